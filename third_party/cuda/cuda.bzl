"""Macros for CUDA targets; each declares nothing where no toolkit exists.

`cuda_objects` compiles .cu files with nvcc into one cc_library of objects.
Host code that calls the CUDA runtime is an ordinary cc_library that
depends on it (and on @local_cuda//:cudart). Device tests use
`cuda_cc_test`, which tags them `gpu`; they skip themselves at run time
where no device is present.
"""

load("@local_cuda//:defs.bzl", "CUDA_AVAILABLE", "NVCC")

# Architectures compiled into every object: Ampere and Hopper (H100), plus
# PTX for the newest so that later GPUs can JIT it.
_GENCODE = [
    "--generate-code=arch=compute_80,code=sm_80",
    "--generate-code=arch=compute_90,code=[compute_90,sm_90]",
]

def cuda_objects(name, srcs, hdrs = [], deps = [], nvcc_flags = [], visibility = None):
    """nvcc-compiled objects of `srcs`, as a cc_library named `name`.

    `nvcc_flags`: more flags for nvcc (e.g. --fmad=false where the device
    must round as the host does)."""
    if not CUDA_AVAILABLE:
        return
    objects = []
    for src in srcs:
        obj = src.replace(".cu", ".pic.o")
        native.genrule(
            name = name + "_" + src.replace("/", "_").replace(".", "_"),
            srcs = [src] + hdrs,
            outs = [obj],
            cmd = " ".join([
                NVCC,
                "-c -std=c++17 -O3 -Xcompiler -fPIC -Xcompiler -Wall",
                "--expt-relaxed-constexpr -I. -I$(GENDIR)",
            ] + nvcc_flags + _GENCODE + ["$(location " + src + ") -o $@"]),
        )
        objects.append(obj)
    native.cc_library(
        name = name,
        srcs = objects,
        hdrs = hdrs,
        deps = deps + ["@local_cuda//:cudart"],
        visibility = visibility,
    )

def cuda_cc_library(**attrs):
    """A host cc_library that needs the CUDA toolkit; absent without one."""
    if CUDA_AVAILABLE:
        native.cc_library(**attrs)

def cuda_cc_test(name, tags = [], **attrs):
    """A test that needs a GPU at run time: tagged `gpu`; absent without a toolkit."""
    if CUDA_AVAILABLE:
        native.cc_test(name = name, tags = tags + ["gpu"], **attrs)
