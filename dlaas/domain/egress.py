"""Where the platform may connect on a user's behalf: the one rule for user-named endpoints. Pure.

A user names endpoints the platform's own processes then connect to: a manifest's data
store (`data_stores[].connection.auth_url`, read by the API and the LCM for logs, metrics
and results) and webhooks (POSTed by the worker). Those processes run inside the platform,
next to its etcd, Redis, S3 and a cloud's metadata service, so an endpoint is allowed only
where every address its host resolves to is public, or inside a network the operator
allows (`DLAAS_EGRESS_ALLOW_NETWORKS`, formerly `DLAAS_HOOKS_ALLOW_NETWORKS`). Loopback,
private, link-local (169.254.169.254 included), shared (100.64.0.0/10), unique-local and
every other non-global address is refused.

The refusal is one message for every inside address: it names the field and the host the
user wrote, never what answered there, whether a port is open, or the address a name
resolved to, so an error cannot be used to map the inside. The check runs at submit (or
`hooks add`) and again at connect, where the connection then goes to the address checked
(dlaas.adapters.egress pins it), so a name that resolves elsewhere later reaches nothing new.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Sequence

from dlaas.domain.errors import InvalidRequest

ENV = "DLAAS_EGRESS_ALLOW_NETWORKS"
OLD_ENV = "DLAAS_HOOKS_ALLOW_NETWORKS"  # still read: the setting began as the webhooks'

Network = ipaddress.IPv4Network | ipaddress.IPv6Network


class EgressRefused(InvalidRequest):
    """A user-named endpoint is not one the platform connects to (the message says which
    field and host, and the rule; never what is there)."""

    code = "address_refused"


def allowed_networks(spec: str) -> tuple[Network, ...]:
    """The operator's allowed networks ("127.0.0.0/8,10.1.0.0/16"); ValueError naming the
    entry that is not a network."""
    out = []
    for item in (x.strip() for x in spec.split(",")):
        if not item:
            continue
        try:
            out.append(ipaddress.ip_network(item, strict=False))
        except ValueError:
            raise ValueError(f"{item!r} is not a network (e.g. 10.0.0.0/8)") from None
    return tuple(out)


def address(text: str) -> ipaddress.IPv4Address | ipaddress.IPv6Address:
    """The address `text` names, an IPv6 zone dropped and an IPv4-mapped IPv6 address
    (::ffff:127.0.0.1) unwrapped: it reaches the IPv4 address, so it is judged as that."""
    ip = ipaddress.ip_address(text.split("%", 1)[0])
    if ip.version == 6 and ip.ipv4_mapped is not None:
        return ip.ipv4_mapped
    return ip


def address_allowed(text: str, allowed: Sequence[Network] = ()) -> bool:
    """Whether the platform may connect to the address: a public one, or one inside a
    network the operator allows."""
    ip = address(text)
    return any(ip in net for net in allowed) or (ip.is_global and not ip.is_multicast)


def literal_address(host: str) -> str | None:
    """The address `host` is when it is written as one ("10.0.0.1", "[::1]"), else None."""
    try:
        return str(address(host.strip("[]")))
    except ValueError:
        return None


def refusal(field: str, host: str) -> str:
    """The one message for every refused endpoint."""
    return (
        f"{field}: {host} is not an address the platform connects to: only public "
        f"addresses, or networks the operator allows ({ENV})"
    )


def check_addresses(
    field: str, host: str, addresses: Sequence[str], allowed: Sequence[Network] = ()
) -> None:
    """Raise EgressRefused unless every address `host` resolved to is allowed (one inside
    address among public ones is enough to refuse: the connection might take it)."""
    if not all(address_allowed(a, allowed) for a in addresses):
        raise EgressRefused(refusal(field, host))
