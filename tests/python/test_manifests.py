"""deploy/k8s against the binaries it runs: every flag a manifest passes is
one the binary has (its --helpfull), the numbers that must agree do (shards,
workers, ports), the ConfigMap is the local job's config, and ps_server
starts with exactly the manifest's arguments (paths pointed at test
directories and certificates made here). Schema validation against the
Kubernetes API is tests/k8s/validate_schema.sh (a PyPI validator)."""

import re
import subprocess

import pytest
import yaml

from conftest import REPO, binary

K8S = REPO / "deploy" / "k8s"
BINARIES = {"ps_server": "server/ps_server", "ps_worker": "worker/ps_worker",
            "ps_predictor": "worker/ps_predictor", "embedps_health": "tools/embedps_health",
            "datagen": "tools/datagen"}


def documents():
    docs = []
    for path in sorted(K8S.glob("*.yaml")):
        docs += [d for d in yaml.safe_load_all(path.read_text()) if d]
    return docs


def by_kind(kind):
    return {d["metadata"]["name"]: d for d in documents() if d["kind"] == kind}


def pod_specs():
    for doc in documents():
        if doc["kind"] in ("StatefulSet", "Deployment", "Job"):
            yield doc, doc["spec"]["template"]["spec"]


def invocations():
    """(binary name, [args]) of every container command and exec probe."""
    for _, spec in pod_specs():
        for container in spec.get("initContainers", []) + spec["containers"]:
            command = container["command"] + container.get("args", [])
            if command[0] == "/bin/sh":
                for line in command[2:]:
                    for name, flags in re.findall(r"/usr/local/bin/(\w+)((?:\s+--\S+)*)", line):
                        yield name, flags.split()
            else:
                yield command[0].rsplit("/", 1)[1], command[1:]
            for probe in ("readinessProbe", "livenessProbe"):
                if probe in container:
                    exec_command = container[probe]["exec"]["command"]
                    yield exec_command[0].rsplit("/", 1)[1], exec_command[1:]


_flags = {}


def flags_of(name):
    if name not in _flags:
        out = subprocess.run([binary(BINARIES[name]), "--helpfull"], capture_output=True,
                             text=True, timeout=60)
        _flags[name] = set(re.findall(r"^\s+--(\w+) ", out.stdout + out.stderr, re.M))
        assert len(_flags[name]) > 5, out
    return _flags[name]


def flag(args, name):
    values = [a.split("=", 1)[1] for a in args if a.startswith(f"--{name}=")]
    assert len(values) == 1, (name, args)
    return values[0]


def test_every_flag_is_a_real_flag_of_its_binary():
    seen = set()
    for name, args in invocations():
        assert name in BINARIES, name
        seen.add(name)
        for arg in args:
            assert arg.startswith("--"), (name, arg)
            assert arg[2:].split("=", 1)[0] in flags_of(name), f"{name} has no flag {arg}"
    assert seen == set(BINARIES)


def test_the_numbers_agree():
    ps = by_kind("StatefulSet")["embedps-ps"]
    job = by_kind("Job")["embedps-train"]
    server_args = ps["spec"]["template"]["spec"]["containers"][0]["args"]
    worker_args = job["spec"]["template"]["spec"]["containers"][0]["args"]
    shards = ps["spec"]["replicas"]
    assert int(flag(server_args, "num_shards")) == shards
    servers = flag(worker_args, "servers").split(",")
    assert servers == [f"embedps-ps-{i}.embedps-ps:50051" for i in range(shards)]
    assert int(flag(server_args, "num_workers")) == job["spec"]["completions"] == \
        job["spec"]["parallelism"] == int(flag(worker_args, "world_size"))
    assert job["spec"]["completionMode"] == "Indexed"
    serving = by_kind("Deployment")["embedps-serving"]["spec"]["template"]["spec"]["containers"][0]["args"]
    assert flag(serving, "training_servers").split(",") == servers
    assert flag(serving, "follow_checkpoints") == flag(worker_args, "checkpoint_dir")
    assert flag(worker_args, "checkpoint_dir").startswith(flag(server_args, "checkpoint_root") + "/")
    # The memory limit stays below the container's.
    container = ps["spec"]["template"]["spec"]["containers"][0]
    limit_gib = int(container["resources"]["limits"]["memory"].removesuffix("Gi"))
    assert int(flag(server_args, "memory_limit_mb")) < limit_gib * 1024


def test_every_mount_has_its_volume_and_every_config_map_exists():
    config_maps = set(by_kind("ConfigMap"))
    claims = set(by_kind("PersistentVolumeClaim"))
    for doc, spec in pod_specs():
        volumes = {v["name"]: v for v in spec.get("volumes", [])}
        templates = {t["metadata"]["name"] for t in doc["spec"].get("volumeClaimTemplates", [])}
        for container in spec.get("initContainers", []) + spec["containers"]:
            for mount in container.get("volumeMounts", []):
                assert mount["name"] in volumes or mount["name"] in templates, mount
        for volume in volumes.values():
            if "configMap" in volume:
                assert volume["configMap"]["name"] in config_maps
            if "persistentVolumeClaim" in volume:
                assert volume["persistentVolumeClaim"]["claimName"] in claims


def test_the_config_map_is_the_local_jobs_config():
    config = by_kind("ConfigMap")["embedps-config"]["data"]["dlrm.txtpb"]
    assert config == (REPO / "deploy" / "local" / "dlrm_small.txtpb").read_text()


def test_ps_server_starts_with_the_manifests_arguments(tmp_path):
    certs = tmp_path / "certs"
    subprocess.run([str(REPO / "security" / "make_certs.sh"), str(certs)], check=True,
                   capture_output=True)
    tls = tmp_path / "tls"
    tls.mkdir()
    for name, source in (("tls.crt", "node.pem"), ("tls.key", "node.key"), ("ca.crt", "ca.pem")):
        (tls / name).write_bytes((certs / source).read_bytes())
    for directory in ("checkpoints", "data"):
        (tmp_path / directory).mkdir()
    container = by_kind("StatefulSet")["embedps-ps"]["spec"]["template"]["spec"]["containers"][0]
    args = []
    for arg in container["args"]:
        arg = (arg.replace("/etc/embedps/tls", str(tls)).replace("/etc/embedps/tokens", str(certs))
               .replace("=/checkpoints", f"={tmp_path}/checkpoints").replace("=/data", f"={tmp_path}/data")
               .replace("$(SHARD_INDEX)", "1").replace("0.0.0.0", "127.0.0.1"))
        if arg.startswith(("--port=", "--metrics_port=")):
            arg = arg.split("=")[0] + "=0"
        args.append(arg)
    port_file = tmp_path / "port"
    server = subprocess.Popen([binary("server/ps_server"), *args, f"--port_file={port_file}"],
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        import time
        deadline = time.monotonic() + 30
        while not port_file.exists():
            assert server.poll() is None, server.stdout.read()
            assert time.monotonic() < deadline
            time.sleep(0.05)
        port = port_file.read_text().split()[0]
        probe = container["readinessProbe"]["exec"]["command"]
        probe = [binary("tools/embedps_health"), f"--address=localhost:{port}",
                 *[a.replace("/etc/embedps/tls", str(tls)) for a in probe[2:]]]
        assert subprocess.run(probe, capture_output=True, timeout=30).returncode == 0
    finally:
        server.terminate()
        assert server.wait(timeout=30) == 0
