"""The one rule for endpoints users name (dlaas.domain.egress) and its pinning adapter.

Every inside address is refused with the same message, whatever listens there; a name is
judged by every address it resolves to; the connection then goes to the address checked.
"""

from __future__ import annotations

import pytest

from dlaas.adapters import egress as pin
from dlaas.adapters.s3 import client_for
from dlaas.domain import egress
from dlaas.domain.errors import InvalidRequest, TemporaryError
from dlaas.domain.locations import S3Location

INSIDE = [
    "127.0.0.1", "127.8.0.1", "10.1.2.3", "172.17.0.1", "192.168.1.1", "169.254.169.254",
    "::1", "fe80::1%eth0", "0.0.0.0", "100.64.0.1", "fc00::1", "fd00:ec2::254",
    "::ffff:127.0.0.1", "::ffff:169.254.169.254", "224.0.0.1", "255.255.255.255",
]  # fmt: skip
FIELD = "data_stores[0].connection.endpoint"


@pytest.mark.parametrize("address", INSIDE)
def test_inside_addresses_are_refused_with_one_message(address):
    with pytest.raises(egress.EgressRefused) as refused:
        egress.check_addresses(FIELD, "store.example", [address])
    # The same words for every address: nothing says which address, or what is there.
    assert str(refused.value) == egress.refusal(FIELD, "store.example")
    assert address.split("%")[0] not in str(refused.value)
    assert egress.ENV in str(refused.value)
    assert isinstance(refused.value, InvalidRequest)  # a 4xx on every transport


def test_public_addresses_and_allowed_networks_pass():
    egress.check_addresses(FIELD, "h", ["93.184.216.34", "2606:2800::1"])
    allowed = egress.allowed_networks(" 127.0.0.0/8, 10.1.0.0/16 ,")
    egress.check_addresses(FIELD, "localhost", ["127.0.0.1", "::ffff:127.0.0.1"], allowed)
    egress.check_addresses(FIELD, "h", ["10.1.9.9"], allowed)
    # Every address counts: one public answer does not cover a private one beside it.
    with pytest.raises(egress.EgressRefused):
        egress.check_addresses(FIELD, "h", ["93.184.216.34", "10.2.0.1"], allowed)


def test_an_allowed_network_that_is_not_one_is_named():
    with pytest.raises(ValueError, match="'10.0.0.300/8' is not a network"):
        egress.allowed_networks("127.0.0.0/8,10.0.0.300/8")


def test_a_name_is_judged_by_what_it_resolves_to():
    with pytest.raises(egress.EgressRefused) as refused:
        pin.check_url(FIELD, "http://innocent.test:2379", resolve=lambda h, p: ["127.0.0.1"])
    assert "innocent.test" in str(refused.value) and "127.0.0.1" not in str(refused.value)
    with pytest.raises(pin.Unresolved):
        pin.check_url(FIELD, "http://gone.test", resolve=lambda h, p: [])


def test_a_literal_address_is_not_looked_up():
    def resolve(host, port):
        raise AssertionError("a literal address was looked up")

    with pytest.raises(egress.EgressRefused):
        pin.check_url(FIELD, "http://169.254.169.254/latest/meta-data", resolve=resolve)
    with pytest.raises(egress.EgressRefused):
        pin.check_url(FIELD, "http://[::ffff:127.0.0.1]:6379", resolve=resolve)
    assert pin.check_url(FIELD, "https://93.184.216.34", resolve=resolve) == ["93.184.216.34"]


def test_pinning_keeps_the_name_for_host_and_tls_but_not_credentials():
    p = pin.pin(FIELD, "https://u:pw@s3.test:9000/x", resolve=lambda h, port: ["93.184.216.34"])
    assert p == pin.Pinned("https://93.184.216.34:9000/x", "s3.test:9000", "s3.test", True)


def own(endpoint: str, allow: str = "") -> S3Location:
    return S3Location(endpoint, "a", "b", "bucket", allow_networks=allow)


def test_a_users_store_client_is_refused_at_an_inside_address_before_connecting():
    for endpoint in ("http://127.0.0.1:2379", "http://169.254.169.254", "http://[::1]:6379"):
        with pytest.raises(egress.EgressRefused):
            client_for(own(endpoint))
    with pytest.raises(egress.EgressRefused):
        client_for(own("http://localhost:8333"), resolve=lambda h, p: ["127.0.0.1"])
    with pytest.raises(TemporaryError, match="resolves to no address"):
        client_for(own("http://gone.test"), resolve=lambda h, p: [])


def test_a_users_store_client_talks_to_the_checked_address_under_the_stores_name():
    c = client_for(own("https://s3.test:9000"), resolve=lambda h, p: ["93.184.216.34"])
    assert c.meta.endpoint_url == "https://93.184.216.34:9000"
    kw = c._endpoint.http_session._manager.connection_pool_kw
    assert (kw["server_hostname"], kw["assert_hostname"]) == ("s3.test", "s3.test")
    allowed = client_for(own("http://127.0.0.1:9000", "127.0.0.0/8"))
    assert allowed.meta.endpoint_url == "http://127.0.0.1:9000"


@pytest.mark.parametrize("url", ["http://[::1", "http://h:99999", "http://", "http:///x"])
def test_a_url_without_a_host_or_port_to_connect_to_is_named(url):
    with pytest.raises(InvalidRequest) as bad:
        pin.check_url(FIELD, url, resolve=lambda h, p: ["93.184.216.34"])
    assert str(bad.value).startswith(f"{FIELD}: ")
    assert not isinstance(bad.value, egress.EgressRefused)


def test_numeric_spellings_of_loopback_are_refused():
    for url in ("http://127.1/", "http://2130706433/", "http://0x7f.0.0.1/"):
        with pytest.raises(egress.EgressRefused):
            pin.check_url(FIELD, url)  # the system's resolver reads them as 127.0.0.1
