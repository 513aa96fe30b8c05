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

BIN = pathlib.Path(os.environ.get("EMBEDPS_BIN", pathlib.Path(__file__).resolve().parents[2] / "bazel-bin"))
REPO = pathlib.Path(os.environ.get("EMBEDPS_REPO", pathlib.Path(__file__).resolve().parents[2]))
HOSTS = ["ps0", "ps1", "w0", "w1"]

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
    yield job, hosts
    hosts.close()


def auc(summaries):
    assert len({round(s["test_auc"], 6) for s in summaries}) == 1, summaries
    return summaries[0]["test_auc"]


def test_across_hosts_the_job_learns_what_it_learns_on_loopback(setup):
    job, hosts = setup
    local, _, _ = job.run(None, "loopback")
    remote, sent, _ = job.run(hosts, "hosts")
    assert remote[0]["steps"] == local[0]["steps"] > 0
    assert abs(auc(remote) - auc(local)) < 0.002, (auc(remote), auc(local))
    assert auc(remote) > 0.7
    # The workers' traffic left through their links.
    assert all(s > 100 * remote[0]["samples"] / 2 for s in sent), sent


@pytest.mark.parametrize("rate", ["10gbit", "1gbit"])
def test_training_completes_on_limited_links(setup, rate):
    job, hosts = setup
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
    job, hosts = setup
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
