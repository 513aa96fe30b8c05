"""The hot-row tier of an EmbeddingBagCollection (``hot_rows=N``).

Every worker holds the rows of each table's N most pulled keys with their
optimizer state and trains them itself with the servers' optimizer code
(``_embedps._HotRows`` is ps_worker's tier): only the other keys are pulled
and pushed. With several workers (``torch.distributed`` initialized) each
step's touched rows and gradient sums are gathered from every worker and
every row some worker touched gets one update of the sum, so every
worker's copy stays the same — SYNC semantics for the held rows, whatever
the table's mode. The held rows go back to their shards (only those used)
before every ``Client.checkpoint`` and ``Client.publish`` of the client
the module uses, and before the set is chosen again. Design:
docs/architecture.md "Hot rows".
"""

from typing import Dict, List, Optional, Tuple

import numpy as np
import torch

import embedps
from embedps import _embedps


def _available_memory() -> int:
    """MemAvailable of /proc/meminfo in bytes (0 if unknown)."""
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 0


class TorchCollectives:
    """The collectives _HotRows.apply needs, over torch.distributed's
    default group (any backend that runs on CPU tensors: gloo)."""

    def __init__(self):
        self.rank = torch.distributed.get_rank()
        self.world_size = torch.distributed.get_world_size()

    def all_gather(self, values: np.ndarray) -> np.ndarray:
        local = torch.from_numpy(values)
        parts = [torch.empty_like(local) for _ in range(self.world_size)]
        torch.distributed.all_gather(parts, local)
        return torch.cat(parts).numpy()

    def all_reduce(self, values: np.ndarray) -> np.ndarray:
        local = torch.from_numpy(values)
        torch.distributed.all_reduce(local)
        return local.numpy()

    def broadcast(self, values: np.ndarray, root: int) -> np.ndarray:
        local = torch.from_numpy(values)
        torch.distributed.broadcast(local, src=root)
        return local.numpy()

    def barrier(self) -> None:
        torch.distributed.barrier()

    def broadcast_keys(self, keys: np.ndarray) -> np.ndarray:
        """Rank 0's uint64 keys on every rank."""
        count = torch.tensor([len(keys)], dtype=torch.int64)
        torch.distributed.broadcast(count, src=0)
        bits = torch.from_numpy(keys.view(np.int64)) if self.rank == 0 else \
            torch.empty(int(count[0]), dtype=torch.int64)
        torch.distributed.broadcast(bits, src=0)
        return bits.numpy().view(np.uint64)


class HotTier:
    """One module's tier: the rows, when they are chosen, and the steps
    whose update is still to be applied. Split: None for a table none of
    whose step keys is held, else (cold keys, cold positions, held
    positions, held slots) over the step's distinct keys."""

    def __init__(self, client: "embedps.Client", tables: List["embedps.Table"], rows: int,
                 warmup: int, refresh: int):
        if rows <= 0 or rows > 2**31 - 1:
            raise ValueError(f"hot_rows must be in [1, 2^31 - 1], not {rows}")
        if warmup < 1 or refresh < 1:
            raise ValueError(f"hot_rows_warmup ({warmup}) and hot_rows_refresh ({refresh}) must be >= 1")
        self.client = client
        self.rows = rows
        self.warmup = warmup
        self.refresh = refresh
        self.native = _embedps._HotRows(tables, threads=max(1, torch.get_num_threads()))
        self.num_tables = len(tables)
        self.dims = [table.dim for table in tables]
        self.eligible = [self.native.eligible(t) for t in range(self.num_tables)]
        if not any(self.eligible):
            raise ValueError("hot_rows: every table of the module has a TTL or max_rows (rows its "
                             "servers may drop on their own stay with the servers)")
        need = rows * sum(self.native.bytes_per_row(t) for t in range(self.num_tables) if self.eligible[t])
        available = _available_memory()
        if available and need > available // 2:
            raise embedps.ResourceExhaustedError(
                f"hot_rows={rows} needs up to {need} bytes of this process's memory for the tier; "
                f"this host has {available} available and the tier may take half: lower hot_rows")
        several = (torch.distributed.is_available() and torch.distributed.is_initialized()
                   and torch.distributed.get_world_size() > 1)
        self.collectives: Optional[TorchCollectives] = TorchCollectives() if several else None
        self.generation = 0        # moves each time the held set changes
        self.taken = 0             # training forwards taken
        self.next_choice = warmup  # the training forward that chooses the set
        # Training steps whose update is not applied yet: step -> {table:
        # (slots, grads)}; applied once every table's backward reported
        # (or by the next training forward).
        self.open: Dict[int, Dict[int, Tuple[np.ndarray, np.ndarray]]] = {}
        self.lost = 0  # held rows found erased on their shard at a write-back

    @property
    def rank(self) -> int:
        return self.collectives.rank if self.collectives else 0

    def split(self, t: int, unique: np.ndarray):
        if not self.eligible[t] or self.native.size(t) == 0:
            return None
        return self.native.split(t, unique)

    def open_step(self, step: int) -> None:
        self.open[step] = {}

    def record(self, step: int, t: int, slots: np.ndarray, grads: np.ndarray) -> None:
        """Table t's held part of step's gradient; applies the step once
        every table reported."""
        parts = self.open.get(step)
        if parts is None:  # the step predates the set (refresh, reset)
            return
        parts[t] = (slots, grads)
        if len(parts) == self.num_tables:
            self._apply(self.open.pop(step))

    def settle(self, before: int) -> None:
        """Applies every open step before `before` (with what reported:
        a table whose backward did not run adds nothing)."""
        for step in sorted(s for s in self.open if s < before):
            self._apply(self.open.pop(step))

    def _apply(self, parts) -> None:
        slots, grads = [], []
        for t in range(self.num_tables):
            s, g = parts.get(t, (None, None))
            if s is None:
                s = np.empty(0, dtype=np.int32)
                g = np.empty((0, self.dims[t]), dtype=np.float32)
            slots.append(s)
            grads.append(g)
        self.native.apply(slots, grads, self.collectives)

    def due(self) -> bool:
        return self.taken == self.next_choice

    def choose(self, step: int) -> None:
        """Writes the held rows back (rank 0), then every rank holds the
        rows of rank 0's choice of each table's most pulled keys, read at
        `step`. Every rank calls it at the same training step."""
        if self.rank == 0:
            self.write_back(step)
        if self.collectives:
            self.collectives.barrier()  # no rank reads before the write-back is in
        for t in range(self.num_tables):
            if not self.eligible[t]:
                continue
            keys = self.native.choose(self.client, t, self.rows) if self.rank == 0 else \
                np.empty(0, dtype=np.uint64)
            if self.collectives:
                keys = self.collectives.broadcast_keys(keys)
            self.native.load(self.client, t, keys, step)
        self.generation += 1
        self.next_choice = self.taken + self.refresh

    def write_back(self, step: int) -> None:
        for t in range(self.num_tables):
            if self.eligible[t]:
                self.lost += self.native.write_back(self.client, t, step)

    def reset(self) -> None:
        """The servers' tables were replaced (Client.load): nothing is
        held; the set is chosen again hot_rows_warmup steps later."""
        self.open.clear()
        for t in range(self.num_tables):
            if self.eligible[t]:
                self.native.clear(t)
        self.generation += 1
        self.next_choice = self.taken + self.warmup

    def held(self) -> List[int]:
        return [self.native.size(t) for t in range(self.num_tables)]
