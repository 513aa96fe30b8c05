#!/usr/bin/env bash
# Runs the image built by deploy/image/build.sh: every binary starts (its
# --help), and a small training job runs inside one container (a ps_server
# shard, datagen, one ps_worker with TLS and tokens, a checkpoint), with
# no network but loopback. Exit 0 when the job trained and checkpointed.
#
#   deploy/image/check.sh [--tag=embedps:0.4.0]
#
# The podman flags are what these VMs need (runc: crun refuses their
# hybrid cgroup setup; rlimits cannot be raised here).
set -euo pipefail
tag=embedps:0.4.0
for arg in "$@"; do
  case $arg in
    --tag=*) tag=${arg#--tag=} ;;
    *) echo "usage: $0 [--tag=NAME:TAG]" >&2; exit 2 ;;
  esac
done
sudo=""
[ "$(id -u)" -eq 0 ] || sudo=sudo
run() {
  $sudo podman --runtime runc --cgroup-manager=cgroupfs run --rm \
    --ulimit nofile=1024:1024 --ulimit nproc=1024:1024 --network=none \
    "$@"
}
for b in ps_server ps_worker ps_predictor dense_worker embedps_health datagen; do
  # absl's --help exits 1: what counts is that it printed the flags.
  help=$(run "$tag" "/usr/local/bin/$b" --help 2>&1 || true)
  grep -q -- "--" <<<"$help" || { echo "image: $b does not start: $help"; exit 1; }
  echo "image: $b starts"
done
certs=$(mktemp -d)
trap '$sudo rm -rf "$certs"' EXIT
"$(dirname "$0")/../../security/make_certs.sh" "$certs" >/dev/null
chmod -R a+rX "$certs"
run -v "$certs:/certs:ro" "$tag" /bin/sh -ec '
  cd /tmp && mkdir -p ckpt data
  ps_server --port=50051 --checkpoint_root=/tmp/ckpt --log_level=warn \
    --tls_cert=/certs/node.pem --tls_key=/certs/node.key \
    --train_token_file=/certs/train.token --read_token_file=/certs/read.token &
  server=$!
  datagen --output_dir=data --train_rows=20000 --test_rows=2000 >/dev/null
  until embedps_health --address=localhost:50051 --tls_ca=/certs/ca.pem 2>/dev/null; do sleep 0.2; done
  ps_worker --config=/etc/embedps/dlrm_small.txtpb --servers=localhost:50051 \
    --train_data=data/train.txt --test_data=data/test.txt --mode=async \
    --checkpoint_dir=/tmp/ckpt/job --output_dir=/tmp/out --log_level=warn \
    --tls_ca=/certs/ca.pem --token_file=/certs/train.token | tail -1
  ls /tmp/ckpt/job | grep -q "^ckpt-" && echo "image: trained and checkpointed inside the container"
  kill $server; wait $server
'
