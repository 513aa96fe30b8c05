#!/usr/bin/env bash
# Every generated file that is committed, checked against (or, with --fix,
# rewritten from) its source. Today: docs/config_reference.md, from the
# comments of proto/tables.proto and config/worker_config.proto.
set -uo pipefail
cd "$(dirname "$0")/../.."
if [ "${1:-}" = "--fix" ]; then
  /usr/bin/python3 tools/docgen/config_reference.py
else
  /usr/bin/python3 tools/docgen/config_reference.py --check
fi
