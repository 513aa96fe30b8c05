#!/usr/bin/env bash
# The form CI keeps (tests/run.sh runs it first): C++ and .proto files as
# .clang-format formats them, BUILD deps lists sorted (tools/lint/build_deps.py),
# and every generated file in step with its source (tools/lint/generated.sh).
#
#   tools/lint/check.sh          # exit 1 naming what is off
#   tools/lint/check.sh --fix    # reformat, sort and regenerate in place
set -uo pipefail
cd "$(dirname "$0")/../.."

fix=0
[ "${1:-}" = "--fix" ] && fix=1
failed=0

mapfile -t sources < <(git ls-files --cached --others --exclude-standard \
  '*.cc' '*.h' '*.cu' '*.cuh' '*.proto')
if [ "$fix" -eq 1 ]; then
  clang-format -i "${sources[@]}"
else
  unformatted=$(clang-format --dry-run "${sources[@]}" 2>&1 |
    grep -oE '^[^:]+:[0-9]+:[0-9]+: warning' | cut -d: -f1 | sort -u)
  if [ -n "$unformatted" ]; then
    echo "lint: not as .clang-format formats them (tools/lint/check.sh --fix):"
    echo "$unformatted" | sed 's/^/  /'
    failed=1
  fi
fi

if [ "$fix" -eq 1 ]; then
  tools/lint/build_deps.py --fix >/dev/null
elif ! tools/lint/build_deps.py; then
  failed=1
fi

if [ "$fix" -eq 1 ]; then
  tools/lint/generated.sh --fix || failed=1
elif ! tools/lint/generated.sh; then
  failed=1
fi

if [ "$failed" -eq 0 ]; then
  echo "lint: ${#sources[@]} sources formatted, BUILD deps sorted, generated files current"
fi
exit "$failed"
