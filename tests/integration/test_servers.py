"""The real servers the platform stands on, as dlaas.local starts them.

etcd (put/get, lease expiry, compare-and-swap), SeaweedFS S3 (round trip, credentials
enforced), a container reaching S3 through the bridge gateway, and the process helpers
(stop by PID, stale pid detection, a server that never answers is stopped again).
"""

from __future__ import annotations

import subprocess
import sys
import time
import uuid

import pytest
from botocore.exceptions import ClientError

from dlaas.local import etcd, processes, seaweedfs
from dlaas.local.redis import start_redis

# --------------------------------------------------------------------------- etcd


def test_etcd_put_get(etcd_client, etcd_prefix):
    etcd_client.put(f"{etcd_prefix}/a", "1")
    value, meta = etcd_client.get(f"{etcd_prefix}/a")
    assert value == b"1"
    assert meta.mod_revision > 0
    assert etcd_client.get(f"{etcd_prefix}/missing")[0] is None


def test_etcd_lease_expiry_removes_key(etcd_client, etcd_prefix):
    lease = etcd_client.lease(1)
    etcd_client.put(f"{etcd_prefix}/alive", "x", lease=lease)
    assert etcd_client.get(f"{etcd_prefix}/alive")[0] == b"x"
    deadline = time.monotonic() + 10
    while etcd_client.get(f"{etcd_prefix}/alive")[0] is not None:
        assert time.monotonic() < deadline, "key with an expired lease still present"
        time.sleep(0.2)


def test_etcd_txn_compare_and_swap(etcd_client, etcd_prefix):
    key = f"{etcd_prefix}/cas"
    etcd_client.put(key, "v1")
    _, meta = etcd_client.get(key)
    tx = etcd_client.transactions
    ok, _ = etcd_client.transaction(
        compare=[tx.mod(key) == meta.mod_revision], success=[tx.put(key, "v2")], failure=[]
    )
    assert ok
    # The same expected revision is now stale: the second writer loses.
    ok, _ = etcd_client.transaction(
        compare=[tx.mod(key) == meta.mod_revision], success=[tx.put(key, "v3")], failure=[]
    )
    assert not ok
    assert etcd_client.get(key)[0] == b"v2"


def test_etcd_three_member_cluster(tmp_path):
    import pyetcd

    names = ["m1", "m2", "m3"]
    ports = processes.free_ports(6)
    peers = dict(zip(names, ports[3:], strict=True))
    cluster = ",".join(f"{n}=http://127.0.0.1:{p}" for n, p in peers.items())
    members = []
    try:
        # Members start together; each waits for a quorum before serving.
        for i, name in enumerate(names):
            members.append(
                etcd.start_etcd(
                    tmp_path, name=name, client_port=ports[i], peer_port=peers[name],
                    cluster=cluster,
                )
            )  # fmt: skip
        client = pyetcd.client(host="127.0.0.1", port=members[0].port, timeout=10)
        deadline = time.monotonic() + 20
        while True:
            try:
                client.put("/k", "v")
                break
            except Exception:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.2)
        other = pyetcd.client(host="127.0.0.1", port=members[2].port, timeout=10)
        assert other.get("/k")[0] == b"v"
        assert len(list(client.members)) == 3
        client.close()
        other.close()
    finally:
        for m in members:
            m.stop()
    assert not any(processes.pid_alive(m.pid) for m in members)


# --------------------------------------------------------------------------- S3


def test_s3_put_get(s3_client, s3_bucket):
    s3_client.put_object(Bucket=s3_bucket, Key="dir/obj.txt", Body=b"hello")
    body = s3_client.get_object(Bucket=s3_bucket, Key="dir/obj.txt")["Body"].read()
    assert body == b"hello"
    keys = [o["Key"] for o in s3_client.list_objects_v2(Bucket=s3_bucket)["Contents"]]
    assert keys == ["dir/obj.txt"]


def test_s3_wrong_secret_is_refused(s3_server, s3_client, s3_bucket):
    s3_client.put_object(Bucket=s3_bucket, Key="k", Body=b"secret data")
    intruder = s3_server.client(secret_key="not-the-secret")
    with pytest.raises(ClientError) as err:
        intruder.get_object(Bucket=s3_bucket, Key="k")
    assert err.value.response["ResponseMetadata"]["HTTPStatusCode"] == 403


def test_s3_unknown_access_key_is_refused(s3_server, s3_bucket):
    stranger = s3_server.client(access_key="nobody")
    with pytest.raises(ClientError) as err:
        stranger.list_objects_v2(Bucket=s3_bucket)
    assert err.value.response["ResponseMetadata"]["HTTPStatusCode"] == 403


# --------------------------------------------------------------------------- Docker


@pytest.mark.docker
def test_container_reaches_s3_through_gateway(docker_client, docker_gateway, s3_server,
                                              s3_client, s3_bucket, learner_image):  # fmt: skip
    s3_client.put_object(Bucket=s3_bucket, Key="in.txt", Body=b"from host")
    script = (
        "import boto3, os\n"
        "from botocore.config import Config\n"
        "c = boto3.client('s3', endpoint_url=os.environ['EP'], region_name='us-east-1',\n"
        "    aws_access_key_id=os.environ['AK'], aws_secret_access_key=os.environ['SK'],\n"
        "    config=Config(s3={'addressing_style': 'path'}))\n"
        "b = os.environ['B']\n"
        "data = c.get_object(Bucket=b, Key='in.txt')['Body'].read()\n"
        "c.put_object(Bucket=b, Key='out.txt', Body=data + b' and back')\n"
    )
    network = docker_client.networks.create(f"dlaas-test-{uuid.uuid4().hex[:8]}", driver="bridge")
    try:
        output = docker_client.containers.run(
            learner_image,
            ["python3", "-c", script],
            environment={
                "EP": f"http://{docker_gateway}:{s3_server.port}",
                "AK": s3_server.access_key,
                "SK": s3_server.secret_key,
                "B": s3_bucket,
            },
            network=network.name,
            remove=True,
            init=True,
            stderr=True,
        )
    finally:
        network.remove()
    assert output == b""
    body = s3_client.get_object(Bucket=s3_bucket, Key="out.txt")["Body"].read()
    assert body == b"from host and back"


def test_docker_gateway_ip_is_a_host_address(docker_client, docker_gateway):
    import ipaddress

    assert ipaddress.ip_address(docker_gateway).is_private


# --------------------------------------------------------------------------- processes


def test_free_ports_are_distinct():
    ports = processes.free_ports(20)
    assert len(set(ports)) == 20


def test_stop_pid_kills_a_process_that_ignores_sigterm():
    ignore_term = (
        "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); "
        "print('ready', flush=True); time.sleep(60)"
    )
    proc = subprocess.Popen([sys.executable, "-c", ignore_term], stdout=subprocess.PIPE)
    try:
        assert proc.stdout.readline().strip() == b"ready"
        started = time.monotonic()
        processes.stop_pid(proc.pid, timeout=0.5, proc=proc)
        assert proc.poll() is not None
        assert time.monotonic() - started < 5
    finally:
        proc.kill()
        proc.wait()


def test_pid_matches_detects_a_stale_pid():
    token = f"marker-{uuid.uuid4().hex[:8]}"
    # The child says it is ready only after exec, so its command line is final.
    proc = subprocess.Popen(
        [sys.executable, "-c", "print('ready', flush=True); import time; time.sleep(30)", token],
        stdout=subprocess.PIPE,
    )
    try:
        assert proc.stdout.readline().strip() == b"ready"
        assert processes.pid_matches(proc.pid, token)
        # The same pid running another program (a reused number) is not a match.
        assert not processes.pid_matches(proc.pid, "etcd")
    finally:
        proc.kill()
        proc.wait()
    assert not processes.pid_alive(proc.pid)
    assert not processes.pid_matches(proc.pid, token)


def test_a_server_that_never_answers_is_stopped(tmp_path):
    mp = processes.spawn("sleeper", ["sleep", "30"], tmp_path / "sleeper.log")
    with pytest.raises(processes.ServerError, match="sleeper did not answer within"):
        processes.started(mp, lambda: False, 0.5, "sleeper")
    assert not mp.alive()


def test_a_server_that_exits_early_names_its_log(tmp_path):
    mp = processes.spawn("failer", ["sh", "-c", "echo boom; exit 3"], tmp_path / "failer.log")
    with pytest.raises(processes.ServerError, match=r"exited before it answered.*boom"):
        processes.started(mp, lambda: False, 10, "failer")


def test_a_check_that_keeps_failing_is_named_in_the_error():
    def check():
        raise ConnectionRefusedError(111, "Connection refused")

    with pytest.raises(processes.ServerError) as err:
        processes.wait_until(check, 0.2, "refuser", interval=0.05)
    assert "refuser did not answer within" in str(err.value)
    assert "(last check: ConnectionRefusedError: [Errno 111] Connection refused)" in str(err.value)


def test_seaweedfs_requires_credentials(tmp_path):
    with pytest.raises(processes.ServerError, match="access_key and secret_key"):
        seaweedfs.start_seaweedfs(tmp_path, "", "")


def test_redis_ping(tmp_path):
    redis = start_redis(tmp_path)
    try:
        import socket

        with socket.create_connection((redis.host, redis.port), timeout=2) as s:
            s.sendall(b"SET a 1\r\nGET a\r\n")
            time.sleep(0.1)
            assert s.recv(64) == b"+OK\r\n$1\r\n1\r\n"
    finally:
        redis.stop()
    assert not processes.pid_alive(redis.pid)
