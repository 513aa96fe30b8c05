#!/usr/bin/env bash
# ps_bench refuses flags it cannot honour, with a message and exit code 2,
# before it starts any server (it used to loop forever on the first one).
set -uo pipefail
bench="$1"
out=$(timeout 20 "$bench" --keys=5 --batch_sizes=10 2>&1)
rc=$?
[ "$rc" -eq 2 ] || { echo "want exit 2, got $rc: $out"; exit 1; }
grep -q -- "--keys >= 10 (got 5)" <<<"$out" || { echo "message: $out"; exit 1; }
# A bad list flag is refused before any server starts (it used to leave
# the servers it had started running, so $(...) never returned).
out=$(timeout 20 "$bench" --dims=0 2>&1)
rc=$?
[ "$rc" -eq 2 ] || { echo "want exit 2 for --dims=0, got $rc: $out"; exit 1; }
grep -q "'0' is not a positive integer" <<<"$out" || { echo "message: $out"; exit 1; }
out=$(timeout 20 "$bench" --sweeps=sometimes 2>&1)
rc=$?
[ "$rc" -eq 2 ] || { echo "want exit 2 for --sweeps=sometimes, got $rc: $out"; exit 1; }
grep -q -- "--sweeps takes off and on, got sometimes" <<<"$out" || { echo "message: $out"; exit 1; }
echo PASS
