"""embedps.Client against real ps_server shards: round trips, argument
errors, server errors, futures, threads, the GIL."""

import os
import subprocess
import sys
import threading
import time

import numpy as np
import pytest

import embedps
from conftest import REPO

SGD = {"kind": "sgd", "learning_rate": 1.0}


@pytest.fixture
def two_shards(start_servers):
    servers = start_servers(2)
    client = embedps.Client([s.address for s in servers], retry_deadline=5)
    return client, servers


def test_pull_push_lookup_round_trip(two_shards):
    client, _ = two_shards
    table = client.create_table(name="emb", dim=8, optimizer=SGD)
    assert (table.name, table.dim, table.mode, table.num_shards) == ("emb", 8, "async", 2)
    keys = np.array([3, 1 << 63, 3, 17, 99, 1], dtype=np.uint64)
    first = client.pull(table, keys)
    assert first.shape == (6, 8) and first.dtype == np.float32
    np.testing.assert_array_equal(first[0], first[2])  # the same key, the same row
    grads = np.arange(48, dtype=np.float32).reshape(6, 8) / 10
    client.push(table, keys, grads)
    after = client.pull(table, keys)
    # SGD with rate 1: row - sum of its gradients (key 3 twice), in float32.
    expected = first.copy()
    for i, key in enumerate(keys):
        expected[i] = first[i] - grads[keys == key].sum(axis=0, dtype=np.float32)
    np.testing.assert_array_equal(after, expected)
    # int64 keys are the same 64 bits; lookup reads without creating.
    np.testing.assert_array_equal(client.lookup(table, keys.view(np.int64)), after)
    assert sum(s["table"][0]["rows"] for s in client.stats()) == 5


def test_servers_may_be_one_comma_separated_string(two_shards):
    client, servers = two_shards
    table = client.create_table(name="emb", dim=4, optimizer=SGD)
    keys = np.array([1, 2, 3], dtype=np.uint64)
    rows = client.pull(table, keys)
    # As ps_worker's --servers: the same shards, in the same order.
    joined = embedps.Client(" , ".join(s.address for s in servers), retry_deadline=5)
    assert joined.num_shards == 2
    np.testing.assert_array_equal(joined.lookup(joined.create_table(name="emb", dim=4, optimizer=SGD),
                                                keys), rows)
    with pytest.raises(TypeError, match='servers must be a list of "host:port" strings'):
        embedps.Client(50051)
    with pytest.raises(TypeError, match=r'servers\[1\] must be a "host:port" string, not int'):
        embedps.Client([servers[0].address, 7])


def test_lookup_creates_no_row_and_pull_writes_into_out(two_shards):
    client, _ = two_shards
    table = client.create_table('name: "t" dim: 4 optimizer { kind: SGD learning_rate: 1 }')
    keys = np.array([10, 11], dtype=np.uint64)
    looked = client.lookup(table, keys)
    assert sum(s["table"][0]["rows"] for s in client.stats()) == 0
    out = np.zeros((2, 4), dtype=np.float32)
    returned = client.pull(table, keys, out=out)
    assert returned is out
    np.testing.assert_array_equal(out, looked)  # the initial rows
    assert client.pull(table, np.array([], dtype=np.uint64)).shape == (0, 4)


def test_create_table_is_idempotent_and_checks_its_config(two_shards):
    client, _ = two_shards
    a = client.create_table(name="e", dim=4, optimizer={"kind": "adagrad", "learning_rate": 0.1})
    b = client.create_table('name: "e" dim: 4 optimizer { kind: ADAGRAD learning_rate: 0.1 }')
    assert a.name == b.name
    with pytest.raises(embedps.FailedPreconditionError, match="different spec"):
        client.create_table(name="e", dim=8)
    with pytest.raises(embedps.InvalidArgumentError, match="dimm"):
        client.create_table(name="x", dimm=3)
    with pytest.raises(embedps.InvalidArgumentError, match="line 1"):
        client.create_table('name: "x" dim: oops')
    with pytest.raises(embedps.InvalidArgumentError) as error:  # the server's check
        client.create_table(name="x", dim=0)
    assert error.value.code == 3 and error.value.code_name == "INVALID_ARGUMENT"
    assert isinstance(error.value, ValueError)
    with pytest.raises(TypeError):
        client.create_table('name: "x"', dim=3)


@pytest.mark.parametrize("keys, error, message", [
    (np.array([1.0, 2.0]), TypeError, "uint64 or int64"),
    (np.array([1, 2], dtype=np.int32), TypeError, "uint64 or int64"),
    (np.array([[1, 2]], dtype=np.uint64), ValueError, "1-D"),
    (np.arange(8, dtype=np.uint64)[::2], ValueError, "C-contiguous"),
    ([1, 2, 3], TypeError, "numpy array"),
])
def test_bad_keys_are_refused_before_sending(two_shards, keys, error, message):
    client, _ = two_shards
    table = client.create_table(name="emb", dim=4)
    before = client.stats()
    for call in (client.pull, client.lookup, client.pull_async):
        with pytest.raises(error, match=message):
            call(table, keys)
    with pytest.raises(error, match=message):
        client.push(table, keys, np.zeros((2, 4), np.float32))
    assert client.stats()[0]["table"][0]["rows"] == before[0]["table"][0]["rows"]


@pytest.mark.parametrize("grads, error, message", [
    (np.zeros((3, 4), np.float64), TypeError, "float32"),
    (np.zeros((3, 5), np.float32), ValueError, r"shape \(3, 4\)"),
    (np.zeros((2, 4), np.float32), ValueError, r"shape \(3, 4\)"),
    (np.zeros(12, np.float32), ValueError, r"shape \(3, 4\)"),
    (np.zeros((4, 3), np.float32).T, ValueError, "C-contiguous"),
    (np.zeros((3, 4), np.float32).tolist(), TypeError, "numpy array"),
])
def test_bad_gradients_are_refused_and_change_nothing(two_shards, grads, error, message):
    client, _ = two_shards
    table = client.create_table(name="emb", dim=4, optimizer=SGD)
    keys = np.array([1, 2, 3], dtype=np.uint64)
    before = client.pull(table, keys)
    with pytest.raises(error, match=message):
        client.push(table, keys, grads)
    with pytest.raises(error, match=message):
        client.push_async(table, keys, grads)
    np.testing.assert_array_equal(client.pull(table, keys), before)


def test_bad_out_and_options_are_refused(two_shards, start_servers):
    client, servers = two_shards
    table = client.create_table(name="emb", dim=4)
    keys = np.array([1, 2], dtype=np.uint64)
    with pytest.raises(ValueError, match=r"shape \(2, 4\)"):
        client.pull(table, keys, out=np.zeros((2, 5), np.float32))
    readonly = np.zeros((2, 4), np.float32)
    readonly.setflags(write=False)
    with pytest.raises(ValueError, match="writable"):
        client.pull(table, keys, out=readonly)
    with pytest.raises(ValueError, match="wire"):
        embedps.Client([servers[0].address], wire="float64")
    with pytest.raises(ValueError, match="rpc_timeout"):
        embedps.Client([servers[0].address], rpc_timeout=-1)
    with pytest.raises(embedps.InvalidArgumentError):
        embedps.Client([])
    # A table handle of a client with another shard count.
    one = embedps.Client([servers[0].address])
    with pytest.raises(ValueError, match="2 shard"):
        one.pull(table, keys)


def test_server_errors_raise_their_classes(two_shards, tmp_path, start_servers):
    client, servers = two_shards
    table = client.create_table(name="emb", dim=4)
    with pytest.raises(embedps.NotFoundError) as error:
        client.load(str(tmp_path / "no-such-checkpoint"))
    assert error.value.code == 5 and "no-such-checkpoint" in str(error.value)
    root = tmp_path / "ckpt"
    manifest = client.checkpoint(str(root), step=7)
    assert int(manifest["step"]) == 7
    with pytest.raises(embedps.AlreadyExistsError):
        client.checkpoint(str(root), step=7)
    # A dead server: UNAVAILABLE once the retries give up.
    dead = embedps.Client([servers[0].address, "127.0.0.1:1"], retry_deadline=0.3)
    with pytest.raises(embedps.UnavailableError) as error:
        dead.create_table(name="emb", dim=4)
    assert error.value.code == 14 and isinstance(error.value, ConnectionError)
    # A serving replica refuses pushes.
    replica = start_servers(1, "--role=serving", f"--follow_checkpoints={root}")[0]
    serving = embedps.Client([replica.address], retry_deadline=2)
    with pytest.raises(embedps.FailedPreconditionError, match="serving"):
        serving.create_table(name="new", dim=4)


def test_checkpoint_and_load_restore_rows(start_servers, tmp_path):
    first = start_servers(2)
    client = embedps.Client([s.address for s in first])
    table = client.create_table(name="emb", dim=4, optimizer=SGD)
    keys = np.arange(100, dtype=np.uint64)
    client.push(table, keys, np.ones((100, 4), np.float32))
    rows = client.pull(table, keys)
    client.checkpoint(str(tmp_path / "root"), step=3)
    second = start_servers(2)
    fresh = embedps.Client([s.address for s in second])
    loaded = fresh.load(str(tmp_path / "root"))
    assert int(loaded["step"]) == 3
    restored = fresh.create_table(name="emb", dim=4, optimizer=SGD)
    np.testing.assert_array_equal(fresh.lookup(restored, keys), rows)


def test_futures(two_shards):
    client, _ = two_shards
    table = client.create_table(name="emb", dim=4, optimizer=SGD)
    keys = np.arange(1000, dtype=np.uint64)
    pull = client.pull_async(table, keys)
    rows = pull.result(timeout=10)
    assert pull.done() and rows.shape == (1000, 4)
    np.testing.assert_array_equal(pull.result(), rows)  # again: the same rows
    # The arrays stay borrowed while the call runs, even when dropped.
    push = client.push_async(table, keys.copy(), np.ones((1000, 4), np.float32))
    assert push.result() is None
    np.testing.assert_array_equal(client.lookup_async(table, keys).result(), rows - 1)


def test_a_future_raises_the_calls_error(start_servers):
    server = start_servers(1)[0]
    client = embedps.Client([server.address], retry_deadline=0.5)
    table = client.create_table(name="emb", dim=4)
    server.stop()
    future = client.pull_async(table, np.array([1], dtype=np.uint64))
    with pytest.raises(embedps.UnavailableError):
        future.result(timeout=30)
    assert future.done()


def test_sync_pull_waits_and_times_out_on_result(start_servers):
    server = start_servers(1, "--num_workers=2")[0]
    client = embedps.Client([server.address])
    table = client.create_table(name="s", dim=4, consistency={"mode": "sync", "timeout_ms": 20000})
    assert table.mode == "sync"
    keys = np.array([1, 2], dtype=np.uint64)
    # Step 1 waits for both workers' step 0: one alone cannot finish it.
    client.push(table, keys, np.ones((2, 4), np.float32), step=0)
    waiting = client.pull_async(table, keys, step=1)
    with pytest.raises(TimeoutError):
        waiting.result(timeout=0.2)
    other = embedps.Client([server.address])
    other.push(table, keys, np.ones((2, 4), np.float32), step=0)
    assert waiting.result(timeout=20).shape == (2, 4)


def test_many_threads_share_one_client(two_shards):
    client, _ = two_shards
    table = client.create_table(name="emb", dim=4, optimizer=SGD)
    threads, errors = 8, []
    keys = [np.arange(t * 1000, t * 1000 + 500, dtype=np.uint64) for t in range(threads)]
    initial = [client.pull(table, k) for k in keys]

    def work(t):
        try:
            for _ in range(20):
                client.push(table, keys[t], np.full((500, 4), 0.5, np.float32))
                client.pull(table, keys[t])
        except Exception as e:  # noqa: BLE001 - reported below
            errors.append(e)

    workers = [threading.Thread(target=work, args=(t,)) for t in range(threads)]
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    assert not errors
    for t in range(threads):
        expected = initial[t]
        for _ in range(20):
            expected = expected - np.float32(0.5)
        np.testing.assert_array_equal(client.lookup(table, keys[t]), expected)


def test_the_gil_is_released_during_a_call(start_servers):
    """A SYNC pull blocks until another worker's push, which a Python
    thread sends: it can only run if the blocked call released the GIL."""
    server = start_servers(1, "--num_workers=2")[0]
    a = embedps.Client([server.address])
    b = embedps.Client([server.address])
    table = a.create_table(name="s", dim=4, consistency={"mode": "sync", "timeout_ms": 20000})
    keys = np.array([5], dtype=np.uint64)
    a.push(table, keys, np.ones((1, 4), np.float32), step=0)
    ticks = []

    def other_worker():
        time.sleep(0.3)
        for _ in range(100):
            ticks.append(time.monotonic())  # needs the GIL
        b.push(table, keys, np.ones((1, 4), np.float32), step=0)

    thread = threading.Thread(target=other_worker)
    start = time.monotonic()
    thread.start()
    a.pull(table, keys, step=1)  # blocks in C++ until b's push
    thread.join()
    assert len(ticks) == 100 and ticks[0] > start


def test_float16_wire_is_within_half_precision(two_shards):
    _, servers = two_shards
    client = embedps.Client([s.address for s in servers], wire="float16")
    table = client.create_table(name="emb", dim=4, optimizer=SGD)
    exact = embedps.Client([s.address for s in servers])
    keys = np.arange(50, dtype=np.uint64)
    np.testing.assert_allclose(client.pull(table, keys), exact.lookup(table, keys), atol=1e-4)


def test_a_package_without_its_cpp_part_says_what_to_build():
    env = dict(os.environ, PYTHONPATH=str(REPO / "python"))
    result = subprocess.run([sys.executable, "-c", "import embedps"], env=env,
                            capture_output=True, text=True, timeout=60)
    assert result.returncode != 0
    assert "bazel build //python:embedps" in result.stderr
    assert "ImportError" in result.stderr


def test_checkpoint_paths_stay_inside_the_servers_root(start_servers, tmp_path):
    """ps_server --checkpoint_root: Save and Load requests resolve inside it;
    '..', absolute paths elsewhere and links that leave it are refused with
    PERMISSION_DENIED, and the server writes nothing there."""
    root = tmp_path / "root"
    elsewhere = tmp_path / "elsewhere"
    root.mkdir()
    elsewhere.mkdir()
    (root / "out").symlink_to(elsewhere)
    servers = start_servers(2, f"--checkpoint_root={root}")
    client = embedps.Client([s.address for s in servers])
    table = client.create_table(name="emb", dim=4, optimizer=SGD)
    keys = np.arange(50, dtype=np.uint64)
    client.push(table, keys, np.ones((50, 4), np.float32))
    rows = client.pull(table, keys)
    assert int(client.checkpoint(str(root), step=1)["step"]) == 1
    for bad in (elsewhere, root / "out", root / ".." / "elsewhere"):
        with pytest.raises(embedps.PermissionDeniedError, match="outside the checkpoint root"):
            client.checkpoint(str(bad), step=2)
    assert not list(elsewhere.rglob("shard-*")), "a shard wrote outside its root"
    for bad in ("/etc", str(elsewhere), "../elsewhere", str(root / "out")):
        with pytest.raises(embedps.PermissionDeniedError):
            client.load(bad)
    # Inside the root: restored, relative or absolute.
    fresh = start_servers(2, f"--checkpoint_root={root}")
    other = embedps.Client([s.address for s in fresh])
    assert int(other.load(".")["step"]) == 1
    restored = other.create_table(name="emb", dim=4, optimizer=SGD)
    np.testing.assert_array_equal(other.lookup(restored, keys), rows)
    np.testing.assert_array_equal(client.pull(table, keys), rows)  # unchanged


def test_a_server_without_a_checkpoint_root_refuses_save_and_load(start_servers, tmp_path):
    server = start_servers(1, "--checkpoint_root=")[0]
    client = embedps.Client([server.address])
    table = client.create_table(name="emb", dim=4, optimizer=SGD)
    keys = np.arange(10, dtype=np.uint64)
    rows = client.pull(table, keys)
    for call in (lambda: client.checkpoint(str(tmp_path / "root"), step=1),
                 lambda: client.load(str(tmp_path))):
        with pytest.raises(embedps.FailedPreconditionError, match="no --checkpoint_root"):
            call()
    assert not list((tmp_path / "root").rglob("shard-*"))
    np.testing.assert_array_equal(client.pull(table, keys), rows)


def test_the_checkpoint_root_flag_is_checked_at_start(tmp_path):
    from conftest import binary
    root = tmp_path / "root"
    root.mkdir()
    for args, message in (
            ([f"--checkpoint_root={tmp_path / 'none'}"], "is not a directory"),
            ([f"--checkpoint_root={root}", f"--restore={tmp_path}"], "outside the checkpoint root"),
            (["--max_message_bytes=1000"], "--max_message_bytes must be >= 1 MiB")):
        result = subprocess.run([binary("server/ps_server"), "--port=0", *args],
                                capture_output=True, text=True, timeout=60)
        assert result.returncode == 2, result.stderr
        assert message in result.stderr


def test_erase_removes_rows_on_every_shard(two_shards):
    client, _ = two_shards
    table = client.create_table(name="users", dim=4, optimizer=SGD)
    keys = np.arange(100, 140, dtype=np.uint64)
    initial = client.lookup(table, keys)
    client.push(table, keys, np.ones((40, 4), dtype=np.float32))
    assert not np.array_equal(client.lookup(table, keys), initial)
    erased = client.erase(table, np.concatenate([keys, keys[:3]]))
    assert len(erased) == 2 and sum(erased) == 40  # duplicates count once
    np.testing.assert_array_equal(client.lookup(table, keys), initial)
    assert client.erase(table, keys) == [0, 0]
    with pytest.raises(TypeError):
        client.erase(table, ["not", "keys"])


def test_servers_that_are_not_the_cluster_given_are_refused(start_server):
    """Two servers started with the defaults (each shard 0 of 1), given as a
    two-shard cluster: refused before any table call, naming both; a
    cluster id the servers do not state: refused too."""
    a = start_server()
    b = start_server()
    client = embedps.Client([a.address, b.address], retry_deadline=5)
    with pytest.raises(embedps.FailedPreconditionError) as refused:
        client.create_table('name: "t" dim: 4')
    message = str(refused.value)
    assert f"server 0 ({a.address}) says it is a training shard 0 of 1" in message
    assert f"server 1 ({b.address}) says it is a training shard 0 of 1" in message
    assert all(len(s["table"]) == 0 for s in client.stats())
    one = embedps.Client([a.address], cluster_id="prod", retry_deadline=5)
    with pytest.raises(embedps.FailedPreconditionError, match="cluster 'prod'"):
        one.create_table('name: "t" dim: 4')
    embedps.Client([a.address]).create_table('name: "t" dim: 4')


def test_a_forked_child_gets_a_clear_error_not_a_hang(start_servers):
    """A process forked after it made a client (a DataLoader worker with
    the default start method) cannot use gRPC: its calls, and a new client
    made there, raise RuntimeError at once naming the remedy instead of
    hanging; the parent's client goes on working."""
    import os
    import signal
    servers = start_servers(1)
    client = embedps.Client([s.address for s in servers])
    table = client.create_table(name="fork", dim=4)
    keys = np.arange(4, dtype=np.uint64)
    client.lookup(table, keys)
    pid = os.fork()
    if pid == 0:  # the child: report through the exit code, never return
        code = 0
        for attempt in (lambda: client.lookup(table, keys),
                        lambda: client.push(table, keys, np.ones((4, 4), dtype=np.float32)),
                        lambda: embedps.Client([s.address for s in servers])):
            try:
                attempt()
                code = 1
            except RuntimeError as e:
                if "spawn" not in str(e) or "forked" not in str(e):
                    code = 2
            except BaseException:
                code = 3
        os._exit(code)
    deadline = time.monotonic() + 30
    while True:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            break
        if time.monotonic() > deadline:
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
            pytest.fail("the forked child hung")
        time.sleep(0.05)
    assert os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0, status
    np.testing.assert_array_equal(client.lookup(table, keys), client.lookup(table, keys))


def test_metrics_take_their_arguments_by_name_and_refuse_swapped_ones():
    labels = np.array([0, 1, 1, 0], dtype=np.float32)
    scores = np.array([0.1, 0.9, 0.8, 0.3], dtype=np.float32)
    assert embedps.roc_auc(labels=labels, scores=scores) == 1.0
    with pytest.raises(TypeError):
        embedps.roc_auc(scores, labels)  # positional: which is which?
    with pytest.raises(ValueError, match="0 or 1"):
        embedps.roc_auc(labels=scores, scores=labels)
    assert embedps.mean_log_loss(labels=labels, logits=np.zeros(4, np.float32)) == pytest.approx(np.log(2))
    with pytest.raises(ValueError, match="0 or 1"):
        embedps.mean_log_loss(labels=scores, logits=labels)


def test_a_table_recreated_with_another_spec_names_what_differs(start_servers):
    servers = start_servers(1)
    client = embedps.Client([s.address for s in servers])
    client.create_table(name="spec", dim=4, optimizer={"kind": "sgd", "learning_rate": 0.5})
    with pytest.raises(embedps.FailedPreconditionError) as error:
        client.create_table(name="spec", dim=8, optimizer={"kind": "sgd", "learning_rate": 0.5})
    message = str(error.value)
    assert "dim: existing {dim: 4}, requested {dim: 8}" in message
    assert "optimizer" not in message and len(message) < 400, message


def test_ctrl_c_interrupts_a_blocking_sync_pull(start_servers):
    """A SYNC pull waiting for a worker that never comes returns to Python
    with KeyboardInterrupt soon after Ctrl-C (SIGINT), not at the table's
    timeout; the client works on afterwards."""
    import signal
    servers = start_servers(1, "--num_workers=2")
    client = embedps.Client([s.address for s in servers])
    table = client.create_table(name="wait", dim=4, consistency={"mode": "sync", "timeout_ms": 60000})
    keys = np.arange(8, dtype=np.uint64)
    client.pull(table, keys, step=0)
    client.push(table, keys, np.ones((8, 4), dtype=np.float32), step=0)
    # Step 1 waits for the other worker's step 0, which never comes.
    timer = threading.Timer(0.5, lambda: os.kill(os.getpid(), signal.SIGINT))
    start = time.monotonic()
    timer.start()
    with pytest.raises(KeyboardInterrupt):
        client.pull(table, keys, step=1)
    waited = time.monotonic() - start
    print(f"KeyboardInterrupt {waited - 0.5:.3f} s after SIGINT")
    assert waited < 30, waited  # the server would have waited 60 s
    np.testing.assert_array_equal(client.lookup(table, keys, step=0), client.lookup(table, keys, step=0))


def test_a_lost_server_is_reported_with_what_a_python_program_does(start_servers):
    servers = start_servers(1)
    client = embedps.Client([s.address for s in servers], retry_deadline=1.0)
    table = client.create_table(name="lost", dim=4)
    servers[0].stop()
    with pytest.raises(embedps.UnavailableError) as error:
        client.pull(table, np.arange(4, dtype=np.uint64))
    message = str(error.value)
    assert "client.load" in message and "step" in message, message
    assert isinstance(error.value, ConnectionError)
