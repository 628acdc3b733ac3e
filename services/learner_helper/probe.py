"""Does the job's own data store answer? A quick TCP check before the helper starts work.

boto3 retries a store that does not answer for over a minute, and the platform would then
restart the job as if its own S3 had failed. A job whose manifest names its own store
(`connection.auth_url`) gets this check first instead: a host that cannot be resolved,
refuses the connection, or does not answer within PROBE_TIMEOUT_S (tried PROBE_TRIES
times) is reported at once, naming the host and the manifest field, as the job's own
failure (dlaas.domain.jobspec.HELPER_EXIT_CONNECTION_UNREACHABLE). Stdlib only.
"""

from __future__ import annotations

import socket
from collections.abc import Callable
from urllib.parse import urlsplit

PROBE_TIMEOUT_S = 3.0
PROBE_TRIES = 2


def address(url: str) -> tuple[str, int]:
    """(host, port) of an http(s) endpoint URL; the scheme's port when it names none.
    Raise ValueError for a URL without a host or with a bad port."""
    parts = urlsplit(url.strip())
    host = parts.hostname
    if not host:
        raise ValueError(f"{url!r} names no host")
    port = parts.port  # raises ValueError for a port that is no number or out of range
    return host, port or (443 if parts.scheme == "https" else 80)


def unreachable_reason(
    host: str,
    port: int,
    connect: Callable[..., socket.socket] = socket.create_connection,
    timeout_s: float = PROBE_TIMEOUT_S,
    tries: int = PROBE_TRIES,
) -> str | None:
    """Why host:port cannot be reached (after `tries` attempts), or None if it answered."""
    why = ""
    for _ in range(tries):
        try:
            connect((host, port), timeout=timeout_s).close()
            return None
        except socket.gaierror:
            return "the host name does not resolve"  # no use trying again
        except TimeoutError:
            why = f"no answer within {timeout_s:g} s"
        except OSError as exc:
            why = exc.strerror or exc.__class__.__name__
    return why
