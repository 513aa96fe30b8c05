"""Replicated shards over etcd across hosts (network namespaces,
netns_cluster.py): hosts n0, n1, n2 each run an etcd member and training
replicas (shard 0 on n0 and n1, shard 1 on n1 and n2), w0 and w1 run the
workers, which meet in etcd too. In the middle of a SYNC job the host
holding shard 0's primary — and one etcd member — is cut off for good:
etcd keeps its quorum, a backup on another host takes over, the workers'
calls to the lost host fail within the keepalive and move on, and the job
ends with the steps and the AUC of an uncut run. Plain text (TLS across
hosts is test_multihost.py's)."""

import json
import os
import pathlib
import subprocess
import threading
import time

import pytest

import netns_cluster

BIN = pathlib.Path(os.environ.get("EMBEDPS_BIN", pathlib.Path(__file__).resolve().parents[2] / "bazel-bin"))
REPO = pathlib.Path(os.environ.get("EMBEDPS_REPO", pathlib.Path(__file__).resolve().parents[2]))
ETCD = "/usr/bin/etcd"
HOSTS = ["n0", "n1", "n2", "w0", "w1"]
# Each shard's two replicas: (host, port).
REPLICAS = {0: [("n0", 50051), ("n1", 50051)], 1: [("n1", 50052), ("n2", 50052)]}

why_not = netns_cluster.available() or (None if os.path.exists(ETCD) else
                                        "no etcd (deploy/setup.sh installs etcd-server)")
pytestmark = pytest.mark.skipif(why_not is not None, reason=f"cannot run: {why_not}")

# Reads a key through etcd's JSON gateway, from a host of the cluster.
_RANGE = """
import base64, json, sys, urllib.request
body = json.dumps({"key": base64.b64encode(sys.argv[2].encode()).decode()}).encode()
answer = json.load(urllib.request.urlopen(urllib.request.Request(
    sys.argv[1] + "/v3/kv/range", body, {"Content-Type": "application/json"}), timeout=3))
kvs = answer.get("kvs", [])
print(base64.b64decode(kvs[0]["value"]).decode() if kvs else "")
"""


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    work = tmp_path_factory.mktemp("etcd_partition")
    data = work / "data"
    subprocess.run([str(BIN / "tools/datagen"), f"--output_dir={data}", "--train_rows=60000",
                    "--test_rows=10000"], check=True, capture_output=True, timeout=120)
    yield work, data


class Cluster:
    """etcd on n0..n2 and the replicated shards, on fresh hosts."""

    def __init__(self, work, name):
        self.out = work / name
        self.out.mkdir()
        (self.out / "ckpt").mkdir()
        self.name = name
        self.hosts = netns_cluster.Hosts(HOSTS)
        ip = self.hosts.address
        members = ["n0", "n1", "n2"]
        self.etcd = "etcd://" + ",".join(f"{ip[m]}:2379" for m in members)
        initial = ",".join(f"{m}=http://{ip[m]}:2380" for m in members)
        for m in members:
            self.hosts.spawn(m, [
                ETCD, f"--name={m}", f"--data-dir={self.out / ('etcd-' + m)}",
                f"--listen-client-urls=http://{ip[m]}:2379",
                f"--advertise-client-urls=http://{ip[m]}:2379",
                f"--listen-peer-urls=http://{ip[m]}:2380",
                f"--initial-advertise-peer-urls=http://{ip[m]}:2380",
                f"--initial-cluster={initial}", "--initial-cluster-state=new",
                f"--initial-cluster-token={name}"], self.out / f"etcd-{m}.log")
        self.wait(lambda: self.read("/health-probe") is not None, "etcd never answered")
        self.servers = []
        self.server_args = {}  # (shard, host) -> command line
        self.server_processes = {}  # (shard, host) -> the latest process
        self.restarts = []  # (shard, host, why), in order
        self.cut_hosts = set()
        for shard, replicas in REPLICAS.items():
            addresses = []
            for host, port in replicas:
                self.server_args[(shard, host)] = [
                    str(BIN / "server/ps_server"), f"--host={ip[host]}", f"--port={port}",
                    f"--port_file={self.out / f'ps{shard}-{host}.port'}",
                    f"--shard_index={shard}", "--num_shards=2",
                    "--num_workers=2", f"--control_plane={self.etcd}",
                    f"--cluster_id={name}", "--forward_timeout=1s",
                    f"--checkpoint_root={self.out / 'ckpt'}", "--log_level=warn"]
                self.server_processes[(shard, host)] = self.hosts.spawn(
                    host, self.server_args[(shard, host)], self.log(shard, host))
                addresses.append(f"{ip[host]}:{port}")
            self.servers.append("|".join(addresses))
        # The servers' supervisor, as deploy/k8s/replicated's restartPolicy:
        # a replica that left its shard (exit 75: deposed) starts again
        # empty and catches up. Not on a host that is cut off.
        self.supervising = True
        self.supervisor = threading.Thread(target=self.supervise, daemon=True)
        self.supervisor.start()
        try:
            for shard in REPLICAS:
                self.wait(lambda: len(self.in_sync(shard)) == 2,
                          f"shard {shard}'s replicas never reached sync", seconds=120)
        except AssertionError as e:
            # What the servers said, and nothing left running.
            logs = self.server_logs()
            self.close()
            raise AssertionError(f"{e}; in_sync lists read from etcd, server logs:{logs}") from None
        except BaseException:
            self.close()
            raise

    def log(self, shard, host, restart=None):
        """The log of a server (of its `restart`th restart, counted from 1)."""
        restart = sum(1 for s, h, _ in self.restarts if (s, h) == (shard, host)) \
            if restart is None else restart
        return self.out / (f"ps{shard}-{host}.log" if restart == 0 else
                           f"ps{shard}-{host}.restart{restart}.log")

    def supervise(self):
        while self.supervising:
            for key, process in list(self.server_processes.items()):
                shard, host = key
                if process.poll() == 75 and host not in self.cut_hosts and self.supervising:
                    why = self.log(shard, host).read_text().strip().splitlines()[-1:]
                    self.restarts.append((shard, host, why[0] if why else ""))
                    self.server_processes[key] = self.hosts.spawn(
                        host, self.server_args[key], self.log(shard, host))
            time.sleep(0.2)

    def server_logs(self):
        """Each server's restarts, exit code (if it ended) and the tail of
        its logs."""
        parts = [f"\nrestarted: ps{s} on {h}: {why}" for s, h, why in self.restarts]
        for (shard, host), process in sorted(self.server_processes.items()):
            code = process.poll()
            latest = self.log(shard, host)
            for restart in range(1 + sum(1 for s, h, _ in self.restarts
                                         if (s, h) == (shard, host))):
                log = self.log(shard, host, restart)
                state = "" if log != latest else \
                    " (running)" if code is None else f" (exited {code})"
                parts.append(f"\n--- {log.name}{state}:\n" + log.read_text()[-1500:])
        return "".join(parts)

    def read(self, key):
        """The value at `key` (from w0), "" if absent, None if etcd did not
        answer."""
        for member in ("n0", "n1", "n2"):
            result = self.hosts.run_unchecked(
                "w0", "/usr/bin/python3", "-c", _RANGE,
                f"http://{self.hosts.address[member]}:2379", key)
            if result.returncode == 0:
                return result.stdout.strip()
        return None

    def in_sync(self, shard):
        value = self.read(f"/embedps/{self.name}/shards/{shard}/in_sync")
        return json.loads(value) if value else []

    def primary_host(self, shard):
        value = json.loads(self.read(f"/embedps/{self.name}/shards/{shard}/primary"))
        return next(host for host in HOSTS if self.hosts.address[host] ==
                    value["member"].split(":")[0])

    @staticmethod
    def wait(condition, what, seconds=60):
        deadline = time.monotonic() + seconds
        while not condition():
            assert time.monotonic() < deadline, what
            time.sleep(0.2)

    def train(self, data, during=None):
        """Rank 0's summary and the job's seconds."""
        ip = self.hosts.address
        workers = []
        for r in range(2):
            host = f"w{r}"
            args = [str(BIN / "worker/ps_worker"),
                    f"--config={REPO / 'deploy/local/dlrm_small.txtpb'}",
                    f"--servers={','.join(self.servers)}", f"--rank={r}", "--world_size=2",
                    f"--gloo_host={ip[host]}", "--mode=sync", f"--job_name={self.name}",
                    f"--control_plane={self.etcd}", f"--cluster_id={self.name}",
                    f"--train_data={data / 'train.txt'}", f"--test_data={data / 'test.txt'}",
                    "--epochs=6", "--log_level=warn", "--retry_deadline_s=120"]
            workers.append(netns_cluster._spawn_plain(
                self.hosts, host, args, self.out / f"w{r}.json", self.out / f"w{r}.err"))
        start = time.monotonic()
        if during is not None:
            during(self)
        codes = [w.wait(timeout=600) for w in workers]
        seconds = time.monotonic() - start
        for r, code in enumerate(codes):
            assert code == 0, f"worker {r} exited {code}: " + \
                (self.out / f"w{r}.err").read_text()[-3000:] + "\nservers:" + \
                self.server_logs()
        lines = (self.out / "w0.json").read_text().strip().splitlines()
        return json.loads(lines[-1]), seconds

    def close(self):
        self.supervising = False
        self.supervisor.join()
        self.hosts.close()


def test_a_host_with_a_primary_and_an_etcd_member_cut_off(setup):
    work, data = setup
    uncut = Cluster(work, "uncut")
    try:
        reference, reference_seconds = uncut.train(data)
    finally:
        uncut.close()
    cut_cluster = Cluster(work, "cut")
    cut = {}

    def cut_primary_host(cluster):
        def go():
            time.sleep(min(2.0, reference_seconds / 3))
            # The test is of a shard that has a backup to take over: a
            # replica that left (and was restarted) must be back in sync.
            deadline = time.monotonic() + 60
            while len(cluster.in_sync(0)) < 2 and time.monotonic() < deadline:
                time.sleep(0.2)
            host = cluster.primary_host(0)
            cluster.cut_hosts.add(host)
            cluster.hosts.link(host, False)
            cut["host"] = host
            cut["at"] = time.monotonic()
        threading.Thread(target=go, daemon=True).start()

    try:
        summary, seconds = cut_cluster.train(data, during=cut_primary_host)
        assert "host" in cut, "the job ended before the cut"
        # Shard 0 is led from another host now, in a later epoch.
        assert cut_cluster.primary_host(0) != cut["host"]
    finally:
        cut_cluster.close()
    print(f"uncut: AUC {reference['test_auc']:.5f} in {reference_seconds:.1f} s; "
          f"{cut['host']} cut off: AUC {summary['test_auc']:.5f} in {seconds:.1f} s; "
          f"replicas restarted: {cut_cluster.restarts}")
    assert summary["steps"] == reference["steps"] > 0
    assert abs(summary["test_auc"] - reference["test_auc"]) < 0.002, (summary, reference)
