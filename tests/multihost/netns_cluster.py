"""Hosts on one machine: Linux network namespaces joined by veth pairs and
a bridge, addresses from the documentation range 192.0.2.0/24, with
links that can be rate-limited (tc tbf) and cut. Runs embedps jobs across
them with TLS and tokens. Used by test_multihost.py and by
bench/multihost/run.sh. Needs root and iproute2; everything it creates is
removed by close() (and at exit), and nothing outside the namespaces is
contacted.
"""

import atexit
import ctypes
import itertools
import json
import os
import pathlib
import signal
import subprocess
import sys
import time

_PR_SET_PDEATHSIG = 1


def _die_with_parent():
    ctypes.CDLL("libc.so.6", use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)


def sh(*args, check=True):
    return subprocess.run(args, check=check, capture_output=True, text=True)


def available():
    """Why these hosts cannot be made here, or None."""
    if os.geteuid() != 0:
        return "needs root (network namespaces)"
    for tool in ("ip", "tc"):
        if subprocess.run(["which", tool], capture_output=True).returncode != 0:
            return f"needs {tool} (iproute2)"
    name = f"epcheck{os.getpid()}"
    made = sh("ip", "netns", "add", name, check=False)
    if made.returncode != 0:
        return f"cannot create a network namespace: {made.stderr.strip()}"
    sh("ip", "netns", "del", name, check=False)
    return None


_made = itertools.count()


class Hosts:
    """`names` hosts, host i at 192.0.2.(10 + i), on one bridge."""

    def __init__(self, names):
        self.names = list(names)
        self.rate = None
        self._make()

    def rebuild(self):
        """Every host anew (new namespaces, links and bridge; the same
        addresses), its processes killed: for a set of hosts whose network
        stopped carrying packets. The links' limit is kept."""
        self.close()
        self._make()
        if self.rate is not None:
            self.limit(self.rate)

    def _make(self):
        names = self.names
        # Names carry this process's whole pid, a letter per Hosts made in
        # it and a separator before the host's index: no two live sets of
        # hosts make the same name (Linux allows 15 characters: "ev" + 7
        # digits + letter + "x" + index fits). A name left by a dead
        # process that had this pid is removed first.
        tag = f"{os.getpid()}{chr(ord('a') + next(_made) % 26)}"
        self.bridge = f"epbr{tag}"
        sh("ip", "link", "del", self.bridge, check=False)
        self.namespaces = {}
        self.address = {}
        self.processes = []
        self.veths = []
        if not getattr(self, "_closing_at_exit", False):
            atexit.register(self.close)
            self._closing_at_exit = True
        sh("ip", "link", "add", self.bridge, "type", "bridge")
        # No address on the bridge: this namespace's own network may use
        # the same range (this machine's eth0 does), and nothing here is to
        # reach the hosts but through a host of its own.
        sh("ip", "link", "set", self.bridge, "up")
        for i, name in enumerate(names):
            ns = f"ep{tag}-{name}"
            veth = f"ev{tag}x{i}"
            sh("ip", "netns", "del", ns, check=False)
            sh("ip", "link", "del", veth, check=False)
            sh("ip", "netns", "add", ns)
            self.namespaces[name] = ns
            sh("ip", "link", "add", veth, "type", "veth", "peer", "name", "eth0", "netns", ns)
            self.veths.append(veth)
            sh("ip", "link", "set", veth, "master", self.bridge)
            sh("ip", "link", "set", veth, "up")
            address = f"192.0.2.{10 + i}"
            self.address[name] = address
            self.run(name, "ip", "addr", "add", f"{address}/24", "dev", "eth0")
            self.run(name, "ip", "link", "set", "eth0", "up")
            self.run(name, "ip", "link", "set", "lo", "up")

    def run(self, host, *args):
        return sh("ip", "netns", "exec", self.namespaces[host], *args)

    def run_unchecked(self, host, *args):
        """`args` on `host`, with this process's environment; its result."""
        return subprocess.run(["ip", "netns", "exec", self.namespaces[host], *args],
                              capture_output=True, text=True, timeout=300)

    def spawn(self, host, args, log_path):
        """A process on `host` (None: this namespace) that dies with us."""
        prefix = [] if host is None else ["ip", "netns", "exec", self.namespaces[host]]
        log = open(log_path, "wb")
        process = subprocess.Popen(prefix + list(args), stdout=log, stderr=subprocess.STDOUT,
                                   preexec_fn=_die_with_parent)
        self.processes.append(process)
        return process

    def limit(self, rate):
        """Every host's link limited to `rate` ("10gbit", "1gbit") each
        way (tbf on both ends of its veth), or unlimited (None)."""
        self.rate = rate
        for i, host in enumerate(self.namespaces):
            for prefix, dev in ((["ip", "netns", "exec", self.namespaces[host]], "eth0"),
                                ([], self.veths[i])):
                if rate is None:
                    sh(*prefix, "tc", "qdisc", "del", "dev", dev, "root", check=False)
                else:
                    sh(*prefix, "tc", "qdisc", "replace", "dev", dev, "root", "tbf",
                       "rate", rate, "burst", "1mb", "latency", "100ms")

    def link(self, host, up):
        self.run(host, "ip", "link", "set", "eth0", "up" if up else "down")

    def reach(self, host, address, port, seconds=30):
        """None once a TCP connection from `host` to address:port opens
        (retrying for `seconds`), else what the namespaces' network looked
        like: links, neighbours and the bridge's ports."""
        code = ("import socket,sys,time\n"
                f"end = time.monotonic() + {seconds}\n"
                "while True:\n"
                "    try:\n"
                f"        socket.create_connection(('{address}', {port}), timeout=2).close(); break\n"
                "    except OSError as e:\n"
                "        if time.monotonic() > end: sys.exit(str(e))\n"
                "        time.sleep(0.2)\n")
        result = self.run_unchecked(host, "/usr/bin/python3", "-c", code)
        if result.returncode == 0:
            return None
        target = next(h for h, a in self.address.items() if a == address)
        report = [f"{host} cannot reach {address}:{port} ({target}): {result.stderr.strip()}"]
        for name in (host, target):
            for args in (("ip", "-s", "link", "show", "eth0"), ("ip", "neigh"), ("ss", "-tan")):
                out = self.run_unchecked(name, *args)
                report.append(f"[{name}] {' '.join(args)}:\n{out.stdout}{out.stderr}")
        report.append(sh("bridge", "link", "show", check=False).stdout)
        return "\n".join(report)

    def tx_bytes(self, host):
        return int(self.run(host, "cat", "/sys/class/net/eth0/statistics/tx_bytes").stdout)

    def close(self):
        for process in self.processes:
            if process.poll() is None:
                process.kill()
            process.wait()
        self.processes = []
        # Deleting a veth deletes its pair at once; a deleted namespace's
        # pair can outlive it (the kernel frees a namespace lazily).
        for veth in self.veths:
            sh("ip", "link", "del", veth, check=False)
        self.veths = []
        for ns in self.namespaces.values():
            sh("ip", "netns", "del", ns, check=False)
        self.namespaces = {}
        sh("ip", "link", "del", self.bridge, check=False)


class Job:
    """A SYNC DLRM job: `shards` ps_server shards and `workers` ps_worker
    ranks, with TLS and tokens, placed on hosts (or all on loopback)."""

    def __init__(self, bin_root, repo, work, certs, data, shards=2, workers=2, secure=True):
        self.bin = pathlib.Path(bin_root)
        self.repo = pathlib.Path(repo)
        self.work = pathlib.Path(work)
        self.certs = pathlib.Path(certs)
        self.data = pathlib.Path(data)
        self.shards = shards
        self.workers = workers
        # TLS and tokens on every connection (False: plain text, no tokens).
        self.secure = secure

    def tls(self, token):
        if not self.secure:
            return []
        c = self.certs
        return [f"--tls_cert={c / 'node.pem'}", f"--tls_key={c / 'node.key'}",
                f"--tls_ca={c / 'ca.pem'}", f"--token_file={c / token}"]

    def server_tokens(self):
        if not self.secure:
            return []
        return [f"--train_token_file={self.certs / 'train.token'}",
                f"--read_token_file={self.certs / 'read.token'}"]

    def run(self, hosts, name, extra_worker_args=(), during=None, timeout=600, _again=False):
        """Trains once; returns (rank 0's summary in a list, tx bytes each
        worker sent, seconds). `hosts` None: everything on 127.0.0.1.
        `during(hosts, servers)` runs while the workers train."""
        out = self.work / name
        out.mkdir(parents=True)
        (out / "ckpt").mkdir()
        addresses = []
        servers = []
        for s in range(self.shards):
            host = None if hosts is None else f"ps{s}"
            ip = "127.0.0.1" if hosts is None else hosts.address[host]
            port_file = out / f"ps{s}.port"
            servers.append(self._spawn(hosts, host, [
                str(self.bin / "server/ps_server"), f"--host={ip}",
                f"--port={0 if hosts is None else 50051}",
                f"--port_file={port_file}", f"--shard_index={s}", f"--num_shards={self.shards}",
                f"--num_workers={self.workers}", f"--checkpoint_root={out / 'ckpt'}",
                "--log_level=warn", *self.server_tokens(), *self.tls("read.token")],
                out / f"ps{s}.log", port_file))
            addresses.append(f"{ip}:{port_file.read_text().split()[0]}")
        if hosts is not None:
            # The namespaces' network is the test's ground, not what it
            # tests: a worker host that cannot open a TCP connection to a
            # shard fails here, with the links' state, not 60 s into the
            # job as a worker's retry deadline.
            # Once, the hosts are made anew and the run starts over (the
            # report goes to the test's log): the namespaces' plumbing is
            # not what is tested, and a worker never ran.
            for r in range(self.workers):
                for s, address in enumerate(addresses):
                    ip, port = address.rsplit(":", 1)
                    unreachable = hosts.reach(f"w{r}", ip, int(port))
                    if unreachable is None:
                        continue
                    report = unreachable + "\n" + (out / f"ps{s}.log").read_text()[-3000:]
                    assert not _again, report
                    sys.stderr.write(f"hosts made anew after:\n{report}\n")
                    for server in servers:
                        server.kill()
                        server.wait()
                    hosts.rebuild()
                    return self.run(hosts, f"{name}-again", extra_worker_args, during, timeout,
                                    _again=True)
        workers = []
        before = {}
        for r in range(self.workers):
            host = None if hosts is None else f"w{r}"
            ip = "127.0.0.1" if hosts is None else hosts.address[host]
            if hosts is not None:
                before[r] = hosts.tx_bytes(host)
            args = [str(self.bin / "worker/ps_worker"),
                    f"--config={self.repo / 'deploy/local/dlrm_small.txtpb'}",
                    f"--servers={','.join(addresses)}", f"--rank={r}",
                    f"--world_size={self.workers}", f"--gloo_host={ip}", "--mode=sync",
                    f"--job_name={name}", f"--train_data={self.data / 'train.txt'}",
                    f"--test_data={self.data / 'test.txt'}", "--log_level=warn",
                    "--retry_deadline_s=60", *self.tls("train.token"), *extra_worker_args]
            log = out / f"w{r}.json"
            workers.append(_spawn_plain(hosts, host, args, log, out / f"w{r}.err"))
        start = time.monotonic()
        try:
            if during is not None:
                during(hosts, servers)
            codes = [worker.wait(timeout=timeout) for worker in workers]
            seconds = time.monotonic() - start
            summaries = []
            for r, code in enumerate(codes):
                err = (out / f"w{r}.err").read_text()
                assert code == 0, f"worker {r} exited {code}: {err[-3000:]}" + "".join(
                    f"\nps{s}.log: {(out / f'ps{s}.log').read_text()[-1500:]}"
                    for s in range(self.shards))
                # Rank 0 prints the job's summary.
                lines = (out / f"w{r}.json").read_text().strip().splitlines()
                if r == 0:
                    assert lines, f"rank 0 printed no summary: {err[-3000:]}"
                    summaries.append(json.loads(lines[-1]))
            sent = [hosts.tx_bytes(f"w{r}") - before[r] for r in range(self.workers)] \
                if hosts is not None else None
        finally:
            for process in workers + servers:
                if process.poll() is None:
                    process.kill()
                process.wait()
        return summaries, sent, seconds

    def _spawn(self, hosts, host, args, log, port_file):
        if hosts is None:
            process = subprocess.Popen(args, stdout=open(log, "wb"), stderr=subprocess.STDOUT,
                                       preexec_fn=_die_with_parent)
        else:
            process = hosts.spawn(host, args, log)
        deadline = time.monotonic() + 30
        while not port_file.exists():
            assert process.poll() is None, pathlib.Path(log).read_text()
            assert time.monotonic() < deadline, "ps_server did not start"
            time.sleep(0.05)
        return process


def _spawn_plain(hosts, host, args, stdout, stderr):
    prefix = [] if hosts is None else ["ip", "netns", "exec", hosts.namespaces[host]]
    process = subprocess.Popen(prefix + args, stdout=open(stdout, "wb"),
                               stderr=open(stderr, "wb"), preexec_fn=_die_with_parent)
    if hosts is not None:
        hosts.processes.append(process)
    return process
