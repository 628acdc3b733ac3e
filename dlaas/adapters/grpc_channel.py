"""The options every gRPC channel of the platform is made with (the SDK's, etcd's).

A channel's connections are its own (a local subchannel pool): by default gRPC shares them
between the channels of a process, and a new client to a server that is back would inherit
another client's reconnect backoff from while it was down, failing for seconds (a test's
client once failed so, behind a client of an earlier test to the same port). Reconnects
back off to at most MAX_RECONNECT_BACKOFF_MS, where gRPC's default grows to 120 s: a service
(the scheduler, an LCM, an etcd member) restarted after a long outage is found again within
about that long (measured: 1.0 s after a 20 s outage, 5.56 s with gRPC's defaults).
"""

from __future__ import annotations

MAX_RECONNECT_BACKOFF_MS = 2000

CHANNEL_OPTIONS: list[tuple[str, int]] = [
    ("grpc.use_local_subchannel_pool", 1),
    ("grpc.max_reconnect_backoff_ms", MAX_RECONNECT_BACKOFF_MS),
]
