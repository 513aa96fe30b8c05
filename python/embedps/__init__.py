"""embedps: sparse embedding tables on parameter servers, from Python.

    import embedps, numpy as np
    client = embedps.Client(["localhost:50051", "localhost:50052"])
    table = client.create_table(name="emb", dim=16,
                                optimizer={"kind": "adagrad",
                                           "learning_rate": 0.1})
    keys = np.array([7, 42, 7], dtype=np.uint64)
    rows = client.pull(table, keys)                  # (3, 16) float32
    client.push(table, keys, np.ones_like(rows))     # the servers' optimizer
    future = client.pull_async(table, keys)          # ... .result()

PyTorch: ``embedps.torch`` (ShardedEmbeddingBag, EmbeddingBagCollection).
Serving: ``ServingClient``, ``Slot``, ``Predictor``. Errors: ``embedps.errors``.
The core is C++ (``_embedps``, no libtorch); network calls release the GIL.
"""

import json as _json
import weakref as _weakref

from embedps.errors import *  # noqa: F401,F403 (the error classes)
from embedps.errors import Error

try:
    from embedps import _embedps
except ImportError as _error:  # pragma: no cover - depends on the install
    raise ImportError(
        "embedps: the C++ part of the package (_embedps) is missing or does "
        f"not load ({_error}). From a checkout: `bazel build //python:embedps` "
        "and put bazel-bin/python/site on PYTHONPATH; or pip install the "
        "wheel of `bazel build //python:wheel` (bazel-bin/python/*.whl). It "
        "needs CPython 3.11 and Debian 12's libgrpc++1.51, libprotobuf32, "
        "libabsl20220623, libspdlog1.10 (docs/python.md)."
    ) from _error

__version__ = "0.4.0"

Table = _embedps.Table
Future = _embedps.Future
ServingClient = _embedps.ServingClient
Slot = _embedps.Slot
Predictor = _embedps.Predictor
CriteoReader = _embedps.CriteoReader
feature_key = _embedps.feature_key
missing_feature_key = _embedps.missing_feature_key
unique_inverse = _embedps.unique_inverse
roc_auc = _embedps.roc_auc
mean_log_loss = _embedps.mean_log_loss


class Client(_embedps._Client):
    """A client of embedps shards (ps_server), thread-safe.

    Client(servers, *, rpc_timeout=30.0, retry_deadline=15.0,
           wire="float32", max_keys_per_request=262144,
           channels_per_shard=1, tls_ca="", tls_cert="", tls_key="",
           token_file="", tls_server_name="", cluster_id="")

    ``servers``: "host:port" of every shard, in shard order (a list, or
    one string of them separated by commas, as ps_worker's --servers;
    IPv6 as "[::1]:50051"). Calls retry
    UNAVAILABLE and DEADLINE_EXCEEDED until ``retry_deadline`` seconds
    (15: a shard that is gone is reported within that, with what to do;
    raise it to ride out longer restarts of replicated shards);
    ``wire="float16"`` halves the bytes of rows and gradients.
    ``tls_ca``: PEM CA file the servers are verified with (TLS on);
    ``tls_cert``/``tls_key``: this client's certificate for servers that
    require one; ``token_file``: a file whose one line is the token sent
    with every call (needs TLS); ``tls_server_name``: the name the servers'
    certificates carry when it is not the host of their addresses.
    Before its first table call the client asks each server who it is and
    raises FailedPreconditionError for servers that are not training
    shards 0..n-1 of one cluster in the order given (``cluster_id``: the
    cluster they must belong to, ps_server --cluster_id; empty: any one).

    pull(table, keys, *, step=0, unique=False, out=None) -> (n, dim) float32
        The rows of ``keys`` (1-D uint64 or int64; any order, duplicates
        fine; ``unique=True`` skips the client's own deduplication),
        creating missing rows. ``step``: the caller's training step (SYNC
        and SSP tables wait for other workers as it requires).
    lookup(...): as pull, without side effects (no row is created).
    push(table, keys, grads, *, step=0, unique=False)
        Gradients (n, dim) float32, applied by the table's optimizer on the
        servers; duplicate keys' gradients are summed. For SYNC/SSP tables a
        push is the caller's whole step ``step``.
    pull_async / lookup_async / push_async: the same, returning a Future.
    drop_table(name): removes the table from every shard (frees a place
        under ps_server --max_tables, and its memory).
    checkpoint(root, *, step, incremental=False) -> manifest dict
    load(path) -> dict (a checkpoint directory, or a root: its latest)
    publish(step, dense_parameters=b"") -> rows published to serving
    stats() -> [dict per shard]
    """

    def create_table(self, config: str = None, /, **fields) -> Table:
        """Creates a table on every shard (idempotent for the same spec).

        Either a TableConfig in protobuf text format::

            client.create_table('name: "emb" dim: 16 '
                                'optimizer { kind: ADAGRAD learning_rate: 0.1 }')

        or its fields as keyword arguments (nested messages as dicts, enum
        values by name, any case)::

            client.create_table(name="emb", dim=16,
                                optimizer={"kind": "adagrad",
                                           "learning_rate": 0.1},
                                consistency={"mode": "sync"})

        Fields: proto/tables.proto, message TableConfig (docs/config_reference.md). A config that does
        not parse raises InvalidArgumentError (a ValueError).
        """
        if config is not None and fields:
            raise TypeError("create_table takes a text config or keyword "
                            "fields, not both")
        if config is not None:
            if not isinstance(config, str):
                raise TypeError("config must be a str in protobuf text format")
            return self._create_table(config, False)
        if not fields:
            raise TypeError("create_table needs a config or fields "
                            "(at least name= and dim=)")
        return self._create_table(_json.dumps(fields), True)

    # ---- embedps.torch's hot-row tiers over this client: their rows go
    # back to the servers before a checkpoint or publication, and a load
    # empties them.

    def _hold_hot_rows(self, module) -> None:
        if not hasattr(self, "_hot_modules"):
            self._hot_modules = _weakref.WeakSet()
        self._hot_modules.add(module)

    def _modules_with_hot_rows(self):
        return list(getattr(self, "_hot_modules", ()))

    def checkpoint(self, root, *, step, incremental=False):
        for module in self._modules_with_hot_rows():
            module.write_back_hot_rows()
        return super().checkpoint(root, step=step, incremental=incremental)

    def publish(self, step, dense_parameters=b""):
        for module in self._modules_with_hot_rows():
            module.write_back_hot_rows()
        return super().publish(step, dense_parameters)

    def load(self, path):
        loaded = super().load(path)
        for module in self._modules_with_hot_rows():
            module._reset_hot_rows()
        return loaded


__all__ = [
    "Client", "Table", "Future", "ServingClient", "Slot", "Predictor",
    "CriteoReader", "feature_key", "missing_feature_key", "unique_inverse",
    "roc_auc", "mean_log_loss", "Error",
]
