"""Where things live in a job container, from the env with the dlaas.domain.jobspec paths as defaults.

Inside a container the defaults always apply (the platform sets DATA_DIR etc. to the
jobspec paths). DLAAS_JOB_DIR moves the whole layout elsewhere, which lets tests run the
helper and the learner wrapper as plain processes. Stdlib only.
"""

from __future__ import annotations

import posixpath
from dataclasses import dataclass
from pathlib import Path

from dlaas.domain import jobspec

# User metadata of a learner's log object in S3 (x-amz-meta-dlaas-run-start-line): how many
# of its lines were written by earlier runs of the job, i.e. before the current learner
# container's first line. The helper writes it, dlaas.adapters.logs reads it (see there). It is a
# contract between the two like those in dlaas.domain.jobspec, where it is meant to move.
RUN_START_META = "dlaas-run-start-line"


def _under(job_dir: str, default: str) -> str:
    return posixpath.join(job_dir, posixpath.relpath(default, jobspec.JOB_MOUNT))


@dataclass(frozen=True)
class JobPaths:
    job_dir: Path
    data_dir: Path
    code_dir: Path
    result_dir: Path
    checkpoint_dir: Path
    log_dir: Path
    ready_mark: Path

    @classmethod
    def from_env(cls, env: dict[str, str]) -> JobPaths:
        job = env.get("DLAAS_JOB_DIR") or jobspec.JOB_MOUNT

        def pick(name: str, default: str) -> Path:
            return Path(env.get(name) or _under(job, default))

        return cls(
            job_dir=Path(job),
            data_dir=pick("DATA_DIR", jobspec.DATA_DIR),
            code_dir=pick("DLAAS_CODE_DIR", jobspec.CODE_DIR),
            result_dir=pick("RESULT_DIR", jobspec.RESULT_DIR),
            checkpoint_dir=pick("CHECKPOINT_DIR", jobspec.CHECKPOINT_DIR),
            log_dir=pick("LOG_DIR", jobspec.LOG_DIR),
            ready_mark=pick("DLAAS_DATA_READY_MARK", jobspec.DATA_READY_MARK),
        )

    def learner_log(self, learner_id: str | int) -> Path:
        return self.log_dir / f"learner-{learner_id}.log"

    def learner_exit(self, learner_id: str | int) -> Path:
        """Written by the wrapper when the learner's command ended: its exit code."""
        return self.log_dir / f"learner-{learner_id}.exit"

    def learner_usage(self, learner_id: str | int) -> Path:
        """Written by the wrapper before its exit code: what its container used (JSON,
        dlaas.learner.usage), which the helper reports. Hidden: no sync uploads it."""
        return self.log_dir / f".learner-{learner_id}.usage"

    def learner_alive(self, learner_id: str | int) -> Path:
        """Locked (flock) by the wrapper for as long as it lives: the kernel drops the lock
        however it ends, SIGKILL included, when it can leave no exit code. Hidden (a dot):
        no sync uploads it."""
        return self.log_dir / f".learner-{learner_id}.alive"
