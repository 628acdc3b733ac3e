"""The helper container of a job: `python3 -m services.learner_helper`.

One per job, started by the LCM together with the learners, on the job's network with
the job volume at /job. It
1. restores what earlier runs of the job left in DLAAS_RESULTS_BUCKET (a requeued or
   resumed job gets a new gang): each learner's log object into LOG_DIR (the learner
   wrapper appends to it, so the log stays one stream across restarts; see
   services.learner_helper.sync), and every checkpoint under DLAAS_CHECKPOINT_PREFIX
   into CHECKPOINT_DIR, so the learners find their latest checkpoint before they start,
2. downloads every object of DLAAS_DATA_BUCKET[/DLAAS_DATA_PREFIX] into DATA_DIR,
3. downloads DLAAS_CODE_BUCKET/DLAAS_CODE_KEY (a .tar.gz) and extracts it SAFELY into
   CODE_DIR,
4. touches DATA_READY_MARK (the learner wrappers wait for it) and prints the
   `data_ready` event,
5. with DLAAS_CHECKPOINT_INTERVAL_S set, mirrors CHECKPOINT_DIR to the checkpoint prefix
   soon after each new checkpoint (printing `checkpoint_synced` when something changed):
   a local scan every CHECKPOINT_SCAN_S, but after a sync that shipped, no sooner than
   SYNC_PACE times its duration, and no later than the interval (next_sync_at); uploads
   the learner logs that grew every interval and with each new checkpoint; every
   METRICS_SYNC_S seconds (whatever the interval) uploads the metric files the learners
   write below LOG_DIR that changed (TensorBoard events, JSON lines: see
   services.learner_helper.sync.MetricFiles), so metric charts follow training,
6. waits for SIGUSR1 (HELPER_FINISH_SIGNAL, sent by the LCM when the learners are done)
   or SIGTERM (or, with DLAAS_HELPER_FINISH_ON_EXIT=1, on Swarm, until every learner of
   its node has ended: its exit code written, or its wrapper's alive lock dropped by a
   kill, a gang all on this node given RESTART_WAIT_S to be restarted in place first; see
   services.learner_helper.presence), then mirrors CHECKPOINT_DIR a last time, uploads
   RESULT_DIR/** under results_prefix(JOB_ID) and LOG_DIR/learner-<i>.log to log_object_key(JOB_ID, i),
   prints the `stored` event, removes DATA_READY_MARK and exits 0.
Throughout, it measures the job volume (services.learner_helper.diskwatch) and prints the
`disk_full` event once the volume holds more than DLAAS_VOLUME_LIMIT_MB.
A finish signal during steps 1-3 skips straight to step 6 (the last checkpoint sync then
only touches what was restored or written). A helper that starts while DATA_READY_MARK
exists was restarted beside running learners: it skips steps 1-3 (the volume is the
truth) and carries on from step 4. A helper of a restarted gang whose volume is as the job's
last run stored it (data and code in place, logs and checkpoints equal to S3's) has released
the learners before this module was even imported (services.learner_helper.resume, the fast
start); it then adopts the volume as a restarted helper does.

Env (set by the LCM):
  JOB_ID                  required
  NUM_LEARNERS            optional, default 1 (a missing learner log is reported)
  DLAAS_S3_ENDPOINT       required, e.g. http://172.18.0.1:8333
  AWS_ACCESS_KEY_ID       required
  AWS_SECRET_ACCESS_KEY   required (never printed)
  AWS_DEFAULT_REGION      optional, default us-east-1
  DLAAS_DATA_BUCKET       optional; empty means the job has no training data
  DLAAS_DATA_PREFIX       optional folder inside the data bucket
  DLAAS_RESULTS_BUCKET    required; created if missing
  DLAAS_CODE_BUCKET       optional, with DLAAS_CODE_KEY: the code archive (.tar.gz)
  DLAAS_CODE_KEY          optional
  DLAAS_CODE_ENDPOINT, DLAAS_CODE_ACCESS_KEY, DLAAS_CODE_SECRET_KEY
                          optional: the code archive lives in another S3 than data/results
                          (e.g. the platform's own); all three together (secret never printed)
  DLAAS_CHECKPOINT_PREFIX optional, default checkpoint_prefix(JOB_ID), in the results bucket
  DLAAS_CHECKPOINT_INTERVAL_S
                          optional seconds between syncs; 0 (the default): only at the end
  DLAAS_JOB_DIR           optional, default /job (tests run the helper outside a container)
  DLAAS_S3_ENDPOINT_FIELD optional: the manifest field that named DLAAS_S3_ENDPOINT when it
                          is the job's own store (dlaas.domain.jobspec.ENV_STORE_FIELD)

Events (stdout, one line each, dlaas.domain.jobspec.format_event): data_ready,
checkpoint_synced {files, uploaded, deleted, at}, stored, and error {code, message}
right before a non-zero exit. Exit codes: dlaas.domain.jobspec
HELPER_EXIT_* (10 data not found, 11 store refused, 12 upload failed, 13 bad archive,
14 object store unreachable, 15 the job's own data store unreachable at the start: checked
first, when DLAAS_S3_ENDPOINT_FIELD says the endpoint is the job's, see
services.learner_helper.probe), 2 bad helper env.
"""

from __future__ import annotations

import os
import signal
import sys
import tempfile
import threading
import time
from pathlib import Path

from dlaas.domain.jobspec import (
    EVENT_CHECKPOINT_SYNCED,
    EVENT_DATA_READY,
    EVENT_ERROR,
    EVENT_STORED,
    EVENT_USAGE,
    HELPER_EXIT_BAD_ARCHIVE,
    HELPER_EXIT_CONNECTION_UNREACHABLE,
    HELPER_EXIT_OK,
    format_event,
    results_prefix,
)
from dlaas.learner import usage
from dlaas.learner.paths import JobPaths
from services.learner_helper import diskwatch, probe, resume, store, volume
from services.learner_helper.archive import UnsafeArchive, safe_extract
from services.learner_helper.config import (
    ConfigError,
    HelperConfig,
    folder_prefix,
    with_secret_file,
)
from services.learner_helper.presence import LearnerPresence, RestartWatch
from services.learner_helper.sync import CheckpointSync, LearnerLogs, MetricFiles, SyncPlan

EXIT_BAD_CONFIG = 2
# How often metric files below LOG_DIR are looked at (a local scan; S3 only on a change).
METRICS_SYNC_S = 1.0
# How often CHECKPOINT_DIR is scanned for a new checkpoint (a local scan; S3 only on a change).
CHECKPOINT_SCAN_S = 0.5
# A periodic sync that shipped something waits this many times its own duration before the
# next one, so shipping takes at most about a thirtieth of the time. A job that checkpoints
# every 0.1 s (the DDP example) had, at 10, a sync every 0.5 s beside its learner: 1 learner
# 1.028-1.064 over bare in three runs; at 30, 1.005; with shipping off, 0.989 (2026-11-27,
# docs/benchmarks.md "Training overhead"). The checkpoint in S3 is then at most 30 syncs'
# time older than the learner's last (about 1.5 s for a small one), and never more than the
# job's interval. 100 was tried (2026-11-28: 4 learners 1.085 against 1.223 at 30 in one
# back-to-back pair, then 1.169 / 1.167 / 1.088) and taken back: the chaos run's lost work
# on a killed node went from 1.4-2.2 s to 6.0 s for a gain inside the runs' noise.
SYNC_PACE = 30
# How often a helper that finishes by itself looks whether its learners have ended (a stat
# and a lock try per learner): a restart's teardown waits for this helper to store, so
# each look saved is taken off every gang restart (0.5 s cost 0.25 s on average).
PRESENCE_POLL_S = 0.1


class Steps:
    """How long each step of the start took, for one line (where a restart's time goes)."""

    def __init__(self, started: float | None):
        self.started = time.monotonic() if started is None else started
        self.at = self.started
        self.took: list[tuple[str, float]] = []
        if started is not None:
            self.done("imports")

    def done(self, step: str) -> None:
        now = time.monotonic()
        self.took.append((step, now - self.at))
        self.at = now

    def summary(self) -> str:
        parts = ", ".join(f"{step} {s:.2f}" for step, s in self.took)
        return f"{self.at - self.started:.2f} s after the start ({parts} s)"


def say(message: str) -> None:
    print(f"helper: {message}", flush=True)


def emit(event: str, **fields: object) -> None:
    print(format_event(event, **fields), flush=True)


def fail(exit_code: int, code: str, message: str) -> int:
    emit(EVENT_ERROR, code=code, message=message)
    return exit_code


def check_own_store(cfg: HelperConfig) -> str | None:
    """The error message if the job's own data store does not answer, else None (also for
    the platform's store, which a restart may find back: boto3 retries it)."""
    if not cfg.store_field:
        return None
    try:
        host, port = probe.address(cfg.endpoint)
    except ValueError as exc:
        return f"{cfg.store_field}: not a usable endpoint: {exc}"
    why = probe.unreachable_reason(host, port)
    if why is None:
        return None
    return (
        f"{cfg.store_field}: the data store at {host}:{port} could not be reached ({why}); "
        "check the host and port, and that the platform's nodes can reach it"
    )


def prepare(cfg: HelperConfig, client, paths: JobPaths, stop: threading.Event) -> None:
    """Data and code into the volume. Raises store.StoreError, UnsafeArchive, store.Interrupted.

    The volume counts as prepared (resume.py's fast start) only once both are in place."""
    resume.forget_prepared(paths)
    if cfg.data_bucket:
        say(f"downloading s3://{cfg.data_bucket}/{folder_prefix(cfg.data_prefix)}")
        count, size = store.download_prefix(
            client, cfg.data_bucket, cfg.data_prefix, paths.data_dir, stop.is_set, say
        )
        say(f"downloaded {count} objects ({size} bytes) into {paths.data_dir}")
    else:
        say("no data bucket: the job has no training data")
    if cfg.code_key:
        code_client = client
        if cfg.code_endpoint:
            code_client = store.make_client(
                cfg.code_endpoint, cfg.code_access_key, cfg.code_secret_key, cfg.region
            )
        with tempfile.TemporaryDirectory(prefix="dlaas-code-") as tmp:
            archive = Path(tmp) / "code.tar.gz"
            store.download_object(code_client, cfg.code_bucket, cfg.code_key, archive, stop.is_set)
            files = safe_extract(archive, paths.code_dir)
        say(f"extracted {files} files of the code archive into {paths.code_dir}")
    resume.mark_prepared(paths, cfg)


def restore(
    cfg: HelperConfig,
    paths: JobPaths,
    logs: LearnerLogs,
    ckpt: CheckpointSync,
    stop: threading.Event,
) -> None:
    """What earlier runs left in S3 back into the volume. Raise store.StoreError, Interrupted."""
    lines = logs.restore(cfg.learners)
    if lines:
        say(f"restored {lines} log lines of earlier runs into {paths.log_dir}")
    fetched = ckpt.restore(stop.is_set)
    if fetched:
        say(f"restored {fetched} checkpoint files into {paths.checkpoint_dir}")


def sync_checkpoints(cfg: HelperConfig, ckpt: CheckpointSync, plan: SyncPlan | None = None) -> None:
    """One mirror of CHECKPOINT_DIR; the event only when S3 changed. Raise store.StoreError.

    Only the job's helper mirrors: the mirror deletes what the volume lacks, so the helpers
    of other nodes (whose learners do not write the job's checkpoints) would undo it.
    """
    if not cfg.primary:
        return
    done = ckpt.sync(plan)
    if done.uploaded or done.deleted:
        emit(
            EVENT_CHECKPOINT_SYNCED,
            files=done.files,
            uploaded=done.uploaded,
            deleted=done.deleted,
            at=round(time.time(), 3),
        )


def next_sync_at(ended: float, took_s: float, interval_s: float) -> float:
    """When the next periodic sync may start (time.monotonic), after one that ended at `ended`
    and took `took_s` seconds: SYNC_PACE times its duration later, so a costly sync (a large
    checkpoint, a slow or distant store, a busy machine) is paced by its cost; a cheap one (a
    scan that found nothing new) still after CHECKPOINT_SCAN_S; and never later than the
    job's interval, so a checkpoint reaches the store within one interval whatever the cost.
    """
    pause = max(CHECKPOINT_SCAN_S, SYNC_PACE * took_s)
    return ended + min(pause, max(interval_s, CHECKPOINT_SCAN_S))


def tick(cfg: HelperConfig, ckpt: CheckpointSync, logs: LearnerLogs, with_logs: bool) -> bool:
    """One sync while the learners train; False after a store hiccup (reported).

    A new checkpoint takes the logs along, uploaded first: a gang restarted from a
    checkpoint must find every line the learners printed before it, or its log stream
    would have a hole. So the checkpoints to ship are chosen before the logs are read: one
    saved while they upload (its line perhaps not in them) waits for the next tick.
    """
    try:
        plan = ckpt.plan() if cfg.primary else None
        if with_logs or (plan is not None and plan.changes):
            logs.upload_changed()
        if plan is not None:
            sync_checkpoints(cfg, ckpt, plan)
        return True
    except store.StoreError as exc:
        say(f"periodic sync failed, trying again in {cfg.checkpoint_interval_s:g} s: {exc.message}")
        return False


def sync_metrics(metrics: MetricFiles) -> bool:
    """Upload the metric files that changed; False after a store hiccup (reported)."""
    try:
        metrics.upload_changed()
        return True
    except store.StoreError as exc:
        say(f"metric files could not be stored, trying again later: {exc.message}")
        return False


def report_usage(paths: JobPaths, learners: tuple[int, ...]) -> None:
    """The `usage` event: what this node's learners' containers used, as their wrappers
    left it (none for a learner killed from outside: it left nothing)."""
    used = {str(i): u for i in learners if (u := usage.read(paths.learner_usage(i)))}
    if used:
        emit(EVENT_USAGE, learners=used)


def finish(
    cfg: HelperConfig,
    client,
    paths: JobPaths,
    ckpt: CheckpointSync,
    logs: LearnerLogs,
    metrics: MetricFiles | None = None,
    ran: tuple[int, ...] = (),
) -> int:
    """The last checkpoint sync, what the learners that `ran` used, then results and learner
    logs into the results bucket.

    A failed checkpoint sync does not stop the results and logs from being stored; the
    helper then exits with its error.
    """
    first_error: store.StoreError | None = None
    try:
        sync_checkpoints(cfg, ckpt)
    except store.StoreError as exc:
        say(f"the last checkpoint sync failed: {exc.message}")
        first_error = exc
    report_usage(paths, ran)
    prefix = results_prefix(cfg.job_id)
    try:
        store.ensure_bucket(client, cfg.results_bucket)
        files, size = store.upload_tree(client, paths.result_dir, cfg.results_bucket, prefix)
        if metrics is not None:
            metrics.upload_changed()
        stored = logs.local()
        for i in stored:
            logs.upload(i)
    except store.StoreError as exc:
        return fail(exc.exit_code, exc.code, exc.message)
    if first_error is not None:
        return fail(first_error.exit_code, first_error.code, first_error.message)
    missing = sorted(set(cfg.learners) - set(stored))
    if missing:
        say(f"no log from learner(s) {', '.join(map(str, missing))}")
    say(
        f"stored {files} result files ({size} bytes) and {len(stored)} logs in s3://{cfg.results_bucket}/{prefix}"
    )
    emit(EVENT_STORED, bucket=cfg.results_bucket, prefix=prefix, results=files, logs=len(stored))
    # A next gang on this same volume must restore and wait for a new data_ready.
    paths.ready_mark.unlink(missing_ok=True)
    return HELPER_EXIT_OK


def run(
    env: dict[str, str],
    stop: threading.Event | None = None,
    started: float | None = None,
    resumed: bool = False,
) -> int:
    """The whole helper; `stop` is set by the finish signals (handlers installed if None);
    `started`: the process's start (time.monotonic), for the line that says where the time
    to data_ready went (a gang's restart waits for it); `resumed`: resume.fast_start already
    released the learners on the volume as it was (adopted here, as a rejoin does)."""
    steps = Steps(started)
    if stop is None:
        stop = threading.Event()
        for sig in (signal.SIGUSR1, signal.SIGTERM):
            signal.signal(sig, lambda _signum, _frame: stop.set())

    try:
        cfg = HelperConfig.from_env(with_secret_file(env))
    except ConfigError as exc:
        return fail(EXIT_BAD_CONFIG, "bad_config", f"helper misconfigured: {exc}")
    paths = JobPaths.from_env(env)
    for d in (
        paths.data_dir,
        paths.code_dir,
        paths.result_dir,
        paths.checkpoint_dir,
        paths.log_dir,
    ):
        volume.real_dirs(paths.job_dir, d)  # a learner of an earlier run may have left a link
    diskwatch.start(paths.job_dir, env, emit, stop)
    client = store.make_client(cfg.endpoint, cfg.access_key, cfg.secret_key, cfg.region)
    steps.done("store client")
    ckpt = CheckpointSync(client, cfg.results_bucket, cfg.checkpoint_prefix, paths.checkpoint_dir)
    logs = LearnerLogs(client, cfg.results_bucket, cfg.job_id, paths.log_dir)
    metrics = MetricFiles(client, cfg.results_bucket, cfg.job_id, paths.log_dir, cfg.learners)
    rejoin = paths.ready_mark.exists()
    if not rejoin:
        problem = check_own_store(cfg)
        if problem is not None:
            return fail(HELPER_EXIT_CONNECTION_UNREACHABLE, "store_unreachable", problem)

    try:
        if resumed:
            logs.adopt(cfg.learners)
            ckpt.adopt()
        elif rejoin:
            say("data_ready mark found: rejoining running learners, the volume is up to date")
            logs.adopt(cfg.learners)
            ckpt.adopt()
        else:
            restore(cfg, paths, logs, ckpt, stop)
            steps.done("restore")
            prepare(cfg, client, paths, stop)
            steps.done("data and code")
    except store.Interrupted:
        say("finish signal while downloading: storing what there is")
        return finish(cfg, client, paths, ckpt, logs, metrics)
    except store.StoreError as exc:
        return fail(exc.exit_code, exc.code, exc.message)
    except UnsafeArchive as exc:
        return fail(HELPER_EXIT_BAD_ARCHIVE, "bad_archive", f"code archive refused: {exc}")

    if not rejoin:
        # A gang before this one on the same volume left its exit codes.
        for i in cfg.learners:
            paths.learner_exit(i).unlink(missing_ok=True)
            paths.learner_usage(i).unlink(missing_ok=True)
    if not resumed:  # else fast_start did both
        volume.write_mark(paths.ready_mark)
        say(f"data ready {steps.summary()}")
        emit(EVENT_DATA_READY)
    interval = cfg.checkpoint_interval_s
    # A checkpoint goes to S3 soon after the learner has written it (a local scan every
    # CHECKPOINT_SCAN_S finds it; an unchanged directory costs no S3 call; a sync that
    # shipped waits SYNC_PACE times its duration: next_sync_at), so a node that dies takes
    # little more than the work done since the learner's last checkpoint. Logs go every
    # interval_s.
    next_logs, next_try = time.monotonic() + interval, 0.0
    next_metrics = time.monotonic() + METRICS_SYNC_S
    presence = LearnerPresence(paths, cfg.learners)
    # A gang all here may be restarted in place (presence.py): its logs' new run marked.
    watch = (
        RestartWatch(presence, paths.ready_mark, lambda: mark_new_run(logs, cfg.learners), say)
        if len(cfg.learners) == cfg.num_learners
        else None
    )
    wake_s = PRESENCE_POLL_S if cfg.finish_on_exit else CHECKPOINT_SCAN_S
    while not stop.wait(wake_s):
        if cfg.finish_on_exit and (watch.look() if watch else presence.all_ended()):
            say("every learner of this node has exited")
            break
        now = time.monotonic()
        if now >= next_metrics:
            # S3 down: wait longer before the next try, as the checkpoint sync does.
            next_metrics = now + (METRICS_SYNC_S if sync_metrics(metrics) else max(interval, 10))
        if not interval or now < next_try:
            continue
        logs_due = now >= next_logs
        ok = tick(cfg, ckpt, logs, with_logs=logs_due)
        ended = time.monotonic()
        # S3 down: no retry storm; else paced by what this sync cost.
        next_try = next_sync_at(ended, ended - now, interval) if ok else now + interval
        if logs_due:
            next_logs = now + interval
    say("finish signal received: storing checkpoints, results and logs")
    return finish(cfg, client, paths, ckpt, logs, metrics, ran=cfg.learners)


def mark_new_run(logs: LearnerLogs, learners: tuple[int, ...]) -> None:
    """The learners' new run marked in their logs (a restart in place on a swarm). S3 not
    answering leaves the old start: a live stream then skips the last run's own lines,
    which the stored log still holds."""
    try:
        logs.new_run(learners)
    except (store.StoreError, OSError) as exc:
        say(f"the restarted learners' new run is not marked in their logs: {exc}")


def main() -> int:
    return run(dict(os.environ))


if __name__ == "__main__":
    sys.exit(main())
