"""Detects a CUDA toolkit and exposes it as the @local_cuda repository.

The toolkit is looked for under $CUDA_HOME, then /usr/local/cuda (a plain
Debian machine has neither). EMBEDPS_CUDA=off builds as if there were none
(to check the CUDA-less build on a machine that has a toolkit). The generated repository always has
`defs.bzl` with `CUDA_AVAILABLE`; when the toolkit is present it also has
`:cuda_headers`, `:cudart`, `:cublas` and `:nccl` and `NVCC` (the
compiler's path). BUILD files declare CUDA targets through the macros in
//third_party/cuda:cuda.bzl, which leave them out when the toolkit is absent.
"""

def _cuda_configure_impl(rctx):
    candidates = []
    if rctx.os.environ.get("EMBEDPS_CUDA", "auto") == "off":
        candidates = []
    elif rctx.os.environ.get("CUDA_HOME"):
        candidates.append(rctx.os.environ["CUDA_HOME"])
    if rctx.os.environ.get("EMBEDPS_CUDA", "auto") != "off":
        candidates.append("/usr/local/cuda")
    root = None
    for candidate in candidates:
        if rctx.path(candidate + "/bin/nvcc").exists and rctx.path(candidate + "/include/cuda_runtime.h").exists:
            root = str(rctx.path(candidate).realpath)
            break

    rctx.file("WORKSPACE", 'workspace(name = "local_cuda")\n')
    if root == None:
        print("embedps: no CUDA toolkit under $CUDA_HOME or /usr/local/cuda " +
              "(or EMBEDPS_CUDA=off); " +
              "CUDA targets are left out of this build.")
        rctx.file("defs.bzl", "CUDA_AVAILABLE = False\nNVCC = None\n")
        rctx.file("BUILD.bazel", "")
        return

    # Symlink the pieces we use so that Bazel tracks the headers as sources
    # of this repository (an -isystem outside the execution root is refused).
    rctx.symlink(root + "/include", "include")
    has_nccl = rctx.path(root + "/include/nccl.h").exists
    rctx.file("defs.bzl", "CUDA_AVAILABLE = True\nNVCC = {}\nNCCL_AVAILABLE = {}\n".format(
        repr(root + "/bin/nvcc"),
        repr(has_nccl),
    ))
    lib = root + "/lib64"
    rpath = "-Wl,-rpath," + lib
    rctx.file("BUILD.bazel", """
package(default_visibility = ["//visibility:public"])

cc_library(
    name = "cuda_headers",
    hdrs = glob(["include/**/*.h", "include/**/*.hpp", "include/**/*.inl", "include/**/*.cuh"]),
    includes = ["include"],
)

cc_library(
    name = "cudart",
    linkopts = ["-L{lib}", "-lcudart", "{rpath}"],
    deps = [":cuda_headers"],
)

cc_library(
    name = "cublas",
    linkopts = ["-L{lib}", "-lcublas", "-lcublasLt", "{rpath}"],
    deps = [":cudart"],
)

cc_library(
    name = "nccl",
    linkopts = ["-L{lib}", "-lnccl", "{rpath}"],
    deps = [":cudart"],
)
""".format(lib = lib, rpath = rpath))

cuda_configure = repository_rule(
    implementation = _cuda_configure_impl,
    environ = ["CUDA_HOME", "EMBEDPS_CUDA"],
    local = True,
)
