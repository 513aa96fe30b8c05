"""pytest_test: one pytest file of tests/python run by python/run_pytest.sh."""

def pytest_test(name, src, data = [], size = "medium"):
    """A test running `src` with Debian's python3 over the built package.

    Args:
      name: the test target.
      src: the pytest file, e.g. "python/test_client.py".
      data: what it needs besides conftest.py and the embedps package
        (binaries, configs, other Python files).
      size: Bazel's test size.
    """
    native.sh_test(
        name = name,
        size = size,
        # Sanitized modules do not load into an uninstrumented interpreter.
        tags = [
            "no_asan",
            "no_tsan",
        ],
        srcs = ["python/run_pytest.sh"],
        args = ["$(location %s)" % src],
        data = [
            src,
            ":python_test_support",
            "//python:embedps",
        ] + data,
    )
