"""Samples/s of the DLRM job (2 ps_server shards, 2 SYNC ps_worker ranks,
TLS and tokens; deploy/local's small model) with every process on its own host (a network namespace)
at link rates of 10 and 1 Gbit/s, next to the same job on loopback in the
same run (and the loopback job in plain text: what TLS and tokens cost),
with the bytes each worker sent per sample. Run by
bench/multihost/run.sh (root)."""

import argparse
import os
import pathlib
import subprocess
import sys
import tempfile

REPO = pathlib.Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "tests" / "multihost"))
import netns_cluster  # noqa: E402


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--train_rows", type=int, default=400000)
    parser.add_argument("--repeats", type=int, default=2)
    args = parser.parse_args()
    why_not = netns_cluster.available()
    if why_not:
        sys.exit(f"bench/multihost: {why_not}")
    bin_root = REPO / "bazel-bin"
    work = pathlib.Path(tempfile.mkdtemp(prefix="embedps-multihost-"))
    certs = work / "certs"
    subprocess.run([str(REPO / "security/make_certs.sh"), str(certs),
                    *[f"192.0.2.{10 + i}" for i in range(4)]], check=True, capture_output=True)
    data = work / "data"
    subprocess.run([str(bin_root / "tools/datagen"), f"--output_dir={data}",
                    f"--train_rows={args.train_rows}", "--test_rows=20000"], check=True,
                   capture_output=True)
    job = netns_cluster.Job(bin_root, REPO, work / "runs", certs, data)
    plain = netns_cluster.Job(bin_root, REPO, work / "plain", certs, data, secure=False)
    hosts = netns_cluster.Hosts(["ps0", "ps1", "w0", "w1"])
    rows = []
    try:
        for repeat in range(args.repeats):
            summary, _, _ = plain.run(None, f"plain-{repeat}")
            s = summary[0]
            rows.append(("loopback, plain text", repeat, s["samples_per_second"], s["test_auc"],
                         None, s["pull_wait_seconds"] / max(s["train_seconds"], 1e-9)))
            for name, rate in (("loopback", "-"), ("hosts", None), ("hosts", "10gbit"),
                               ("hosts", "1gbit"), ("hosts", "100mbit")):
                on = None if name == "loopback" else hosts
                if on is not None:
                    hosts.limit(rate)
                summary, sent, _ = job.run(on, f"{name}-{rate}-{repeat}")
                if on is not None:
                    hosts.limit(None)
                s = summary[0]
                rows.append((name if rate in ("-", None) else f"hosts, {rate}/s links",
                             repeat, s["samples_per_second"], s["test_auc"],
                             None if sent is None else max(sent) / (s["samples"] / 2),
                             s["pull_wait_seconds"] / max(s["train_seconds"], 1e-9)))
    finally:
        hosts.close()
    # Every row against the TLS job on loopback of the same repeat.
    loopback = {v[1]: v[2] for v in rows if v[0] == "loopback"}
    print(f"{'placement':28} {'samples/s':>10} {'x loopback':>10} {'test AUC':>9} "
          f"{'bytes sent/sample':>17} {'pull wait':>9}")
    for name, repeat, sps, auc, per_sample, wait in rows:
        print(f"{name:28} {sps:10.0f} {sps / loopback[repeat]:10.2f} {auc:9.4f} "
              f"{'-' if per_sample is None else f'{per_sample:.0f}':>17} {wait:9.1%}")


if __name__ == "__main__":
    main()
