#!/usr/bin/env bash
# Builds the OCI image embedps:VERSION offline: a root file system made by
# mmdebstrap from Debian 12's packages (exactly the runtime libraries the
# binaries link, found with ldd and dpkg), our Bazel outputs in
# /usr/local/bin, the CUDA runtime libraries they link (NVIDIA's
# redistributables, from /usr/local/cuda, when the build has CUDA) in
# /usr/local/lib, and the job configs in /etc/embedps. No base image is
# pulled. Needs root (or sudo), podman and mmdebstrap (installed here if
# missing).
#
#   deploy/image/build.sh [--tag=embedps:0.4.0] [--out=DIR]
#
# Leaves DIR/rootfs.tar (default embedps-image/) and the image in podman's
# store; `podman save embedps:0.4.0 -o embedps.tar` exports it for a
# registry. deploy/image/check.sh runs it.
set -euo pipefail
cd "$(dirname "$0")/../.."
tag=embedps:0.4.0
out=embedps-image
for arg in "$@"; do
  case $arg in
    --tag=*) tag=${arg#--tag=} ;;
    --out=*) out=${arg#--out=} ;;
    *) echo "usage: $0 [--tag=NAME:TAG] [--out=DIR]" >&2; exit 2 ;;
  esac
done
sudo=""
[ "$(id -u)" -eq 0 ] || sudo=sudo
for tool in podman mmdebstrap runc; do
  command -v "$tool" >/dev/null || {
    echo "image: installing podman, mmdebstrap, runc"
    $sudo apt-get install -y -qq --no-install-recommends podman mmdebstrap runc >/dev/null
    break
  }
done

binaries=(server/ps_server worker/ps_worker worker/ps_predictor
          worker/dense_worker tools/embedps_health tools/datagen)
targets=()
for b in "${binaries[@]}"; do targets+=("//${b%/*}:${b##*/}"); done
bazel build "${targets[@]}"

# The Debian packages of every library the binaries link; the rest (CUDA)
# is copied from where it is.
packages=() extra=()
while read -r lib; do
  real=$(readlink -f "$lib")
  if pkg=$(dpkg -S "$real" 2>/dev/null | head -1 | cut -d: -f1) && [ -n "$pkg" ]; then
    packages+=("$pkg")
  else
    extra+=("$lib")
  fi
done < <(for b in "${binaries[@]}"; do ldd "bazel-bin/$b"; done |
         awk '$3 ~ /^\// {print $3}' | sort -u)
mapfile -t packages < <(printf '%s\n' "${packages[@]}" | sort -u)
echo "image: ${#packages[@]} Debian packages, ${#extra[@]} other libraries"

rm -rf "$out"
mkdir -p "$out/overlay/usr/local/bin" "$out/overlay/usr/local/lib" \
  "$out/overlay/etc/embedps" "$out/overlay/etc/ld.so.conf.d"
for b in "${binaries[@]}"; do cp "bazel-bin/$b" "$out/overlay/usr/local/bin/"; done
for lib in "${extra[@]}"; do cp -L "$lib" "$out/overlay/usr/local/lib/"; done
echo /usr/local/lib >"$out/overlay/etc/ld.so.conf.d/embedps.conf"
cp deploy/local/*.txtpb "$out/overlay/etc/embedps/"

# Debian's own packages (from this machine's apt sources), then ours on
# top; ldconfig sees /usr/local/lib. An unprivileged user runs it.
include=$(IFS=,; echo "${packages[*]},ca-certificates")
$sudo mmdebstrap --variant=apt --include="$include" \
  --customize-hook="tar -C '$PWD/$out/overlay' -c . | tar -C \"\$1\" -x" \
  --customize-hook='chroot "$1" ldconfig' \
  --customize-hook='chroot "$1" useradd --system --uid 10001 --no-create-home --shell /usr/sbin/nologin embedps' \
  --customize-hook='rm -rf "$1"/var/cache/apt/* "$1"/var/lib/apt/lists/*' \
  bookworm "$out/rootfs.tar"
$sudo podman import \
  --change 'USER 10001' \
  --change 'ENV PATH=/usr/local/bin:/usr/bin:/bin' \
  --change 'WORKDIR /tmp' \
  --change 'ENTRYPOINT []' \
  --change 'CMD ["/usr/local/bin/ps_server", "--help"]' \
  "$out/rootfs.tar" "$tag" >/dev/null
echo "image: $tag ($(du -h "$out/rootfs.tar" | cut -f1) root file system)"
