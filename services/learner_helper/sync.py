"""Keeping CHECKPOINT_DIR and the learner logs in S3 across restarts of a job's gang.

Checkpoints (dlaas.domain.jobspec's checkpoint contract): `CheckpointSync.restore` fills
CHECKPOINT_DIR from the checkpoint prefix before the learners start; `sync` then mirrors
the directory to the prefix: files new or changed since they were last seen in S3 are
uploaded, and files this helper knows to be in S3 but which are gone locally (the
checkpoint library keeps only the last K) are deleted there. A remote file the helper
never restored nor uploaded is never deleted: a restore cut short by a finish signal
must not wipe the checkpoints it had no time to fetch. Hidden names (any path part
starting with a dot) are skipped both ways: the checkpoint library writes `.tmp-*`
and renames, downloads land as `.part-*`, so a half-written file is never uploaded. A
file that changed while it was uploaded is uploaded again at the next sync.

Logs (the mechanism dlaas.adapters.logs reads, see there): a restarted gang gets new learner
containers whose `docker logs` start empty, while LOG_DIR/learner-<i>.log must keep
growing. `LearnerLogs.restore` puts the longer of the S3 log object and the local file
(both are prefixes of the one log stream of the learner) in LOG_DIR, so the learner
wrapper appends to it, and records its line count as the run's start line. Every upload
of the log object carries that count in the object's metadata (`RUN_START_META`): the
first `run_start` lines of the object are the earlier runs', the rest are the current
learner container's output. Restore uploads the object at once, before `data_ready`,
so the metadata is in place before the new container prints its first line.

Metric files (`MetricFiles`): TensorBoard event files and JSON-lines metric files the
learners write anywhere below LOG_DIR (dlaas.domain.jobspec.metric_file_kind) are uploaded to
metrics_prefix(JOB_ID) whenever they changed, their paths kept; the API parses them
there. Upload only: a file gone from the volume (a new volume after a requeue) stays in
S3, so a series keeps its history; the steps a resumed learner writes again have the
same (name, step) and replace, not duplicate, the earlier points (dlaas.domain.metrics.series).

Everything is idempotent: running restore twice, or a sync after a helper restart,
converges to the same S3 state.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

from dlaas.domain.jobspec import (
    HELPER_EXIT_DATA_NOT_FOUND,
    log_object_key,
    metric_file_kind,
    metric_file_learner,
    metrics_prefix,
)
from dlaas.learner.paths import RUN_START_META
from services.learner_helper import store
from services.learner_helper.config import folder_prefix
from services.learner_helper.volume import (
    Stat,
    count_lines,
    drop_unless_regular,
    hidden,
    real_dirs,
    scan,
)

# --------------------------------------------------------------------------- pure


@dataclass(frozen=True)
class SyncPlan:
    uploads: list[str]
    deletes: list[str]
    seen: dict[str, Stat]  # each upload as the scan saw it

    @property
    def changes(self) -> bool:
        return bool(self.uploads or self.deletes)


def plan_sync(local: dict[str, Stat], synced: dict[str, Stat], owned: set[str]) -> SyncPlan:
    """What to upload (new or changed since last seen in S3) and delete (ours, gone locally)."""
    uploads = sorted(name for name, stat in local.items() if synced.get(name) != stat)
    deletes = sorted(owned - local.keys())
    return SyncPlan(uploads, deletes, {name: local[name] for name in uploads})


# --------------------------------------------------------------------------- adapters


class KnownBucket:
    """A bucket made (or found) once, then taken to be there: asking again before every
    periodic upload cost the store a request per sync (two of a checkpoint sync's five,
    with the logs taken along). After a failed upload it is asked again (it may be gone):
    uploads run inside `uploading()`, which forgets the bucket on a store.StoreError."""

    def __init__(self, client, name: str):
        self.client, self.name, self.known = client, name, False

    def ensure(self) -> None:
        if not self.known:
            store.ensure_bucket(self.client, self.name)
            self.known = True

    @contextlib.contextmanager
    def uploading(self) -> Iterator[None]:
        try:
            yield
        except store.StoreError:
            self.known = False
            raise


def _stat(path: Path) -> Stat | None:
    try:
        st = path.stat()
    except FileNotFoundError:
        return None
    return (st.st_size, st.st_mtime_ns)


def _remote_listing(client, bucket: str, prefix: str) -> dict[str, int]:
    """name below prefix -> size; a bucket that does not exist yet holds nothing."""
    try:
        keys = store.list_keys(client, bucket, prefix)
    except store.StoreError as exc:
        if exc.exit_code == HELPER_EXIT_DATA_NOT_FOUND:
            return {}
        raise
    out = {}
    for key, size in keys:
        name = store.local_name(key, prefix)
        if name is not None and not hidden(name):
            out[name] = size
    return out


@dataclass
class SyncResult:
    uploaded: int
    deleted: int
    files: int  # checkpoint files in S3 after the sync


class CheckpointSync:
    """Mirrors one directory to bucket/prefix; remembers what it has seen in S3."""

    def __init__(self, client, bucket: str, prefix: str, directory: Path):
        self.client, self.bucket, self.directory = client, bucket, directory
        self.bucket_made = KnownBucket(client, bucket)
        self.prefix = folder_prefix(prefix)
        self.synced: dict[str, Stat] = {}  # local files known to equal their S3 object
        self.owned: set[str] = set()  # S3 objects this helper may delete

    def restore(self, should_stop: Callable[[], bool]) -> int:
        """Download every checkpoint missing locally; return how many. Raise store.Interrupted.

        A file already present locally is kept (on a kept volume it is as new as S3's or
        newer) and uploaded by the next sync if it differs.
        """
        remote = _remote_listing(self.client, self.bucket, self.prefix)
        fetched = 0
        for name, size in sorted(remote.items()):
            dest = self.directory / name
            real_dirs(self.directory, dest.parent)  # a learner's links go, never followed
            drop_unless_regular(dest)
            if not dest.exists():
                if should_stop():
                    raise store.Interrupted()
                # (its folders were made real just above: no learner runs while we restore)
                store.download_object(
                    self.client, self.bucket, self.prefix + name, dest, should_stop
                )
                fetched += 1
            stat = _stat(dest)
            self.owned.add(name)
            if stat is not None and stat[0] == size:
                self.synced[name] = stat
        return fetched

    def adopt(self) -> None:
        """A helper restarted beside running learners: the local directory is the truth, and
        every checkpoint in S3 is ours to mirror (deleted there if gone here)."""
        remote = _remote_listing(self.client, self.bucket, self.prefix)
        local = scan(self.directory)
        self.owned = set(remote)
        self.synced = {n: s for n, s in local.items() if remote.get(n) == s[0]}

    def plan(self) -> SyncPlan:
        """What the directory holds that S3 does not, and the reverse (a local scan only)."""
        return plan_sync(scan(self.directory), self.synced, self.owned)

    def sync(self, plan: SyncPlan | None = None) -> SyncResult:
        """Upload new/changed files, delete ours that are gone locally. Raise store.StoreError.

        Given a `plan` taken earlier, only the files as that scan saw them are shipped: one
        written or changed since waits for the next sync (see main.tick, which uploads the
        logs between the two).
        """
        with self.bucket_made.uploading():
            return self._sync(plan or self.plan())

    def _sync(self, plan: SyncPlan) -> SyncResult:
        if plan.uploads:
            self.bucket_made.ensure()
        uploaded = 0
        for name in plan.uploads:
            path = self.directory / name
            before = _stat(path)
            if before is None:
                continue  # deleted since the scan: the next sync deletes it remotely
            if before != plan.seen[name]:
                continue  # changed since the scan: the next sync sends it, after its log lines
            if (
                store.upload_file(
                    self.client, self.directory, name, self.bucket, self.prefix + name
                )
                is None
            ):
                continue  # no longer a regular file: the next scan says what is there
            self.owned.add(name)
            uploaded += 1
            if _stat(path) == before:  # changed while uploading: send again next time
                self.synced[name] = before
        for name in plan.deletes:
            store.delete_object(self.client, self.bucket, self.prefix + name)
            self.owned.discard(name)
            self.synced.pop(name, None)
        return SyncResult(uploaded, len(plan.deletes), len(self.owned))


# --------------------------------------------------------------------------- logs


class LearnerLogs:
    """The learner log files of one job and their S3 objects, continued across restarts."""

    def __init__(self, client, bucket: str, job_id: str, log_dir: Path):
        self.client, self.bucket, self.job_id, self.log_dir = client, bucket, job_id, log_dir
        self.bucket_made = KnownBucket(client, bucket)
        self.run_start: dict[int, int] = {}  # learner -> lines of earlier runs in its log
        self.uploaded: dict[int, Stat] = {}

    def path(self, learner: int) -> Path:
        return self.log_dir / f"learner-{learner}.log"

    def key(self, learner: int) -> str:
        return log_object_key(self.job_id, learner)

    def _head(self, learner: int) -> dict | None:
        return store.head_object(self.client, self.bucket, self.key(learner))

    def restore(self, learners: Iterable[int]) -> int:
        """Put each learner's log so far in LOG_DIR and mark where this run starts; return
        the number of lines restored in all. Raise store.StoreError."""
        total = 0
        for i in learners:
            head = self._head(i)
            local = self.path(i)
            drop_unless_regular(local)  # a learner's link is never read nor written through
            remote_size = head["ContentLength"] if head else -1
            local_size = local.stat().st_size if local.is_file() else -1
            if remote_size > local_size:  # a new volume, or an older one: S3 knows more
                store.download_object(
                    self.client, self.bucket, self.key(i), local, lambda: False, self.log_dir
                )
            size, lines = self._start_run(i)
            total += lines
            meta = (head or {}).get("Metadata", {}).get(RUN_START_META)
            if size is None:
                continue
            if head is None or head["ContentLength"] != size or meta != str(lines):
                self.upload(i)
        return total

    def new_run(self, learners: Iterable[int]) -> None:
        """The learners restarted in place in new containers (presence.RestartWatch): mark
        where their new run starts in each log, and upload it before they print. Raise
        store.StoreError."""
        for i in learners:
            drop_unless_regular(self.path(i))
            size, _ = self._start_run(i)
            if size is not None:
                self.upload(i)

    def _start_run(self, learner: int) -> tuple[int | None, int]:
        """Set the learner's run start to the lines its log holds now; (its bytes, or None
        where there is no log yet, and its lines)."""
        local = self.path(learner)
        if not local.is_file():
            self.run_start[learner] = 0
            return None, 0
        data = local.read_bytes()
        if data and not data.endswith(b"\n"):
            # The last run ended mid-line; this run's first line must not join it.
            with open(local, "ab") as f:
                f.write(b"\n")
            data += b"\n"
        lines = count_lines(data)
        self.run_start[learner] = lines
        return len(data), lines

    def adopt(self, learners: Iterable[int]) -> None:
        """A helper restarted beside running learners: this run's start lines are in S3."""
        for i in learners:
            head = self._head(i)
            meta = (head or {}).get("Metadata", {}).get(RUN_START_META, "0")
            self.run_start[i] = int(meta) if meta.isdigit() else 0

    def upload(self, learner: int) -> None:
        path = self.path(learner)
        before = _stat(path)
        with self.bucket_made.uploading():
            self.bucket_made.ensure()
            store.upload_file(
                self.client,
                self.log_dir,
                path.name,
                self.bucket,
                self.key(learner),
                metadata={RUN_START_META: str(self.run_start.get(learner, 0))},
            )
        self.uploaded[learner] = before

    def local(self) -> list[int]:
        """Learner indexes with a log file in LOG_DIR."""
        found = []
        if self.log_dir.is_dir():
            for p in self.log_dir.iterdir():
                name = p.name
                if name.startswith("learner-") and name.endswith(".log") and p.is_file():
                    index = name[len("learner-") : -len(".log")]
                    if index.isdigit() and not p.is_symlink():
                        found.append(int(index))
        return sorted(found)

    def upload_changed(self) -> list[int]:
        """Upload the logs that grew since their last upload (the periodic tick)."""
        done = []
        for i in self.local():
            if _stat(self.path(i)) != self.uploaded.get(i):
                self.upload(i)
                done.append(i)
        return done


# --------------------------------------------------------------------------- metric files


def metric_files(local: dict[str, Stat], learners: Iterable[int]) -> dict[str, Stat]:
    """The metric files among `local` that belong to `learners` (a node's helper uploads its
    own learners' files only, so two helpers never write the same object)."""
    mine = set(learners)
    return {
        rel: stat
        for rel, stat in local.items()
        if metric_file_kind(rel) is not None and metric_file_learner(rel) in mine
    }


class MetricFiles:
    """Uploads the learners' metric files below LOG_DIR when they change."""

    def __init__(self, client, bucket: str, job_id: str, log_dir: Path, learners: Iterable[int]):
        self.client, self.bucket, self.log_dir = client, bucket, log_dir
        self.bucket_made = KnownBucket(client, bucket)
        self.prefix = metrics_prefix(job_id)
        self.learners = tuple(learners)
        self.synced: dict[str, Stat] = {}

    def upload_changed(self) -> int:
        """Upload the files new or changed since their last upload; how many. Raise
        store.StoreError."""
        local = metric_files(scan(self.log_dir), self.learners)
        plan = plan_sync(local, self.synced, owned=set())  # never deletes: see the docstring
        with self.bucket_made.uploading():
            if plan.uploads:
                self.bucket_made.ensure()
            for rel in plan.uploads:
                path = self.log_dir / rel
                before = _stat(path)
                if before is None:
                    continue
                if (
                    store.upload_file(
                        self.client, self.log_dir, rel, self.bucket, self.prefix + rel
                    )
                    is None
                ):
                    continue
                if _stat(path) == before:  # still being written: sent again next time
                    self.synced[rel] = before
        return len(plan.uploads)
