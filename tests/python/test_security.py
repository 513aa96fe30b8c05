"""TLS and tokens with real processes: ps_server shards, ps_worker, a
serving replica and ps_predictor, with certificates made by
security/make_certs.sh (openssl) for each test."""

import os
import subprocess
import time

import numpy as np
import pytest

import embedps
from conftest import REPO, binary, spawn

SGD = {"kind": "sgd", "learning_rate": 1.0}


@pytest.fixture
def certs(tmp_path):
    directory = tmp_path / "certs"
    subprocess.run([str(REPO / "security" / "make_certs.sh"), str(directory)],
                   check=True, capture_output=True)
    return directory


def tls_server_flags(certs, *, tokens=True, mutual=False):
    flags = [f"--tls_cert={certs / 'node.pem'}", f"--tls_key={certs / 'node.key'}"]
    if tokens:
        flags += [f"--train_token_file={certs / 'train.token'}",
                  f"--read_token_file={certs / 'read.token'}"]
    if mutual:
        flags.append(f"--tls_client_ca={certs / 'ca.pem'}")
    return flags


def localhost(server):
    # The certificate names localhost and 127.0.0.1; either works.
    return f"localhost:{server.port}"


def test_tokens_guard_every_call_and_the_table_stays_as_it_was(start_servers, certs, tmp_path):
    root = tmp_path / "root"
    root.mkdir()
    servers = start_servers(2, *tls_server_flags(certs), f"--checkpoint_root={root}")
    addresses = [localhost(s) for s in servers]
    trainer = embedps.Client(addresses, tls_ca=str(certs / "ca.pem"),
                             token_file=str(certs / "train.token"))
    table = trainer.create_table(name="emb", dim=4, optimizer=SGD)
    keys = np.arange(100, dtype=np.uint64)
    trainer.push(table, keys, np.ones((100, 4), np.float32))
    rows = trainer.pull(table, keys)

    # Plain text to a TLS port, and a client that trusts another CA: the
    # handshake fails, nothing is sent.
    plain = embedps.Client(addresses, retry_deadline=0.5)
    with pytest.raises(embedps.UnavailableError):
        plain.create_table(name="emb", dim=4, optimizer=SGD)
    stranger = embedps.Client(addresses, retry_deadline=0.5, tls_ca=str(certs / "other-ca.pem"),
                              token_file=str(certs / "train.token"))
    with pytest.raises(embedps.UnavailableError):
        stranger.create_table(name="emb", dim=4, optimizer=SGD)

    # TLS without a token, or with a wrong one.
    anonymous = embedps.Client(addresses, tls_ca=str(certs / "ca.pem"))
    with pytest.raises(embedps.UnauthenticatedError, match="no token"):
        anonymous.create_table(name="emb", dim=4, optimizer=SGD)
    with pytest.raises(embedps.UnauthenticatedError):
        anonymous.stats()
    wrong = tmp_path / "wrong.token"
    wrong.write_text("0123456789abcdef\n")
    guesser = embedps.Client(addresses, tls_ca=str(certs / "ca.pem"), token_file=str(wrong))
    with pytest.raises(embedps.UnauthenticatedError, match="not one this server accepts"):
        guesser.create_table(name="emb", dim=4, optimizer=SGD)

    # The read-only token reads Stats and nothing that changes anything.
    reader = embedps.Client(addresses, tls_ca=str(certs / "ca.pem"),
                            token_file=str(certs / "read.token"))
    assert [s["shard_index"] for s in reader.stats()] == [0, 1]
    with pytest.raises(embedps.PermissionDeniedError, match="read-only token cannot call"):
        reader.create_table(name="emb", dim=4, optimizer=SGD)
    with pytest.raises(embedps.PermissionDeniedError):
        reader.create_table(name="other", dim=4)
    # Its handle of the table, as the training client's: Pull (it creates
    # rows) and Push need the training token.
    with pytest.raises(embedps.PermissionDeniedError, match="Push"):
        reader.push(table, keys, np.ones((100, 4), np.float32))
    with pytest.raises(embedps.PermissionDeniedError, match="Pull"):
        reader.pull(table, keys)
    with pytest.raises(embedps.PermissionDeniedError):
        reader.drop_table("emb")
    with pytest.raises(embedps.PermissionDeniedError):
        reader.checkpoint(str(root), step=1)
    with pytest.raises(embedps.PermissionDeniedError):
        reader.load(str(root))

    # Nothing changed: the same rows, one table.
    np.testing.assert_array_equal(trainer.lookup(table, keys), rows)
    assert [len(s["table"]) for s in trainer.stats()] == [1, 1]
    assert not list(root.rglob("shard-*")), "a shard wrote a checkpoint"


def test_tokens_cannot_be_used_without_tls(tmp_path, certs):
    result = subprocess.run([binary("server/ps_server"), "--port=0",
                             f"--train_token_file={certs / 'train.token'}"],
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 2 and "tokens need TLS" in result.stderr, result.stderr
    with pytest.raises(embedps.InvalidArgumentError, match="token needs TLS"):
        embedps.Client(["127.0.0.1:1"], token_file=str(certs / "train.token"))


def test_mutual_tls_refuses_clients_without_the_cas_certificate(start_servers, certs):
    server = start_servers(1, *tls_server_flags(certs, tokens=False, mutual=True))[0]
    ca = str(certs / "ca.pem")
    for kwargs in ({}, {"tls_cert": str(certs / "other.pem"), "tls_key": str(certs / "other.key")}):
        client = embedps.Client([localhost(server)], retry_deadline=0.5, tls_ca=ca, **kwargs)
        with pytest.raises(embedps.UnavailableError):
            client.stats()
    member = embedps.Client([localhost(server)], tls_ca=ca, tls_cert=str(certs / "node.pem"),
                            tls_key=str(certs / "node.key"))
    assert member.stats()[0]["shard_index"] == 0


def test_a_job_trains_checkpoints_and_serves_with_tls_and_tokens(start_servers, start_server, certs,
                                                                 tmp_path):
    """Every connection of a job under TLS and tokens: workers and a
    serving replica (following training's stream with the read-only token)
    and ps_predictor, which serves TLS itself."""
    data = tmp_path / "data"
    subprocess.run([binary("tools/datagen"), f"--output_dir={data}", "--train_rows=4000",
                    "--test_rows=1000"], check=True, capture_output=True, timeout=120)
    root = tmp_path / "checkpoints"
    root.mkdir()
    ca, cert, key = certs / "ca.pem", certs / "node.pem", certs / "node.key"
    client_flags = [f"--tls_ca={ca}", f"--tls_cert={cert}", f"--tls_key={key}"]
    training = start_servers(1, *tls_server_flags(certs), f"--checkpoint_root={root}")[0]
    config = f"{REPO}/deploy/local/dlrm_small.txtpb"
    worker = subprocess.run(
        [binary("worker/ps_worker"), f"--config={config}", f"--servers={localhost(training)}",
         "--mode=async", f"--train_data={data}/train.txt", f"--test_data={data}/test.txt",
         f"--checkpoint_dir={root}", "--checkpoint_every_steps=2", "--log_level=warn",
         *client_flags, f"--token_file={certs / 'train.token'}"],
        capture_output=True, text=True, timeout=300)
    assert worker.returncode == 0, worker.stderr
    replica = start_server("--role=serving", f"--follow_checkpoints={root}",
                           f"--training_servers={localhost(training)}", "--checkpoint_poll=100ms",
                           *tls_server_flags(certs), *client_flags,
                           f"--token_file={certs / 'read.token'}")
    serving = embedps.ServingClient([[localhost(replica)]], deadline=5, attempt_timeout=5,
                                    tls_ca=str(ca), token_file=str(certs / "read.token"))
    reader = embedps.CriteoReader([f"{data}/test.txt"], batch_size=8, include_tail=True)
    _, _, _, keys = next(iter(reader))
    keys = np.unique(keys.reshape(-1))
    n = len(keys)
    (rows,), version = serving.lookup([embedps.Slot("criteo", 16, keys, pooling="none")])
    assert version > 0 and rows.shape == (n, 16)
    trainer = embedps.Client([localhost(training)], tls_ca=str(ca),
                             token_file=str(certs / "train.token"))
    table = trainer.create_table(name="criteo", dim=16, seed=1,
                                 initializer={"kind": "uniform", "low": -0.05, "high": 0.05},
                                 optimizer={"kind": "adagrad", "learning_rate": 0.2,
                                            "initial_accumulator": 0.01},
                                 consistency={"timeout_ms": 300000})
    # Training goes on; its publication reaches the replica over the
    # read-only stream.
    trainer.push(table, keys, np.full((n, 16), 0.5, np.float32), step=version + 1)
    trainer.publish(version + 1)
    deadline = time.monotonic() + 30
    while serving.versions()[0][0]["step"] <= version:
        assert time.monotonic() < deadline, serving.versions()
        time.sleep(0.05)
    (after,), _ = serving.lookup([embedps.Slot("criteo", 16, keys, pooling="none")])
    np.testing.assert_array_equal(after, trainer.lookup(table, keys))
    anonymous = embedps.ServingClient([[localhost(replica)]], deadline=2, attempt_timeout=2,
                                      tls_ca=str(ca))
    with pytest.raises(embedps.Error):
        anonymous.lookup([embedps.Slot("criteo", 16, keys)])

    port_file = tmp_path / "predictor.port"
    log = tmp_path / "predictor.log"
    predictor = spawn([binary("worker/ps_predictor"), f"--config={config}",
                       f"--serving={localhost(replica)}", "--port=0", f"--port_file={port_file}",
                       "--deadline_ms=5000", "--log_level=warn", *tls_server_flags(certs),
                       *client_flags, f"--token_file={certs / 'read.token'}"], log)
    try:
        deadline = time.monotonic() + 60
        while not port_file.exists():
            assert predictor.poll() is None and time.monotonic() < deadline, log.read_text()
            time.sleep(0.05)
        address = f"localhost:{port_file.read_text().split()[0]}"
        lines = (data / "test.txt").read_text().splitlines()[:8]
        unlabeled = [line.split("\t", 1)[1] for line in lines]
        p, _ = embedps.Predictor(address, timeout=10, tls_ca=str(ca),
                                 token_file=str(certs / "read.token")).predict(unlabeled)
        assert p.shape == (8,) and np.all((p > 0) & (p < 1))
        with pytest.raises(embedps.UnauthenticatedError):
            embedps.Predictor(address, timeout=10, tls_ca=str(ca)).predict(unlabeled)
    finally:
        predictor.kill()
        predictor.wait()


def test_the_health_probe_speaks_tls_and_needs_no_token(start_servers, certs):
    server = start_servers(1, *tls_server_flags(certs))[0]
    probe = binary("tools/embedps_health")

    def health(*flags):
        return subprocess.run([probe, f"--address={localhost(server)}", "--timeout=5s", *flags],
                              capture_output=True, text=True, timeout=60)

    assert health(f"--tls_ca={certs / 'ca.pem'}").returncode == 0
    assert health().returncode == 1  # plain text to a TLS port
    refused = health(f"--tls_ca={certs / 'other-ca.pem'}")
    assert refused.returncode == 1 and "certificate verify failed" in refused.stderr
    server.stop()
    assert health(f"--tls_ca={certs / 'ca.pem'}").returncode == 1
