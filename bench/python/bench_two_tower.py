"""The Python benchmark's small two-tower model, one configuration (run.sh
--part=two_tower runs both and prints them side by side).

    bench_two_tower.py --which=embedps --servers=HOST:PORT --data=DIR
    bench_two_tower.py --which=torch --data=DIR   # local nn.EmbeddingBags

DIR: a tools/schema_datagen output directory. The user tower pools the
first half of its id and list columns, the item tower the rest (a
weighted list with its weights), each from a table of its own (dim 16):
mean-pooled ids and lists, the weighted sum for weighted lists; each
tower's pooled slots side by side through an MLP (64-32); the logit is
the towers' dot product. The batches are parsed before the clock
(tools/reference/dlrm_torch.py's SchemaData, the same row ids for both);
Adagrad (0.2, initial accumulator 0.01) on the rows, Adam (0.003) on the
towers. Prints one JSON line: samples/s over --steps steps after
--warmup, and the milliseconds a step spends in each part (the
embeddings' forward — for embedps the wait for the pulls, prefetched a
step ahead, and the next step's prefetch, also counted alone —, the
towers' forward, the backward — for embedps the pushes' start —, the
optimizers).
"""

import argparse
import json
import os
import sys
import time

import numpy as np
import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "tools", "reference"))
import embedps  # noqa: E402
import embedps.torch  # noqa: E402
from dlrm_torch import SchemaData  # noqa: E402

DIM = 16


def towers(data):
    """(slot, tower) pairs: ids and lists alternate between the towers,
    weighted lists go to the item tower."""
    plain = [s for s, kind in enumerate(data.kinds) if kind != "weighted_list"]
    user = plain[:len(plain) // 2]
    item = [s for s in range(len(data.kinds)) if s not in user]
    return user, item


def batch_features(data, first, end):
    """Per slot: (row ids, offsets with the last, weights or None)."""
    out = []
    for s, kind in enumerate(data.kinds):
        a, b = data.offsets[s][first], data.offsets[s][end]
        offsets = torch.from_numpy(data.offsets[s][first:end + 1] - a)
        weights = torch.from_numpy(data.weights[s][a:b]) if kind == "weighted_list" else None
        out.append((torch.from_numpy(data.keys[s][a:b]), offsets, weights))
    return out


def mlp(width):
    torch.manual_seed(1)
    return torch.nn.Sequential(torch.nn.Linear(width, 64), torch.nn.ReLU(), torch.nn.Linear(64, 32))


class Towers(torch.nn.Module):
    def __init__(self, user_slots, item_slots):
        super().__init__()
        self.user = mlp(len(user_slots) * DIM)
        self.item = mlp(len(item_slots) * DIM)

    def forward(self, user, item):
        return (self.user(torch.cat(user, dim=1)) * self.item(torch.cat(item, dim=1))).sum(dim=1)


def mode_of(kind):
    return "sum" if kind == "weighted_list" else "mean"


def timed(batches, warmup, step):
    """samples/s after warmup, and the mean seconds of each part a step."""
    for batch in batches[:warmup]:
        step(batch, {})
    parts = {}
    start = time.perf_counter()
    for batch in batches[warmup:]:
        step(batch, parts)
    seconds = time.perf_counter() - start
    steps = len(batches) - warmup
    samples = steps * len(batches[0][0])
    return samples / seconds, {k: round(v / steps * 1e3, 3) for k, v in parts.items()}


def run(args, data, user_slots, item_slots, batches):
    model = Towers(user_slots, item_slots)
    dense = torch.optim.Adam(model.parameters(), lr=0.003)
    tower_of = {s: ("users" if s in user_slots else "items") for s in range(len(data.kinds))}
    if args.which == "embedps":
        client = embedps.Client(args.servers.split(","))
        tables = {name: client.create_table(
            name=name, dim=DIM, seed=1, initializer={"kind": "uniform", "low": -0.05, "high": 0.05},
            optimizer={"kind": "adagrad", "learning_rate": 0.2, "initial_accumulator": 0.01},
            consistency={"mode": "async"},
            # As many rows as each local table below is made with.
            expected_rows=len(args.vocab)) for name in ("users", "items")}
        emb = embedps.torch.EmbeddingBagCollection(
            client, [(f"f{s}", tables[tower_of[s]]) for s in range(len(data.kinds))],
            mode=[mode_of(kind) for kind in data.kinds])

        def named(features):
            return {f"f{s}": f if f[2] is not None else f[:2] for s, f in enumerate(features)}

        # The next batch's pulls run while this one computes (prefetch).
        following = {id(b): batches[i + 1] for i, b in enumerate(batches[:-1])}
        prepared = {}

        def pooled(features, batch, parts):
            out = emb(prepared.pop(id(batch), None) or named(features))
            after = following.get(id(batch))
            if after is not None:
                t0 = time.perf_counter()
                prepared[id(after)] = emb.prefetch(named(after[1]))
                parts["prefetch_ms"] = parts.get("prefetch_ms", 0.0) + time.perf_counter() - t0
            return out
        sparse_step = None
    else:
        rows = len(args.vocab)
        weights = {name: torch.nn.Parameter(torch.empty(rows, DIM).uniform_(-0.05, 0.05))
                   for name in ("users", "items")}
        sparse = torch.optim.Adagrad(list(weights.values()), lr=0.2, initial_accumulator_value=0.01)

        def pooled(features, batch, parts):
            return {f"f{s}": F.embedding_bag(keys, weights[tower_of[s]], offsets, mode=mode_of(data.kinds[s]),
                                             sparse=True, per_sample_weights=w, include_last_offset=True)
                    for s, (keys, offsets, w) in enumerate(features)}

        def sparse_step():
            sparse.zero_grad()
            return sparse

    def step(batch, parts):
        labels, features = batch
        t0 = time.perf_counter()
        out = pooled(features, batch, parts)
        t1 = time.perf_counter()
        logits = model([out[f"f{s}"] for s in user_slots], [out[f"f{s}"] for s in item_slots])
        loss = F.binary_cross_entropy_with_logits(logits, labels)
        dense.zero_grad()
        optimizer = sparse_step() if sparse_step else None
        t2 = time.perf_counter()
        loss.backward()
        t3 = time.perf_counter()
        dense.step()
        if optimizer is not None:
            optimizer.step()
        t4 = time.perf_counter()
        for name, seconds in (("embeddings_ms", t1 - t0), ("towers_forward_ms", t2 - t1),
                              ("backward_ms", t3 - t2), ("optimizers_ms", t4 - t3)):
            parts[name] = parts.get(name, 0.0) + seconds

    rate, parts = timed(batches, args.warmup, step)
    if args.which == "embedps":
        emb.flush()
    return {"samples_per_second": rate, "ms_a_step": parts}


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--which", required=True, choices=["embedps", "torch"])
    parser.add_argument("--data", required=True, help="a schema_datagen output directory")
    parser.add_argument("--servers", default="")
    parser.add_argument("--batch_size", type=int, default=512)
    parser.add_argument("--steps", type=int, default=600)
    parser.add_argument("--warmup", type=int, default=20)
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    with open(os.path.join(args.data, "meta.json")) as f:
        meta = json.load(f)
    args.vocab = {}
    count = args.warmup + args.steps
    data = SchemaData(os.path.join(args.data, "train.tsv"), meta, args.vocab)
    if len(data) < count * args.batch_size:
        sys.exit(f"{args.data}/train.tsv holds {len(data)} samples; {count * args.batch_size} needed")
    user_slots, item_slots = towers(data)
    batches = [(data.labels[i * args.batch_size:(i + 1) * args.batch_size],
                batch_features(data, i * args.batch_size, (i + 1) * args.batch_size)) for i in range(count)]
    result = {"which": args.which, "torch": torch.__version__, "batch_size": args.batch_size,
              "steps": args.steps, "threads": args.threads, "user_slots": len(user_slots),
              "item_slots": len(item_slots), "distinct_keys": len(args.vocab)}
    result.update(run(args, data, user_slots, item_slots, batches))
    print(json.dumps(result), flush=True)


if __name__ == "__main__":
    main()
