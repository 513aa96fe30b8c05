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

  dlrm_torch.py --train=train.txt --test=test.txt [--threads=2] [--batch_size=512]
      [--processes=N] [--cross_layers=N]
"""
import argparse
import json
import math
import re
import socket
import time

import numpy as np
import torch
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

    def __init__(self, rows, dim, bottom, top, init, cross_layers=0):
        super().__init__()
        self.embedding = nn.Embedding(rows, dim, sparse=True)
        nn.init.uniform_(self.embedding.weight, -init, init)
        self.bottom = mlp([DENSE] + bottom, relu_last=True)
        features = 1 + SLOTS
        self.cross = CrossNet(features * dim, cross_layers) if cross_layers else None
        width = features * dim if self.cross else dim + features * (features - 1) // 2
        self.top = mlp([width] + top + [1], relu_last=False)
        i, j = torch.triu_indices(features, features, offset=1)
        self.register_buffer("pairs_i", i)
        self.register_buffer("pairs_j", j)

    def forward(self, dense, cats):
        z0 = self.bottom(dense)                           # B × d
        e = self.embedding(cats)                          # B × 26 × d
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
    a = p.parse_args()
    if a.processes == 1:
        train(0, a, None)
        return
    with socket.socket() as s:  # a free port for the rendezvous
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    torch.multiprocessing.spawn(train, args=(a, port), nprocs=a.processes)


def train(rank, a, port):
    world = a.processes
    torch.set_num_threads(a.threads)
    torch.manual_seed(a.seed)
    if world > 1:
        torch.distributed.init_process_group(
            "gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank,
            world_size=world)

    vocab = {}
    t0 = time.time()
    y, x, c = parse(a.train, vocab, grow=True)
    ty, tx, tc = parse(a.test, vocab, grow=True)
    parse_seconds = time.time() - t0

    model = Dlrm(len(vocab), a.dim, [int(w) for w in a.bottom.split(",")],
                 [int(w) for w in a.top.split(",")], a.init, a.cross_layers)
    net = model
    if world > 1:
        # Rank 0's parameters go to every rank; gradients are averaged.
        net = torch.nn.parallel.DistributedDataParallel(model)
    sparse = torch.optim.Adagrad([model.embedding.weight], lr=a.embedding_lr,
                                 initial_accumulator_value=a.initial_accumulator)
    dense = torch.optim.Adam(list(model.bottom.parameters()) +
                             list(model.top.parameters()), lr=a.dense_lr)
    loss_fn = nn.BCEWithLogitsLoss()
    steps = len(y) // (a.batch_size * world)
    if world > 1:
        torch.distributed.barrier()
    start = time.time()
    for step in range(steps):
        first = (step * world + rank) * a.batch_size
        s = slice(first, first + a.batch_size)
        loss = loss_fn(net(x[s], c[s]), y[s])
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
        logits = torch.cat([model(tx[i:i + 8192], tc[i:i + 8192])
                            for i in range(0, len(ty), 8192)])
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
