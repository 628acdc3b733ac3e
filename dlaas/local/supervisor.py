"""Keep a `dlaas up` platform running: restart any component that dies.

`python -m dlaas.local.supervisor STATE_DIR` watches the pid records `up` keeps in
STATE_DIR/pids/ (services, servers, the Docker engine if `up` started it) every `poll_s` (0.1 s) with a
pid check (a `kill(pid, 0)` and a look at /proc: no connection, no RPC), and when one
died calls `dlaas.local.platform.up(STATE_DIR, build_images=False)`, which leaves what runs
alone and starts exactly what is dead (~0.1 s when nothing is). Every restart is logged
with its cause and the time from detection to the component answering again.

What it never restarts: a component `down` stopped on purpose. `down` stops the
supervisor first, and forgets (removes) the pid record of everything it stops; the
supervisor only watches records that exist, and leaves as soon as its own record stops
naming it (`down` removed it, or another supervisor replaced it).

Where it sits: a thin loop around `platform.up`; the decision what to restart is the
pure `dead_components`, tested with plain data.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import logging
import os
import signal
import sys
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

log = logging.getLogger("dlaas.local.supervisor")

SELF = "supervisor"  # the pid record name `up` gives this process
POLL_S = 0.1
# A failed `up` (a component that does not start) is tried again after 1, 2, 4 ... s.
MAX_RETRY_S = 10.0

Records = Mapping[str, Mapping]


def dead_components(records: Records, alive: Callable[[Mapping], bool]) -> list[str]:
    """The recorded components whose process is gone, in name order (never this one)."""
    return sorted(name for name, rec in records.items() if name != SELF and not alive(rec))


def still_wanted(records: Records, own_pid: int, was_recorded: bool) -> bool:
    """False once `down` removed this supervisor's record, or another one took it over.

    A supervisor started by hand (no record of its own ever seen) runs until stopped.
    """
    own = records.get(SELF)
    if own is None:
        return not was_recorded
    return int(own.get("pid") or 0) == own_pid


def retry_delay(failures: int) -> float:
    return min(MAX_RETRY_S, 2.0 ** max(0, failures - 1))


# --------------------------------------------------------------------------- adapters


def read_records(pids_dir: Path) -> dict[str, dict]:
    """Every pid record in the directory: name -> {"pid", "match", ...} (unreadable: skipped)."""
    out = {}
    try:
        paths = list(pids_dir.glob("*.json"))
    except OSError:
        return out
    for path in paths:
        with contextlib.suppress(OSError, ValueError):
            data = json.loads(path.read_text())
            if isinstance(data, dict):
                out[path.stem] = data
    return out


def record_alive(record: Mapping) -> bool:
    from dlaas.local import processes

    pid = int(record.get("pid") or 0)
    return bool(pid) and processes.pid_matches(pid, str(record.get("match", "")))


def reap_children() -> None:
    """Collect the exit status of children that died (the services this process restarted).

    Only called between `up` runs: `up` polls its own children while it waits for them.
    """
    while True:
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return


@dataclass
class Restart:
    """One restart round: what was found dead, and how long until `up` had it answering."""

    dead: list[str]
    seconds: float
    ok: bool
    error: str = ""


class Supervisor:
    def __init__(
        self,
        state_dir: Path,
        poll_s: float = POLL_S,
        up: Callable[..., object] | None = None,
        clock: Callable[[], float] = time.monotonic,
    ):
        self.state_dir = Path(state_dir)
        self.poll_s = poll_s
        self._up = up
        self.clock = clock
        self.restarts: list[Restart] = []
        self._was_recorded = False
        self._failures = 0
        self._not_before = 0.0

    def up(self) -> None:
        if self._up is not None:
            self._up()
            return
        from dlaas.local import platform

        platform.up(
            self.state_dir, progress=lambda line: log.info("up: %s", line), build_images=False
        )

    def step(self) -> Restart | None:
        """One look at the records; restarts the dead ones. None when nothing was done."""
        reap_children()
        records = read_records(self.state_dir / "pids")
        if records.get(SELF, {}).get("pid") == os.getpid():
            self._was_recorded = True
        if not still_wanted(records, os.getpid(), self._was_recorded):
            raise SystemExit(0)
        dead = dead_components(records, record_alive)
        if not dead or self.clock() < self._not_before:
            return None
        detected = self.clock()
        pids = ", ".join(f"{n} (pid {records[n].get('pid')})" for n in dead)
        log.info("dead: %s; restarting", pids)
        try:
            self.up()
        # Broad: the supervisor is what restarts the platform, so no failure of a restart
        # may end it; each is logged with its cause and retried after a growing delay.
        except Exception as exc:  # noqa: BLE001 - broad: no failed restart may end the supervisor
            self._failures += 1
            delay = retry_delay(self._failures)
            self._not_before = self.clock() + delay
            took = self.clock() - detected
            log.error(
                "restart of %s failed after %.2f s: %s; again in %.0f s", dead, took, exc, delay
            )
            result = Restart(dead, took, False, str(exc))
        else:
            self._failures = 0
            took = self.clock() - detected
            after = read_records(self.state_dir / "pids")
            now = ", ".join(f"{n} (pid {after.get(n, {}).get('pid')})" for n in dead)
            log.info("restarted %s: answering %.2f s after detection", now, took)
            result = Restart(dead, took, True)
        self.restarts.append(result)
        return result

    def run(self) -> None:
        log.info(
            "watching %s every %.2f s (pid %d)", self.state_dir / "pids", self.poll_s, os.getpid()
        )
        while True:
            self.step()
            time.sleep(self.poll_s)


def _preload() -> None:
    """Import what `up` needs now, not at the first restart (it took ~0.45 s there)."""
    import docker  # noqa: F401
    import grpc  # noqa: F401
    from grpc_health.v1 import health_pb2_grpc  # noqa: F401

    from dlaas.local import platform, processes  # noqa: F401


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m dlaas.local.supervisor",
        description="Restart the components of a `dlaas up` platform when they die.",
    )
    parser.add_argument("state_dir", type=Path, help="the platform's state directory")
    parser.add_argument("--poll", type=float, default=POLL_S, help="seconds between checks")
    args = parser.parse_args(argv)
    logging.basicConfig(
        level=logging.INFO,
        format="%(asctime)s %(levelname)s supervisor: %(message)s",
        stream=sys.stdout,
    )
    if not (args.state_dir / "pids").is_dir():
        print(
            f"error: {args.state_dir} holds no platform (no pids/): run `dlaas up`", file=sys.stderr
        )
        return 2

    def stop(signum, _frame):
        log.info("stopping on signal %d", signum)
        raise SystemExit(0)

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    _preload()
    Supervisor(args.state_dir, poll_s=args.poll).run()
    return 0


if __name__ == "__main__":
    sys.exit(main())
