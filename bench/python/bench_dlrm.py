"""One configuration of the Python benchmark (bench/python/run.sh runs them
all in one run and prints them side by side).

    bench_dlrm.py --which=embedps --servers=HOST:PORT --data=DIR
    bench_dlrm.py --which=torch --data=DIR       # local nn.EmbeddingBag
    bench_dlrm.py --which=torchrec --data=DIR    # TorchRec EBC, fused Adagrad
    bench_dlrm.py --which=overhead --servers=HOST:PORT --data=DIR

Every training configuration trains the same model (examples/train_dlrm.py's
DenseDLRM, --model sizes) on the same batches (read ahead of time with the
C++ Criteo reader, so no configuration pays for parsing), Adagrad (0.2,
initial accumulator 0.01) on the rows, Adam (0.003) on the dense weights,
and prints one JSON line: samples/s over --steps steps after --warmup.
"""

import argparse
import json
import os
import sys
import time

import numpy as np
import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "examples"))
import embedps  # noqa: E402
import embedps.torch  # noqa: E402
from train_dlrm import MODELS, NUM_SLOTS, DenseDLRM, table_config  # noqa: E402


def load_batches(path, batch_size, count):
    """count batches of the training file: (labels, dense, keys uint64)."""
    reader = embedps.CriteoReader([path], batch_size=batch_size)
    batches = []
    for (_, labels, dense, keys), _ in zip(reader, range(count)):
        batches.append((torch.from_numpy(labels), torch.from_numpy(dense), keys))
    if len(batches) < count:
        sys.exit(f"{path} holds {len(batches)} batches of {batch_size}; {count} needed")
    return batches


def timed(batches, warmup, step):
    """samples/s of step(batch) over the batches after the first warmup."""
    for batch in batches[:warmup]:
        step(batch)
    start = time.perf_counter()
    samples = 0
    for batch in batches[warmup:]:
        step(batch)
        samples += len(batch[0])
    return samples / (time.perf_counter() - start)


def dense_model(spec):
    torch.manual_seed(1)
    model = DenseDLRM(spec["dim"], spec["bottom"], spec["top"])
    return model, torch.optim.Adam(model.parameters(), lr=0.003)


def table_rows(args, batches):
    """The rows every configuration's table is made with: the distinct
    keys trained on, or --table_rows if more."""
    keys = np.concatenate([b[2].reshape(-1) for b in batches])
    return max(len(np.unique(keys)), args.table_rows)


def run_embedps(args, spec, batches):
    client = embedps.Client(args.servers.split(","))
    # Told its size, as the local tables are made with theirs (the servers
    # commit its memory at creation, not a page at a time while training).
    table = client.create_table(**table_config(spec["dim"], "async"),
                                expected_rows=table_rows(args, batches))
    emb = embedps.torch.EmbeddingBagCollection(client, [(f"C{s + 1}", table) for s in range(NUM_SLOTS)],
                                               hot_rows=args.hot_rows,
                                               hot_rows_warmup=max(1, args.warmup // 2))
    model, optimizer = dense_model(spec)
    prepared = {}

    def step(batch):
        labels, dense, keys = batch
        features = prepared.pop(id(batch), None) or keys
        rows = emb(features)
        # The next batch's pulls run while this one computes.
        following = index[id(batch)] + 1
        if following < len(batches):
            prepared[id(batches[following])] = emb.prefetch(batches[following][2])
        loss = F.binary_cross_entropy_with_logits(model(dense, rows), labels)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()

    index = {id(b): i for i, b in enumerate(batches)}
    rate = timed(batches, args.warmup, step)
    emb.flush()
    result = {"samples_per_second": rate, "hot_rows": args.hot_rows}
    if args.hot_rows:
        result["hot_rows_held"] = sum(emb._hot.held())
    return result


def local_ids(batches):
    """The batches' keys as ids of a local table (mapped before timing, as a
    pure-PyTorch pipeline maps its categorical values)."""
    keys = np.concatenate([b[2].reshape(-1) for b in batches])
    distinct, ids = np.unique(keys, return_inverse=True)
    out, at = [], 0
    for labels, dense, k in batches:
        n = k.size
        out.append((labels, dense, torch.from_numpy(ids[at:at + n].astype(np.int64)).view(-1, 1)))
        at += n
    return out, len(distinct)


def uniform_(weight):
    with torch.no_grad():
        weight.uniform_(-0.05, 0.05)


def run_torch(args, spec, batches):
    batches, distinct = local_ids(batches)
    rows = max(distinct, args.table_rows)
    emb = torch.nn.EmbeddingBag(rows, spec["dim"], mode="sum", sparse=True)
    uniform_(emb.weight)
    sparse = torch.optim.Adagrad(emb.parameters(), lr=0.2, initial_accumulator_value=0.01)
    model, optimizer = dense_model(spec)

    def step(batch):
        labels, dense, ids = batch
        pooled = emb(ids).view(len(labels), NUM_SLOTS, spec["dim"])
        loss = F.binary_cross_entropy_with_logits(model(dense, pooled), labels)
        optimizer.zero_grad()
        sparse.zero_grad()
        loss.backward()
        optimizer.step()
        sparse.step()

    return {"samples_per_second": timed(batches, args.warmup, step), "distinct_keys": distinct,
            "table_rows": rows}


def run_torchrec(args, spec, batches):
    import torchrec
    from torchrec.distributed.model_parallel import DistributedModelParallel
    from torchrec.distributed.planner import EmbeddingShardingPlanner, Topology
    from torchrec.optim.apply_optimizer_in_backward import apply_optimizer_in_backward

    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ.setdefault("MASTER_PORT", str(args.port))
    torch.distributed.init_process_group("gloo", rank=0, world_size=1)
    batches, distinct = local_ids(batches)
    rows = max(distinct, args.table_rows)
    features = [f"C{s + 1}" for s in range(NUM_SLOTS)]
    ebc = torchrec.EmbeddingBagCollection(tables=[torchrec.EmbeddingBagConfig(
        name="criteo", embedding_dim=spec["dim"], num_embeddings=rows, feature_names=features,
        pooling=torchrec.PoolingType.SUM)], device=torch.device("meta"))
    # FBGEMM's fused Adagrad takes no initial accumulator (TorchRec 1.9.2
    # passes it and FBGEMM 1.9.0 refuses it): its accumulator starts at 0.
    apply_optimizer_in_backward(torch.optim.Adagrad, ebc.parameters(), {"lr": 0.2})
    topology = Topology(world_size=1, compute_device="cpu")
    plan = EmbeddingShardingPlanner(topology=topology).collective_plan(ebc, pg=torch.distributed.GroupMember.WORLD)
    sharded = DistributedModelParallel(ebc, device=torch.device("cpu"), plan=plan)
    model, optimizer = dense_model(spec)
    lengths = None

    def step(batch):
        nonlocal lengths
        labels, dense, ids = batch
        n = len(labels)
        if lengths is None or lengths.numel() != n * NUM_SLOTS:
            lengths = torch.ones(n * NUM_SLOTS, dtype=torch.int64)
        # Slot-major values, as a KeyedJaggedTensor holds them.
        values = ids.view(n, NUM_SLOTS).t().reshape(-1)
        kjt = torchrec.KeyedJaggedTensor(keys=features, values=values, lengths=lengths)
        pooled = sharded(kjt).values().view(n, NUM_SLOTS, spec["dim"])
        loss = F.binary_cross_entropy_with_logits(model(dense, pooled), labels)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()

    rate = timed(batches, args.warmup, step)
    torch.distributed.destroy_process_group()
    return {"samples_per_second": rate, "torchrec": torchrec.__version__, "table_rows": rows}


def run_overhead(args, spec, batches):
    """Python's cost per pull + push pair, two ways, same keys (one batch's
    distinct keys), same client, same server:
      * binding: each Python call's time minus the time its C++ client call
        took inside it (argument checks, array allocation, GIL release and
        reacquisition: exactly what Python adds);
      * loop: a Python loop of pairs against the C++ client's own loop
        (median of interleaved rounds; noisier, server time included)."""
    client = embedps.Client(args.servers.split(","))
    table = client.create_table(**table_config(spec["dim"], "async"))
    keys, _ = embedps.unique_inverse(np.ascontiguousarray(batches[0][2].reshape(-1)))
    grads = np.full((len(keys), spec["dim"]), 1e-6, np.float32)
    iterations, python, native, binding = 200, [], [], []
    for _ in range(7):
        start = time.perf_counter()
        for _ in range(iterations):
            t0 = time.perf_counter()
            client.pull(table, keys, unique=True)
            t1 = time.perf_counter()
            pull_inside = client._last_call_seconds
            client.push(table, keys, grads, unique=True)
            t2 = time.perf_counter()
            binding.append((t1 - t0 - pull_inside) + (t2 - t1 - client._last_call_seconds))
        python.append((time.perf_counter() - start) / iterations)
        native.append(client._native_pull_push_seconds(table, keys, iterations))
    py, cpp = float(np.median(python)), float(np.median(native))
    return {"distinct_keys": int(len(keys)), "binding_overhead_us": float(np.median(binding)) * 1e6,
            "binding_overhead_p90_us": float(np.percentile(binding, 90)) * 1e6,
            "python_pair_us": py * 1e6, "cpp_pair_us": cpp * 1e6, "loop_overhead_us": (py - cpp) * 1e6}


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--which", required=True, choices=["embedps", "torch", "torchrec", "overhead"])
    parser.add_argument("--data", required=True, help="a datagen output directory")
    parser.add_argument("--servers", default="")
    parser.add_argument("--model", choices=sorted(MODELS), default="large")
    parser.add_argument("--batch_size", type=int, default=512)
    parser.add_argument("--steps", type=int, default=300)
    parser.add_argument("--warmup", type=int, default=20)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--table_rows", type=int, default=0,
                        help="rows of the local tables (0, or fewer than the distinct keys of the "
                             "batches: exactly those keys, the smallest table a mapped pipeline needs)")
    parser.add_argument("--port", type=int, default=29533)
    parser.add_argument("--hot_rows", type=int, default=0,
                        help="embedps: the EmbeddingBagCollection's hot-row tier (rows; 0: none)")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    spec = MODELS[args.model]
    count = 1 if args.which == "overhead" else args.warmup + args.steps
    batches = load_batches(os.path.join(args.data, "train.txt"), args.batch_size, count)
    run = {"embedps": run_embedps, "torch": run_torch, "torchrec": run_torchrec, "overhead": run_overhead}
    result = {"which": args.which, "torch": torch.__version__, "model": args.model,
              "batch_size": args.batch_size, "steps": args.steps, "warmup": args.warmup,
              "threads": args.threads}
    result.update(run[args.which](args, spec, batches))
    print(json.dumps(result), flush=True)


if __name__ == "__main__":
    main()
