"""What a job container can reach, on the real Docker engine with the real firewall rules.

Job B's helper probes, from inside B's network, everything the attack on the live
platform reached: job A's learner on MASTER_PORT, the S3 gateway's gRPC port, etcd, and
a TCP listener on the host's 0.0.0.0 (standing in for any other host service: the API,
the gRPC services, whatever else listens there). Only its own network and the S3 port
may answer. The same probes from a job of a platform without rules show that they do see
an open path where nothing fences it: "blocked" is the firewall's doing, not the probe's.
"""

from __future__ import annotations

import json
import socket
import uuid

import listeners
import pytest
from security_support import LISTENER, PROBE, container_ip, python, result_of

from dlaas.domain import jobspec

pytestmark = pytest.mark.docker

OWN_LEARNER = "own job's learner 0"
OTHER_JOB = "other job's learner 0"
S3 = "S3 endpoint"
S3_GRPC = "S3 gRPC port"
ETCD = "etcd"
HOST_SERVICE = "host service on 0.0.0.0"
HOST_SERVICE_OWN_GATEWAY = "host service via the job's own bridge"


@pytest.fixture(scope="module")
def host_listener():
    """A TCP listener on the host's 0.0.0.0 (any host service); its port."""
    with listeners.host_listener() as port:
        yield port


def _view(platform_id, jobs, docker_client, docker_gateway, s3_server, etcd_server, port):
    """Job B's probes (see the module doc), with job A of the same platform listening."""
    a = jobs(platform_id, {"learner-0": python(LISTENER)})
    a_ip = container_ip(docker_client, jobspec.learner_name(a.job_id, 0), a.network)
    probes = [
        [OWN_LEARNER, jobspec.learner_alias(0), jobspec.MASTER_PORT, 15],
        [OTHER_JOB, a_ip, jobspec.MASTER_PORT, 0],
        [S3, docker_gateway, s3_server.port, 0],
        [S3_GRPC, docker_gateway, s3_server.grpc_port, 0],
        [ETCD, docker_gateway, etcd_server.port, 0],
        [HOST_SERVICE, docker_gateway, port, 0],
        [HOST_SERVICE_OWN_GATEWAY, "gateway", port, 0],
    ]
    b = jobs(
        platform_id,
        {"learner-0": python(LISTENER), "helper": python(PROBE)},
        env={"PROBES": json.dumps(probes)},
    )
    return result_of(docker_client, jobspec.helper_name(b.job_id))


@pytest.fixture(scope="module")
def fenced_view(
    fenced, platform_id, jobs, docker_client, docker_gateway, s3_server, etcd_server,
    host_listener,
):  # fmt: skip
    return _view(
        platform_id, jobs, docker_client, docker_gateway, s3_server, etcd_server, host_listener
    )


@pytest.fixture(scope="module")
def unfenced_view(
    fenced, jobs, docker_client, docker_gateway, s3_server, etcd_server, host_listener
):
    """The same probes from jobs of a platform whose rules were never applied."""
    other = f"t-unfenced-{uuid.uuid4().hex[:8]}"
    return _view(other, jobs, docker_client, docker_gateway, s3_server, etcd_server, host_listener)


def test_probes_see_open_paths_where_nothing_fences_them(unfenced_view):
    assert unfenced_view[OWN_LEARNER] == "open"
    assert unfenced_view[S3] == "open"
    assert unfenced_view[HOST_SERVICE] == "open"
    assert unfenced_view[HOST_SERVICE_OWN_GATEWAY] == "open"


def test_a_job_reaches_its_own_network_and_the_s3_endpoint(fenced_view):
    # Intra-job traffic stays allowed (br_netfilter passes it through FORWARD too).
    assert fenced_view[OWN_LEARNER] == "open"
    assert fenced_view[S3] == "open"


@pytest.mark.parametrize("target", [S3_GRPC, ETCD, HOST_SERVICE, HOST_SERVICE_OWN_GATEWAY])
def test_a_job_reaches_no_host_service_but_the_s3_endpoint(fenced_view, target):
    assert fenced_view[target].startswith("blocked"), fenced_view


def test_a_job_cannot_reach_another_jobs_containers(fenced_view, unfenced_view):
    if unfenced_view[OTHER_JOB] != "open":
        pytest.skip(
            "this host routes no traffic between bridges (net.ipv4.ip_forward=0): "
            "nothing to fence here; the FORWARD rules hold where it does"
        )
    assert fenced_view[OTHER_JOB].startswith("blocked"), fenced_view


def test_the_s3_grpc_port_answers_on_loopback_only(fenced, unfenced_view, s3_server):
    # Any container, fenced job or not, is refused it; SeaweedFS itself uses loopback.
    assert unfenced_view[S3_GRPC].startswith("blocked"), unfenced_view
    socket.create_connection(("127.0.0.1", s3_server.grpc_port), timeout=2).close()
