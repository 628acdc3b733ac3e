"""A small REST client for the dlaas API, used by the CLI (and usable from scripts).

`DlaasClient(url, token)` wraps httpx; an error reply becomes `ApiError` (status, error
code, message, problems) and an unreachable server `Unreachable`, so callers print a
clear line instead of a traceback. `load_config(state_dir)` reads the client.json that
`dlaas up` writes.
"""

from __future__ import annotations

import io
import json
import os
import queue
import tarfile
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar
from urllib.parse import quote

import httpx

# What `submit --code DIR` leaves out of the archive it packs.
T = TypeVar("T")

# How long a followed log stream waits for the API to answer again after its connection broke
# (an API process restarted by the supervisor answers within about a second).
FOLLOW_RECONNECT_S = 30.0
# A stream that breaks this many times in a row without a new line is given up.
FOLLOW_MAX_BARREN_BREAKS = 5
_SKIP_DIRS = frozenset({"__pycache__", ".git", ".hg", ".svn", ".venv", ".mypy_cache"})


def _seg(value: str) -> str:
    """`value` as one URL path segment: '/', '?', '#' and '%' escaped, and '.' or '..'
    spelled out, so no id or name can reach another route (`dlaas show ../users`)."""
    out = quote(str(value), safe="")
    return out.replace(".", "%2E") if out in (".", "..") else out


def _path(value: str) -> str:
    """A key of several segments ('dir/file'), each one escaped as `_seg` does."""
    return "/".join(_seg(part) for part in value.split("/"))


class ClientError(Exception):
    """Anything the CLI reports as one line."""


class Unreachable(ClientError):
    pass


class NotConfigured(ClientError):
    pass


@dataclass
class ApiError(ClientError):
    status: int
    code: str
    message: str
    problems: list[str] = field(default_factory=list)

    def __str__(self) -> str:
        return self.message


@dataclass(frozen=True)
class ClientConfig:
    url: str
    token: str
    admin_token: str = ""

    def __repr__(self) -> str:  # never show tokens
        return f"ClientConfig(url={self.url!r})"


def load_config(state_dir: Path, url: str | None = None, token: str | None = None) -> ClientConfig:
    """client.json in `state_dir`, overridden by `url`/`token` (flags or $DLAAS_URL/$DLAAS_TOKEN)."""
    data: dict[str, Any] = {}
    path = Path(state_dir) / "client.json"
    if path.exists():
        try:
            data = json.loads(path.read_text())
        except ValueError:
            raise NotConfigured(f"{path} is not valid JSON; run `dlaas up` again") from None
    url = url or os.environ.get("DLAAS_URL") or data.get("url")
    token = token or os.environ.get("DLAAS_TOKEN") or data.get("token")
    if not url or not token:
        raise NotConfigured(
            f"no API address/token: run `dlaas up` (writes {path}) or pass --url and --token"
        )
    admin_token = data.get("admin_token", "")
    admin_path = Path(state_dir) / "admin.json"
    if admin_path.exists():
        try:
            admin_token = json.loads(admin_path.read_text()).get("admin_token", admin_token)
        except ValueError:
            raise NotConfigured(f"{admin_path} is not valid JSON; run `dlaas up` again") from None
    return ClientConfig(url.rstrip("/"), token, admin_token)


def pack_code(path: Path) -> tuple[bytes, str]:
    """(archive bytes, file name) for `--code`: a directory is packed to tar.gz in memory."""
    path = Path(path)
    if path.is_file():
        return path.read_bytes(), path.name
    if not path.is_dir():
        raise ClientError(f"--code: {path} is neither a directory nor an archive")
    root = path.resolve()
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tar:
        for item in sorted(root.rglob("*")):
            rel = item.relative_to(root)
            if any(part in _SKIP_DIRS for part in rel.parts) or item.suffix == ".pyc":
                continue
            if item.is_symlink():
                target = item.resolve()
                if not target.is_relative_to(root):
                    raise ClientError(f"--code: {rel} links outside {path} (to {target})")
            if item.is_dir() and not item.is_symlink():
                continue  # directories come with their files
            tar.add(item, arcname=rel.as_posix(), recursive=False)
    return buf.getvalue(), f"{path.name or 'code'}.tar.gz"


class DlaasClient:
    def __init__(
        self, url: str, token: str, timeout: float = 30.0, http: httpx.Client | None = None
    ):
        self.url = url.rstrip("/")
        self._http = http or httpx.Client(
            base_url=self.url,
            headers={"Authorization": f"Bearer {token}"},
            timeout=httpx.Timeout(timeout, read=None),  # log streams wait as long as jobs run
        )

    @classmethod
    def from_config(cls, config: ClientConfig, admin: bool = False) -> DlaasClient:
        token = config.admin_token if admin else config.token
        if admin and not token:
            raise NotConfigured(
                "no admin token: administrators run this where `dlaas up` wrote admin.json, "
                "or pass --token with an admin's token"
            )
        return cls(config.url, token)

    def close(self) -> None:
        self._http.close()

    # --- plumbing -------------------------------------------------------------------

    def _raise_for(self, r: httpx.Response) -> None:
        if r.is_success:
            return
        try:
            body = r.json()
        except ValueError:
            body = {}
        if not isinstance(body, dict):
            body = {}
        raise ApiError(
            r.status_code,
            body.get("error", f"http_{r.status_code}"),
            body.get("message") or f"the server answered {r.status_code} {r.reason_phrase}",
            list(body.get("problems") or []),
        )

    def _request(self, method: str, path: str, **kw) -> httpx.Response:
        try:
            r = self._http.request(method, path, **kw)
        except httpx.TransportError as exc:
            raise Unreachable(
                f"cannot reach the dlaas API at {self.url} ({exc.__class__.__name__}); "
                "is the platform up? (`dlaas up`, `dlaas status`)"
            ) from None
        self._raise_for(r)
        return r

    def _stream(
        self, path: str, params: dict[str, Any], read: Callable[[httpx.Response], Iterator[T]]
    ) -> Iterator[T]:
        """`read(response)`'s items; a connection lost at any point, even mid-body, is
        `Unreachable` (the reading happens inside, so no raw transport error escapes)."""
        try:
            with self._http.stream("GET", path, params=params) as r:
                if not r.is_success:
                    r.read()
                    self._raise_for(r)
                yield from read(r)
        except httpx.TransportError as exc:
            raise Unreachable(
                f"lost the connection to {self.url} ({exc.__class__.__name__})"
            ) from None

    # --- API ------------------------------------------------------------------------

    def health(self) -> dict:
        return self._request("GET", "/health").json()

    def submit(self, manifest_text: str, code: bytes | None = None, code_name: str = "") -> dict:
        files: dict[str, Any] = {
            "manifest": ("manifest.yml", manifest_text.encode(), "application/yaml")
        }
        if code is not None:
            files["code"] = (code_name or "code.tar.gz", code, "application/octet-stream")
        return self._request("POST", "/v1/jobs", files=files).json()

    def list_jobs(self, status: str | None = None, offset: int = 0, limit: int = 50) -> dict:
        params: dict[str, Any] = {"offset": offset, "limit": limit}
        if status:
            params["status"] = status
        return self._request("GET", "/v1/jobs", params=params).json()

    def get_job(self, job_id: str) -> dict:
        return self._request("GET", f"/v1/jobs/{_seg(job_id)}").json()

    def halt(self, job_id: str) -> dict:
        return self._request("POST", f"/v1/jobs/{_seg(job_id)}/halt").json()

    def resume(self, job_id: str) -> dict:
        return self._request("POST", f"/v1/jobs/{_seg(job_id)}/resume").json()

    def scale(self, job_id: str, learners: int) -> dict:
        return self._request(
            "POST", f"/v1/jobs/{_seg(job_id)}/scale", json={"learners": learners}
        ).json()

    def delete(self, job_id: str, purge: bool = False) -> dict:
        """Delete the job; the reply says where its results stay, or that a purge is queued."""
        params = {"purge": "true"} if purge else {}
        return self._request("DELETE", f"/v1/jobs/{_seg(job_id)}", params=params).json()

    # --- accounts (administrators) and data ----------------------------------------

    def me(self) -> dict:
        return self._request("GET", "/v1/me").json()

    def add_user(self, name: str, team: str, admin: bool = False, expires_days: float = 0) -> dict:
        body = {"name": name, "team": team, "admin": admin, "expires_days": expires_days}
        return self._request("POST", "/v1/users", json=body).json()

    def issue_token(self, name: str, expires_days: float = 0) -> dict:
        return self._request(
            "POST", f"/v1/users/{_seg(name)}/tokens", json={"expires_days": expires_days}
        ).json()

    def users(self) -> list[dict]:
        return self._request("GET", "/v1/users").json()

    def revoke(self, who: str) -> dict:
        return self._request("POST", "/v1/revoke", json={"who": who}).json()

    def teams(self) -> list[dict]:
        return self._request("GET", "/v1/teams").json()

    def add_team(
        self,
        name: str,
        gpus: int,
        cpus: float,
        memory_mb: int,
        max_priority: int | None = None,
        storage_quota_bytes: int | None = None,
        default_duration_s: int | None = None,
        max_duration_s: int | None = None,
    ) -> dict:
        body = {"name": name, "gpus": gpus, "cpus": cpus, "memory_mb": memory_mb}
        optional = {
            "max_priority": max_priority,
            "storage_quota_bytes": storage_quota_bytes,
            "default_duration_s": default_duration_s,
            "max_duration_s": max_duration_s,
        }
        body.update({k: v for k, v in optional.items() if v is not None})
        return self._request("POST", "/v1/teams", json=body).json()

    def set_max_priority(self, name: str, max_priority: int) -> dict:
        body = {"max_priority": max_priority}
        return self._request("PUT", f"/v1/teams/{_seg(name)}/max-priority", json=body).json()

    def set_storage_quota(self, name: str, storage_quota_bytes: int) -> dict:
        body = {"storage_quota_bytes": storage_quota_bytes}
        return self._request("PUT", f"/v1/teams/{_seg(name)}/storage-quota", json=body).json()

    def set_run_times(
        self, name: str, default_duration_s: int | None, max_duration_s: int | None
    ) -> dict:
        body = {"default_duration_s": default_duration_s, "max_duration_s": max_duration_s}
        body = {k: v for k, v in body.items() if v is not None}
        return self._request("PUT", f"/v1/teams/{_seg(name)}/run-times", json=body).json()

    def set_quota(self, name: str, gpus: int, cpus: float, memory_mb: int) -> dict:
        body = {"gpus": gpus, "cpus": cpus, "memory_mb": memory_mb}
        return self._request("PUT", f"/v1/teams/{_seg(name)}/quota", json=body).json()

    def nodes(self) -> dict:
        return self._request("GET", "/v1/nodes").json()

    def set_node_availability(self, name: str, availability: str) -> dict:
        body = {"availability": availability}
        return self._request("PUT", f"/v1/nodes/{_seg(name)}/availability", json=body).json()

    def usage(
        self, *, team: str = "", user: str = "", since: str = "", until: str = "", by: str = "user"
    ) -> dict:
        """GET /v1/usage: allocated GPU-, CPU- and memory-hours by UTC day."""
        params = {"team": team, "user": user, "since": since, "until": until, "by": by}
        return self._request(
            "GET", "/v1/usage", params={k: v for k, v in params.items() if v}
        ).json()

    def audit(self, offset: int = 0, limit: int = 100) -> dict:
        return self._request("GET", "/v1/audit", params={"offset": offset, "limit": limit}).json()

    def add_hook(self, url: str, events: list[str]) -> dict:
        return self._request("POST", "/v1/hooks", json={"url": url, "events": events}).json()

    def hooks(self) -> list[dict]:
        return self._request("GET", "/v1/hooks").json()

    def delete_hook(self, hook_id: str) -> None:
        self._request("DELETE", f"/v1/hooks/{_seg(hook_id)}")

    def hook_deliveries(self, hook_id: str, offset: int = 0, limit: int = 50) -> dict:
        return self._request(
            "GET", f"/v1/hooks/{_seg(hook_id)}/deliveries",
            params={"offset": offset, "limit": limit},
        ).json()  # fmt: skip

    def data_buckets(self) -> list[str]:
        return self._request("GET", "/v1/data").json()

    def data_list(self, bucket: str, prefix: str = "") -> dict:
        return self._request("GET", f"/v1/data/{_seg(bucket)}", params={"prefix": prefix}).json()

    def data_upload(self, bucket: str, key: str, path: Path) -> dict:
        with open(path, "rb") as f:
            return self._request("PUT", f"/v1/data/{_seg(bucket)}/{_path(key)}", content=f).json()

    def queue(self) -> dict:
        return self._request("GET", "/v1/queue").json()

    def logs(
        self, job_id: str, learner: int = 0, offset: int = 0, follow: bool = False
    ) -> Iterator[str]:
        """Log lines; with `follow`, resumes after a dropped connection at the line reached."""
        seen, barren = offset, 0
        while True:
            params = {"learner": learner, "offset": seen, "follow": str(follow).lower()}
            reached = seen
            try:
                for line in self._stream(
                    f"/v1/jobs/{_seg(job_id)}/logs", params, httpx.Response.iter_lines
                ):
                    seen += 1
                    yield line
                return
            except Unreachable:
                barren = 0 if seen > reached else barren + 1
                if not follow or barren >= FOLLOW_MAX_BARREN_BREAKS:
                    raise
                # The API process serving the stream died (or restarts): once an API answers
                # again, resume at the line reached, so nothing is missed or shown twice.
                self._wait_answering(FOLLOW_RECONNECT_S)

    def metrics(self, job_id: str, learner: int = 0, max_points: int = 1000) -> dict:
        """A learner's series: {"job_id", "learner", "series": {name: [[step, value], ...]}},
        each series downsampled to `max_points` over the whole run (its first and last
        point kept; 0: every point the API keeps, a page of them)."""
        params = {"learner": learner, "max_points": max_points}
        return self._request("GET", f"/v1/jobs/{_seg(job_id)}/metrics", params=params).json()

    def follow_metrics(self, job_id: str, learner: int = 0) -> Iterator[dict]:
        """Points {"name", "step", "value", "line"} as the learner logs them, until the job ends."""
        params = {"learner": learner, "follow": "true"}

        def read(r: httpx.Response) -> Iterator[dict]:
            for line in r.iter_lines():
                if line:
                    yield json.loads(line)

        return self._stream(f"/v1/jobs/{_seg(job_id)}/metrics", params, read)

    def follow_learners(
        self, job_id: str, learners: Sequence[int], offset: int = 0
    ) -> Iterator[tuple[int, str]]:
        """(learner, line) of several learners' logs, interleaved as they come, until the
        job ends. One stream per learner, each read in a thread of its own; the first
        error of any stream is raised here once the lines before it are given."""
        lines: queue.Queue[tuple[int, str | None, BaseException | None]] = queue.Queue()
        stop = threading.Event()

        def read(learner: int) -> None:
            try:
                for line in self.logs(job_id, learner=learner, offset=offset, follow=True):
                    if stop.is_set():  # the caller stopped reading: end at the next line
                        return
                    lines.put((learner, line, None))
            except BaseException as exc:  # noqa: BLE001 - broad: Ctrl-C too; raised in the caller
                lines.put((learner, None, exc))
                return
            lines.put((learner, None, None))

        for learner in learners:
            name = f"logs-{job_id}-{learner}"
            threading.Thread(target=read, args=(learner,), name=name, daemon=True).start()
        try:
            for _ in learners:  # until every stream has ended
                while True:
                    learner, line, error = lines.get()
                    if error is not None:
                        raise error
                    if line is None:
                        break
                    yield learner, line
        finally:
            stop.set()

    def _wait_answering(self, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        pause = 0.05
        while True:
            try:
                self.health()
                return
            except Unreachable:
                if time.monotonic() + pause > deadline:
                    raise
                time.sleep(pause)
                pause = min(pause * 2, 1.0)

    def download(self, job_id: str) -> Iterator[bytes]:
        yield from self._stream(f"/v1/jobs/{_seg(job_id)}/results", {}, httpx.Response.iter_bytes)
