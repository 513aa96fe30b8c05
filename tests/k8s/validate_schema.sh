#!/usr/bin/env bash
# Validates deploy/k8s/*.yaml and deploy/k8s/replicated/*.yaml against the
# Kubernetes API schemas, offline:
# PyPI's kubernetes-validate (pinned) in a venv under tests/k8s/work
# (made on first use: pip needs PyPI once), strict (unknown fields fail).
# tests/run.sh runs it after the Bazel tests.
#
#   tests/k8s/validate_schema.sh [KUBERNETES_VERSION]   # default 1.30.0
set -euo pipefail
cd "$(dirname "$0")/../.."
version=${1:-1.30.0}
work=tests/k8s/work
if [ ! -x "$work/venv/bin/kubernetes-validate" ]; then
  rm -rf "$work/venv"
  mkdir -p "$work"
  /usr/bin/python3 -m venv "$work/venv"
  "$work/venv/bin/pip" install -q --disable-pip-version-check \
    kubernetes-validate==1.37.0
fi
"$work/venv/bin/kubernetes-validate" -k "$version" --strict deploy/k8s/*.yaml deploy/k8s/replicated/*.yaml
echo "manifests: valid against Kubernetes $version"
