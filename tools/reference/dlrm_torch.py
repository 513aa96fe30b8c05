#!/usr/bin/python3
"""The reference DLRM in PyTorch, single process, CPU: the same model, the
same initialization scheme and the same optimizer settings as a ps_worker
config (deploy/local/dlrm_small.txtpb by default), trained on the same
Criteo-format files, for a side-by-side samples/s and AUC comparison
(tools/reference/compare.sh).

Runs on Debian's python3-torch (/usr/bin/python3) or PyPI's. The files
are parsed into tensors before the clock starts; samples/s covers the
training loop only (forward, backward, sparse Adagrad on the embeddings,
Adam on the dense part). Prints one JSON line.

--processes=N trains data-parallel with DistributedDataParallel over Gloo
(N processes on this machine, each --threads threads): every step each
rank takes its own --batch_size rows of the step's N × batch_size, as
ps_worker ranks do; the embedding's sparse gradients and the dense ones
are allreduced by DDP; samples/s counts all ranks.

--cross_layers=N (N > 0) trains DCN-v2 instead: the features side by side,
x0, through N full-rank cross layers x_{l+1} = x0 * (W_l x_l + b_l) + x_l
(W_l Xavier-uniform, b_l zeros, as ps_worker's `interaction: CROSS`),
then the top MLP.

--schema=meta.json reads the files tools/schema_datagen writes instead
of Criteo's (a header row; the columns and separators from its
meta.json) with what deploy/local/schema_small.txtpb says of such
columns: counts log1p, reals standardized (mean and sample deviation of
the training file's first 100,000 lines; an empty field is 0), one id a
bag of one row (an empty field the column's own "missing" row), lists
mean-pooled (an empty list a zero vector), weighted lists the weighted
sum; every column's ids in one table, keyed by (column, id). The model is
the same DLRM (or DCN-v2) over the pooled slots.

  dlrm_torch.py --train=train.txt --test=test.txt [--threads=2] [--batch_size=512]
      [--processes=N] [--cross_layers=N] [--schema=meta.json]
"""
import argparse
import json
import math
import re
import socket
import time
import warnings

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

DENSE, SLOTS = 13, 26


def parse(path, vocab, grow):
    """Labels, log1p dense features and per-slot value indices. Each
    (slot, value) gets a row; test values never seen in training get fresh
    rows too (embedps creates untrained rows for them the same way)."""
    labels, dense, cats = [], [], []
    with open(path) as f:
        for line in f:
            fields = line.rstrip("\n").split("\t")
            if len(fields) != 1 + DENSE + SLOTS:
                continue
            labels.append(float(fields[0]))
            dense.append([math.log1p(max(int(x), 0)) if x else 0.0
                          for x in fields[1:1 + DENSE]])
            row = []
            for s, value in enumerate(fields[1 + DENSE:]):
                key = (s, value)
                index = vocab.get(key)
                if index is None:
                    index = vocab[key] = len(vocab)
                row.append(index)
            cats.append(row)
    return (torch.tensor(labels), torch.tensor(dense),
            torch.tensor(cats, dtype=torch.int64))


STATISTICS_LINES = 100000  # FeatureSchema.statistics_lines' default


class SchemaData:
    """One file of schema_datagen's layout, parsed: labels, transformed
    dense features and, per id column, its bags (row indices, offsets and,
    weighted lists, weights)."""

    def __init__(self, path, meta, vocab, statistics=None):
        sep, list_sep = meta["column_separator"], meta["list_separator"]
        weight_sep = meta["weight_separator"]
        with open(path) as f:
            position = {n: i for i, n in enumerate(f.readline().rstrip("\r\n").split(sep))}
            lines = f.read().splitlines()
        columns = [(c["name"], c["kind"], position[c["name"]]) for c in meta["columns"]]
        label = next(p for _, kind, p in columns if kind == "label")
        dense = [(kind, p) for _, kind, p in columns if kind in ("count", "real")]
        sparse = [(kind, p) for _, kind, p in columns if kind in ("id", "list", "weighted_list")]
        width = len(position)
        if statistics is None:  # this is the training file: the reals' mean and 1/std
            statistics = {}
            for kind, p in dense:
                if kind == "real":
                    x = np.array([float(fs[p]) for fs in (line.split(sep) for line in lines[:STATISTICS_LINES])
                                  if len(fs) == width and fs[p]])
                    std = float(x.std(ddof=1)) if len(x) > 1 else 0.0
                    statistics[p] = (float(x.mean()) if len(x) else 0.0, 1 / std if std > 0 else 1.0)
        self.statistics = statistics
        labels, values = [], []
        keys = [[] for _ in sparse]
        lengths = [[] for _ in sparse]
        weights = [[] for _ in sparse]
        for line in lines:
            fields = line.rstrip("\r").split(sep)
            if len(fields) != width:
                continue
            labels.append(float(fields[label]))
            row = []
            for kind, p in dense:
                text = fields[p]
                if not text:
                    row.append(0.0)
                elif kind == "count":
                    row.append(math.log1p(max(float(text), 0.0)))
                else:
                    mean, inv_std = statistics[p]
                    row.append((float(text) - mean) * inv_std)
            values.append(row)
            for s, (kind, p) in enumerate(sparse):
                text = fields[p]
                if kind == "id":
                    items = [text]  # empty: the column's missing row
                else:
                    items = text.split(list_sep)[:256] if text else []
                for item in items:
                    if kind == "weighted_list":
                        item, weight = item.rsplit(weight_sep, 1)
                        weights[s].append(float(weight))
                    index = vocab.get((s, item))
                    if index is None:
                        index = vocab[(s, item)] = len(vocab)
                    keys[s].append(index)
                lengths[s].append(len(items))
        self.labels = torch.tensor(labels)
        self.dense = torch.tensor(values).reshape(len(labels), len(dense))
        self.kinds = [kind for kind, _ in sparse]
        self.keys = [np.array(k, dtype=np.int64) for k in keys]
        self.offsets = [np.concatenate([[0], np.cumsum(n, dtype=np.int64)]) for n in lengths]
        self.weights = [np.array(w, dtype=np.float32) for w in weights]

    def __len__(self):
        return len(self.labels)

    def bags(self, first, end):
        """Samples [first, end) as the model's groups: the mean-pooled slots
        (ids and lists) and the weighted ones, each (row indices, offsets
        with the last, weights or None, mode, slots), bags slot-major."""
        groups = []
        for kinds, mode in (({"id", "list"}, "mean"), ({"weighted_list"}, "sum")):
            slots = [s for s, kind in enumerate(self.kinds) if kind in kinds]
            if not slots:
                continue
            keys = np.concatenate([self.keys[s][self.offsets[s][first]:self.offsets[s][end]] for s in slots])
            lengths = np.concatenate([np.diff(self.offsets[s][first:end + 1]) for s in slots])
            offsets = np.concatenate([[0], np.cumsum(lengths)])
            weights = None
            if mode == "sum":
                weights = torch.from_numpy(np.concatenate(
                    [self.weights[s][self.offsets[s][first]:self.offsets[s][end]] for s in slots]))
            groups.append((torch.from_numpy(keys), torch.from_numpy(offsets), weights, mode, len(slots)))
        return groups


def mlp(widths, relu_last):
    layers = []
    for i in range(len(widths) - 1):
        linear = nn.Linear(widths[i], widths[i + 1])
        nn.init.xavier_uniform_(linear.weight)
        nn.init.zeros_(linear.bias)
        layers.append(linear)
        if i + 2 < len(widths) or relu_last:
            layers.append(nn.ReLU())
    return nn.Sequential(*layers)


class CrossNet(nn.Module):
    """DCN-v2's cross network: x_{l+1} = x0 * (W_l x_l + b_l) + x_l."""

    def __init__(self, width, layers):
        super().__init__()
        self.layers = nn.ModuleList()
        for _ in range(layers):
            linear = nn.Linear(width, width)
            nn.init.xavier_uniform_(linear.weight)
            nn.init.zeros_(linear.bias)
            self.layers.append(linear)

    def forward(self, x0):
        x = x0
        for linear in self.layers:
            x = x0 * linear(x) + x
        return x


class Dlrm(nn.Module):
    """DLRM (pairwise dots), or DCN-v2 with cross_layers > 0."""

    def __init__(self, rows, dim, bottom, top, init, cross_layers=0, dense=DENSE, slots=SLOTS):
        super().__init__()
        self.embedding = nn.Embedding(rows, dim, sparse=True)
        nn.init.uniform_(self.embedding.weight, -init, init)
        self.bottom = mlp([dense] + bottom, relu_last=True)
        features = 1 + slots
        self.cross = CrossNet(features * dim, cross_layers) if cross_layers else None
        width = features * dim if self.cross else dim + features * (features - 1) // 2
        self.top = mlp([width] + top + [1], relu_last=False)
        i, j = torch.triu_indices(features, features, offset=1)
        self.register_buffer("pairs_i", i)
        self.register_buffer("pairs_j", j)

    def pooled(self, groups, batch):
        """The bags of SchemaData.bags, pooled: B × slots × d."""
        parts = []
        for keys, offsets, weights, mode, slots in groups:
            bags = F.embedding_bag(keys, self.embedding.weight, offsets, mode=mode, sparse=True,
                                   per_sample_weights=weights, include_last_offset=True)
            parts.append(bags.view(slots, batch, -1).transpose(0, 1))
        return torch.cat(parts, dim=1) if len(parts) > 1 else parts[0]

    def forward(self, dense, cats):
        z0 = self.bottom(dense)                           # B × d
        if isinstance(cats, list):                        # a schema's bags
            e = self.pooled(cats, dense.shape[0])         # B × slots × d
        else:
            e = self.embedding(cats)                      # B × 26 × d
        t = torch.cat([z0.unsqueeze(1), e], dim=1)        # B × F × d
        if self.cross is not None:
            return self.top(self.cross(t.flatten(1))).squeeze(1)
        dots = torch.bmm(t, t.transpose(1, 2))            # B × F × F
        pairs = dots[:, self.pairs_i, self.pairs_j]       # i < j, i-major
        return self.top(torch.cat([z0, pairs], dim=1)).squeeze(1)


def auc(scores, labels):
    order = np.argsort(scores, kind="mergesort")
    s, y = scores[order], labels[order]
    ranks = np.empty(len(s))
    i = 0
    while i < len(s):
        j = i
        while j < len(s) and s[j] == s[i]:
            j += 1
        ranks[i:j] = 0.5 * (i + 1 + j)
        i = j
    pos = y.sum()
    neg = len(y) - pos
    return float((ranks[y > 0.5].sum() - pos * (pos + 1) / 2) / (pos * neg))


def loaded_blas():
    """The BLAS this process computes with: torch's own build configuration
    (PyPI's wheels link MKL and oneDNN statically), or the OpenBLAS library
    it loaded (Debian's, chosen with LD_LIBRARY_PATH by compare.sh)."""
    config = torch.__config__.show()
    found = re.search(r"BLAS_INFO=(\w+)", config)
    if found and found.group(1) not in ("open", "generic"):
        onednn = re.search(r"oneDNN v([\d.]+)", config) or re.search(r"MKL-DNN v([\d.]+)", config)
        return f"{found.group(1)}" + (f" + oneDNN {onednn.group(1)}" if onednn else "")
    with open("/proc/self/maps") as maps:
        paths = {line.split()[-1] for line in maps if ".so" in line}
    for name in ("libopenblas", "libblas"):
        for path in sorted(paths):
            if name in path:
                return path
    return "?"


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--train", required=True)
    p.add_argument("--test", required=True)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--batch_size", type=int, default=512)
    p.add_argument("--dim", type=int, default=16)
    p.add_argument("--bottom", default="64,16")
    p.add_argument("--top", default="64,32")
    p.add_argument("--init", type=float, default=0.05)
    p.add_argument("--embedding_lr", type=float, default=0.2)
    p.add_argument("--initial_accumulator", type=float, default=0.01)
    p.add_argument("--dense_lr", type=float, default=0.003)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--processes", type=int, default=1)
    p.add_argument("--cross_layers", type=int, default=0)
    p.add_argument("--schema", default="", help="schema_datagen's meta.json: read its layout")
    a = p.parse_args()
    if a.processes == 1:
        train(0, a, None)
        return
    with socket.socket() as s:  # a free port for the rendezvous
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    torch.multiprocessing.spawn(train, args=(a, port), nprocs=a.processes)


def train(rank, a, port):
    # torch 2.x's sparse Adagrad says once per process that it skips
    # sparse invariant checks: noise in the comparison's output.
    warnings.filterwarnings("ignore", message="Sparse invariant checks")
    world = a.processes
    torch.set_num_threads(a.threads)
    torch.manual_seed(a.seed)
    if world > 1:
        torch.distributed.init_process_group(
            "gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank,
            world_size=world)

    vocab = {}
    t0 = time.time()
    if a.schema:
        with open(a.schema) as f:
            meta = json.load(f)
        train_data = SchemaData(a.train, meta, vocab)
        test_data = SchemaData(a.test, meta, vocab, train_data.statistics)
        y, ty = train_data.labels, test_data.labels
        shape = dict(dense=train_data.dense.shape[1], slots=len(train_data.kinds))
        # The steps' batches are made before the clock, as the Criteo
        # path's tensors are parsed before it.
        batches = {}
        for step in range(len(y) // (a.batch_size * world)):
            first = (step * world + rank) * a.batch_size
            end = first + a.batch_size
            batches[step] = (train_data.dense[first:end], train_data.bags(first, end), y[first:end])
        batch = batches.__getitem__
        test_batches = [(test_data.dense[i:i + 8192], test_data.bags(i, min(i + 8192, len(ty))))
                        for i in range(0, len(ty), 8192)]
    else:
        y, x, c = parse(a.train, vocab, grow=True)
        ty, tx, tc = parse(a.test, vocab, grow=True)
        shape = {}

        def batch(step):
            first = (step * world + rank) * a.batch_size
            s = slice(first, first + a.batch_size)
            return x[s], c[s], y[s]
        test_batches = [(tx[i:i + 8192], tc[i:i + 8192]) for i in range(0, len(ty), 8192)]
    parse_seconds = time.time() - t0

    model = Dlrm(len(vocab), a.dim, [int(w) for w in a.bottom.split(",")],
                 [int(w) for w in a.top.split(",")], a.init, a.cross_layers, **shape)
    net = model
    if world > 1:
        # Rank 0's parameters go to every rank; gradients are averaged.
        net = torch.nn.parallel.DistributedDataParallel(model)
    sparse = torch.optim.Adagrad([model.embedding.weight], lr=a.embedding_lr,
                                 initial_accumulator_value=a.initial_accumulator)
    # Every dense parameter: the MLPs and the cross layers.
    dense = torch.optim.Adam([p for name, p in model.named_parameters() if not name.startswith("embedding.")],
                             lr=a.dense_lr)
    loss_fn = nn.BCEWithLogitsLoss()
    steps = len(y) // (a.batch_size * world)
    if world > 1:
        torch.distributed.barrier()
    start = time.time()
    for step in range(steps):
        xs, cs, ys = batch(step)
        loss = loss_fn(net(xs, cs), ys)
        sparse.zero_grad()
        dense.zero_grad()
        loss.backward()
        sparse.step()
        dense.step()
    if world > 1:
        torch.distributed.barrier()
    seconds = time.time() - start
    if rank != 0:
        return
    with torch.no_grad():
        logits = torch.cat([model(xs, cs) for xs, cs in test_batches])
    test_logloss = float(loss_fn(logits, ty))
    samples = steps * a.batch_size * world
    print(json.dumps({
        "impl": "pytorch", "torch": torch.__version__, "threads": a.threads,
        "processes": world, "blas": loaded_blas(),
        "steps": steps, "samples": samples,
        "train_seconds": round(seconds, 3),
        "samples_per_second": round(samples / seconds, 1),
        "parse_seconds": round(parse_seconds, 1),
        "test_auc": round(auc(logits.numpy(), ty.numpy()), 6),
        "test_logloss": round(test_logloss, 6)}), flush=True)


if __name__ == "__main__":
    main()
