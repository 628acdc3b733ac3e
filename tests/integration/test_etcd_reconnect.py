"""A platform service's etcd client that connects while another one waits out its backoff.

gRPC shares connections between the channels of a process unless told not to: a client
made after its etcd member came back (a service's restart, an LCM's new term) would inherit
an older client's reconnect backoff from the outage and fail for seconds. The platform's
channels keep their connections to themselves and back off to at most 2 s
(dlaas.adapters.grpc_channel; an older client found etcd again 1.0 s after a 12 s outage,
3.0-4.0 s with gRPC's defaults, measured 2026-11-27).
"""

from __future__ import annotations

import contextlib
import time

from dlaas.adapters import etcd_status
from dlaas.local import etcd
from dlaas.local.processes import free_port


def test_a_new_etcd_client_answers_at_once_whatever_an_older_one_saw(tmp_path):
    ports = {"client_port": free_port(), "peer_port": free_port()}
    server = etcd.start_etcd(tmp_path, **ports)
    older = etcd_status.connect([(server.host, server.port)], timeout=2)
    newer = None
    try:
        older.put("/t-reconnect/a", "1")
        server.stop()
        end = time.monotonic() + 5
        while time.monotonic() < end:  # it goes on calling: its reconnects back off
            with contextlib.suppress(Exception):
                older.get("/t-reconnect/a")
            time.sleep(0.2)
        server = etcd.start_etcd(tmp_path, **ports)
        newer = etcd_status.connect([(server.host, server.port)], timeout=2)
        assert newer.get("/t-reconnect/a")[0] == b"1"
    finally:
        for client in (older, newer):
            if client is not None:
                client.close()
        server.stop()
