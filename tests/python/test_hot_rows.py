"""embedps.torch's hot-row tier (EmbeddingBagCollection(hot_rows=N))
against real ps_server shards: it trains exactly as the servers do, its
rows reach checkpoints and publications, a load empties it, two SYNC
workers (Gloo) keep equal copies, bad arguments and arrays are refused."""

import os

import numpy as np
import pytest
import torch

import embedps
import embedps.torch as et
from embedps import _embedps
from conftest import run_sync_workers

ADAGRAD = {"kind": "adagrad", "learning_rate": 0.2, "initial_accumulator": 0.01}
SGD = {"kind": "sgd", "learning_rate": 0.1}
KEYS = 300


def make_tables(client):
    wide = client.create_table(name="wide", dim=8, seed=3,
                               initializer={"kind": "uniform", "low": -0.1, "high": 0.1},
                               optimizer=ADAGRAD)
    narrow = client.create_table(name="narrow", dim=4, seed=4,
                                 initializer={"kind": "uniform", "low": -0.1, "high": 0.1},
                                 optimizer=SGD)
    return wide, narrow


def features(rng):
    """Two slots of `wide` (one multi-hot) and one of `narrow`, 16 bags;
    skewed keys, so that a few are in most steps."""
    def keys(n):
        return torch.from_numpy((rng.zipf(1.3, size=n) % KEYS).astype(np.int64))
    lengths = rng.integers(0, 4, size=16)
    offsets = torch.from_numpy(np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64))
    return {"id": keys(16).view(16, 1), "list": (keys(int(lengths.sum())), offsets),
            "other": keys(16).view(16, 1)}


def train(client, steps, hot_rows=0, checkpoint_root=None, warmup=3, refresh=7):
    """`steps` steps of a small model; returns the module and its tables."""
    wide, narrow = make_tables(client)
    kwargs = dict(hot_rows=hot_rows, hot_rows_warmup=warmup, hot_rows_refresh=refresh) if hot_rows else {}
    emb = et.EmbeddingBagCollection(client, [("id", wide), ("list", wide), ("other", narrow)],
                                    mode=["sum", "mean", "sum"], **kwargs)
    torch.manual_seed(0)
    dense = torch.nn.Linear(20, 1)
    rng = np.random.default_rng(5)
    for _ in range(steps):
        out = emb(features(rng))
        loss = dense(torch.cat([out["id"], out["list"], out["other"]], 1)).square().mean()
        dense.zero_grad()
        loss.backward()
    if checkpoint_root is not None:
        client.checkpoint(str(checkpoint_root), step=emb.step)
    return emb, wide, narrow


def rows(client, tables):
    every = np.arange(KEYS, dtype=np.uint64)
    return [client.lookup(t, every) for t in tables]


def held_keys(emb, t=0):
    """The keys table t's tier holds."""
    every = np.arange(KEYS, dtype=np.uint64)
    return every[emb._hot.native.split(t, every)[2]]


def test_a_tier_trains_exactly_as_the_servers_do(start_servers):
    plain_client = embedps.Client([start_servers(1)[0].address])
    emb, *tables = train(plain_client, 25)
    plain = rows(plain_client, tables)
    assert emb.hot_rows_stats == {}

    hot_client = embedps.Client([s.address for s in start_servers(2)])
    emb, *tables = train(hot_client, 25, hot_rows=20)
    # Chosen at steps 3, 10, 17, 24.
    assert emb.hot_rows_stats == {"held": [20, 20], "choices": 4, "lost": 0}
    emb.write_back_hot_rows()
    for got, want in zip(rows(hot_client, tables), plain):
        np.testing.assert_array_equal(got, want)


def test_prefetching_with_a_tier_reads_a_step_prepared_before_a_refresh_again(start_servers):
    """The step prefetched before the set changes is split again."""
    client = embedps.Client([start_servers(1)[0].address])
    wide, narrow = make_tables(client)
    emb = et.EmbeddingBagCollection(client, [("id", wide), ("list", wide), ("other", narrow)],
                                    hot_rows=10, hot_rows_warmup=2, hot_rows_refresh=3)
    rng = np.random.default_rng(5)
    batches = [features(rng) for _ in range(12)]
    for _, prepared in et.prefetched(batches, emb):
        out = emb(prepared)
        torch.cat([out["id"], out["list"], out["other"]], 1).square().sum().backward()
    emb.flush()
    assert emb.hot_rows_stats == {"held": [10, 10], "choices": 4, "lost": 0}


def test_checkpoints_and_publications_hold_the_tiers_rows(start_servers, tmp_path):
    plain_client = embedps.Client([start_servers(1)[0].address])
    _, *tables = train(plain_client, 12)
    plain = rows(plain_client, tables)

    hot_client = embedps.Client([start_servers(1)[0].address])
    emb, *tables = train(hot_client, 12, hot_rows=30, checkpoint_root=tmp_path / "ckpt")
    assert emb._hot.held() == [30, 30]
    # A job restored from the checkpoint: its tier, made before the load,
    # holds nothing after it and chooses from the restored rows.
    restored = embedps.Client([start_servers(1)[0].address])
    wide, narrow = make_tables(restored)
    resumed = et.EmbeddingBagCollection(restored, [("id", wide), ("list", wide), ("other", narrow)],
                                        hot_rows=30, hot_rows_warmup=2)
    resumed._hot.native.load(restored, 0, np.arange(3, dtype=np.uint64), 0)  # rows of the empty table
    restored.load(str(tmp_path / "ckpt"))
    assert resumed._hot.held() == [0, 0]
    for got, want in zip(rows(restored, [wide, narrow]), plain):
        np.testing.assert_array_equal(got, want)
    rng = np.random.default_rng(9)
    for _ in range(3):
        out = resumed(features(rng))
        torch.cat([out["id"], out["list"], out["other"]], 1).square().sum().backward()
    resumed.flush()
    assert resumed._hot.held() == [30, 30]


def test_a_publication_writes_the_tier_back_first(start_servers):
    servers = start_servers(1)
    client = embedps.Client([servers[0].address])
    emb, wide, _ = train(client, 6, hot_rows=5, warmup=2)
    held_key = held_keys(emb)
    before = client.lookup(wide, held_key)
    # The tier's copy moved on since its last write-back (at the choice):
    # the servers' is older until a publication writes it back.
    client.publish(emb.step)
    after = client.lookup(wide, held_key)
    assert not np.array_equal(before, after)


def test_an_erased_held_row_stays_erased(start_servers):
    client = embedps.Client([start_servers(1)[0].address])
    emb, wide, _ = train(client, 5, hot_rows=5, warmup=2)
    key = held_keys(emb)[:1]
    def held_rows():
        return next(t["rows"] for t in client.stats()[0]["table"] if t["name"] == "wide")
    rows_before = held_rows()
    client.erase(wide, key)
    emb.write_back_hot_rows()
    assert emb.hot_rows_stats["lost"] == 1
    assert held_rows() == rows_before - 1


def test_tier_arguments_are_checked(start_servers):
    client = embedps.Client([start_servers(1)[0].address])
    wide, _ = make_tables(client)
    expiring = client.create_table(name="expiring", dim=4, optimizer=SGD, eviction={"ttl": 10})
    with pytest.raises(ValueError, match="hot_rows must be"):
        et.EmbeddingBagCollection(client, [("a", wide)], hot_rows=-1)
    with pytest.raises(ValueError, match="hot_rows_warmup"):
        et.EmbeddingBagCollection(client, [("a", wide)], hot_rows=5, hot_rows_warmup=0)
    with pytest.raises(ValueError, match="TTL or max_rows"):
        et.EmbeddingBagCollection(client, [("a", expiring)], hot_rows=5)
    with pytest.raises(embedps.ResourceExhaustedError, match="hot_rows=2147483647 needs up to"):
        et.EmbeddingBagCollection(client, [("a", wide)], hot_rows=2**31 - 1)


def test_bad_arrays_are_refused_by_the_tier(start_servers):
    client = embedps.Client([start_servers(1)[0].address])
    wide, narrow = make_tables(client)
    client.pull(wide, np.arange(10, dtype=np.uint64))
    tier = _embedps._HotRows([wide, narrow], 1)
    tier.load(client, 0, np.arange(4, dtype=np.uint64), 0)
    slots = np.array([0, 1], dtype=np.int32)
    none = np.empty(0, dtype=np.int32)
    grads = np.ones((2, 8), dtype=np.float32)
    with pytest.raises(ValueError, match="slot 4 of table 'wide': it holds 4 rows"):
        tier.apply([np.array([0, 4], dtype=np.int32), none], [grads, np.empty((0, 4), np.float32)], None)
    with pytest.raises(ValueError, match="repeats"):
        tier.apply([np.array([1, 1], dtype=np.int32), none], [grads, np.empty((0, 4), np.float32)], None)
    with pytest.raises(ValueError, match="one slots and one grads array per table"):
        tier.apply([slots], [grads], None)
    with pytest.raises(TypeError, match="slots must be int32"):
        tier.apply([slots.astype(np.int64), none], [grads, np.empty((0, 4), np.float32)], None)
    with pytest.raises(ValueError, match="grads"):
        tier.apply([slots, none], [np.ones((3, 8), np.float32), np.empty((0, 4), np.float32)], None)
    with pytest.raises(ValueError, match="cover each of 3 rows once"):
        tier.assemble(0, np.ones((1, 8), np.float32), np.array([0]), np.array([0, 2]), slots)
    with pytest.raises(IndexError):
        tier.split(2, np.arange(3, dtype=np.uint64))
    # Nothing was applied: the rows are the servers'.
    split = tier.split(0, np.arange(6, dtype=np.uint64))
    cold_keys, cold_positions, hot_positions, hot_slots = split
    np.testing.assert_array_equal(cold_keys, [4, 5])
    got = tier.assemble(0, client.pull(wide, cold_keys), cold_positions, hot_positions, hot_slots)
    np.testing.assert_array_equal(got, client.lookup(wide, np.arange(6, dtype=np.uint64)))


def test_two_sync_workers_with_a_tier_train_as_without(start_servers, tmp_path):
    steps = 6
    plain_dir, hot_dir = tmp_path / "plain", tmp_path / "hot"
    plain_dir.mkdir()
    hot_dir.mkdir()
    plain = run_sync_workers(",".join(s.address for s in start_servers(2, "--num_workers=2")),
                             plain_dir, steps, 0)
    hot = run_sync_workers(",".join(s.address for s in start_servers(2, "--num_workers=2")),
                           hot_dir, steps, 10)
    assert list(hot[0]["held"]) == [10] and list(hot[1]["held"]) == [10]
    np.testing.assert_array_equal(hot[0]["rows"], hot[1]["rows"])
    np.testing.assert_allclose(hot[0]["rows"], plain[0]["rows"], atol=1e-6)
    np.testing.assert_allclose(hot[0]["weight"], plain[0]["weight"], atol=1e-6)


def test_a_forked_child_gets_a_clear_error_from_the_tier(start_servers):
    """A child forked while the tier's update thread is the parent's:
    using the tier raises at once, naming the cause (it would wait for
    ever)."""
    client = embedps.Client([start_servers(1)[0].address])
    emb, _, _ = train(client, 4, hot_rows=5, warmup=2)  # an update in flight or done
    pid = os.fork()
    if pid == 0:
        try:
            emb._hot.native.wait()
            os._exit(1)
        except embedps.FailedPreconditionError as e:
            os._exit(0 if "forked from" in str(e) else 2)
        except BaseException:
            os._exit(3)
    _, status = os.waitpid(pid, 0)
    assert os.WEXITSTATUS(status) == 0
    emb.flush()  # the parent's tier goes on
    assert emb._hot.held() == [5, 5]


def test_a_sharded_embedding_bag_with_a_tier_trains_as_without(start_servers):
    """The nn.EmbeddingBag drop-in takes the tier too (padding and empty
    bags included)."""
    results = []
    for hot_rows in (0, 8):
        client = embedps.Client([start_servers(1)[0].address])
        table = client.create_table(name="bag", dim=4, seed=2, optimizer=ADAGRAD)
        bag = et.ShardedEmbeddingBag(client, table, mode="mean", padding_idx=0, hot_rows=hot_rows,
                                     hot_rows_warmup=2, hot_rows_refresh=3)
        rng = np.random.default_rng(1)
        for _ in range(9):
            keys = torch.from_numpy((rng.zipf(1.4, size=24) % 40).astype(np.int64))
            offsets = torch.tensor([0, 5, 5, 12, 20])
            bag(keys, offsets).square().sum().backward()
        bag.write_back_hot_rows()
        bag.flush()
        if hot_rows:
            assert bag._hot.held() == [8]
        results.append(client.lookup(table, np.arange(40, dtype=np.uint64)))
    np.testing.assert_array_equal(results[1], results[0])
