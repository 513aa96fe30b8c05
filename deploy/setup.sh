#!/usr/bin/env bash
# Installs what embedps needs to build and test on Debian 12, and nothing
# that is already there. Idempotent: a second run installs nothing and says so.
#
#   deploy/setup.sh            # as root, or as a user with sudo
#
# Prints one line per package it installs, or that nothing was missing.
set -euo pipefail

packages=(
  # Build: Bazel from Debian (4.2.3), compilers, pkg-config.
  bazel-bootstrap g++ pkg-config
  # Libraries the build links against (headers from the -dev packages).
  libabsl-dev libgrpc++-dev libgrpc-dev protobuf-compiler-grpc libprotobuf-dev
  protobuf-compiler librocksdb-dev libgtest-dev libgmock-dev libbenchmark-dev
  libgloo-dev libspdlog-dev libfmt-dev libopenblas-dev libcpp-httplib-dev
  libdnnl-dev
  zlib1g-dev libzstd-dev libxxhash-dev nlohmann-json3-dev libssl-dev
  # The Python module (python/) and its tests: headers, pybind11, and the
  # numpy, PyTorch and pytest of Debian's /usr/bin/python3.
  python3-dev pybind11-dev python3-numpy python3-torch python3-pytest
  # The manifests' tests (python3-yaml) and their schema check's venv.
  python3-yaml python3-venv
  # The fuzz targets (fuzz/run.sh): clang and its libFuzzer runtime.
  clang libclang-rt-14-dev
  # etcd, the control plane of replicated shards (--control_plane): its
  # tests start a real 3-member cluster on loopback.
  etcd-server
  # Formatting and tooling used by the scripts (gnuplot: the training plot;
  # python3-protobuf: tools/docgen reads the .proto files' descriptors).
  clang-format procps gnuplot-nox python3-protobuf
)

missing=()
for pkg in "${packages[@]}"; do
  status=$(dpkg-query -W -f='${db:Status-Status}' "$pkg" 2>/dev/null || true)
  [ "$status" = "installed" ] || missing+=("$pkg")
done

if [ ${#missing[@]} -eq 0 ]; then
  echo "setup: all ${#packages[@]} packages already installed; nothing to do"
  exit 0
fi

sudo=""
if [ "$(id -u)" -ne 0 ]; then
  command -v sudo >/dev/null || { echo "setup: need root (or sudo) to install: ${missing[*]}" >&2; exit 1; }
  sudo="sudo"
fi

echo "setup: installing ${#missing[@]} missing package(s): ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
$sudo apt-get update -qq
$sudo apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
for pkg in "${missing[@]}"; do
  echo "setup: installed $pkg $(dpkg-query -W -f='${Version}' "$pkg")"
done
