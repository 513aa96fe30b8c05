"""libFuzzer targets and their corpus replay tests.

embedps_fuzzer(name, srcs, deps) declares, for a source that defines
LLVMFuzzerTestOneInput:
  - NAME_replay: a cc_test (every build, the sanitizers' too) that feeds
    each file of corpus/NAME to the target once: the seeds and every crash
    found and fixed stay regression tests;
  - NAME: the libFuzzer binary, built only under --config=fuzz (clang;
    fuzz/run.sh), tagged manual so that `bazel build //...` leaves it out.
"""

def embedps_fuzzer(name, srcs, deps, size = "small", replay_tags = []):
    native.cc_library(
        name = name + "_target",
        testonly = True,
        srcs = srcs,
        deps = deps,
        alwayslink = True,
    )
    native.cc_test(
        name = name + "_replay",
        size = size,
        srcs = ["replay_main.cc"],
        args = ["fuzz/corpus/" + name],
        data = native.glob(["corpus/" + name + "/**"]),
        tags = replay_tags,
        deps = [":" + name + "_target"],
    )
    native.cc_binary(
        name = name,
        testonly = True,
        linkopts = ["-fsanitize=fuzzer"],
        tags = ["manual"],
        deps = [":" + name + "_target"],
    )
