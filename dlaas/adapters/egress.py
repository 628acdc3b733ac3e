"""Resolve a user-named URL and pin it to an address the egress rule allows.

The rule is dlaas.domain.egress'; this module does the DNS lookup and rewrites the URL to
the address it checked, so the connection that follows goes there and nowhere else (a name
that resolves to a public address for the check and to 127.0.0.1 a moment later, DNS
rebinding, reaches nothing new). The caller keeps the name for the Host header and, over
TLS, for the name presented and verified.
"""

from __future__ import annotations

import socket
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from urllib.parse import urlsplit, urlunsplit

from dlaas.domain import egress
from dlaas.domain.errors import InvalidRequest

Resolve = Callable[[str, int], list[str]]


class Unresolved(Exception):
    """The host resolves to no address (a DNS outage, or a name that does not exist)."""


@dataclass(frozen=True)
class Pinned:
    url: str  # the URL with the checked address in place of the host
    netloc: str  # the URL's host[:port] as written: the Host header
    hostname: str  # the name as written: what TLS presents and verifies
    https: bool


def resolve(host: str, port: int) -> list[str]:
    """Every address `host` resolves to; [] when it resolves to none."""
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except (socket.gaierror, UnicodeError):
        return []
    return sorted({str(info[4][0]) for info in infos})


def check_url(
    field: str, url: str, allowed: Sequence[egress.Network] = (), resolve: Resolve = resolve
) -> list[str]:
    """The addresses `url`'s host resolves to, once every one passes the rule; raise
    EgressRefused (one message, whatever is there), Unresolved, or InvalidRequest for a URL
    that names no host or port to connect to."""
    try:
        parts = urlsplit(url)
        host = parts.hostname or ""
        port = parts.port or (443 if parts.scheme == "https" else 80)
    except ValueError:  # "http://[::1", a port that is not one
        raise InvalidRequest(f"{field}: not a URL the platform can call") from None
    if not host:
        raise InvalidRequest(f"{field}: the URL names no host")
    literal = egress.literal_address(host)
    addresses = [literal] if literal else resolve(host, port)
    if not addresses:
        raise Unresolved(f"{field}: {host} resolves to no address")
    egress.check_addresses(field, host, addresses, allowed)
    return addresses


def pin(
    field: str, url: str, allowed: Sequence[egress.Network] = (), resolve: Resolve = resolve
) -> Pinned:
    """`url` rewritten to the first address its host resolves to, once all pass the rule."""
    parts = urlsplit(url)
    https = parts.scheme == "https"
    ip = egress.address(check_url(field, url, allowed, resolve)[0])
    literal = f"[{ip}]" if ip.version == 6 else str(ip)
    port = parts.port or (443 if https else 80)
    pinned = urlunsplit(parts._replace(netloc=f"{literal}:{port}"))
    # The Host header: host[:port] as written, without any user:password@ part.
    return Pinned(pinned, parts.netloc.rpartition("@")[2], parts.hostname or "", https)
