"""What the job monitor sees of its jobs' learner logs for stall detection, the
platform's settings for the limits (limits.py) and triage (dlaas.domain.triage), and the
teams' run times (read from the job store, cached a short while: `TeamRunTimes`).

Log activity is when a learner's last lines last changed, as seen here: each look at a
PROCESSING job reads the last `ACTIVITY_TAIL_LINES` lines of every running learner (one
small `logs(tail=...)` call of the JobContainers port) and compares them with the previous
look's. The port gives no timestamps, and the job volume's LOG_DIR (with file times) is on
the learners' node, which on a swarm the monitor cannot stat: this is the cheapest view
that is correct on every engine, to within one poll (`Limits.poll_s`). A line repeated
identically looks like silence, which a training loop's counters or losses rarely are.
Kept in memory: a restarted monitor counts a learner as active when it first sees it,
unless the stall it marked before shows the same last line (then since that line's time).
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from dlaas.domain import jobspec, run_time
from dlaas.domain.accounts import Team
from dlaas.domain.manifest import Manifest
from dlaas.domain.ports import Container
from dlaas.domain.status import Status
from dlaas.domain.triage import Rule
from services.jobmonitor import limits as lm
from services.jobmonitor.disk import DEFAULT_DISK_POLL_S, limit_bytes
from services.jobmonitor.limits import Activity

# Lines of a running learner's log compared between two looks (a stall: none changed).
ACTIVITY_TAIL_LINES = 3
# A team's run times as read from the job store are used this long (an administrator's
# change reaches running jobs within it), for at most this many teams.
TEAM_TTL_S = 30.0
MAX_TEAMS_CACHED = 1024


@dataclass(frozen=True)
class Limits:
    """The platform's settings for the limits (limits.py) and its operator's triage rows."""

    triage: tuple[Rule, ...] = ()
    stall_after_s: float = 0.0  # when a manifest names none; 0: not watched
    max_stall_after_s: float = lm.MAX_STALL_AFTER_S
    poll_s: float = lm.DEFAULT_POLL_S
    max_duration_s: float = 0.0  # the most any job runs; 0: no maximum
    # A learner's disk size when its manifest names none, MiB (DLAAS_LEARNER_DISK_MB; 0: not
    # watched), and how often running learners' writable layers are measured (disk.py).
    learner_disk_mb: int = 0
    disk_poll_s: float = DEFAULT_DISK_POLL_S

    def of(self, manifest: Manifest | None, team: Team | None = None) -> dict[str, Any]:
        """The JobView fields of one job's limits: its manifest's (for the deadline, else its
        team's run times), bounded by the platform's."""
        stall = float(manifest.stall_after if manifest and manifest.stall_after else 0)
        stall = min(stall or self.stall_after_s, self.max_stall_after_s)
        asked, source = run_time.deadline(
            manifest.max_duration if manifest else 0, team, self.max_duration_s
        )
        return {
            "stall_after_s": stall,
            "on_stall": manifest.on_stall if manifest else lm.ON_STALL_NOTIFY,
            "max_duration_s": asked,
            "deadline_source": source,
            "disk_limit_bytes": limit_bytes(
                manifest.disk_mb if manifest else 0, self.learner_disk_mb
            ),
            "disk_poll_s": self.disk_poll_s,
        }


class TeamRunTimes:
    """The teams' records as the monitor uses them for deadlines: read from the job store at
    most once per `TEAM_TTL_S` per team, the least recently read dropped past
    `MAX_TEAMS_CACHED`. Called from the monitor's single worker."""

    def __init__(self, get_team: Callable[[str], Team | None], clock: Callable[[], float]):
        self.get_team = get_team
        self.clock = clock
        self._read: OrderedDict[str, tuple[float, Team | None]] = OrderedDict()

    def get(self, name: str) -> Team | None:
        if not name:  # a job from before teams
            return None
        now = self.clock()
        cached = self._read.get(name)
        if cached is not None and now - cached[0] < TEAM_TTL_S:
            return cached[1]
        team = self.get_team(name)
        self._read[name] = (now, team)
        self._read.move_to_end(name)
        while len(self._read) > MAX_TEAMS_CACHED:
            self._read.popitem(last=False)
        return team


class LogActivity:
    """The learners' log activity of every job one monitor watches."""

    def __init__(self, clock: Callable[[], float]):
        self.clock = clock
        # job -> learner container id -> (its last lines, the activity they show, whether
        # read after it exited: then never again)
        self._seen: dict[str, dict[str, tuple[bytes, Activity, bool]]] = {}

    def look(
        self,
        job_id: str,
        status: Status,
        containers: list[Container],
        read_tail: Callable[[Container], bytes | None],
        marked: object,
    ) -> dict[int, Activity]:
        """Each learner's log activity: when its last lines last changed, as seen here.

        A running learner's last lines are read at each look (one small call), a learner
        that exited once more. A learner first seen counts as active now, unless the stall
        already marked shows the same last line (a restarted monitor): then since then."""
        if status != Status.PROCESSING:
            return {}
        now = self.clock()
        known = self._seen.setdefault(job_id, {})
        before = {
            e.get("learner"): e
            for e in (marked.get("learners") or [] if isinstance(marked, dict) else [])
            if isinstance(e, dict)
        }
        out: dict[int, Activity] = {}
        for c in containers:
            if c.role != jobspec.ROLE_LEARNER or c.learner is None:
                continue
            seen = known.get(c.id)
            if seen is None or not seen[2]:
                raw = read_tail(c) or b""
                if seen is None or seen[0] != raw:
                    lines = raw.decode("utf-8", "replace").splitlines()
                    line = next((x for x in reversed(lines) if x.strip()), "")
                    old = before.get(c.learner)
                    at = now
                    if seen is None and isinstance(old, dict) and old.get("last_line") == line:
                        at = float(old.get("last_line_at") or now)
                    seen = (raw, Activity(at, line), c.exited)
                known[c.id] = seen = (seen[0], seen[1], c.exited)
            out[c.learner] = seen[1]
        return out

    def forget(self, job_id: str) -> None:
        self._seen.pop(job_id, None)
