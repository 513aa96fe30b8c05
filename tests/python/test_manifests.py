"""deploy/k8s against the binaries it runs: every flag a manifest passes is
one the binary has (its --helpfull), the numbers that must agree do (shards,
workers, ports), the ConfigMap is the local job's config, and ps_server
starts with exactly the manifest's arguments (paths pointed at test
directories and certificates made here). deploy/k8s/replicated likewise,
with its etcd members started from their manifest's arguments (Debian's
etcd) and two replicas of a shard electing a primary in them, one killed
and restarted as its StatefulSet would. Schema validation against the
Kubernetes API is tests/k8s/validate_schema.sh (a PyPI validator)."""

import base64
import http.client
import json
import re
import ssl
import subprocess
import time

import pytest
import yaml

from conftest import REPO, binary, free_port

K8S = REPO / "deploy" / "k8s"
REPLICATED = K8S / "replicated"
ETCD = "/usr/bin/etcd"
BINARIES = {"ps_server": "server/ps_server", "ps_worker": "worker/ps_worker",
            "ps_predictor": "worker/ps_predictor", "embedps_health": "tools/embedps_health",
            "datagen": "tools/datagen"}


def documents(directory=K8S):
    docs = []
    for path in sorted(directory.glob("*.yaml")):
        docs += [d for d in yaml.safe_load_all(path.read_text()) if d]
    return docs


def by_kind(kind, directory=K8S):
    return {d["metadata"]["name"]: d for d in documents(directory) if d["kind"] == kind}


def pod_specs(directory=K8S):
    for doc in documents(directory):
        if doc["kind"] in ("StatefulSet", "Deployment", "Job"):
            yield doc, doc["spec"]["template"]["spec"]


def invocations(directory=K8S):
    """(binary name, [args]) of every container command and exec probe."""
    for _, spec in pod_specs(directory):
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
    if name not in _flags and name == "etcd":
        out = subprocess.run([ETCD, "--help"], capture_output=True, text=True, timeout=60)
        _flags[name] = set(re.findall(r"^\s+--([\w-]+)", out.stdout + out.stderr, re.M))
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


@pytest.mark.parametrize("directory", [K8S, REPLICATED], ids=["k8s", "replicated"])
def test_every_flag_is_a_real_flag_of_its_binary(directory):
    seen = set()
    for name, args in invocations(directory):
        assert name in BINARIES or name == "etcd", name
        seen.add(name)
        for arg in args:
            assert arg.startswith("--"), (name, arg)
            assert arg[2:].split("=", 1)[0] in flags_of(name), f"{name} has no flag {arg}"
    if directory == K8S:
        assert seen == set(BINARIES)
    else:
        assert seen == {"ps_server", "ps_worker", "embedps_health", "datagen", "etcd"}


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


@pytest.mark.parametrize("directory", [K8S, REPLICATED], ids=["k8s", "replicated"])
def test_every_mount_has_its_volume_and_every_config_map_exists(directory):
    # The replicated deployment is applied with ../config.yaml.
    config_maps = set(by_kind("ConfigMap"))
    claims = set(by_kind("PersistentVolumeClaim", directory))
    for doc, spec in pod_specs(directory):
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


def secrets(tmp_path):
    """make_certs.sh's certificates and tokens, and the embedps-tls Secret's
    files (tls.crt, tls.key, ca.crt) as the manifests mount them."""
    certs = tmp_path / "certs"
    subprocess.run([str(REPO / "security" / "make_certs.sh"), str(certs)], check=True,
                   capture_output=True)
    tls = tmp_path / "tls"
    tls.mkdir()
    for name, source in (("tls.crt", "node.pem"), ("tls.key", "node.key"), ("ca.crt", "ca.pem")):
        (tls / name).write_bytes((certs / source).read_bytes())
    return certs, tls


def test_ps_server_starts_with_the_manifests_arguments(tmp_path):
    certs, tls = secrets(tmp_path)
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


def container_args(doc):
    return doc["spec"]["template"]["spec"]["containers"][0]["args"]


def test_the_replicated_numbers_agree():
    sets = by_kind("StatefulSet", REPLICATED)
    a, b, etcd = sets["embedps-ps-a"], sets["embedps-ps-b"], sets["embedps-etcd"]
    job = by_kind("Job", REPLICATED)["embedps-train"]
    args_a, args_b, worker = container_args(a), container_args(b), container_args(job)
    shards = a["spec"]["replicas"]
    assert b["spec"]["replicas"] == shards
    assert int(flag(args_a, "num_shards")) == int(flag(args_b, "num_shards")) == shards
    assert flag(worker, "servers").split(",") == [
        f"embedps-ps-a-{i}.embedps-ps-a:50051|embedps-ps-b-{i}.embedps-ps-b:50051"
        for i in range(shards)]
    for letter, sts, args in (("a", a, args_a), ("b", b, args_b)):
        assert sts["spec"]["serviceName"] == f"embedps-ps-{letter}"
        assert flag(args, "advertise") == f"$(POD_NAME).embedps-ps-{letter}:50051"
    # The two replicas of a shard differ only in the name they advertise.
    assert [x for x in args_a if "advertise" not in x] == \
        [x for x in args_b if "advertise" not in x]
    members = etcd["spec"]["replicas"]
    endpoints = "etcds://" + ",".join(
        f"embedps-etcd-{i}.embedps-etcd:2379" for i in range(members))
    for args in (args_a, args_b, worker):
        assert flag(args, "control_plane") == endpoints
        assert flag(args, "cluster_id") == "embedps"
    assert flag(container_args(etcd), "initial-cluster").split(",") == [
        f"embedps-etcd-{i}=https://embedps-etcd-{i}.embedps-etcd:2380" for i in range(members)]
    assert etcd["spec"]["serviceName"] == "embedps-etcd"
    assert int(flag(args_a, "num_workers")) == job["spec"]["completions"] == \
        job["spec"]["parallelism"] == int(flag(worker, "world_size"))


def etcd_range(client_port, tls, key):
    """The value at `key` (None if absent), through etcd's JSON gateway."""
    context = ssl.create_default_context(cafile=str(tls / "ca.crt"))
    context.load_cert_chain(str(tls / "tls.crt"), str(tls / "tls.key"))
    connection = http.client.HTTPSConnection("127.0.0.1", client_port, context=context,
                                             timeout=5)
    body = json.dumps({"key": base64.b64encode(key.encode()).decode()})
    connection.request("POST", "/v3/kv/range", body, {"Content-Type": "application/json"})
    answer = json.loads(connection.getresponse().read())
    kvs = answer.get("kvs", [])
    return base64.b64decode(kvs[0]["value"]).decode() if kvs else None


def wait_for(condition, what, seconds=60):
    deadline = time.monotonic() + seconds
    while not condition():
        assert time.monotonic() < deadline, what
        time.sleep(0.1)


def test_replicated_shards_start_on_the_manifests_etcd(tmp_path):
    """etcd's members and two replicas of shard 0 start with their
    manifests' arguments (names and paths pointed at loopback and test
    directories); the replicas elect a primary in etcd and reach sync; one
    killed and started again (its StatefulSet's restart) catches up."""
    certs, tls = secrets(tmp_path)
    for directory in ("checkpoints", "data-a", "data-b"):
        (tmp_path / directory).mkdir()
    sets = by_kind("StatefulSet", REPLICATED)
    members = sets["embedps-etcd"]["spec"]["replicas"]
    client = [free_port() for _ in range(members)]
    peer = [free_port() for _ in range(members)]

    def on_loopback(arg, own):
        arg = arg.replace("$(POD_NAME)", f"embedps-etcd-{own}").replace("/etc/embedps/tls", str(tls))
        for i in range(members):
            arg = (arg.replace(f"embedps-etcd-{i}.embedps-etcd:2379", f"127.0.0.1:{client[i]}")
                   .replace(f"embedps-etcd-{i}.embedps-etcd:2380", f"127.0.0.1:{peer[i]}"))
        return (arg.replace("0.0.0.0:2379", f"127.0.0.1:{client[own]}")
                .replace("0.0.0.0:2380", f"127.0.0.1:{peer[own]}")
                .replace("=/var/lib/etcd", f"={tmp_path}/etcd-{own}"))

    processes = []
    try:
        for i in range(members):
            args = [on_loopback(a, i) for a in container_args(sets["embedps-etcd"])]
            processes.append(subprocess.Popen([ETCD, *args], stdout=subprocess.DEVNULL,
                                              stderr=open(tmp_path / f"etcd-{i}.log", "wb")))

        def replica(letter):
            port = free_port()
            args = []
            for arg in container_args(sets[f"embedps-ps-{letter}"]):
                arg = (arg.replace("/etc/embedps/tls", str(tls))
                       .replace("/etc/embedps/tokens", str(certs))
                       .replace("=/checkpoints", f"={tmp_path}/checkpoints")
                       .replace("=/data", f"={tmp_path}/data-{letter}")
                       .replace("$(SHARD_INDEX)", "0").replace("0.0.0.0", "127.0.0.1")
                       .replace(f"$(POD_NAME).embedps-ps-{letter}:50051", f"localhost:{port}"))
                for i in range(members):
                    arg = arg.replace(f"embedps-etcd-{i}.embedps-etcd:2379",
                                      f"localhost:{client[i]}")
                if arg.startswith("--port="):
                    arg = f"--port={port}"
                if arg.startswith("--metrics_port="):
                    arg = "--metrics_port=0"
                args.append(arg)
            process = subprocess.Popen([binary("server/ps_server"), *args],
                                       stdout=subprocess.DEVNULL,
                                       stderr=open(tmp_path / f"ps-{letter}.log", "ab"))
            return process, f"localhost:{port}"

        a, address_a = replica("a")
        b, address_b = replica("b")
        processes += [a, b]

        def in_sync():
            try:
                value = etcd_range(client[0], tls, "/embedps/embedps/shards/0/in_sync")
            except OSError:
                return []
            return sorted(r["member"] for r in json.loads(value)) if value else []

        wait_for(lambda: in_sync() == sorted([address_a, address_b]),
                 f"the two replicas never reached sync: {in_sync()}")
        container = sets["embedps-ps-a"]["spec"]["template"]["spec"]["containers"][0]
        command = container["readinessProbe"]["exec"]["command"]
        for address in (address_a, address_b):
            check = [binary("tools/embedps_health"), f"--address={address}",
                     *[x.replace("/etc/embedps/tls", str(tls)) for x in command[2:]]]
            assert subprocess.run(check, capture_output=True, timeout=30).returncode == 0
        primary = json.loads(etcd_range(client[0], tls, "/embedps/embedps/shards/0/primary"))
        # The primary's pod dies; its StatefulSet starts it again at the
        # same name: the other replica takes over, the restarted one
        # catches up.
        killed = "a" if primary["member"] == address_a else "b"
        victim = a if killed == "a" else b
        victim.kill()
        victim.wait()
        survivor = address_b if killed == "a" else address_a
        wait_for(lambda: json.loads(etcd_range(
            client[0], tls, "/embedps/embedps/shards/0/primary"))["member"] == survivor,
            "no failover to the surviving replica")
        port = int((address_a if killed == "a" else address_b).split(":")[1])
        args = victim.args[1:]
        again = subprocess.Popen([binary("server/ps_server"), *args], stdout=subprocess.DEVNULL,
                                 stderr=open(tmp_path / f"ps-{killed}.log", "ab"))
        processes.append(again)
        assert f"--port={port}" in args
        wait_for(lambda: in_sync() == sorted([address_a, address_b]),
                 f"the restarted replica never caught up: {in_sync()}")
    finally:
        for process in processes:
            if process.poll() is None:
                process.terminate()
        for process in processes:
            try:
                process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                process.kill()
