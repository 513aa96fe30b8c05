"""PyTorch modules over embedps tables: forward pulls, backward pushes.

    import embedps, embedps.torch
    client = embedps.Client(servers)
    table = client.create_table(name="emb", dim=16,
                                optimizer={"kind": "adagrad",
                                           "learning_rate": 0.1})
    bag = embedps.torch.ShardedEmbeddingBag(client, table, mode="sum")
    pooled = bag(indices, offsets)        # like nn.EmbeddingBag
    loss = model(pooled).mean(); loss.backward()   # pushes the row grads

Forward deduplicates the batch's keys, pulls each distinct row once, and
pools the rows with torch (``F.embedding_bag`` over the pulled rows), so
autograd computes the per-row gradient sums; backward pushes them to the
servers, whose optimizer (SGD, Adagrad, Adam, FTRL...) updates the rows.
The rows are not torch parameters: a local optimizer and DDP see only the
dense model. Keys are uint64 on the servers; int64 tensors are read as
the same 64 bits.

Steps. Every training forward takes the next step number (``step``, from
0; set it to resume) and its backward pushes with it. SYNC and SSP tables
need it: a pull of step t waits on the servers until step t - 1 (SSP:
t - staleness - 1) is complete on every worker, and a push completes the
worker's step t; so every training forward should be followed by its
backward, with every table of the module in the loss (one that is not —
a skipped loss, a model that raised — is completed by the next training
forward with an empty push, and a RuntimeWarning says so). In SYNC mode the
servers sum the workers' pushes: the gradients are scaled by 1/world size
(``torch.distributed``'s, when it is initialized) so that the update is
that of the mean loss over all workers, as DDP averages the dense
gradients; ``grad_scale`` overrides the factor.

Pushes run in the background; the next forward (or ``flush()``) waits
for them and raises their error, if any. Evaluation (``module.eval()`` or
``torch.no_grad()``) reads with ``lookup``: no row is created, nothing is
pushed, the step does not move.

Prefetch: ``prepared = module.prefetch(next_input)`` starts the pulls of the
next forward while the current batch computes; ``module(prepared)`` then
uses them. ``prefetched(loader, module, features)`` does this for a loop.
With ASYNC tables a prefetched pull may not see the current step's push
(rows one step stale, as in any pipelined parameter server); SYNC/SSP
pulls wait on the servers for the steps they need, so they see it.
"""

from typing import Callable, Dict, Iterable, Iterator, List, Mapping, Optional, Sequence, Tuple, Union

import warnings

import numpy as np
import torch
import torch.nn.functional as F

import embedps
from embedps._hot_rows import HotTier

__all__ = [
    "ShardedEmbeddingBag",
    "EmbeddingBagCollection",
    "Prepared",
    "prefetched",
]

_MODES = ("sum", "mean")


def _keys(values) -> np.ndarray:
    """A 1-D contiguous uint64/int64 numpy view of keys (tensor or array)."""
    if isinstance(values, torch.Tensor):
        if values.dtype != torch.int64:
            raise TypeError(f"keys must be an int64 tensor, not {values.dtype}")
        if values.device.type != "cpu":
            values = values.cpu()
        values = values.detach().numpy()
    if not isinstance(values, np.ndarray):
        raise TypeError(f"keys must be a tensor or numpy array, not {type(values).__name__}")
    if values.dtype not in (np.uint64, np.int64):
        raise TypeError(f"keys must be uint64 or int64, not {values.dtype}")
    return np.ascontiguousarray(values.reshape(-1))


def _offsets(offsets, num_keys: int) -> torch.Tensor:
    """Bag offsets as an int64 tensor of bags + 1 entries ending at num_keys.
    (Checked as a numpy array: a slot's few checks cost a microsecond each
    there, several on tensors.)"""
    if isinstance(offsets, torch.Tensor):
        if offsets.dtype not in (torch.int32, torch.int64):
            raise TypeError("offsets must be an int32 or int64 tensor or array")
        array = offsets.detach().cpu().numpy()
    elif isinstance(offsets, np.ndarray):
        if offsets.dtype not in (np.int32, np.int64):
            raise TypeError("offsets must be an int32 or int64 tensor or array")
        array = offsets
    else:
        raise TypeError("offsets must be an int32 or int64 tensor or array")
    if array.ndim != 1:
        raise ValueError(f"offsets must be 1-D, not of shape {tuple(array.shape)}")
    array = array.astype(np.int64, copy=False)
    if len(array) == 0 or array[0] != 0:
        raise ValueError("offsets must start at 0")
    # nn.EmbeddingBag's convention: bags start at offsets (the last bag
    # runs to the end); ours closes it explicitly.
    if array[-1] != num_keys:
        array = np.append(array, np.int64(num_keys))
    if (array[1:] < array[:-1]).any() or array[-1] != num_keys:
        raise ValueError(f"offsets must be non-decreasing and end at {num_keys} (the number of keys)")
    return torch.from_numpy(array)


class _Rows(torch.autograd.Function):
    """The pulled rows of one table as a tensor whose gradient is pushed."""

    @staticmethod
    def forward(ctx, anchor, rows, owner, t, keys, split, step):
        ctx.owner, ctx.t, ctx.keys, ctx.split, ctx.step = owner, t, keys, split, step
        return rows

    @staticmethod
    def backward(ctx, grad):
        ctx.owner._push(ctx.t, ctx.keys, ctx.split, grad, ctx.step)
        return None, None, None, None, None, None, None


class Prepared:
    """The pulls of one forward, started ahead (EmbeddingBagCollection.prefetch)."""

    def __init__(self, features, step: int, plan, futures, training: bool, splits=None,
                 generation: int = 0):
        self.features = features
        self.step = step
        self._plan = plan
        self._futures = futures
        self.training = training
        self._splits = splits  # per table: the hot-row tier's split, or None
        self._generation = generation

    def rows(self) -> List[np.ndarray]:
        """Waits for the pulls; the rows of every table of the plan."""
        return [future.result() for future in self._futures]


class EmbeddingBagCollection(torch.nn.Module):
    """Slots that pool bags of keys from embedps tables, several slots
    sharing a table; one pull and one push per table and step.

    EmbeddingBagCollection(client, slots, mode="sum", step=0,
                           grad_scale=None, *, hot_rows=0,
                           hot_rows_warmup=50, hot_rows_refresh=1000)

    ``slots``: a sequence of (slot name, embedps.Table) in order, or a
    mapping from slot name to Table. ``mode``: "sum" or "mean", or a
    sequence of them, one per slot.

    forward(features) with features either
      * a mapping slot name -> (keys, offsets) or (keys, offsets,
        per_sample_weights): keys 1-D int64/uint64, offsets of bags + 1 (or
        nn.EmbeddingBag's bags) entries, weights one per key (mode "sum"),
        or slot name -> a 2-D keys tensor (batch, bag size); returns
        {slot name: (batch, dim)};
      * a 2-D int64 tensor / uint64 array (batch, number of slots): one key
        per slot per sample (the Criteo layout); returns (batch, slots, dim);
      * a Prepared from prefetch(features).

    Outputs are on the module's device (``module.to(device)``,
    ``.cuda()``; the CPU until moved), as nn.EmbeddingBag's are on its
    weight's: the pulled rows go there and are pooled there; their
    gradients come back to the host to be pushed.

    ``hot_rows=N``: a hot-row tier — this process holds the rows of each
    table's N most pulled keys (chosen ``hot_rows_warmup`` training steps
    in, again every ``hot_rows_refresh``) with their optimizer state and
    trains them with the servers' optimizer; only the other keys are
    pulled and pushed. With several workers (torch.distributed, gloo) the
    held rows' gradients are gathered every step, so every worker holds
    the same rows (SYNC semantics for them in any mode; every worker must
    take the same training steps). The held rows go back to the servers
    before each checkpoint() and publish() of ``client`` and with
    ``write_back_hot_rows()``; ``client.load()`` empties the tier. Tables
    with a TTL or max_rows stay out of it. docs/python.md "Hot rows".
    """

    def __init__(self, client: "embedps.Client", slots, mode: Union[str, Sequence[str]] = "sum",
                 step: int = 0, grad_scale: Optional[float] = None, *, hot_rows: int = 0,
                 hot_rows_warmup: int = 50, hot_rows_refresh: int = 1000):
        super().__init__()
        if isinstance(slots, Mapping):
            slots = list(slots.items())
        slots = list(slots)
        if not slots:
            raise ValueError("slots: at least one (name, table)")
        self.client = client
        self.slot_names = [name for name, _ in slots]
        if len(set(self.slot_names)) != len(self.slot_names):
            raise ValueError("slot names must be distinct")
        self.tables: List[embedps.Table] = []
        self._slot_table: List[int] = []
        for name, table in slots:
            if not isinstance(table, embedps.Table):
                raise TypeError(f"slot {name!r}: expected an embedps.Table, not {type(table).__name__}")
            index = next((i for i, t in enumerate(self.tables) if t.name == table.name), None)
            if index is None:
                index = len(self.tables)
                self.tables.append(table)
            self._slot_table.append(index)
        modes = [mode] * len(slots) if isinstance(mode, str) else list(mode)
        if len(modes) != len(slots) or any(m not in _MODES for m in modes):
            raise ValueError(f"mode: 'sum' or 'mean', or one of them per slot ({len(slots)})")
        self.modes = modes
        self.step = step
        self.grad_scale = grad_scale
        self._pending: List[embedps.Future] = []
        self._started = False  # a training pull was sent
        self._first_pulls: Optional[List[embedps.Future]] = None
        # Training steps taken whose SYNC/SSP tables were not pushed yet:
        # step -> indices of those tables.
        self._open_steps: Dict[int, set] = {}
        # An anchor that requires grad, so that autograd records _Rows.
        self._anchor = torch.zeros((), requires_grad=True)
        # Where outputs go: moved by module.to(device) / .cuda(), as
        # nn.EmbeddingBag's weight is (not saved in state_dict).
        self.register_buffer("_placement", torch.empty(0), persistent=False)
        self._hot: Optional[HotTier] = None
        if hot_rows:
            self._hot = HotTier(client, self.tables, hot_rows, hot_rows_warmup, hot_rows_refresh)
            client._hold_hot_rows(self)

    # ---- Steps and pushes.

    def _scale(self, table: "embedps.Table") -> float:
        if self.grad_scale is not None:
            return self.grad_scale
        if table.mode == "sync" and torch.distributed.is_available() and torch.distributed.is_initialized():
            return 1.0 / torch.distributed.get_world_size()
        return 1.0

    def _push(self, t: int, keys: np.ndarray, split, grad: torch.Tensor, step: int) -> None:
        table = self.tables[t]
        waiting = self._open_steps.get(step)
        if waiting is not None:
            waiting.discard(t)
            if not waiting:
                del self._open_steps[step]
        grad = grad.detach().to(torch.float32).cpu()
        scale = self._scale(table)
        if scale != 1.0:
            grad = grad * scale
        grads = grad.numpy()
        if split is not None:
            cold_keys, cold_positions, hot_positions, hot_slots = split
            self._pending.append(self.client.push_async(
                table, cold_keys, np.ascontiguousarray(grads[cold_positions]), step=step, unique=True))
            self._hot.record(step, t, hot_slots, np.ascontiguousarray(grads[hot_positions]))
            return
        self._pending.append(self.client.push_async(table, keys, np.ascontiguousarray(grads), step=step,
                                                    unique=True))
        if self._hot is not None:
            self._hot.record(step, t, np.empty(0, dtype=np.int32), np.empty((0, table.dim), dtype=np.float32))

    def _complete_open_steps(self, before: int) -> None:
        """Steps before `before` whose forward was not followed by its
        backward (or raised) leave their SYNC/SSP tables waiting for this
        worker: an empty push completes each such step, so that the other
        workers (and this one's next pull) go on, and a warning says so."""
        for step in sorted(s for s in self._open_steps if s < before):
            tables = [self.tables[i] for i in sorted(self._open_steps.pop(step))]
            for table in tables:
                self._pending.append(self.client.push_async(
                    table, np.empty(0, dtype=np.uint64), np.empty((0, table.dim), dtype=np.float32),
                    step=step, unique=True))
            warnings.warn(
                f"embedps: step {step} of table(s) {', '.join(t.name for t in tables)} was not pushed "
                "(its forward was not followed by a backward, or raised): an empty push completed it "
                "on the servers so that the workers go on; that step's embedding gradients are lost",
                RuntimeWarning, stacklevel=3)

    def flush(self) -> None:
        """Waits for the pushes in flight; raises the first error. With a
        hot-row tier, first applies the held rows' updates of the training
        forwards taken whose backward did not apply them (call it after
        the backward)."""
        if self._hot is not None:
            self._hot.settle(before=self.step)
        pending, self._pending = self._pending, []
        error = None
        for future in pending:
            try:
                future.result()
            except embedps.Error as e:  # wait for every push, then raise
                error = error or e
        if error is not None:
            raise error

    # ---- Forward.

    def _plan(self, features):
        """Per table: (distinct keys, inverse, [(slot index, start, end, offsets)]);
        and the output layout ("dict" or "stacked", batch size)."""
        per_table = [([], []) for _ in self.tables]  # key arrays, slot parts
        if isinstance(features, Mapping):
            layout = "dict"
            missing = [n for n in self.slot_names if n not in features]
            if missing:
                raise ValueError(f"features lack slot(s) {missing}")
            extra = [n for n in features if n not in self.slot_names]
            if extra:
                raise ValueError(f"features have unknown slot(s) {extra}")
            batch = None
            for s, name in enumerate(self.slot_names):
                value = features[name]
                weights = None
                if isinstance(value, tuple):
                    if len(value) == 3:
                        keys, offsets, weights = value
                    elif len(value) == 2:
                        keys, offsets = value
                    else:
                        raise ValueError(f"slot {name!r}: (keys, offsets) or (keys, offsets, per_sample_weights)")
                    keys = _keys(keys)
                    offsets = _offsets(offsets, len(keys))
                    if weights is not None:
                        if self.modes[s] != "sum":
                            raise NotImplementedError(
                                f"slot {name!r}: per_sample_weights are only supported for mode='sum' "
                                f"(got mode={self.modes[s]!r}), as nn.EmbeddingBag")
                        if not isinstance(weights, torch.Tensor):
                            weights = torch.as_tensor(weights)
                        weights = weights.reshape(-1)
                        if weights.numel() != len(keys):
                            raise ValueError(f"slot {name!r}: {weights.numel()} per_sample_weights for {len(keys)} keys")
                else:
                    two_d = value if isinstance(value, (torch.Tensor, np.ndarray)) else None
                    if two_d is None or two_d.ndim != 2:
                        raise ValueError(f"slot {name!r}: (keys, offsets) or a 2-D keys tensor (batch, bag size)")
                    rows, size = two_d.shape
                    keys = _keys(two_d)
                    offsets = torch.arange(rows + 1, dtype=torch.int64) * size
                bags = len(offsets) - 1
                if batch is None:
                    batch = bags
                elif bags != batch:
                    raise ValueError(f"slot {name!r} has {bags} bags; slot {self.slot_names[0]!r} has {batch}")
                key_list, parts = per_table[self._slot_table[s]]
                start = sum(len(k) for k in key_list)
                key_list.append(keys)
                parts.append((s, start, start + len(keys), offsets, weights))
        else:
            layout = "stacked"
            if isinstance(features, torch.Tensor):
                if features.dim() != 2:
                    raise ValueError(f"keys must be (batch, {len(self.slot_names)} slots), not {tuple(features.shape)}")
                shape = tuple(features.shape)
            elif isinstance(features, np.ndarray):
                if features.ndim != 2:
                    raise ValueError(f"keys must be (batch, {len(self.slot_names)} slots), not {features.shape}")
                shape = features.shape
            else:
                raise TypeError("features: a mapping of slots, a 2-D keys tensor or array, or a Prepared")
            batch, slots = shape
            if slots != len(self.slot_names):
                raise ValueError(f"keys have {slots} columns; the collection has {len(self.slot_names)} slots")
            keys = _keys(features).reshape(batch, slots)
            for t in range(len(self.tables)):
                columns = [s for s in range(slots) if self._slot_table[s] == t]
                key_list, parts = per_table[t]
                block = np.ascontiguousarray(keys[:, columns]).reshape(-1)
                key_list.append(block)
                parts.append((columns, 0, len(block), None, None))
        plan = []
        for key_list, parts in per_table:
            keys = np.concatenate(key_list) if len(key_list) > 1 else key_list[0]
            unique, inverse = embedps.unique_inverse(keys)
            plan.append((unique, torch.from_numpy(inverse), parts))
        return plan, layout, batch

    def _training(self) -> bool:
        return self.training and torch.is_grad_enabled()

    def _start(self, features, training: bool) -> Prepared:
        plan, layout, batch = self._plan(features)
        step = self.step
        if training:
            self.step += 1
            waiting = {i for i, t in enumerate(self.tables) if t.mode in ("sync", "ssp")}
            if waiting:
                self._open_steps[step] = waiting
            # A SYNC shard starts counting at the step of the first pull it
            # sees: a prefetched pull of the next step must not overtake
            # the first one.
            first, self._first_pulls = self._first_pulls, None
            for future in first or ():
                try:
                    future.result()
                except embedps.Error:
                    pass  # raised by the forward that uses it
        futures, splits = self._read(plan, step, training)
        if training and not self._started:
            self._started = True
            self._first_pulls = futures
        return Prepared(features, step, (plan, layout, batch), futures, training, splits,
                        self._hot.generation if self._hot else 0)

    def _read(self, plan, step: int, training: bool):
        """Starts the pulls (lookups) of a plan's distinct keys; with a
        hot-row tier only of the keys it does not hold. Returns the
        futures and the tier's splits (None per table without held keys)."""
        read = self.client.pull_async if training else self.client.lookup_async
        splits = [self._hot.split(t, unique) if self._hot else None for t, (unique, _, _) in enumerate(plan)]
        futures = [read(table, unique if split is None else split[0], step=step, unique=True)
                   for table, (unique, _, _), split in zip(self.tables, plan, splits)]
        return futures, splits

    def _hot_rows_before(self, prepared: Prepared) -> None:
        """The tier's part of a forward: the open updates applied, the set
        chosen when due, and a prepared step split with an older set read
        again."""
        hot = self._hot
        if prepared.training:
            self.flush()  # earlier pushes in, every open update applied
            if hot.due():
                hot.choose(prepared.step)
            hot.taken += 1
        elif hot.collectives is None:
            hot.settle(before=prepared.step + 1)
        if prepared._generation != hot.generation:
            for future in prepared._futures:
                try:
                    future.result()
                except embedps.Error:
                    pass  # read again below
            plan = prepared._plan[0]
            prepared._futures, prepared._splits = self._read(plan, prepared.step, prepared.training)
            prepared._generation = hot.generation

    @property
    def hot_rows_stats(self) -> Dict[str, object]:
        """The hot-row tier's state ({} without one): "held", the rows it
        holds per table (the collection's table order; 0 before the first
        choice); "choices", the times its set was chosen or emptied (a
        client.load()); "lost", held rows found erased on their shard at a
        write-back (left erased)."""
        if self._hot is None:
            return {}
        return {"held": self._hot.held(), "choices": self._hot.generation, "lost": self._hot.lost}

    def write_back_hot_rows(self) -> None:
        """Writes the hot-row tier's rows used since the last write-back to
        their shards (checkpoint() and publish() of the module's client do
        it first themselves). Nothing without a tier."""
        if self._hot is not None:
            self.flush()
            self._hot.write_back(self.step)

    def _reset_hot_rows(self) -> None:
        if self._hot is not None:
            self._hot.reset()

    def prefetch(self, features) -> Prepared:
        """Starts the pulls of a coming forward (the next training step, in
        order: prefetch and forward steps are taken in the same sequence)."""
        return self._start(features, self._training())

    def forward(self, features):
        if self._training():
            # A training forward's step follows the previous ones' backward.
            upcoming = features.step if isinstance(features, Prepared) else self.step
            self._complete_open_steps(before=upcoming)
        if isinstance(features, Prepared):
            prepared = features
            if prepared.training != self._training():
                raise ValueError("prefetched in another mode (train/eval) than this forward")
        else:
            # Earlier pushes first: a pull then sees this worker's last step.
            self.flush()
            prepared = self._start(features, self._training())
        if self._hot is not None:
            self._hot_rows_before(prepared)
        plan, layout, batch = prepared._plan
        device = self._placement.device
        all_rows = prepared.rows()
        if prepared.training:
            self.flush()
            if self._hot is not None:
                self._hot.open_step(prepared.step)  # its backward applies it
        outputs = [None] * len(self.slot_names)
        stacked = []  # (columns, (batch, columns, dim)) per table
        splits = prepared._splits or [None] * len(self.tables)
        for t, (table, (unique, inverse, parts), rows, split) in enumerate(
                zip(self.tables, plan, all_rows, splits)):
            if split is not None:  # the pulled rows and the tier's, in unique's order
                _, cold_positions, hot_positions, hot_slots = split
                rows = self._hot.native.assemble(t, rows, cold_positions, hot_positions, hot_slots)
            rows_t = torch.from_numpy(rows)
            if prepared.training:
                rows_t = _Rows.apply(self._anchor, rows_t, self, t, unique, split, prepared.step)
            rows_t, inverse = rows_t.to(device), inverse.to(device)
            if layout == "stacked":
                columns = parts[0][0]
                stacked.append((columns, F.embedding(inverse, rows_t).view(batch, len(columns), table.dim)))
            else:
                for s, start, end, offsets, weights in parts:
                    outputs[s] = F.embedding_bag(inverse[start:end], rows_t, offsets[:-1].to(device),
                                                 mode=self.modes[s], include_last_offset=False,
                                                 per_sample_weights=None if weights is None
                                                 else weights.to(device))
        if layout == "stacked":
            if len(stacked) == 1:  # one table: its columns are the slots, in order
                return stacked[0][1]
            order = torch.tensor([s for columns, _ in stacked for s in columns], device=device)
            joined = torch.cat([block for _, block in stacked], dim=1)
            return joined.index_select(1, torch.argsort(order))
        return dict(zip(self.slot_names, outputs))


def _bag_arguments(input, offsets, per_sample_weights, mode: str, include_last_offset: bool,
                   padding_idx: Optional[int]):
    """nn.EmbeddingBag's forward arguments, checked by its rules (and with
    its exception classes), as (keys, closed offsets of bags + 1 entries,
    per-key weights or None), padding keys left out."""
    if isinstance(input, torch.Tensor):
        ndim, shape = input.dim(), tuple(input.shape)
        if input.dtype == torch.int32:
            input = input.to(torch.int64)
    elif isinstance(input, np.ndarray):
        ndim, shape = input.ndim, input.shape
        if input.dtype == np.int32:
            input = input.astype(np.int64)
    else:
        raise TypeError(f"input must be a tensor or numpy array of keys, not {type(input).__name__}")
    if ndim == 2:
        if offsets is not None:
            raise ValueError("if input is 2D, then offsets has to be None, as input is treated as a "
                             f"mini-batch of fixed length sequences. However, found offsets of type {type(offsets)}")
        batch, size = shape
        closed = np.arange(batch + 1, dtype=np.int64) * size
        used = batch * size
    elif ndim == 1:
        if offsets is None:
            raise ValueError("offsets has to be a 1D Tensor but got None")
        if isinstance(offsets, torch.Tensor):
            offsets = offsets.detach().cpu().numpy()
        offsets = np.asarray(offsets)
        if offsets.ndim != 1:
            raise ValueError("offsets has to be a 1D Tensor")
        if offsets.dtype.kind not in "iu":
            raise TypeError(f"offsets must be integers, not {offsets.dtype}")
        offsets = offsets.astype(np.int64)
        length = shape[0]
        if len(offsets) == 0 or (include_last_offset and len(offsets) < 1):
            raise ValueError("offsets has no entry: one per bag (plus the end with include_last_offset)")
        if offsets[0] != 0:
            raise RuntimeError("offsets[0] has to be 0, i.e., the first sequence in the mini-batch has to "
                               f"start from position 0. However, got {offsets[0]}")
        if offsets.max() > length:
            raise RuntimeError(f"offsets[-1] can not be greater than input's length {length} but got "
                               f"offsets[-1] of {offsets.max()}")
        if (np.diff(offsets) < 0).any():
            raise RuntimeError("offsets must be non-decreasing")
        # nn.EmbeddingBag: bags start at the offsets, the last one runs to
        # the end of input (include_last_offset: the last offset ends it).
        closed = offsets if include_last_offset else np.append(offsets, length)
        used = int(closed[-1])
    else:
        raise ValueError(f"input has to be 1D or 2D Tensor, but got Tensor of dimension {ndim}")
    keys = _keys(input)[:used]
    weights = None
    if per_sample_weights is not None:
        if mode != "sum":
            raise NotImplementedError("embedding_bag: per_sample_weights was not None. per_sample_weights is "
                                      f"only supported for mode='sum' (got mode='{mode}')")
        if not isinstance(per_sample_weights, torch.Tensor):
            per_sample_weights = torch.as_tensor(per_sample_weights)
        if tuple(per_sample_weights.shape) != tuple(shape):
            raise ValueError(f"embedding_bag: If per_sample_weights ({tuple(per_sample_weights.shape)}) is not "
                             f"None, then it must have the same shape as the input ({tuple(shape)})")
        weights = per_sample_weights.reshape(-1)[:used]
    if padding_idx is not None:
        # The padding key is left out of its bag (a mean counts the other
        # keys only) and is never pulled or pushed.
        pad = np.array(padding_idx, dtype=np.int64).astype(keys.dtype)
        keep = keys != pad
        if not keep.all():
            bag_of = np.repeat(np.arange(len(closed) - 1), np.diff(closed))
            counts = np.bincount(bag_of[keep], minlength=len(closed) - 1)
            closed = np.concatenate([[0], np.cumsum(counts)]).astype(np.int64)
            keys = keys[keep]
            if weights is not None:
                weights = weights[torch.from_numpy(keep).to(weights.device)]
    return keys, torch.from_numpy(np.ascontiguousarray(closed, dtype=np.int64)), weights


class ShardedEmbeddingBag(EmbeddingBagCollection):
    """A drop-in for nn.EmbeddingBag over one embedps table.

    ShardedEmbeddingBag(client, table, mode="sum", step=0, grad_scale=None,
                        *, include_last_offset=False, padding_idx=None,
                        max_norm=None, norm_type=2.0,
                        scale_grad_by_freq=False, sparse=False,
                        hot_rows=0, hot_rows_warmup=50, hot_rows_refresh=1000)

    forward(input, offsets=None, per_sample_weights=None) takes what
    nn.EmbeddingBag takes, with its rules and errors: 1-D keys with offsets
    (bags start at the offsets; an offset equal to len(input) is an empty
    last bag, unless include_last_offset=True), or 2-D (batch, bag size)
    without offsets; int64 or int32 keys (and uint64 numpy arrays: keys are
    64-bit ids, not indices into a weight); per_sample_weights of the
    input's shape with mode "sum"; padding_idx a key left out of every bag
    (never pulled or pushed). Returns (batch, dim).

    What cannot be the same raises at construction: max_norm (it rewrites
    the rows it reads; the rows are the servers', changed only by their
    optimizer), scale_grad_by_freq, mode "max". sparse is accepted: the
    rows' gradients always travel as sparse rows. hot_rows: the hot-row
    tier of EmbeddingBagCollection.
    """

    def __init__(self, client: "embedps.Client", table: "embedps.Table", mode: str = "sum",
                 step: int = 0, grad_scale: Optional[float] = None, *,
                 include_last_offset: bool = False, padding_idx: Optional[int] = None,
                 max_norm: Optional[float] = None, norm_type: float = 2.0,
                 scale_grad_by_freq: bool = False, sparse: bool = False, hot_rows: int = 0,
                 hot_rows_warmup: int = 50, hot_rows_refresh: int = 1000):
        if max_norm is not None:
            raise ValueError("max_norm is not supported: nn.EmbeddingBag renormalizes the rows it reads "
                             "in place, and embedps rows live on the servers, changed only by their optimizer")
        if scale_grad_by_freq:
            raise ValueError("scale_grad_by_freq is not supported: scale the table's learning rate, or use "
                             "an adaptive server optimizer (adagrad, adam)")
        if mode == "max":
            raise ValueError("mode 'max' is not supported: 'sum' or 'mean'")
        super().__init__(client, [("bag", table)], mode=mode, step=step, grad_scale=grad_scale,
                         hot_rows=hot_rows, hot_rows_warmup=hot_rows_warmup, hot_rows_refresh=hot_rows_refresh)
        self.include_last_offset = include_last_offset
        self.padding_idx = padding_idx
        self.sparse = sparse

    def _features(self, input, offsets, per_sample_weights):
        if isinstance(input, Prepared):
            if offsets is not None or per_sample_weights is not None:
                raise ValueError("a Prepared input carries its own offsets and weights")
            return input
        keys, closed, weights = _bag_arguments(input, offsets, per_sample_weights, self.modes[0],
                                               self.include_last_offset, self.padding_idx)
        return {"bag": (keys, closed, weights) if weights is not None else (keys, closed)}

    def prefetch(self, input, offsets=None, per_sample_weights=None) -> Prepared:
        return super().prefetch(self._features(input, offsets, per_sample_weights))

    def forward(self, input, offsets=None, per_sample_weights=None):
        return super().forward(self._features(input, offsets, per_sample_weights))["bag"]


def prefetched(batches: Iterable, module: EmbeddingBagCollection,
               features: Callable = lambda batch: batch) -> Iterator[Tuple[object, Prepared]]:
    """Yields (batch, prepared) with the pulls of the next batch already
    started: ``for batch, prepared in prefetched(loader, emb, lambda b: b[2]):
    pooled = emb(prepared)``. Each prepared must be used, in order."""
    iterator = iter(batches)
    try:
        batch = next(iterator)
    except StopIteration:
        return
    prepared = module.prefetch(features(batch))
    for following in iterator:
        upcoming = module.prefetch(features(following))
        yield batch, prepared
        batch, prepared = following, upcoming
    yield batch, prepared
