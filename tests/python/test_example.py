"""examples/train_dlrm.py against ps_worker on the same planted data, and
the serving side from Python (ServingClient, Predictor) over a real job's
serving replica and ps_predictor."""

import json
import os
import pathlib
import subprocess
import sys

import numpy as np
import pytest

import embedps
from conftest import REPO, Server, _die_with_parent, binary, free_port, spawn


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    directory = tmp_path_factory.mktemp("data")
    subprocess.run([binary("tools/datagen"), f"--output_dir={directory}", "--train_rows=100000",
                    "--test_rows=10000"], check=True, capture_output=True, timeout=120)
    return directory


def run_workers(commands, timeout=300):
    """Runs the commands at once; their stdout, after all succeeded."""
    procs = [subprocess.Popen(c, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env,
                              preexec_fn=_die_with_parent) for c, env in commands]
    outputs = []
    for p in procs:
        out, err = p.communicate(timeout=timeout)
        assert p.returncode == 0, err.decode()[-3000:]
        outputs.append(out.decode())
    return outputs


def last_json(output: str) -> dict:
    return json.loads([line for line in output.splitlines() if line.startswith("{")][-1])


def test_the_example_trains_as_ps_worker_does(data, start_servers):
    """2 workers x 2 servers, SYNC: test AUC within 0.005 of ps_worker's."""
    servers = ",".join(s.address for s in start_servers(2, "--num_workers=2"))
    # The environment torchrun gives each worker (Debian's torchrun of
    # torch 1.13 fails under Python 3.11: Std.from_str returns None).
    port = free_port()
    example = str(REPO / "examples" / "train_dlrm.py")
    commands = []
    for rank in range(2):
        env = dict(os.environ, RANK=str(rank), LOCAL_RANK=str(rank), WORLD_SIZE="2",
                   MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), OMP_NUM_THREADS="1")
        commands.append(([sys.executable, example, f"--servers={servers}", f"--train={data}/train.txt",
                          f"--test={data}/test.txt", "--threads=1"], env))
    python = last_json(run_workers(commands)[0])

    others = ",".join(s.address for s in start_servers(2, "--num_workers=2"))
    rendezvous = data / "rendezvous"
    rendezvous.mkdir()
    worker = [binary("worker/ps_worker"), f"--config={REPO}/deploy/local/dlrm_small.txtpb",
              f"--servers={others}", "--world_size=2", f"--rendezvous_dir={rendezvous}",
              f"--train_data={data}/train.txt", f"--test_data={data}/test.txt",
              f"--bayes_metrics={data}/meta.json", "--log_level=warn"]
    cpp = last_json(run_workers([(worker + [f"--rank={r}"], dict(os.environ)) for r in range(2)])[0])

    assert python["steps"] == cpp["steps"] > 0
    assert cpp["test_auc"] > 0.8
    assert abs(python["test_auc"] - cpp["test_auc"]) < 0.005, (python, cpp)


def test_serving_from_python(data, start_servers, start_server, tmp_path):
    """A job's checkpoint served by a replica: ServingClient reads what
    training holds, Predictor answers through ps_predictor."""
    training = start_servers(1)[0]
    checkpoints = tmp_path / "checkpoints"
    config = f"{REPO}/deploy/local/dlrm_small.txtpb"
    out = run_workers([([binary("worker/ps_worker"), f"--config={config}", f"--servers={training.address}",
                         "--mode=async", f"--train_data={data}/train.txt", f"--test_data={data}/test.txt",
                         f"--checkpoint_dir={checkpoints}", "--checkpoint_every_steps=100",
                         "--log_level=warn"], dict(os.environ))])[0]
    steps = last_json(out)["steps"]
    replica = start_server("--role=serving", f"--follow_checkpoints={checkpoints}",
                           f"--training_servers={training.address}", "--checkpoint_poll=100ms")

    serving = embedps.ServingClient([[replica.address]], deadline=5, attempt_timeout=5)
    import time
    deadline = time.monotonic() + 60
    while serving.versions()[0][0]["step"] != steps:
        assert time.monotonic() < deadline, serving.versions()
        time.sleep(0.1)
    reader = embedps.CriteoReader([f"{data}/test.txt"], batch_size=64, include_tail=True)
    _, _, _, keys = next(iter(reader))
    keys = np.ascontiguousarray(keys.reshape(-1))
    trainer = embedps.Client([training.address])
    table = trainer.create_table(name="criteo", dim=16, seed=1,
                                 initializer={"kind": "uniform", "low": -0.05, "high": 0.05},
                                 optimizer={"kind": "adagrad", "learning_rate": 0.2,
                                            "initial_accumulator": 0.01},
                                 consistency={"timeout_ms": 300000})
    expected = trainer.lookup(table, keys)
    (rows,), version = serving.lookup([embedps.Slot("criteo", 16, keys, pooling="none")])
    assert version == steps
    np.testing.assert_array_equal(rows, expected)
    offsets = np.arange(0, len(keys) + 1, 26, dtype=np.int64)
    (pooled,), _ = serving.lookup([embedps.Slot("criteo", 16, keys, offsets, "mean")], version=steps)
    np.testing.assert_allclose(pooled, expected.reshape(-1, 26, 16).mean(axis=1), rtol=1e-5, atol=1e-6)
    with pytest.raises(ValueError, match="pooling"):
        embedps.Slot("criteo", 16, keys, pooling="max")
    with pytest.raises(embedps.InvalidArgumentError):
        serving.lookup([embedps.Slot("criteo", 16, keys, np.array([0, 5], np.int64))])
    with pytest.raises(embedps.Error):
        serving.lookup([embedps.Slot("criteo", 16, keys)], version=steps + 1000)

    port_file = tmp_path / "predictor.port"
    predictor_log = tmp_path / "predictor.log"
    predictor = spawn([binary("worker/ps_predictor"), f"--config={config}", f"--serving={replica.address}",
                       "--port=0", f"--port_file={port_file}", "--deadline_ms=5000", "--log_level=warn"],
                      predictor_log)
    try:
        while not port_file.exists():
            assert predictor.poll() is None, predictor_log.read_text()
            time.sleep(0.05)
        address = f"127.0.0.1:{port_file.read_text().split()[0]}"
        lines, labels = [], []
        with open(f"{data}/test.txt") as f:
            for line, _ in zip(f, range(2000)):
                label, features = line.rstrip("\n").split("\t", 1)
                lines.append(features)
                labels.append(float(label))
        client = embedps.Predictor(address, timeout=30)
        probabilities, version = client.predict(lines)
        assert version == steps and probabilities.shape == (2000,)
        assert ((probabilities > 0) & (probabilities < 1)).all()
        assert embedps.roc_auc(labels=np.array(labels, np.float32), scores=probabilities) > 0.8
        with pytest.raises(embedps.InvalidArgumentError):
            client.predict(["not\ta\tcriteo line"])
    finally:
        predictor.kill()
        predictor.wait()
    with pytest.raises(embedps.UnavailableError):
        embedps.Predictor("127.0.0.1:1", timeout=1).predict(lines[:1])
