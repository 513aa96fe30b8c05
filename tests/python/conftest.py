"""Fixtures of the Python tests: real ps_server processes on 127.0.0.1.

Binaries come from EMBEDPS_BIN (the Bazel runfiles root that
tests/python/run_pytest.sh sets) or the checkout's bazel-bin. Every
process started here dies with the test process (PR_SET_PDEATHSIG) and is
killed when its fixture ends.
"""

import ctypes
import os
import pathlib
import random
import signal
import socket
import subprocess
import sys
import time

import numpy as np
import pytest

ROOT = pathlib.Path(os.environ.get(
    "EMBEDPS_BIN", pathlib.Path(__file__).resolve().parents[2] / "bazel-bin"))
REPO = pathlib.Path(os.environ.get(
    "EMBEDPS_REPO", pathlib.Path(__file__).resolve().parents[2]))

_PR_SET_PDEATHSIG = 1


def _die_with_parent():
    ctypes.CDLL("libc.so.6", use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)


def binary(name: str) -> str:
    path = ROOT / name
    if not path.exists():
        pytest.fail(f"{path} is missing: bazel build //{name.rsplit('/', 1)[0]}:{name.rsplit('/', 1)[1]}")
    return str(path)


def spawn(args, log_path, env=None):
    """A child process that dies with this one; output to log_path."""
    log = open(log_path, "wb")
    return subprocess.Popen(args, stdout=log, stderr=subprocess.STDOUT,
                            preexec_fn=_die_with_parent, env=env)


_ports = random.Random(os.getpid() ^ time.monotonic_ns())


class Server:
    """A ps_server on a port of its own.

    Ports come from 20000-29999, below the kernel's ephemeral range that
    port 0 draws from: the C++ multi-process tests running beside these
    kill servers whose clients keep retrying, and a server of ours that
    got such a port would receive their requests (a request names a table
    by its id on the server, so it would land in our table).

    Its checkpoint root is the test's directory (the parent of
    `directory`), as a deployment names its checkpoint volume; `args` may
    name another (the last flag wins), or none with "--checkpoint_root=".
    """

    def __init__(self, directory: pathlib.Path, name: str, args=()):
        directory.mkdir(parents=True, exist_ok=True)
        self.port_file = directory / f"{name}.port"
        self.log = directory / f"{name}.log"
        for _ in range(50):
            port = _ports.randrange(20000, 30000)
            self.process = spawn([binary("server/ps_server"), f"--port={port}",
                                  f"--port_file={self.port_file}", "--metrics_port=-1",
                                  "--log_level=warn", f"--checkpoint_root={directory.parent}",
                                  *args], self.log)
            if self._started():
                break
        else:
            raise RuntimeError(f"ps_server did not start: {self.log.read_text()}")
        self.port = int(self.port_file.read_text().split()[0])
        self.address = f"127.0.0.1:{self.port}"

    def _started(self) -> bool:
        """Whether it listens; False if it exited (its port was taken)."""
        deadline = time.monotonic() + 30
        while not self.port_file.exists():
            if self.process.poll() is not None:
                return False
            if time.monotonic() > deadline:
                raise RuntimeError("ps_server did not start in 30 s")
            time.sleep(0.02)
        return True

    def stop(self):
        if self.process.poll() is None:
            self.process.kill()
        self.process.wait()


@pytest.fixture
def start_servers(tmp_path):
    """start_servers(n, *args) -> [Server]: shard i of n for each."""
    started = []

    def start(n=1, *args):
        servers = []
        for i in range(n):
            extra = [f"--shard_index={i}", f"--num_shards={n}", *args]
            server = Server(tmp_path / "servers", f"shard{len(started)}", extra)
            started.append(server)
            servers.append(server)
        return servers

    yield start
    for server in started:
        server.stop()


@pytest.fixture
def start_server(tmp_path):
    """start_server(*args) -> Server, with exactly the given flags."""
    started = []

    def start(*args):
        server = Server(tmp_path / "servers", f"server{len(started)}", args)
        started.append(server)
        return server

    yield start
    for server in started:
        server.stop()


def free_port() -> int:
    """A port free on 127.0.0.1 now (for a rendezvous)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run_sync_workers(addresses: str, out_dir: pathlib.Path, steps: int, hot_rows: int = 0):
    """Two sync_worker.py processes (DDP over Gloo) against `addresses`;
    asserts both succeed and returns their .npz results, rank order."""
    port = free_port()
    procs = []
    for rank in range(2):
        env = dict(os.environ, RANK=str(rank), WORLD_SIZE="2", MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
        procs.append(subprocess.Popen(
            [sys.executable, os.path.join(os.path.dirname(__file__), "sync_worker.py"), addresses,
             str(out_dir / f"rank{rank}.npz"), str(steps), str(hot_rows)],
            env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, preexec_fn=_die_with_parent))
    for p in procs:
        output, _ = p.communicate(timeout=120)
        assert p.returncode == 0, output.decode()
    return [np.load(out_dir / f"rank{rank}.npz") for rank in range(2)]


def pytest_report_header(config):
    return f"embedps binaries: {ROOT}; python {sys.version.split()[0]}"
