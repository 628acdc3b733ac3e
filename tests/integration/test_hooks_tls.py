"""A webhook over https, pinned to the address the worker checked: the real TLS handshake.

`guarded_post` (services/worker/hooks.py) POSTs to the checked address while presenting and
verifying the hook's host name. Here a real TLS receiver on loopback holds a certificate for
`hooks.localtest` only (made here; trusted through SSL_CERT_FILE, as httpx reads it), and
the name "resolves" to loopback, which the test allows.
"""

from __future__ import annotations

import datetime
import http.server
import ssl
import threading

import httpx
import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from dlaas.domain import egress
from services.worker import hooks as delivery

NAME = "hooks.localtest"


def certificate(tmp_path):
    key = ec.generate_private_key(ec.SECP256R1())
    subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, NAME)])
    now = datetime.datetime.now(datetime.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=1))
        .not_valid_after(now + datetime.timedelta(hours=1))
        .add_extension(x509.SubjectAlternativeName([x509.DNSName(NAME)]), critical=False)
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(key, hashes.SHA256())
    )
    cert_file, key_file = tmp_path / "cert.pem", tmp_path / "key.pem"
    cert_file.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_file.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    return cert_file, key_file


@pytest.fixture
def receiver(tmp_path, monkeypatch):
    cert_file, key_file = certificate(tmp_path)
    seen: list[str] = []

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            self.rfile.read(int(self.headers.get("Content-Length", 0)))
            seen.append(self.headers.get("Host", ""))
            self.send_response(204)
            self.end_headers()

        def log_message(self, *args) -> None:
            pass

    server = http.server.HTTPServer(("127.0.0.1", 0), Handler)
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(cert_file, key_file)
    server.socket = context.wrap_socket(server.socket, server_side=True)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    monkeypatch.setenv("SSL_CERT_FILE", str(cert_file))
    try:
        yield server.server_address[1], seen
    finally:
        server.shutdown()
        server.server_close()


def post(url: str) -> int:
    return delivery.guarded_post(
        url, b"{}", {"Content-Type": "application/json"}, 5.0,
        allowed=egress.allowed_networks("127.0.0.0/8"), resolve=lambda host, port: ["127.0.0.1"],
    )  # fmt: skip


def test_the_pinned_post_verifies_the_hooks_name_over_tls(receiver):
    port, seen = receiver
    assert post(f"https://{NAME}:{port}/hook") == 204
    assert seen == [f"{NAME}:{port}"]
    # The same address under another name: the certificate does not match, nothing is sent.
    with pytest.raises(httpx.ConnectError, match="Hostname mismatch"):
        post(f"https://other.localtest:{port}/hook")
    assert len(seen) == 1
