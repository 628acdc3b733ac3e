"""The helper's fast start: a gang restarted on a node whose job volume is as its job's last
run stored it starts training without waiting for boto3.

A restart of a gang (a learner killed, a node's engine lost elsewhere, a rescale) gets new
containers on a volume that, on a node the job ran on before, still holds the data, the
code, the checkpoints and the learner logs. The ordinary start (main.run) imports boto3 and
makes its client first: 0.25 s of CPU, over a second on a loaded node (the chaos run), all
of it before the learners may start. `fast_start` runs before that import (see
services.learner_helper.__main__), in the standard library only (s3lite for three calls),
and releases the learners when the volume is known to be current:

- no DATA_READY_MARK: that is a helper restarted beside running learners (main.run's rejoin);
- PREPARED_MARK in the job dir names this job's data and code: main.prepare writes it once
  both were in place, and removes it before it downloads, so a download cut short leaves none;
- each learner of this node: its log object in S3 is the local log file, byte for byte (same
  size, ETag = the file's MD5, a whole last line): nothing was added to the log since its
  helper stored it, here or by a run on another node;
- the checkpoint prefix in S3 lists exactly the volume's checkpoint files (names, sizes): no
  run elsewhere checkpointed since.

Then it does what LearnerLogs.restore would: each log object whose run start (RUN_START_META)
is not its line count is stored again with it, before the learners are released (the log
reader's contract, dlaas.adapters.logs); the learners' exit files of the last run are
removed, DATA_READY_MARK touched and `data_ready` printed. main.run then adopts the volume as
its rejoin does. Anything else, or any failure, leaves the mark alone: the ordinary start
follows and does everything it always did. The data are those of the job's first download
on this node: a restart does not pick up objects changed in the data bucket meanwhile.
"""

from __future__ import annotations

import hashlib
import json
import time
from collections.abc import Callable

from dlaas.domain.jobspec import EVENT_DATA_READY, format_event, log_object_key
from dlaas.learner.paths import RUN_START_META, JobPaths
from services.learner_helper import s3lite
from services.learner_helper.config import ConfigError, HelperConfig, with_secret_file
from services.learner_helper.volume import count_lines, hidden, scan, write_mark

PREPARED_MARK = ".dlaas-prepared"  # in the job dir; hidden, so no sync uploads it


def prepared_stamp(cfg: HelperConfig) -> dict[str, str]:
    """What PREPARED_MARK holds: the job and where its data and code came from. Pure."""
    return {
        "job_id": cfg.job_id,
        "data": f"{cfg.data_bucket}/{cfg.data_prefix}" if cfg.data_bucket else "",
        "code": f"{cfg.code_bucket}/{cfg.code_key}" if cfg.code_key else "",
    }


def mark_prepared(paths: JobPaths, cfg: HelperConfig) -> None:
    """Data and code are in place (main.prepare, after both)."""
    write_mark(paths.job_dir / PREPARED_MARK, json.dumps(prepared_stamp(cfg)))


def forget_prepared(paths: JobPaths) -> None:
    """Data or code are about to change (main.prepare, before any download)."""
    (paths.job_dir / PREPARED_MARK).unlink(missing_ok=True)


def is_prepared(paths: JobPaths, cfg: HelperConfig) -> bool:
    try:
        return json.loads((paths.job_dir / PREPARED_MARK).read_text()) == prepared_stamp(cfg)
    except (OSError, ValueError):
        return False


def checkpoints_match(local: dict[str, int], remote: dict[str, int], prefix: str) -> bool:
    """Whether S3's listing under `prefix` (key -> size) is the volume's checkpoint files
    (name -> size), hidden names left out on both sides. Pure."""
    names = {}
    for key, size in remote.items():
        rel = key.removeprefix(prefix)
        if rel and not rel.endswith("/") and not hidden(rel):
            names[rel] = size
    return names == local


def log_matches(data: bytes, head: dict[str, str] | None) -> bool:
    """Whether the log object (its HEAD, lower-cased headers) is `data`, the local log, byte
    for byte, and `data` ends with a whole line (else restore would add a newline). Pure."""
    if head is None:
        return not data
    if not data.endswith(b"\n"):
        return False
    etag = head.get("etag", "").strip('"')
    return (
        head.get("content-length") == str(len(data))
        and etag == hashlib.md5(data, usedforsecurity=False).hexdigest()
    )


def fast_start(env: dict[str, str], say: Callable[[str], None], started: float) -> bool:
    """Release the learners if the volume is current (see the module docstring); True if it
    did (DATA_READY_MARK touched, `data_ready` printed). Never raises for the store's or the
    volume's sake: False, and the ordinary start does it all."""
    try:
        cfg = HelperConfig.from_env(with_secret_file(env))
    except ConfigError:
        return False  # the ordinary start reports it
    paths = JobPaths.from_env(env)
    if paths.ready_mark.exists() or not is_prepared(paths, cfg):
        return False
    creds = s3lite.Credentials(cfg.endpoint, cfg.access_key, cfg.secret_key, cfg.region)
    try:
        remote = s3lite.list_sizes(creds, cfg.results_bucket, cfg.checkpoint_prefix)
        local = {name: size for name, (size, _) in scan(paths.checkpoint_dir).items()}
        if not checkpoints_match(local, remote, cfg.checkpoint_prefix):
            return False
        stale: list[tuple[int, bytes]] = []
        for i in cfg.learners:
            path = paths.learner_log(i)
            data = path.read_bytes() if path.is_file() else b""
            key = log_object_key(cfg.job_id, i)
            head = s3lite.head(creds, cfg.results_bucket, key)
            if not log_matches(data, head):
                return False
            lines = count_lines(data)
            if head is not None and head.get(f"x-amz-meta-{RUN_START_META}") != str(lines):
                stale.append((i, data))
        for i, data in stale:  # this run's start, before its learners may print
            s3lite.put(
                creds,
                cfg.results_bucket,
                log_object_key(cfg.job_id, i),
                data,
                {RUN_START_META: str(count_lines(data))},
            )
    except (s3lite.S3LiteError, OSError) as exc:
        say(f"fast start not possible ({exc}); restoring from the store")
        return False
    # Broad: the fast start only saves time, and the ordinary start after it does everything
    # (an odd answer of the store must not end the helper before it could report anything).
    except Exception as exc:  # noqa: BLE001 - broad: an optimisation; the cause is printed
        say(f"fast start not possible ({type(exc).__name__}: {exc}); restoring from the store")
        return False
    for i in cfg.learners:
        paths.learner_exit(i).unlink(missing_ok=True)  # the last run's
    write_mark(paths.ready_mark)
    say(
        f"data ready {time.monotonic() - started:.2f} s after the start (fast start: the volume "
        "is as the job's last run stored it)"
    )
    print(format_event(EVENT_DATA_READY), flush=True)
    return True
