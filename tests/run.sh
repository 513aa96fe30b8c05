#!/usr/bin/env bash
# Runs every embedps test: the form (tools/lint/check.sh), unit tests beside
# the code and the multi-process tests under tests/. Installs what is
# missing first (deploy/setup.sh).
#
#   tests/run.sh [extra bazel test flags, e.g. --config=asan]
#
# Ends with Bazel's summary and one line "N passed, N failed" (test targets),
# exits non-zero if any test failed or the build broke, and leaves no
# process behind.
set -uo pipefail
cd "$(dirname "$0")/.."

deploy/setup.sh || exit 1
tools/cuda_status.sh

log=$(mktemp)
trap 'rm -f "$log"; bazel shutdown >/dev/null 2>&1' EXIT

# The form first (clang-format, sorted BUILD deps, generated files
# current): tools/lint/check.sh --fix repairs what it reports.
lint_status=0
tools/lint/check.sh || lint_status=1

bazel test //... --test_summary=short --color=no --curses=no "$@" 2>&1 | tee "$log"
status=${PIPESTATUS[0]}

# Bazel's per-target lines: "//pkg:target   (cached) PASSED in 0.1s".
passed=$(grep -cE '^//[^ ]+ +(\(cached\) +)?PASSED' "$log")
failed=$(grep -cE '^//[^ ]+ +(\(cached\) +)?(FAILED|TIMEOUT|FLAKY|NO STATUS|INCOMPLETE|FAILED TO BUILD)' "$log")
if [ "$status" -ne 0 ] && [ "$failed" -eq 0 ]; then
  failed=1  # the build itself failed before any test could report
fi
if [ "$lint_status" -eq 0 ]; then
  passed=$((passed + 1))
else
  failed=$((failed + 1))
  status=1
  echo "FAILED: tools/lint/check.sh (the form: run tools/lint/check.sh --fix)"
fi
# The Kubernetes manifests against the API's schemas (a PyPI validator).
if tests/k8s/validate_schema.sh >"$log" 2>&1; then
  passed=$((passed + 1))
  tail -1 "$log"
else
  failed=$((failed + 1))
  status=1
  echo "FAILED: tests/k8s/validate_schema.sh"
  tail -20 "$log"
fi
# Each fuzz target for a few seconds on its corpus (docs/fuzzing.md); the
# corpora's replay tests ran above. Skipped with --config=... runs: the
# fuzzers are ASAN builds of their own.
if [ $# -eq 0 ]; then
  fuzz_out=$(mktemp -d)
  if fuzz/run.sh --seconds 5 --out "$fuzz_out" >"$log" 2>&1; then
    passed=$((passed + 1))
    grep -E "^[a-z_]+_fuzz: " "$log"
    rm -rf "$fuzz_out"
  else
    failed=$((failed + 1))
    status=1
    echo "FAILED: fuzz/run.sh --seconds 5 (crashing inputs: $fuzz_out/crashes)"
    tail -20 "$log"
  fi
fi
echo "$passed passed, $failed failed"
[ "$status" -eq 0 ] && [ "$failed" -eq 0 ]
