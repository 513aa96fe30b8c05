"""A training job across hosts: ps_server shards and ps_worker ranks in
separate network namespaces (tests/multihost/netns_cluster.py), TLS and
tokens on, against the same job on loopback: the same AUC, training that
completes on 10 and 1 Gbit/s links, and a shard whose link is cut for a
few seconds without a step lost. Timings are the benchmark's
(bench/multihost/run.sh), not asserted here."""

import os
import pathlib
import subprocess
import threading
import time

import pytest

import netns_cluster
import numpy as np

BIN = pathlib.Path(os.environ.get("EMBEDPS_BIN", pathlib.Path(__file__).resolve().parents[2] / "bazel-bin"))
REPO = pathlib.Path(os.environ.get("EMBEDPS_REPO", pathlib.Path(__file__).resolve().parents[2]))
HOSTS = ["ps0", "ps1", "w0", "w1", "sv", "client"]

why_not = netns_cluster.available()
pytestmark = pytest.mark.skipif(why_not is not None, reason=f"no network namespaces: {why_not}")


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    work = tmp_path_factory.mktemp("multihost")
    certs = work / "certs"
    subprocess.run([str(REPO / "security/make_certs.sh"), str(certs),
                    *[f"192.0.2.{10 + i}" for i in range(len(HOSTS))]], check=True,
                   capture_output=True)
    data = work / "data"
    subprocess.run([str(BIN / "tools/datagen"), f"--output_dir={data}", "--train_rows=60000",
                    "--test_rows=10000"], check=True, capture_output=True, timeout=120)
    job = netns_cluster.Job(BIN, REPO, work / "runs", certs, data)
    hosts = netns_cluster.Hosts(HOSTS)
    yield job, hosts, certs
    hosts.close()


def auc(summaries):
    assert len({round(s["test_auc"], 6) for s in summaries}) == 1, summaries
    return summaries[0]["test_auc"]


def test_across_hosts_the_job_learns_what_it_learns_on_loopback(setup):
    job, hosts, _ = setup
    local, _, _ = job.run(None, "loopback")
    remote, sent, _ = job.run(hosts, "hosts")
    assert remote[0]["steps"] == local[0]["steps"] > 0
    assert abs(auc(remote) - auc(local)) < 0.002, (auc(remote), auc(local))
    assert auc(remote) > 0.7
    # The workers' traffic left through their links.
    assert all(s > 100 * remote[0]["samples"] / 2 for s in sent), sent


@pytest.mark.parametrize("rate", ["10gbit", "1gbit"])
def test_training_completes_on_limited_links(setup, rate):
    job, hosts, _ = setup
    hosts.limit(rate)
    try:
        summaries, sent, _ = job.run(hosts, f"limited-{rate}")
    finally:
        hosts.limit(None)
    assert summaries[0]["steps"] > 0 and auc(summaries) > 0.7
    assert all(s > 0 for s in sent)


def test_a_shard_whose_link_is_cut_loses_no_step(setup):
    """Shard 1's link goes down for 3 s in the middle of training and comes
    back: the workers retry, every step is applied once, and the job ends
    as an uncut one does."""
    job, hosts, _ = setup
    longer = ["--epochs=12"]  # long enough to cut in the middle
    reference, _, _ = job.run(hosts, "uncut", longer)
    cut = {}

    def cut_link(hosts, servers):
        def go():
            time.sleep(1.0)
            hosts.link("ps1", False)
            cut["down"] = time.monotonic()
            time.sleep(3.0)
            hosts.link("ps1", True)
            cut["up"] = time.monotonic()
        threading.Thread(target=go, daemon=True).start()

    summaries, _, seconds = job.run(hosts, "cut", longer, during=cut_link)
    assert "up" in cut and seconds > cut["up"] - cut["down"], \
        "the job ended before the link came back"
    assert summaries[0]["steps"] == reference[0]["steps"]
    # SYNC: the same steps applied once each give the same model.
    assert abs(auc(summaries) - auc(reference)) < 0.002, (auc(summaries), auc(reference))


def test_a_serving_replica_on_its_own_host_follows_the_job(setup):
    """A serving replica on host "sv" follows the training shards on theirs
    (checkpoints, and their stream with the read-only token) and ends at
    the job's last step, serving exactly the rows of its last checkpoint."""
    import embedps
    job, hosts, certs = setup
    name = "serving"
    root = job.work / name / "ckpt"
    checkpoints = root / "job"
    training = ",".join(f"{hosts.address[f'ps{s}']}:50051" for s in range(job.shards))
    replica_address = f"{hosts.address['sv']}:50051"

    def start_replica(hosts, servers):
        hosts.spawn("sv", [
            str(BIN / "server/ps_server"), "--role=serving", f"--host={hosts.address['sv']}",
            "--port=50051", f"--follow_checkpoints={checkpoints}", f"--checkpoint_root={root}",
            f"--training_servers={training}", "--checkpoint_poll=100ms", "--checkpoint_wait=120s",
            "--log_level=warn", f"--read_token_file={certs / 'read.token'}",
            f"--token_file={certs / 'read.token'}", *job.tls("read.token")],
            job.work / name / "replica.log")

    summary, _, _ = job.run(hosts, name, [f"--checkpoint_dir={checkpoints}",
                                          "--checkpoint_every_steps=20"], during=start_replica)
    steps = summary[0]["steps"]
    # Read from a host of its own: this namespace does not reach the hosts.
    probe = job.work / name / "served.npz"
    result = hosts.run_unchecked("client", "/usr/bin/python3", str(pathlib.Path(__file__).parent /
                                 "serving_probe.py"), f"--replica={replica_address}",
                                 f"--certs={certs}", f"--data={job.data}", f"--steps={steps}",
                                 f"--out={probe}")
    assert result.returncode == 0, (result.stderr[-3000:],
                                    (job.work / name / "replica.log").read_text()[-3000:])
    served_file = np.load(probe)
    keys, served = served_file["keys"], served_file["rows"]
    assert int(served_file["version"]) == steps
    # The same checkpoint restored on loopback holds the same rows.
    port_file = job.work / name / "restored.port"
    restored = subprocess.Popen(
        [str(BIN / "server/ps_server"), "--port=0", f"--port_file={port_file}",
         f"--checkpoint_root={root}", f"--restore={checkpoints}", "--log_level=warn"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        while not port_file.exists():
            assert restored.poll() is None
            time.sleep(0.05)
        client = embedps.Client([f"127.0.0.1:{port_file.read_text().split()[0]}"])
        table = client.create_table(name="criteo", dim=16, seed=1,
                                    initializer={"kind": "uniform", "low": -0.05, "high": 0.05},
                                    optimizer={"kind": "adagrad", "learning_rate": 0.2,
                                               "initial_accumulator": 0.01},
                                    consistency={"mode": "sync", "timeout_ms": 300000})
        np.testing.assert_array_equal(served, client.lookup(table, keys))
    finally:
        restored.kill()
        restored.wait()
