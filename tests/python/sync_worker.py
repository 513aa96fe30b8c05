"""One worker of test_torch.py's SYNC test: DDP (Gloo) over the dense part,
an EmbeddingBagCollection over a SYNC table; writes what it trained to
an .npz. Run with RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT set.

    sync_worker.py SERVERS OUT.npz STEPS [HOT_ROWS]

HOT_ROWS: the collection's hot-row tier (chosen after 1 step, again every
2), written back by rank 0 before the rows are read.
"""

import os
import sys

import numpy as np
import torch

import embedps
import embedps.torch

DIM, BATCH, SLOTS = 4, 8, 3


def batch(step: int, rank: int, world: int):
    """The global batch of a step; this worker's rows of it (rank-th part)."""
    rng = np.random.default_rng(1000 + step)
    keys = rng.integers(0, 40, size=(BATCH * world, SLOTS)).astype(np.int64)
    labels = rng.random(BATCH * world).astype(np.float32)
    part = slice(rank * BATCH, (rank + 1) * BATCH)
    return keys[part], labels[part]


def main():
    servers, out, steps = sys.argv[1].split(","), sys.argv[2], int(sys.argv[3])
    hot_rows = int(sys.argv[4]) if len(sys.argv) > 4 else 0
    torch.distributed.init_process_group("gloo")
    rank, world = torch.distributed.get_rank(), torch.distributed.get_world_size()
    client = embedps.Client(servers)
    table = client.create_table(name="sync", dim=DIM,
                                optimizer={"kind": "sgd", "learning_rate": 0.5},
                                consistency={"mode": "sync", "timeout_ms": 30000})
    emb = embedps.torch.EmbeddingBagCollection(
        client, [(f"s{i}", table) for i in range(SLOTS)], hot_rows=hot_rows,
        hot_rows_warmup=1, hot_rows_refresh=2)
    torch.manual_seed(0)
    dense = torch.nn.parallel.DistributedDataParallel(torch.nn.Linear(SLOTS * DIM, 1))
    optimizer = torch.optim.SGD(dense.parameters(), lr=0.1)
    for step in range(steps):
        keys, labels = batch(step, rank, world)
        pooled = emb(torch.from_numpy(keys))  # (BATCH, SLOTS, DIM)
        logits = dense(pooled.reshape(BATCH, -1)).squeeze(1)
        loss = torch.nn.functional.binary_cross_entropy_with_logits(
            logits, torch.from_numpy(labels))
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    emb.flush()
    if hot_rows and rank == 0:
        emb.write_back_hot_rows()
    torch.distributed.barrier()
    emb.eval()
    with torch.no_grad():
        rows = client.lookup(table, np.arange(40, dtype=np.uint64), step=emb.step)
    np.savez(out, weight=dense.module.weight.detach().numpy(),
             bias=dense.module.bias.detach().numpy(), rows=rows, step=emb.step,
             held=np.array(emb._hot.held() if hot_rows else [0]))
    torch.distributed.barrier()
    torch.distributed.destroy_process_group()


if __name__ == "__main__":
    main()
