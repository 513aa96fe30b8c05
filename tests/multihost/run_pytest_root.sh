#!/usr/bin/env bash
# tests/multihost under Bazel: runs as root outside Bazel's sandbox (tag
# "local"), with the binaries of the runfiles tree.
set -euo pipefail
root="$TEST_SRCDIR/embedps"
export EMBEDPS_BIN="$root" EMBEDPS_REPO="$root" PYTHONDONTWRITEBYTECODE=1 OMP_NUM_THREADS=1
export PYTHONPATH="$root/tests/multihost:$root/python/site"
exec /usr/bin/python3 -m pytest -q -p no:cacheprovider -rs --basetemp="$TEST_TMPDIR/pytest" "$@"
