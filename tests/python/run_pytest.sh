#!/usr/bin/env bash
# Runs pytest files of tests/python with Debian's /usr/bin/python3 (its
# numpy, torch and pytest) over the embedps package and binaries that
# Bazel built: `bazel test //tests:python_client_test` etc., or from a
# checkout after `bazel build //python:embedps //server:ps_server ...`:
#   tests/python/run_pytest.sh tests/python/test_client.py
# EMBEDPS_PYTHON picks another interpreter (one with numpy, torch and
# pytest), e.g. a venv of PyPI's current torch (docs/python.md).
set -euo pipefail
if [ -n "${TEST_SRCDIR:-}" ]; then
  root="$TEST_SRCDIR/embedps"
  basetemp="$TEST_TMPDIR/pytest"
else
  root="$(cd "$(dirname "$0")/../.." && pwd)/bazel-bin"
  basetemp="$(mktemp -d)/pytest"
fi
export EMBEDPS_BIN="$root"
export EMBEDPS_REPO="${TEST_SRCDIR:+$root}"
export EMBEDPS_REPO="${EMBEDPS_REPO:-$(cd "$(dirname "$0")/../.." && pwd)}"
export PYTHONPATH="$root/python/site"
export PYTHONDONTWRITEBYTECODE=1
# One BLAS / OpenMP thread per process: tests run beside each other.
export OMP_NUM_THREADS=1
exec "${EMBEDPS_PYTHON:-/usr/bin/python3}" -m pytest -q -p no:cacheprovider --basetemp="$basetemp" "$@"
