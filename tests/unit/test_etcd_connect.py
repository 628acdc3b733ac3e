"""The etcd client the services make (dlaas.adapters.etcd_status.connect) never cuts a
service off from etcd for long after one failed call.

pyetcd sets an endpoint aside after a call to it fails; by default for 300 s, and its
single-endpoint client then raised ValueError ("Trying to use a failed node") on every
call: seen when the platform ran as a stack, whose services start before etcd answers
(every submit an internal error for five minutes). No connection is made here: a gRPC
channel connects only when a call is made.
"""

from __future__ import annotations

import time

import pyetcd.exceptions
import pytest

from dlaas.adapters.etcd_status import ENDPOINT_RETRY_S, connect


@pytest.mark.parametrize("count", [1, 3])
def test_a_failed_endpoint_is_an_etcd_error_for_a_moment_then_tried_again(count):
    client = connect([("127.0.0.1", 2379 + i) for i in range(count)], timeout=1)
    try:
        for endpoint in client.endpoints.values():
            endpoint.fail()  # as pyetcd marks it when a call to it fails
        with pytest.raises(pyetcd.exceptions.Etcd3Exception):
            client.channel  # noqa: B018 - the property is the call under test
        for endpoint in client.endpoints.values():  # as if ENDPOINT_RETRY_S went by
            endpoint.last_failed = time.time() - ENDPOINT_RETRY_S - 0.01
        assert client.channel is not None  # tried again, no error
    finally:
        client.close()


def test_endpoints_are_set_aside_briefly():
    assert ENDPOINT_RETRY_S <= 5
