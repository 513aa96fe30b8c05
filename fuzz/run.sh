#!/usr/bin/env bash
# Builds the libFuzzer targets (clang, ASAN + UBSan; a Bazel output base of
# their own) and runs each for a bounded time on a copy of its corpus.
#
#   fuzz/run.sh                      # every target, 600 s each (docs/fuzzing.md)
#   fuzz/run.sh --seconds 5          # what tests/run.sh does
#   fuzz/run.sh --seconds 60 rpc_fuzz bulk_fuzz
#   fuzz/run.sh --out DIR            # logs, grown corpora, crashes (default
#                                    # /tmp/embedps-fuzz)
#   fuzz/run.sh --merge              # afterwards, add the inputs that reach new
#                                    # code to fuzz/corpus (libFuzzer -merge=1)
#
# Prints one line per target (runs, coverage, corpus); exits 1 if any target
# crashed, leaked, timed out or ran out of memory, naming the input that did
# (copy it to fuzz/corpus/TARGET/ with the fix: the replay test keeps it).
set -euo pipefail
cd "$(dirname "$0")/.."
repo=$PWD

seconds=600
out=/tmp/embedps-fuzz
merge=0
targets=()
while [ $# -gt 0 ]; do
  case "$1" in
    --seconds) seconds=$2; shift 2 ;;
    --out) out=$2; shift 2 ;;
    --merge) merge=1; shift ;;
    -h|--help) sed -n '2,16p' "$0"; exit 0 ;;
    -*) echo "fuzz/run.sh: unknown option $1" >&2; exit 2 ;;
    *) targets+=("$1"); shift ;;
  esac
done
if [ ${#targets[@]} -eq 0 ]; then
  targets=(bulk_fuzz rpc_fuzz checkpoint_fuzz config_fuzz criteo_fuzz schema_fuzz line_reader_fuzz)
fi

command -v clang >/dev/null || {
  echo "fuzz/run.sh: clang is missing (deploy/setup.sh installs it)" >&2
  exit 1
}
output_base=${EMBEDPS_FUZZ_OUTPUT_BASE:-$HOME/.cache/embedps-fuzz-bazel}
# The fuzz build's Bazel server (its own output base) leaves with us.
trap 'bazel --output_base="$output_base" shutdown >/dev/null 2>&1' EXIT
mkdir -p "$out"
echo "fuzz/run.sh: building the fuzzers (clang; output base $output_base)"
if ! bazel --output_base="$output_base" build --config=fuzz //fuzz:all_fuzzers \
    >"$out/build.log" 2>&1; then
  grep -E "ERROR|error:" "$out/build.log" | head -n 20 >&2
  echo "fuzz/run.sh: the build failed; see $out/build.log" >&2
  exit 1
fi
bin=$(bazel --output_base="$output_base" info --config=fuzz bazel-bin 2>/dev/null)
status=0
for target in "${targets[@]}"; do
  [ -x "$bin/fuzz/$target" ] || { echo "fuzz/run.sh: no target $target" >&2; exit 2; }
  corpus=$out/corpus/$target
  crashes=$out/crashes/$target
  mkdir -p "$corpus" "$crashes"
  cp -n fuzz/corpus/$target/* "$corpus"/
  log=$out/$target.log
  rc=0
  # Each input gets 10 s and the process 3 GiB; the targets' servers run in
  # a scratch directory of their own under /tmp.
  (cd "$out" && "$bin/fuzz/$target" -max_total_time="$seconds" \
      -timeout=10 -rss_limit_mb=3072 -print_final_stats=1 \
      -artifact_prefix="$crashes/" "$corpus" >"$log" 2>&1) || rc=$?
  summary=$(grep -E '^#[0-9]+\s+(DONE|pulse|NEW|REDUCE|INITED)' "$log" | tail -n 1 |
    sed -E 's/^#([0-9]+)\s+[A-Z]+\s+/\1 runs, /')
  if [ $rc -ne 0 ]; then
    status=1
    echo "$target: FAILED (exit $rc): $(ls "$crashes" | head -n 3 | tr '\n' ' ')— $log"
    grep -E "^(==[0-9]+==ERROR|SUMMARY)|runtime error" "$log" | head -n 3 | sed 's/^/  /'
  else
    echo "$target: ${summary:-no stats} (${seconds} s)"
  fi
  if [ $merge -eq 1 ] && [ $rc -eq 0 ]; then
    before=$(ls "$repo/fuzz/corpus/$target" | wc -l)
    (cd "$out" && "$bin/fuzz/$target" -merge=1 "$repo/fuzz/corpus/$target" \
      "$corpus" >"$out/$target.merge.log" 2>&1) || true
    echo "  merged: $before -> $(ls "$repo/fuzz/corpus/$target" | wc -l) inputs in fuzz/corpus/$target"
  fi
done
exit $status
