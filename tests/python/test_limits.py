"""No single call exhausts a ps_server: requests past each limit are
refused with RESOURCE_EXHAUSTED before anything is allocated, what the
server holds stays as it was, and it keeps serving. Real processes."""

import os
import subprocess

import numpy as np
import pytest

import embedps
from conftest import binary

SGD = {"kind": "sgd", "learning_rate": 1.0}
ZEROS = {"kind": "zeros"}


def resident_mib(server) -> float:
    with open(f"/proc/{server.process.pid}/statm") as statm:
        return int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20


def test_a_pull_whose_response_is_too_big_is_refused(start_servers):
    # 2 MiB messages: 64 keys at dim 4096 (1 MiB) fit, 200 (3.2 MiB) do not.
    server = start_servers(1, "--max_message_bytes=2097152")[0]
    client = embedps.Client([server.address])
    table = client.create_table(name="wide", dim=4096, optimizer=SGD)
    small = np.arange(64, dtype=np.uint64)
    rows = client.pull(table, small)
    before = resident_mib(server)
    with pytest.raises(embedps.ResourceExhaustedError, match="split the batch"):
        client.pull(table, np.arange(1000, 1200, dtype=np.uint64))
    with pytest.raises(embedps.ResourceExhaustedError):
        client.lookup(table, np.arange(1000, 1200, dtype=np.uint64))
    assert resident_mib(server) < before + 16
    np.testing.assert_array_equal(client.pull(table, small), rows)
    assert client.stats()[0]["table"][0]["rows"] == 64
    assert client.stats()[0]["rejected_requests"]["over_limit"] == 2


def test_a_huge_admission_sketch_is_refused(start_servers):
    server = start_servers(1)[0]
    client = embedps.Client([server.address])
    before = resident_mib(server)
    with pytest.raises(embedps.ResourceExhaustedError, match="--max_sketch_counters"):
        client.create_table(name="sketchy", dim=8,
                            admission={"kind": "count", "sketch_counters": 4294967296,
                                       "min_count": 2})
    assert resident_mib(server) < before + 16
    assert client.stats()[0]["table"] == []
    table = client.create_table(name="fine", dim=8, optimizer=SGD,
                                admission={"kind": "count", "sketch_counters": 1 << 16,
                                           "min_count": 2})
    assert client.pull(table, np.arange(4, dtype=np.uint64)).shape == (4, 8)


def test_expected_rows_commit_memory_up_to_the_servers_limit(start_servers):
    server = start_servers(1, "--max_expected_rows_mb=64")[0]
    client = embedps.Client([server.address])
    before = resident_mib(server)
    # 10M rows of dim 64 would commit ~5 GB at once: refused, nothing taken.
    with pytest.raises(embedps.ResourceExhaustedError, match="--max_expected_rows_mb"):
        client.create_table(name="huge", dim=64, optimizer=SGD, expected_rows=10_000_000)
    # More than a table can hold at all: a bad spec.
    with pytest.raises(embedps.InvalidArgumentError, match="expected_rows"):
        client.create_table(name="huge", dim=4, optimizer=SGD, num_stripes=1,
                            expected_rows=1 << 40)
    assert resident_mib(server) < before + 16
    assert client.stats()[0]["table"] == []
    # 100k rows of dim 64 with SGD (~27 MB): committed when the table is
    # created, before any row exists.
    table = client.create_table(name="sized", dim=64, optimizer=SGD,
                                initializer=ZEROS, expected_rows=100_000)
    assert resident_mib(server) > before + 20
    assert client.stats()[0]["table"][0]["rows"] == 0
    # A hint is no part of the spec: another one names the same table.
    again = client.create_table(name="sized", dim=64, optimizer=SGD,
                                initializer=ZEROS, expected_rows=5)
    keys = np.arange(1000, dtype=np.uint64)
    client.push(again, keys, np.ones((1000, 64), np.float32))
    np.testing.assert_array_equal(client.lookup(table, keys), -np.ones((1000, 64), np.float32))


def test_tables_are_limited_and_drop_table_frees_a_place(start_servers):
    servers = start_servers(2, "--max_tables=3")
    client = embedps.Client([s.address for s in servers])
    tables = [client.create_table(name=f"t{i}", dim=4, optimizer=SGD, initializer=ZEROS) for i in range(3)]
    keys = np.arange(100, dtype=np.uint64)
    client.push(tables[0], keys, np.ones((100, 4), np.float32))
    with pytest.raises(embedps.ResourceExhaustedError, match="--max_tables"):
        client.create_table(name="t3", dim=4, optimizer=SGD, initializer=ZEROS)
    # The same spec again is not a new table.
    client.create_table(name="t1", dim=4, optimizer=SGD, initializer=ZEROS)
    client.drop_table("t2")
    with pytest.raises(embedps.NotFoundError, match="dropped"):
        client.pull(tables[2], keys)
    with pytest.raises(embedps.NotFoundError):
        client.drop_table("t2")
    client.create_table(name="t3", dim=4, optimizer=SGD, initializer=ZEROS)
    np.testing.assert_array_equal(client.lookup(tables[0], keys), -np.ones((100, 4), np.float32))
    assert sorted(t["name"] for t in client.stats()[0]["table"]) == ["t0", "t1", "t3"]
    # A dropped name can be created afresh (new rows, new id).
    client.drop_table("t0")
    again = client.create_table(name="t0", dim=4, optimizer=SGD, initializer=ZEROS)
    np.testing.assert_array_equal(client.lookup(again, keys), np.zeros((100, 4), np.float32))


def test_the_memory_limit_is_on_by_default(start_servers):
    """Without --memory_limit_mb a server keeps to 80% of the memory it may
    use (the machine's, or its container's limit): a table whose expected
    rows would commit more is refused before anything is allocated (with
    no limit, three such requests took a 24 GB machine down)."""
    server = start_servers(1, "--max_expected_rows_mb=100000000")[0]
    client = embedps.Client([server.address])
    limit = client.stats()[0]["memory_limit_bytes"]
    with open("/proc/meminfo") as meminfo:
        total = int(meminfo.readline().split()[1]) * 1024
    assert 0 < limit <= total * 0.8
    rows = limit // (64 * 4) + 1_000_000
    before = resident_mib(server)
    with pytest.raises(embedps.ResourceExhaustedError, match="--memory_limit_mb"):
        client.create_table(name="huge", dim=64, optimizer=SGD, expected_rows=rows)
    assert resident_mib(server) < before + 16
    assert client.stats()[0]["table"] == []
    # The flag takes auto, 0 (no limit) or MiB; anything else is refused.
    refused = subprocess.run([binary("server/ps_server"), "--port=0",
                              "--memory_limit_mb=lots"],
                             capture_output=True, text=True, timeout=30)
    assert refused.returncode == 2
    assert "--memory_limit_mb must be auto, 0 (no limit) or MiB" in refused.stderr


def test_the_memory_limit_refuses_before_the_process_grows_past_it(start_servers):
    """Rows are created until the limit: then Pulls and Pushes that would
    create more are refused, the rows held stay readable, and resident
    memory stays near the limit."""
    probe = start_servers(1)[0]
    limit = int(resident_mib(probe)) + 96
    probe.stop()
    server = start_servers(1, f"--memory_limit_mb={limit}")[0]
    client = embedps.Client([server.address])
    table = client.create_table(name="emb", dim=256, optimizer=SGD)
    batch = 20000  # 20 MB of rows per Pull
    created = 0
    with pytest.raises(embedps.ResourceExhaustedError, match="--memory_limit_mb"):
        for start in range(0, 100 * batch, batch):
            client.pull(table, np.arange(start, start + batch, dtype=np.uint64))
            created += batch
    assert created > 0
    stats = client.stats()[0]
    assert stats["memory_limit_bytes"] == limit << 20
    assert stats["resident_bytes"] <= (limit + 32) << 20
    assert resident_mib(server) <= limit + 32
    assert stats["table"][0]["rows"] == created
    # What it holds is still served, read-only.
    held = np.arange(0, 1000, dtype=np.uint64)
    assert client.lookup(table, held).shape == (1000, 256)
    with pytest.raises(embedps.ResourceExhaustedError):
        client.push(table, np.arange(10**7, 10**7 + batch, dtype=np.uint64),
                    np.ones((batch, 256), np.float32))
    assert client.stats()[0]["table"][0]["rows"] == created


def test_the_capacity_planner_agrees_with_a_real_table(start_servers, tmp_path):
    """tools/capacity's memory and checkpoint bytes per shard against the
    Stats and the checkpoint files of real shards holding the same keys, and
    its serving replica's (values only) against a real replica's."""
    import json
    import subprocess
    from conftest import binary
    config = 'name: "emb" dim: 32 optimizer { kind: ADAGRAD learning_rate: 0.1 }'
    keys = 400000
    plan = json.loads(subprocess.run(
        [binary("tools/capacity"), f"--table={config}", f"--keys={keys}", "--shards=2",
         "--replicas=1"],
        check=True, capture_output=True, text=True, timeout=120).stdout)
    servers = start_servers(2)
    client = embedps.Client([s.address for s in servers])
    table = client.create_table(config)
    for start in range(0, keys, 50000):
        client.pull(table, np.arange(start, start + 50000, dtype=np.uint64) * 0x9E3779B1 + 7)
    for shard in client.stats():
        stats = shard["table"][0]
        assert abs(stats["rows"] - keys / 2) < keys * 0.01
        assert stats["resident_bytes"] == pytest.approx(plan["memory_bytes_per_shard"], rel=0.15)
    manifest = client.checkpoint(str(tmp_path / "ckpt"), step=1)
    files = [f for t in manifest["table"] for f in t["file"]]
    assert len(files) == 2
    for f in files:
        assert int(f["bytes"]) == pytest.approx(plan["checkpoint_bytes_per_shard"], rel=0.1)
    # One serving shard: a replica holds both training shards' rows.
    replica = start_servers(1, "--role=serving", f"--follow_checkpoints={tmp_path / 'ckpt'}")[0]
    served = embedps.Client([replica.address]).stats()[0]["table"][0]
    assert int(served["rows"]) == keys
    assert int(served["resident_bytes"]) == pytest.approx(
        2 * plan["serving_memory_bytes_per_replica"], rel=0.15)
    assert plan["serving_memory_bytes_per_row"] < 0.6 * plan["memory_bytes_per_row"]
    assert plan["checkpoint_snapshot_bytes_per_shard"] > 0
    # A replica storing int8 rows: the planner's figure against a real one.
    int8 = json.loads(subprocess.run(
        [binary("tools/capacity"), f"--table={config}", f"--keys={keys}", "--shards=2",
         "--replicas=1", "--serving_storage=int8"],
        check=True, capture_output=True, text=True, timeout=120).stdout)
    assert int8["serving_storage"] == "INT8"
    replica = start_servers(1, "--role=serving", f"--follow_checkpoints={tmp_path / 'ckpt'}",
                            "--serving_storage=int8")[0]
    served = embedps.Client([replica.address]).stats()[0]["table"][0]
    assert int(served["resident_bytes"]) == pytest.approx(
        2 * int8["serving_memory_bytes_per_replica"], rel=0.15)
    assert int8["serving_memory_bytes_per_row"] < 0.7 * plan["serving_memory_bytes_per_row"]


def test_the_capacity_planner_refuses_what_it_cannot_plan():
    import subprocess
    from conftest import binary
    for args, message in ((["--table=not a config", "--keys=10"], "TableConfig"),
                          (['--table=name: "t" dim: 8', "--keys=0"], "--keys"),
                          (['--table=name: "t" dim: 0', "--keys=10"], "dim")):
        result = subprocess.run([binary("tools/capacity"), *args], capture_output=True,
                                text=True, timeout=60)
        assert result.returncode == 2 and message in result.stderr, (args, result.stderr)


def test_a_load_past_the_memory_limit_is_refused_and_makes_nothing(start_servers, tmp_path):
    """Load of a checkpoint whose rows do not fit --memory_limit_mb is
    refused before any table is made (the manifest's row counts); the
    server keeps serving, and one with room restores the same checkpoint."""
    source = start_servers(1)[0]
    # 300k rows of 32 values and 32 accumulators: ~80 MB; 24 MB of room.
    limit = int(resident_mib(source)) + 24
    client = embedps.Client([source.address])
    table = client.create_table(name="big", dim=32, optimizer={"kind": "adagrad"})
    for start in range(0, 300_000, 100_000):
        client.pull(table, np.arange(start, start + 100_000, dtype=np.uint64))
    client.checkpoint(str(tmp_path / "root"), step=1)
    source.stop()
    tight = start_servers(1, f"--memory_limit_mb={limit}")[0]
    assert resident_mib(tight) < limit
    refused = embedps.Client([tight.address])
    with pytest.raises(embedps.ResourceExhaustedError,
                       match=r"restoring .*300000 rows on this shard.*--memory_limit_mb"):
        refused.load(str(tmp_path / "root"))
    assert refused.stats()[0].get("table", []) == []
    assert resident_mib(tight) < limit
    # Still serving: a small table fits.
    small = refused.create_table(name="small", dim=4, optimizer=SGD)
    assert refused.pull(small, np.arange(10, dtype=np.uint64)).shape == (10, 4)

    roomy = start_servers(1, f"--memory_limit_mb={limit + 512}")[0]
    loaded = embedps.Client([roomy.address]).load(str(tmp_path / "root"))
    assert int(loaded["rows"]) == 300_000


def test_a_replica_that_cannot_hold_its_primarys_rows_leaves(start_server, tmp_path):
    """A backup catching up from a primary whose rows do not fit its
    --memory_limit_mb stops at the limit and leaves (exit 75, saying why)
    instead of growing past it; the primary keeps serving every row."""
    from conftest import binary, spawn

    coordinator = start_server("--role=coordinator", "--replica_lease=1s")
    shard = ("--shard_index=0", "--num_shards=1",
             f"--replica_directory={coordinator.address}")
    primary = start_server(*shard)
    limit = int(resident_mib(primary)) + 24
    client = embedps.Client([primary.address])
    table = client.create_table(name="big", dim=64, optimizer=SGD)
    keys = np.arange(300_000, dtype=np.uint64)
    for start in range(0, len(keys), 100_000):
        client.pull(table, keys[start:start + 100_000])
    # ~77 MB of rows against 24 MB of room.
    log = tmp_path / "backup.log"
    backup = spawn([binary("server/ps_server"), "--port=0",
                    f"--port_file={tmp_path / 'backup.port'}", "--metrics_port=-1",
                    "--log_level=warn", f"--memory_limit_mb={limit}", *shard], log)
    try:
        assert backup.wait(timeout=60) == 75, log.read_text()
    finally:
        if backup.poll() is None:
            backup.kill()
            backup.wait()
    text = log.read_text()
    assert "catching up table 'big'" in text and "--memory_limit_mb" in text, text
    assert client.lookup(table, keys).shape == (300_000, 64)
