"""The `stalled` webhook event (the job monitor's, no transition) goes through the same
notifier, broker and worker as the transitions' events, under an idempotency key of its own:
a hook that wants `started` and `stalled` gets both, neither taken for the other."""

from __future__ import annotations

import json
import time

from test_hooks_delivery import (  # noqa: F401 - env is a fixture
    WAIT_S,
    Receiver,
    add_hook,
    delivered,
    env,
    free_port,
    submit,
)

from dlaas.domain import hooks
from dlaas.domain.status import Status, Transition
from dlaas.local import processes


def test_a_stalled_event_reaches_the_hook_under_a_key_of_its_own(env):  # noqa: F811 - fixture
    _settings, store, keeper, worker = env
    receiver = Receiver(free_port())
    try:
        hook = add_hook(store, receiver.url, (hooks.STARTED, hooks.STALLED))
        worker.start()
        submit(store, keeper, "job-1")
        for status in (Status.PENDING, Status.DOWNLOADING, Status.PROCESSING):
            keeper.transition("job-1", status, "step")
        seq = keeper.get("job-1").seq
        why = "stalled: no learner logged for 31 s (stall_after 30 s); learner 0 (running): ..."
        body = Transition(Status.PROCESSING, time.time(), why, "stalled")
        keeper.notifier.event("job-1", hooks.STALLED, seq, body, "stall-1000.000")
        processes.wait_until(
            lambda: len(delivered(store, hook.hook_id)) == 2, WAIT_S, "two deliveries",
            log=worker.log,
        )  # fmt: skip
        by_event = {d["event"]: d for d in (json.loads(b) for _h, b in receiver.requests)}
        started_key = hooks.idempotency_key(hook.hook_id, "job-1", seq)
        assert by_event["started"]["idempotency_key"] == started_key
        stalled = by_event["stalled"]
        assert stalled["idempotency_key"] == started_key + ".stall-1000.000"
        assert (stalled["status"], stalled["reason"], stalled["error_code"]) == (
            "PROCESSING", why, "stalled",
        )  # fmt: skip
    finally:
        receiver.close()
