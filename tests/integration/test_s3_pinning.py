"""A user's own store reached through the pinned client (dlaas.adapters.s3.client_for): the
connection goes to the address checked, while the store's name is what is signed, sent as
Host and, over https, verified against the certificate (a real TLS handshake here), and a
real S3 (SeaweedFS) accepts the signature made for its name."""

from __future__ import annotations

import http.server
import ssl
import threading

import pytest
from botocore.exceptions import SSLError
from test_hooks_tls import NAME, certificate

from dlaas.adapters.s3 import client_for
from dlaas.domain.locations import S3Location

EMPTY_LISTING = (
    b'<?xml version="1.0" encoding="UTF-8"?>'
    b'<ListBucketResult xmlns="http://s3.amazonaws.com/doc/2006-03-01/">'
    b"<Name>b</Name><Prefix></Prefix><KeyCount>0</KeyCount><MaxKeys>1000</MaxKeys>"
    b"<IsTruncated>false</IsTruncated></ListBucketResult>"
)


@pytest.fixture
def tls_store(tmp_path, monkeypatch):
    cert_file, key_file = certificate(tmp_path)
    seen: list[str] = []

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            seen.append(self.headers.get("Host", ""))
            self.send_response(200)
            self.send_header("Content-Type", "application/xml")
            self.send_header("Content-Length", str(len(EMPTY_LISTING)))
            self.end_headers()
            self.wfile.write(EMPTY_LISTING)

        def log_message(self, *args) -> None:
            pass

    server = http.server.HTTPServer(("127.0.0.1", 0), Handler)
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(cert_file, key_file)
    server.socket = context.wrap_socket(server.socket, server_side=True)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    monkeypatch.setenv("AWS_CA_BUNDLE", str(cert_file))
    try:
        yield server.server_address[1], seen
    finally:
        server.shutdown()
        server.server_close()


def loopback(host: str, port: int) -> list[str]:
    return ["127.0.0.1"]


def test_a_pinned_https_store_is_verified_under_its_name(tls_store):
    port, seen = tls_store
    loc = S3Location(f"https://{NAME}:{port}", "a", "b", "b", allow_networks="127.0.0.0/8")
    s3 = client_for(loc, resolve=loopback)
    assert s3.list_objects_v2(Bucket="b")["KeyCount"] == 0
    assert seen == [f"{NAME}:{port}"]
    # The same address under another name: the certificate does not match, nothing is sent.
    other = S3Location(
        f"https://other.localtest:{port}", "a", "b", "b", allow_networks="127.0.0.0/8"
    )
    with pytest.raises(SSLError):
        client_for(other, resolve=loopback).list_objects_v2(Bucket="b")
    assert len(seen) == 1


def test_a_real_store_accepts_the_signature_made_for_its_name(s3_server, s3_client):
    s3_client.create_bucket(Bucket="pinned-own")
    s3_client.put_object(Bucket="pinned-own", Key="x", Body=b"1")
    port = s3_server.endpoint.rsplit(":", 1)[1]
    loc = S3Location(
        f"http://store.localtest:{port}",
        s3_server.access_key,
        s3_server.secret_key,
        "pinned-own",
        allow_networks="127.0.0.0/8",
    )
    s3 = client_for(loc, resolve=loopback)
    assert s3.meta.endpoint_url == f"http://127.0.0.1:{port}"
    assert s3.get_object(Bucket="pinned-own", Key="x")["Body"].read() == b"1"
