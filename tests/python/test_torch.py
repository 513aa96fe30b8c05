"""embedps.torch against real ps_server shards: gradients pushed equal a
local nn.EmbeddingBag's, collections, evaluation, prefetch, SYNC with two
DDP (Gloo) processes."""

import os
import sys

import numpy as np
import pytest
import torch

import embedps
import embedps.torch as et
from conftest import run_sync_workers

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


def test_two_dimensional_bags_without_columns_are_empty(client):
    # (batch, 0) keys: batch empty bags, zeros, and nothing pushed.
    # nn.EmbeddingBag raises RuntimeError ("step must be nonzero") there,
    # in torch 1.13 and 2.15 alike: docs/python.md names the difference.
    table = client.create_table(name="emb", dim=4, optimizer=SGD)
    for mode in ("sum", "mean"):
        bag = et.ShardedEmbeddingBag(client, table, mode=mode)
        out = bag(torch.zeros((3, 0), dtype=torch.int64))
        assert out.shape == (3, 4)
        assert not out.detach().any()
        out.sum().backward()
        bag.flush()


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


def test_outputs_follow_the_modules_device(client):
    """module.to(device) moves where the bags are pooled and returned, as
    nn.EmbeddingBag's weight does; nothing enters state_dict. (No CUDA
    here: the meta device carries the placement, in evaluation.)"""
    a = client.create_table(name="a", dim=4, optimizer=SGD)
    b = client.create_table(name="b", dim=4, optimizer=SGD)
    emb = et.EmbeddingBagCollection(client, [("s0", a), ("s1", b)])
    assert emb.state_dict() == {}
    features = {"s0": (torch.tensor([1, 2, 3]), torch.tensor([0, 2])),
                "s1": (torch.tensor([4, 5]), torch.tensor([0, 1]), torch.tensor([0.5, 2.0]))}
    on_cpu = emb(features)
    emb.flush()
    emb.to("meta").eval()
    assert emb.state_dict() == {}
    with torch.no_grad():
        moved = emb(features)
        stacked = emb(torch.tensor([[1, 4], [2, 5]]))
    for name in ("s0", "s1"):
        assert moved[name].device.type == "meta"
        assert moved[name].shape == on_cpu[name].shape == (2, 4)
    assert stacked.device.type == "meta" and stacked.shape == (2, 2, 4)
    emb.to_empty(device="cpu")  # (the placement holds no data to copy)
    with torch.no_grad():
        back = emb(features)
    assert back["s0"].device.type == "cpu"
    torch.testing.assert_close(back["s1"], on_cpu["s1"].detach(), rtol=0, atol=1e-5)


def test_bad_inputs_are_refused(client):
    table = client.create_table(name="emb", dim=4)
    bag = et.ShardedEmbeddingBag(client, table)
    with pytest.raises(TypeError, match="int64"):
        bag(torch.tensor([1.0, 2.0]), torch.tensor([0]))
    with pytest.raises(RuntimeError, match="has to be 0"):  # as nn.EmbeddingBag
        bag(torch.tensor([1, 2]), torch.tensor([1]))
    with pytest.raises(RuntimeError, match="non-decreasing"):
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


# nn.EmbeddingBag's argument forms, each through both modules: (mode,
# constructor arguments, input, offsets, per_sample_weights).
DROP_IN_CASES = {
    "offsets_ending_at_len_is_an_empty_last_bag": ("sum", {}, [3, 1, 4, 1, 5], [0, 2, 5], None),
    "mean_with_empty_bags": ("mean", {}, [3, 1, 4, 1, 5], [0, 0, 2, 2], None),
    "include_last_offset": ("sum", {"include_last_offset": True}, [3, 1, 4, 1, 5], [0, 2, 5], None),
    "two_dimensional": ("mean", {}, [[3, 1], [4, 1], [5, 9]], None, None),
    "per_sample_weights": ("sum", {}, [3, 1, 4, 1, 5], [0, 3], [0.5, -1.0, 2.0, 0.25, 1.5]),
    "per_sample_weights_2d": ("sum", {}, [[3, 1], [4, 1]], None, [[0.5, -1.0], [2.0, 0.25]]),
    "padding_idx_sum": ("sum", {"padding_idx": 1}, [3, 1, 4, 1, 1, 5], [0, 2, 4, 5], None),
    "padding_idx_mean": ("mean", {"padding_idx": 1}, [3, 1, 4, 1, 1, 5], [0, 2, 4, 5], None),
    "padding_with_weights": ("sum", {"padding_idx": 4}, [3, 1, 4, 4, 5], [0, 3], [1.0, 2.0, 3.0, 4.0, 5.0]),
}


@pytest.mark.parametrize("case", sorted(DROP_IN_CASES))
@pytest.mark.parametrize("key_type", [torch.int64, torch.int32])
def test_a_drop_in_for_nn_embedding_bag(client, case, key_type):
    """The same outputs and gradients as nn.EmbeddingBag over the same rows
    (keys 0..9 as its indices): the rows' gradients, pushed with SGD at rate
    1, move the servers' rows by exactly nn's weight gradient; the weights'
    gradients equal nn's."""
    mode, kwargs, input, offsets, weights = DROP_IN_CASES[case]
    table = client.create_table(name=f"{case}_{key_type}".replace(".", "_"), dim=4, optimizer=SGD)
    rows = client.lookup(table, np.arange(10, dtype=np.uint64))
    reference = torch.nn.EmbeddingBag(10, 4, mode=mode, **kwargs)
    with torch.no_grad():
        reference.weight.copy_(torch.from_numpy(rows))
    bag = et.ShardedEmbeddingBag(client, table, mode=mode, **kwargs)
    keys = torch.tensor(input, dtype=key_type)
    offs = None if offsets is None else torch.tensor(offsets, dtype=key_type)
    w_ours = None if weights is None else torch.tensor(weights, requires_grad=True)
    w_ref = None if weights is None else torch.tensor(weights, requires_grad=True)
    out = bag(keys, offs, per_sample_weights=w_ours)
    expected = reference(keys, offs, per_sample_weights=w_ref)
    assert out.shape == expected.shape
    torch.testing.assert_close(out, expected, rtol=1e-6, atol=1e-6)
    probe = torch.randn(expected.shape, generator=torch.Generator().manual_seed(7))
    (out * probe).sum().backward()
    (expected * probe).sum().backward()
    bag.flush()
    after = client.lookup(table, np.arange(10, dtype=np.uint64))
    np.testing.assert_allclose(after, rows - reference.weight.grad.numpy(), rtol=1e-6, atol=1e-6)
    if weights is not None:
        torch.testing.assert_close(w_ours.grad, w_ref.grad, rtol=1e-6, atol=1e-6)
    # Only the keys that were pooled have rows on the servers: a padding
    # key is never pulled.
    pooled = {k for k in np.asarray(input).reshape(-1).tolist() if k != kwargs.get("padding_idx")}
    held = sum(t["rows"] for s in client.stats() for t in s["table"] if t["name"] == table.name)
    assert held == len(pooled)


def test_random_bags_match_nn_embedding_bag(client):
    """300 random calls (modes, padding_idx, include_last_offset, 1-D with
    random bag starts or 2-D, empty bags, per-sample weights) through both
    over the same rows: the same outputs, row and weight gradients (the
    rows' moved by SGD at rate 1), or the same exception class."""
    import random
    rng = random.Random(5)
    vocab, dim = 40, 4
    table = client.create_table(name="random_bags", dim=dim, optimizer=SGD)
    everything = np.arange(vocab, dtype=np.uint64)
    for trial in range(300):
        mode = rng.choice(["sum", "mean"])
        kwargs = {"padding_idx": rng.choice([None, None, rng.randrange(vocab)])}
        weighted = mode == "sum" and rng.random() < 0.5
        if rng.random() < 0.3:  # 2-D bags of 1 to 3 keys
            keys = torch.randint(0, vocab, (rng.randrange(1, 5), rng.randrange(1, 4)))
            offsets = None
        else:
            keys = torch.randint(0, vocab, (rng.randrange(0, 12),))
            kwargs["include_last_offset"] = rng.random() < 0.5
            starts = [0] + sorted(rng.randrange(0, len(keys) + 1) for _ in range(rng.randrange(0, 4)))
            offsets = torch.tensor(starts + ([len(keys)] if kwargs["include_last_offset"] else []))
        weights = torch.rand(keys.shape) if weighted else None
        rows = client.lookup(table, everything)
        reference = torch.nn.EmbeddingBag(vocab, dim, mode=mode, **kwargs)
        with torch.no_grad():
            reference.weight.copy_(torch.from_numpy(rows))
        bag = et.ShardedEmbeddingBag(client, table, mode=mode, **kwargs)
        w_ref = None if weights is None else weights.clone().requires_grad_()
        w_ours = None if weights is None else weights.clone().requires_grad_()
        case = f"trial {trial}: {mode} {kwargs} keys {keys.tolist()} offsets {offsets}"
        try:
            expected = reference(keys, offsets, per_sample_weights=w_ref)
        except Exception as e:  # noqa: BLE001 - compared below
            with pytest.raises(type(e)):
                bag(keys, offsets, per_sample_weights=w_ours)
            continue
        out = bag(keys, offsets, per_sample_weights=w_ours)
        torch.testing.assert_close(out, expected, rtol=1e-6, atol=1e-6, msg=case)
        probe = torch.randn(expected.shape)
        (expected * probe).sum().backward()
        (out * probe).sum().backward()
        bag.flush()
        moved = torch.from_numpy(rows - client.lookup(table, everything))
        torch.testing.assert_close(moved, reference.weight.grad, rtol=1e-5, atol=1e-5, msg=case)
        if weights is not None:
            torch.testing.assert_close(w_ours.grad, w_ref.grad, rtol=1e-5, atol=1e-5, msg=case)


def test_nn_embedding_bag_errors_are_raised_alike(client):
    """Where nn.EmbeddingBag raises, the drop-in raises the same class."""
    table = client.create_table(name="errors", dim=4, optimizer=SGD)
    cases = [
        ("sum", {}, (torch.tensor([[1, 2]]), torch.tensor([0])), {}),        # 2-D with offsets
        ("sum", {}, (torch.tensor([1, 2]), None), {}),                       # 1-D without offsets
        ("sum", {}, (torch.tensor([1, 2]), torch.tensor([[0]])), {}),        # 2-D offsets
        ("sum", {}, (torch.tensor([1, 2]), torch.tensor([1])), {}),          # offsets[0] != 0
        ("sum", {}, (torch.tensor([1, 2]), torch.tensor([0, 3])), {}),       # past the input
        ("sum", {}, (torch.tensor([[[1]]]), None), {}),                      # 3-D
        ("mean", {}, (torch.tensor([1, 2]), torch.tensor([0])), {"per_sample_weights": torch.ones(2)}),
        ("sum", {}, (torch.tensor([1, 2]), torch.tensor([0])), {"per_sample_weights": torch.ones(3)}),
    ]
    for mode, kwargs, args, call_kwargs in cases:
        reference = torch.nn.EmbeddingBag(10, 4, mode=mode, **kwargs)
        bag = et.ShardedEmbeddingBag(client, table, mode=mode, **kwargs)
        with pytest.raises(Exception) as theirs:
            reference(*args, **call_kwargs)
        with pytest.raises(theirs.type):
            bag(*args, **call_kwargs)
        assert bag.step == 0
    # What cannot be the same is refused when the module is made.
    for kwargs in ({"max_norm": 1.0}, {"scale_grad_by_freq": True}, {"mode": "max"}):
        with pytest.raises(ValueError, match=next(iter(kwargs))):
            et.ShardedEmbeddingBag(client, table, **kwargs)


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


def test_sync_with_two_ddp_processes_equals_one_big_batch(start_servers, tmp_path):
    """Two workers (DDP over Gloo for the dense layer, a SYNC table for the
    rows) train as one process would on their batches together."""
    servers = start_servers(2, "--num_workers=2")
    addresses = ",".join(s.address for s in servers)
    steps = 4
    r0, r1 = run_sync_workers(addresses, tmp_path, steps)
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


def test_a_sync_step_without_its_backward_is_completed_and_reported(start_servers):
    """A training forward whose backward never comes (the loss was skipped,
    or the model raised) would leave its SYNC step open: every later pull
    would wait out the table's timeout. The next forward completes it with
    an empty push and warns; training goes on, and only the steps that
    were pushed moved the rows."""
    servers = start_servers(1)  # one worker
    client = embedps.Client([s.address for s in servers])
    table = client.create_table(name="open", dim=4, optimizer=SGD,
                                consistency={"mode": "sync", "timeout_ms": 20000})
    bag = et.ShardedEmbeddingBag(client, table, mode="sum")
    keys = torch.tensor([1, 2, 3])
    offsets = torch.tensor([0])
    before = client.lookup(table, keys.numpy().astype(np.uint64))
    bag(keys, offsets)  # step 0: no backward
    with pytest.warns(RuntimeWarning, match="step 0 of table.s. open was not pushed"):
        out = bag(keys, offsets)  # step 1
    out.sum().backward()
    bag.flush()
    after = client.lookup(table, keys.numpy().astype(np.uint64), step=2)
    np.testing.assert_array_equal(after, before - 1.0)  # step 1's gradient only
    assert bag.step == 2
