"""embedps.torch against real ps_server shards: gradients pushed equal a
local nn.EmbeddingBag's, collections, evaluation, prefetch, SYNC with two
DDP (Gloo) processes."""

import os
import socket
import subprocess
import sys

import numpy as np
import pytest
import torch

import embedps
import embedps.torch as et
from conftest import _die_with_parent

SGD = {"kind": "sgd", "learning_rate": 1.0}


@pytest.fixture
def client(start_servers):
    servers = start_servers(2)
    return embedps.Client([s.address for s in servers])


def local_bag(rows: np.ndarray, mode: str) -> torch.nn.EmbeddingBag:
    bag = torch.nn.EmbeddingBag(rows.shape[0], rows.shape[1], mode=mode)
    with torch.no_grad():
        bag.weight.copy_(torch.from_numpy(rows))
    return bag


@pytest.mark.parametrize("mode", ["sum", "mean"])
def test_pushed_gradients_equal_embedding_bag_bitwise(client, mode):
    """SGD on float32: the servers' rows move by exactly the gradient a
    local nn.EmbeddingBag computes for the same batch."""
    table = client.create_table(name="emb", dim=8, optimizer=SGD)
    bag = et.ShardedEmbeddingBag(client, table, mode=mode)
    keys = torch.tensor([5, 9, 5, 1 << 40, 9, 9, 3, 77], dtype=torch.int64)
    offsets = torch.tensor([0, 3, 3, 6])  # an empty bag, as nn.EmbeddingBag
    unique, inverse = embedps.unique_inverse(keys.numpy())
    before = client.lookup(table, unique)
    weights = torch.randn(4, 8, generator=torch.Generator().manual_seed(1))

    out = bag(keys, offsets)
    reference = local_bag(before, mode)
    expected = reference(torch.from_numpy(inverse), offsets)
    assert torch.equal(out, expected)
    (out * weights).sum().backward()
    (expected * weights).sum().backward()
    bag.flush()
    after = client.lookup(table, unique)
    grad = reference.weight.grad.numpy()
    np.testing.assert_array_equal(after, before - np.float32(1.0) * grad)
    assert bag.step == 1


def test_two_dimensional_bags_and_numpy_keys(client):
    table = client.create_table(name="emb", dim=4, optimizer=SGD)
    bag = et.ShardedEmbeddingBag(client, table, mode="sum")
    keys = np.array([[1, 2], [2, 3], [4, 4]], dtype=np.uint64)
    rows = client.lookup(table, np.array([1, 2, 3, 4], dtype=np.uint64))
    out = bag(keys)
    expected = np.stack([rows[0] + rows[1], rows[1] + rows[2], rows[3] + rows[3]])
    np.testing.assert_allclose(out.detach().numpy(), expected, rtol=1e-6)


def test_a_collection_pushes_once_per_table_with_every_slots_gradient(client):
    a = client.create_table(name="a", dim=4, optimizer=SGD)
    b = client.create_table(name="b", dim=4, optimizer=SGD)
    emb = et.EmbeddingBagCollection(client, [("x", a), ("y", a), ("z", b)], mode=["sum", "mean", "sum"])
    features = {
        "x": (torch.tensor([1, 2, 3]), torch.tensor([0, 1, 3])),
        "y": (torch.tensor([2, 2, 7, 1]), torch.tensor([0, 2, 4])),
        "z": torch.tensor([[1, 5], [6, 1]]),  # 2-D: fixed bags
    }
    ka, kb = np.array([1, 2, 3, 7], np.uint64), np.array([1, 5, 6], np.uint64)
    ra, rb = client.lookup(a, ka), client.lookup(b, kb)
    out = emb(features)
    assert set(out) == {"x", "y", "z"} and out["x"].shape == (2, 4)
    # The same computation on local tables.
    wa = torch.from_numpy(ra.copy()).requires_grad_()
    wb = torch.from_numpy(rb.copy()).requires_grad_()
    ia = {1: 0, 2: 1, 3: 2, 7: 3}
    ib = {1: 0, 5: 1, 6: 2}
    x = torch.nn.functional.embedding_bag(torch.tensor([ia[k] for k in (1, 2, 3)]), wa, torch.tensor([0, 1]), mode="sum")
    y = torch.nn.functional.embedding_bag(torch.tensor([ia[k] for k in (2, 2, 7, 1)]), wa, torch.tensor([0, 2]), mode="mean")
    z = torch.nn.functional.embedding_bag(torch.tensor([ib[k] for k in (1, 5, 6, 1)]), wb, torch.tensor([0, 2]), mode="sum")
    for name, ref in (("x", x), ("y", y), ("z", z)):
        torch.testing.assert_close(out[name], ref, rtol=0, atol=1e-6)
    g = torch.randn(3, 2, 4, generator=torch.Generator().manual_seed(2))
    (out["x"] * g[0] + out["y"] * g[1] + out["z"] * g[2]).sum().backward()
    (x * g[0] + y * g[1] + z * g[2]).sum().backward()
    emb.flush()
    np.testing.assert_allclose(client.lookup(a, ka), ra - wa.grad.numpy(), atol=1e-6)
    np.testing.assert_allclose(client.lookup(b, kb), rb - wb.grad.numpy(), atol=1e-6)


def test_stacked_keys_one_per_slot(client):
    a = client.create_table(name="a", dim=4, optimizer=SGD)
    b = client.create_table(name="b", dim=4, optimizer=SGD)
    emb = et.EmbeddingBagCollection(client, [("s0", a), ("s1", b), ("s2", a)])
    keys = torch.tensor([[1, 1, 2], [3, 1, 1]])
    out = emb(keys)
    assert out.shape == (2, 3, 4)
    ra = client.lookup(a, np.array([1, 2, 3], np.uint64))
    rb = client.lookup(b, np.array([1], np.uint64))
    np.testing.assert_array_equal(out[0, 0].detach().numpy(), ra[0])
    np.testing.assert_array_equal(out[0, 1].detach().numpy(), rb[0])
    np.testing.assert_array_equal(out[1, 2].detach().numpy(), ra[0])
    out.sum().backward()
    emb.flush()
    # Key 1 of table a: slot s0 once, slot s2 once: gradient 2 in each dim.
    np.testing.assert_allclose(client.lookup(a, np.array([1], np.uint64)), ra[:1] - 2, atol=1e-6)
    np.testing.assert_allclose(client.lookup(b, np.array([1], np.uint64)), rb - 2, atol=1e-6)


def test_evaluation_reads_without_creating_or_pushing(client):
    table = client.create_table(name="emb", dim=4, optimizer=SGD)
    bag = et.ShardedEmbeddingBag(client, table)
    bag.eval()
    out = bag(torch.tensor([[1, 2]]))
    assert not out.requires_grad and bag.step == 0
    assert sum(s["table"][0]["rows"] for s in client.stats()) == 0
    bag.train()
    with torch.no_grad():
        bag(torch.tensor([[1, 2]]))
    assert sum(s["table"][0]["rows"] for s in client.stats()) == 0


def test_bad_inputs_are_refused(client):
    table = client.create_table(name="emb", dim=4)
    bag = et.ShardedEmbeddingBag(client, table)
    with pytest.raises(TypeError, match="int64"):
        bag(torch.tensor([1.0, 2.0]), torch.tensor([0]))
    with pytest.raises(ValueError, match="start at 0"):
        bag(torch.tensor([1, 2]), torch.tensor([1]))
    with pytest.raises(ValueError, match="non-decreasing"):
        bag(torch.tensor([1, 2, 3]), torch.tensor([0, 2, 1]))
    with pytest.raises(ValueError, match="mode"):
        et.ShardedEmbeddingBag(client, table, mode="max")
    emb = et.EmbeddingBagCollection(client, [("a", table), ("b", table)])
    with pytest.raises(ValueError, match="columns"):
        emb(torch.tensor([[1, 2, 3]]))
    with pytest.raises(ValueError, match="lack"):
        emb({"a": torch.tensor([[1]])})
    with pytest.raises(ValueError, match="bags"):
        emb({"a": torch.tensor([[1]]), "b": torch.tensor([[1], [2]])})
    assert bag.step == 0 and emb.step == 0


def train_steps(client, table_name, batches, prefetch):
    table = client.create_table(name=table_name, dim=4, optimizer={"kind": "adagrad", "learning_rate": 0.3},
                                consistency={"mode": "sync"})
    emb = et.EmbeddingBagCollection(client, [("s0", table), ("s1", table)])
    dense = torch.nn.Linear(8, 1)
    torch.nn.init.constant_(dense.weight, 0.1)
    torch.nn.init.constant_(dense.bias, 0.2)
    iterator = et.prefetched(batches, emb) if prefetch else ((b, b) for b in batches)
    for _, features in iterator:
        loss = dense(emb(features).reshape(len(batches[0]), -1)).square().mean()
        loss.backward()
    emb.flush()
    return client.lookup(table, np.arange(20, dtype=np.uint64), step=emb.step)


def test_prefetch_trains_exactly_as_without_it_on_sync_tables(start_servers):
    """Also: the pull of step 1, prefetched, never overtakes the first pull
    (a SYNC shard starts at the step of the first pull it sees)."""
    rng = np.random.default_rng(3)
    batches = [torch.from_numpy(rng.integers(0, 20, size=(6, 2))) for _ in range(5)]
    one = start_servers(1)
    other = start_servers(1)
    plain = train_steps(embedps.Client([one[0].address]), "t", batches, prefetch=False)
    ahead = train_steps(embedps.Client([other[0].address]), "t", batches, prefetch=True)
    np.testing.assert_array_equal(ahead, plain)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_sync_with_two_ddp_processes_equals_one_big_batch(start_servers, tmp_path):
    """Two workers (DDP over Gloo for the dense layer, a SYNC table for the
    rows) train as one process would on their batches together."""
    servers = start_servers(2, "--num_workers=2")
    addresses = ",".join(s.address for s in servers)
    steps, port = 4, free_port()
    procs = []
    for rank in range(2):
        env = dict(os.environ, RANK=str(rank), WORLD_SIZE="2", MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
        procs.append(subprocess.Popen(
            [sys.executable, os.path.join(os.path.dirname(__file__), "sync_worker.py"), addresses,
             str(tmp_path / f"rank{rank}.npz"), str(steps)],
            env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, preexec_fn=_die_with_parent))
    for p in procs:
        output, _ = p.communicate(timeout=120)
        assert p.returncode == 0, output.decode()
    r0, r1 = np.load(tmp_path / "rank0.npz"), np.load(tmp_path / "rank1.npz")
    np.testing.assert_array_equal(r0["weight"], r1["weight"])
    np.testing.assert_array_equal(r0["rows"], r1["rows"])
    assert int(r0["step"]) == steps

    # The reference: one process, both workers' batches as one, mean loss.
    sys.path.insert(0, os.path.dirname(__file__))
    import sync_worker
    fresh = start_servers(1)
    probe = embedps.Client([fresh[0].address])
    probe_table = probe.create_table(name="sync", dim=sync_worker.DIM,
                                     optimizer={"kind": "sgd", "learning_rate": 0.5})
    weight = torch.from_numpy(probe.lookup(probe_table, np.arange(40, dtype=np.uint64)).copy()).requires_grad_()
    torch.manual_seed(0)
    dense = torch.nn.Linear(sync_worker.SLOTS * sync_worker.DIM, 1)
    optimizer = torch.optim.SGD(dense.parameters(), lr=0.1)
    for step in range(steps):
        parts = [sync_worker.batch(step, rank, 2) for rank in range(2)]
        keys = np.concatenate([k for k, _ in parts])
        labels = np.concatenate([l for _, l in parts])
        pooled = weight[torch.from_numpy(keys)]
        logits = dense(pooled.reshape(len(keys), -1)).squeeze(1)
        loss = torch.nn.functional.binary_cross_entropy_with_logits(logits, torch.from_numpy(labels))
        optimizer.zero_grad()
        weight.grad = None
        loss.backward()
        optimizer.step()
        with torch.no_grad():
            weight -= 0.5 * weight.grad
    np.testing.assert_allclose(r0["weight"], dense.weight.detach().numpy(), atol=1e-6)
    np.testing.assert_allclose(r0["rows"], weight.detach().numpy(), atol=1e-6)


class _Clicks(torch.utils.data.Dataset):
    """Samples of 3 keys and a label; a DataLoader batches them."""

    def __len__(self):
        return 48

    def __getitem__(self, i):
        return torch.tensor([i % 7, 7 + i % 5, 12 + i % 3]), torch.tensor(float(i % 2))


@pytest.mark.parametrize("mode", ["async", "ssp"])
def test_a_dataloader_loop_with_worker_processes(client, mode):
    consistency = {"mode": mode, "staleness": 1} if mode == "ssp" else {"mode": mode}
    table = client.create_table(name="emb", dim=4, optimizer={"kind": "adagrad", "learning_rate": 0.1},
                                consistency=consistency)
    assert table.mode == mode
    bag = et.ShardedEmbeddingBag(client, table, mode="mean")
    dense = torch.nn.Linear(4, 1)
    optimizer = torch.optim.SGD(dense.parameters(), lr=0.1)
    before = client.lookup(table, np.arange(15, dtype=np.uint64))
    loader = torch.utils.data.DataLoader(_Clicks(), batch_size=8, shuffle=True, num_workers=2)
    for keys, labels in loader:
        logits = dense(bag(keys)).squeeze(1)
        loss = torch.nn.functional.binary_cross_entropy_with_logits(logits, labels)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    bag.flush()
    assert bag.step == 6
    after = client.lookup(table, np.arange(15, dtype=np.uint64))
    assert (np.abs(after - before).max(axis=1) > 0).all()  # every row was trained
