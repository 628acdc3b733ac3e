"""The helper container of a job: `python3 -m services.learner_helper`.

One per job, started by the LCM together with the learners, on the job's network with
the job volume at /job. It
1. downloads every object of DLAAS_DATA_BUCKET[/DLAAS_DATA_PREFIX] into DATA_DIR,
2. downloads DLAAS_CODE_BUCKET/DLAAS_CODE_KEY (a .tar.gz) and extracts it SAFELY into
   CODE_DIR,
3. touches DATA_READY_MARK (the learner wrappers wait for it) and prints the
   `data_ready` event,
4. waits for SIGUSR1 (HELPER_FINISH_SIGNAL, sent by the LCM when the learners are done)
   or SIGTERM, then uploads RESULT_DIR/** to DLAAS_RESULTS_BUCKET under
   results_prefix(JOB_ID) and LOG_DIR/learner-<i>.log to log_object_key(JOB_ID, i),
   prints the `stored` event and exits 0.
A finish signal during step 1 or 2 skips straight to step 4 (then only logs exist).

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
  DLAAS_JOB_DIR           optional, default /job (tests run the helper outside a container)

Events (stdout, one line each, dlaas.jobspec.format_event): data_ready, stored, and
error {code, message} right before a non-zero exit. Exit codes: dlaas.jobspec
HELPER_EXIT_* (10 data not found, 11 store refused, 12 upload failed, 13 bad archive),
1 object store unreachable, 2 bad helper env.
"""

from __future__ import annotations

import os
import re
import signal
import sys
import tempfile
import threading
from dataclasses import dataclass
from pathlib import Path

from dlaas.jobspec import (
    EVENT_DATA_READY,
    EVENT_ERROR,
    EVENT_STORED,
    HELPER_EXIT_BAD_ARCHIVE,
    HELPER_EXIT_OK,
    format_event,
    log_object_key,
    results_prefix,
)
from dlaas.learner.paths import JobPaths
from services.learner_helper import store
from services.learner_helper.archive import UnsafeArchive, safe_extract

EXIT_BAD_CONFIG = 2
_LOG_RE = re.compile(r"^learner-(\d+)\.log$")


class ConfigError(ValueError):
    pass


@dataclass(frozen=True)
class HelperConfig:
    job_id: str
    num_learners: int
    endpoint: str
    access_key: str
    secret_key: str
    region: str
    data_bucket: str
    data_prefix: str
    results_bucket: str
    code_bucket: str
    code_key: str
    code_endpoint: str = ""
    code_access_key: str = ""
    code_secret_key: str = ""

    def __repr__(self) -> str:  # never show the secret, even in a traceback
        return f"HelperConfig(job_id={self.job_id!r}, endpoint={self.endpoint!r}, ...)"

    @classmethod
    def from_env(cls, env: dict[str, str]) -> HelperConfig:
        def get(name: str) -> str:
            return (env.get(name) or "").strip()

        missing = [
            n
            for n in (
                "JOB_ID",
                "DLAAS_S3_ENDPOINT",
                "AWS_ACCESS_KEY_ID",
                "AWS_SECRET_ACCESS_KEY",
                "DLAAS_RESULTS_BUCKET",
            )
            if not get(n)
        ]
        if missing:
            raise ConfigError(f"missing env: {', '.join(missing)}")
        try:
            num_learners = int(get("NUM_LEARNERS") or "1")
            if num_learners < 1:
                raise ValueError
        except ValueError:
            raise ConfigError("NUM_LEARNERS must be a positive integer") from None
        if bool(get("DLAAS_CODE_BUCKET")) != bool(get("DLAAS_CODE_KEY")):
            raise ConfigError("DLAAS_CODE_BUCKET and DLAAS_CODE_KEY must be set together")
        code_store = ("DLAAS_CODE_ENDPOINT", "DLAAS_CODE_ACCESS_KEY", "DLAAS_CODE_SECRET_KEY")
        if any(get(n) for n in code_store) and not all(get(n) for n in code_store):
            raise ConfigError(f"{', '.join(code_store)} must be set together")
        return cls(
            job_id=get("JOB_ID"),
            num_learners=num_learners,
            endpoint=get("DLAAS_S3_ENDPOINT"),
            access_key=get("AWS_ACCESS_KEY_ID"),
            secret_key=get("AWS_SECRET_ACCESS_KEY"),
            region=get("AWS_DEFAULT_REGION") or "us-east-1",
            data_bucket=get("DLAAS_DATA_BUCKET"),
            data_prefix=get("DLAAS_DATA_PREFIX"),
            results_bucket=get("DLAAS_RESULTS_BUCKET"),
            code_bucket=get("DLAAS_CODE_BUCKET"),
            code_key=get("DLAAS_CODE_KEY"),
            code_endpoint=get("DLAAS_CODE_ENDPOINT"),
            code_access_key=get("DLAAS_CODE_ACCESS_KEY"),
            code_secret_key=get("DLAAS_CODE_SECRET_KEY"),
        )


def say(message: str) -> None:
    print(f"helper: {message}", flush=True)


def emit(event: str, **fields: object) -> None:
    print(format_event(event, **fields), flush=True)


def fail(exit_code: int, code: str, message: str) -> int:
    emit(EVENT_ERROR, code=code, message=message)
    return exit_code


def prepare(cfg: HelperConfig, client, paths: JobPaths, stop: threading.Event) -> None:
    """Data and code into the volume. Raises store.StoreError, UnsafeArchive, store.Interrupted."""
    if cfg.data_bucket:
        say(f"downloading s3://{cfg.data_bucket}/{store.folder_prefix(cfg.data_prefix)}")
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


def finish(cfg: HelperConfig, client, paths: JobPaths) -> int:
    """Results and learner logs into the results bucket."""
    prefix = results_prefix(cfg.job_id)
    try:
        store.ensure_bucket(client, cfg.results_bucket)
        files, size = store.upload_tree(client, paths.result_dir, cfg.results_bucket, prefix)
        logs = []
        if paths.log_dir.is_dir():
            for log in sorted(paths.log_dir.iterdir()):
                m = _LOG_RE.match(log.name)
                if m and log.is_file() and not log.is_symlink():
                    key = log_object_key(cfg.job_id, int(m.group(1)))
                    store.upload_file(client, log, cfg.results_bucket, key)
                    logs.append(int(m.group(1)))
    except store.StoreError as exc:
        return fail(exc.exit_code, exc.code, exc.message)
    missing = sorted(set(range(cfg.num_learners)) - set(logs))
    if missing:
        say(f"no log from learner(s) {', '.join(map(str, missing))}")
    say(
        f"stored {files} result files ({size} bytes) and {len(logs)} logs in s3://{cfg.results_bucket}/{prefix}"
    )
    emit(EVENT_STORED, bucket=cfg.results_bucket, prefix=prefix, results=files, logs=len(logs))
    return HELPER_EXIT_OK


def run(env: dict[str, str], stop: threading.Event | None = None) -> int:
    """The whole helper; `stop` is set by the finish signals (handlers installed if None)."""
    if stop is None:
        stop = threading.Event()
        for sig in (signal.SIGUSR1, signal.SIGTERM):
            signal.signal(sig, lambda _signum, _frame: stop.set())

    try:
        cfg = HelperConfig.from_env(env)
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
        d.mkdir(parents=True, exist_ok=True)
    client = store.make_client(cfg.endpoint, cfg.access_key, cfg.secret_key, cfg.region)

    try:
        prepare(cfg, client, paths, stop)
    except store.Interrupted:
        say("finish signal while downloading: storing what there is")
        return finish(cfg, client, paths)
    except store.StoreError as exc:
        return fail(exc.exit_code, exc.code, exc.message)
    except UnsafeArchive as exc:
        return fail(HELPER_EXIT_BAD_ARCHIVE, "bad_archive", f"code archive refused: {exc}")

    paths.ready_mark.touch()
    emit(EVENT_DATA_READY)
    while not stop.wait(0.5):
        pass
    say("finish signal received: storing results and logs")
    return finish(cfg, client, paths)


def main() -> int:
    return run(dict(os.environ))


if __name__ == "__main__":
    sys.exit(main())
