"""Trains the DLRM of deploy/local with PyTorch, its embedding table on
embedps servers: the model, data files and optimizers of ps_worker's job,
written as a user's own PyTorch program.

    # 2 ps_server shards (SYNC needs --num_workers=2), then 2 workers:
    bazel-bin/server/ps_server --port=50051 --shard_index=0 --num_shards=2 --num_workers=2 &
    bazel-bin/server/ps_server --port=50052 --shard_index=1 --num_shards=2 --num_workers=2 &
    PYTHONPATH=bazel-bin/python/site torchrun --nproc_per_node=2 \\
        examples/train_dlrm.py --servers=localhost:50051,localhost:50052 \\
        --train=data/train.txt --test=data/test.txt

One process without torchrun trains alone (use --mode=async, or servers
started with --num_workers=1). Rank 0 evaluates the test file at the end
and prints one JSON line (test AUC, samples/s); --output writes it too.

The model (dense/model_spec.h): bottom MLP over the 13 dense features (ReLU
after every layer), the 26 categorical slots' rows from one shared table,
pairwise dot products of [bottom output, 26 rows], the top MLP (ReLU hidden
layers, one logit), mean binary cross-entropy. Rows: Adagrad on the
servers; dense weights: Adam, averaged across workers by DDP (Gloo).
"""

import argparse
import json
import os
import sys
import time

import numpy as np
import torch
import torch.nn.functional as F

import embedps
import embedps.torch

# deploy/local/dlrm_small.txtpb and dlrm_large.txtpb.
MODELS = {
    "small": {"dim": 16, "bottom": [64, 16], "top": [64, 32]},
    "large": {"dim": 64, "bottom": [512, 256, 64], "top": [512, 256]},
}
NUM_DENSE, NUM_SLOTS = 13, 26


def table_config(dim: int, mode: str) -> dict:
    """The job's table, as the DLRM configs of deploy/local declare it."""
    return {
        "name": "criteo", "dim": dim, "seed": 1,
        "initializer": {"kind": "uniform", "low": -0.05, "high": 0.05},
        "optimizer": {"kind": "adagrad", "learning_rate": 0.2, "initial_accumulator": 0.01},
        "consistency": {"mode": mode, "timeout_ms": 120000},
    }


def mlp(widths, relu_last: bool) -> torch.nn.Sequential:
    layers = []
    for i in range(len(widths) - 1):
        linear = torch.nn.Linear(widths[i], widths[i + 1])
        torch.nn.init.xavier_uniform_(linear.weight)
        torch.nn.init.zeros_(linear.bias)
        layers.append(linear)
        if relu_last or i < len(widths) - 2:
            layers.append(torch.nn.ReLU())
    return torch.nn.Sequential(*layers)


class DenseDLRM(torch.nn.Module):
    """The dense half: bottom MLP, dot interaction, top MLP -> logit."""

    def __init__(self, dim: int, bottom, top, num_slots: int = NUM_SLOTS):
        super().__init__()
        if bottom[-1] != dim:
            raise ValueError(f"the bottom MLP must end at the embedding dim {dim}")
        self.bottom = mlp([NUM_DENSE, *bottom], relu_last=True)
        features = num_slots + 1
        self.register_buffer("pairs", torch.triu_indices(features, features, offset=1))
        self.top = mlp([dim + features * (features - 1) // 2, *top, 1], relu_last=False)

    def forward(self, dense: torch.Tensor, rows: torch.Tensor) -> torch.Tensor:
        z0 = self.bottom(dense)                                  # (B, d)
        t = torch.cat([z0.unsqueeze(1), rows], dim=1)            # (B, F, d)
        dots = torch.bmm(t, t.transpose(1, 2))[:, self.pairs[0], self.pairs[1]]
        return self.top(torch.cat([z0, dots], dim=1)).squeeze(1)


def evaluate(model, emb, path: str):
    """(AUC, log loss) of the test file, reading rows without changing them."""
    model.eval()
    emb.eval()
    logits, labels = [], []
    with torch.no_grad():
        for _, y, dense, keys in embedps.CriteoReader([path], batch_size=4096, include_tail=True):
            if len(y) == 0:
                continue
            logits.append(model(torch.from_numpy(dense), emb(keys)).numpy())
            labels.append(y)
    logits, labels = np.concatenate(logits), np.concatenate(labels)
    return (embedps.roc_auc(labels=labels, scores=logits),
            embedps.mean_log_loss(labels=labels, logits=logits))


def main(argv=None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--servers", required=True, help="host:port of every shard, comma-separated")
    parser.add_argument("--train", required=True, help="Criteo TSV training file(s), comma-separated")
    parser.add_argument("--test", help="Criteo TSV test file, evaluated by rank 0 at the end")
    parser.add_argument("--model", choices=sorted(MODELS), default="small")
    parser.add_argument("--batch_size", type=int, default=512, help="samples per step on each worker")
    parser.add_argument("--epochs", type=int, default=1)
    parser.add_argument("--mode", choices=["sync", "async"], default="sync")
    parser.add_argument("--lr", type=float, default=0.003, help="Adam's learning rate (dense weights)")
    parser.add_argument("--max_steps", type=int, default=0, help="stop after this many steps (0: all)")
    parser.add_argument("--no_prefetch", action="store_true", help="pull each batch's rows only when it is needed")
    parser.add_argument("--threads", type=int, default=0, help="torch CPU threads (0: torch's default)")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--output", help="also write the result JSON here")
    args = parser.parse_args(argv)

    distributed = "WORLD_SIZE" in os.environ and int(os.environ["WORLD_SIZE"]) > 1
    if distributed:
        torch.distributed.init_process_group("gloo")
    rank = torch.distributed.get_rank() if distributed else 0
    world = torch.distributed.get_world_size() if distributed else 1
    if args.threads > 0:
        torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)

    spec = MODELS[args.model]
    client = embedps.Client(args.servers.split(","))
    table = client.create_table(**table_config(spec["dim"], args.mode))
    emb = embedps.torch.EmbeddingBagCollection(client, [(f"C{s + 1}", table) for s in range(NUM_SLOTS)])
    model = DenseDLRM(spec["dim"], spec["bottom"], spec["top"])
    trained = torch.nn.parallel.DistributedDataParallel(model) if distributed else model
    optimizer = torch.optim.Adam(model.parameters(), lr=args.lr)

    reader = embedps.CriteoReader(args.train.split(","), batch_size=args.batch_size,
                                  worker_index=rank, num_workers=world, epochs=args.epochs)
    batches = reader
    if args.max_steps > 0:
        batches = (b for b, _ in zip(reader, range(args.max_steps)))
    steps, samples, start = 0, 0, time.monotonic()
    pairs = (embedps.torch.prefetched(batches, emb, features=lambda b: b[3]) if not args.no_prefetch
             else ((b, b[3]) for b in batches))
    loss = torch.zeros(())
    for (_, labels, dense, _), features in pairs:
        logits = trained(torch.from_numpy(dense), emb(features))
        loss = F.binary_cross_entropy_with_logits(logits, torch.from_numpy(labels))
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        steps += 1
        samples += len(labels)
    emb.flush()
    seconds = time.monotonic() - start

    result = {"workers": world, "steps": steps, "samples": samples * world,
              "train_seconds": round(seconds, 3),
              "samples_per_second": round(samples * world / seconds, 1) if seconds > 0 else 0.0,
              "last_loss": loss.item()}
    if rank == 0 and args.test:
        auc, logloss = evaluate(model, emb, args.test)
        result.update(test_auc=auc, test_logloss=logloss)
    if distributed:
        torch.distributed.barrier()  # the others wait for rank 0's evaluation
        torch.distributed.destroy_process_group()
    if rank == 0:
        print(json.dumps(result), flush=True)
        if args.output:
            with open(args.output, "w") as f:
                json.dump(result, f)
    return result


if __name__ == "__main__":
    sys.exit(0 if main() else 1)
