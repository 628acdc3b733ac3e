"""Fuzzing the REST API: no generated request, valid or not, gets a 5xx answer.

Requests come from the app's own OpenAPI spec (schemathesis: positive and negative
cases for every operation), sent with alice's, bob's or no token, against the same
app, real LCM on port fakes and FAKE scheduler as test_api.py. Path job ids are often swapped for real
jobs of either user, so the requests reach past the 404. A second test sends manifests
as JSON objects: a valid manifest with fields replaced by arbitrary JSON values, the
input that once left ghost jobs (numbers no proto can carry) or gave 500s.
"""

from __future__ import annotations

import json

import pytest
import test_api
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from test_api import ADMIN, ALICE, BOB, auth

from dlaas.domain.manifest import parse_manifest
from services.lcm.service import Lcm

schemathesis = pytest.importorskip("schemathesis")
from schemathesis.generation import GenerationMode

# The same fakes, app and environment as test_api.py (see its docstring); tests/unit is
# on sys.path while pytest collects, so its module imports by name.
env = test_api.env

FUZZ = settings(
    max_examples=400,
    deadline=None,
    derandomize=True,  # the same requests every run: a failure here is reproducible
    database=None,
    suppress_health_check=list(HealthCheck),
)

TOKENS = st.sampled_from([ALICE, ALICE, BOB, BOB, None])


def _seed(env) -> list[str]:
    """A few jobs of alice and bob, some still QUEUED, one finished."""
    ids = []
    for token in (ALICE, ALICE, BOB):
        r = env.submit(token=token, manifest=env.manifest(learners=2, elastic=(1, 4)))
        assert r.status_code == 201, r.text
        ids.append(r.json()["job_id"])
    env.finish(ids[1])
    return ids


def _answer(r) -> str:
    return f"{r.request.method} {r.request.url} -> {r.status_code}: {r.text[:500]}"


def test_generated_requests_never_get_a_5xx(env):
    app = env.client.app
    schema = schemathesis.openapi.from_asgi("/openapi.json", app)
    operations = [result.ok() for result in schema.get_all_operations()]
    assert len(operations) >= 10  # every route is in the spec
    ids = _seed(env)
    modes = [GenerationMode.POSITIVE, GenerationMode.NEGATIVE]
    strategies = [op.as_strategy(generation_mode=mode) for op in operations for mode in modes]
    seen: list[int] = []

    @FUZZ
    @given(
        case=st.one_of(strategies),
        token=TOKENS,
        job=st.sampled_from(ids) | st.none(),
    )
    def one(case, token, job):
        if job is not None and "job_id" in (case.path_parameters or {}):
            case.path_parameters["job_id"] = job
        if case.path.endswith(("/logs", "/metrics")) and isinstance(case.query, dict):
            case.query["follow"] = False  # a follow on a running job streams until it ends
        # The spec's bearer scheme makes schemathesis generate an Authorization header of
        # its own (often junk): it is replaced by a real token, or kept when none is drawn.
        if token:
            case.headers = {**(case.headers or {}), **auth(token)}
        r = case.call()
        seen.append(r.status_code)
        assert r.status_code < 500, _answer(r)
        assert "Traceback" not in r.text

    one()
    assert len(seen) >= 200
    assert any(400 <= s < 500 for s in seen) and any(s < 300 for s in seen)


JSON_VALUES = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**80), max_value=2**80)
    | st.floats()  # NaN and infinities included; json.dumps writes them as JS literals
    | st.text(max_size=20),
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4)
    ),
    max_leaves=12,
)
# Values at the edges of what a proto, SQLite or Docker carries, drawn as often as the rest.
EDGES = st.sampled_from(
    [
        0, 1, 5, 6, -1, 2**31 - 1, 2**31, -(2**31) - 1, 2**63, 2**64, 10**30,
        1e26, 1e308, -1e-300, 0.001, float("inf"), float("nan"), True,
        "", "x\0y", "\ud800", "1e26", "9" * 40, "512MiB", "1e26GiB", "high",
        {"A": "x\0y"}, {"A": 2**70}, {"interval_s": 2**63}, {"x": [[[[[[1]]]]]]},
        [{"id": "a", "type": "s3", "connection": {"endpoint": "gopher://x"}}],
        {"name": "python", "command": "run\0"}, {"name": "python", "command": "x" * 40_000},
    ]
)  # fmt: skip
VALUES = st.one_of(EDGES, EDGES, EDGES, JSON_VALUES)  # edges 3 times in 4
FIELDS = st.sampled_from(
    [
        "name", "description", "version", "learners", "cpus", "gpus", "gpu_type", "memory",
        "priority", "min_learners", "max_learners", "max_restarts", "env", "checkpoint",
        "evaluation_metrics", "data_stores", "framework",
    ]
)  # fmt: skip


def test_fuzzed_manifests_are_refused_with_a_4xx_or_accepted_never_a_5xx(env):
    base = yaml.safe_load(env.manifest())
    answers: list[int] = []

    @FUZZ
    @given(change=st.dictionaries(FIELDS, VALUES, min_size=1, max_size=2))
    def one(change):
        body = json.dumps({**base, **change})
        r = env.client.post(
            "/v1/jobs",
            content=body,
            headers={**auth(ALICE), "Content-Type": "application/json"},
        )
        answers.append(r.status_code)
        assert r.status_code in (201, 413, 422), _answer(r)
        if r.status_code == 201:
            job_id = r.json()["job_id"]
            got = env.client.get(f"/v1/jobs/{job_id}", headers=auth(ALICE))
            assert got.status_code == 200, _answer(got)
            # What the API accepts, the LCM can hand on: the gang fits the scheduler's
            # proto (int32, int64, double), and no text bound for Docker holds a NUL.
            record = env.store.get(job_id)
            m = parse_manifest(record.manifest_yaml)
            Lcm._gang(record, m)  # raises ValueError on a number the proto cannot carry
            docker_text = [m.framework.command, *m.env.keys(), *m.env.values()]
            assert not any("\0" in t for t in docker_text), body
        else:
            assert r.json()["problems"], r.text

    one()
    total = env.client.get("/v1/jobs", headers=auth(ADMIN)).json()["total"]
    assert total == answers.count(201)  # a refused manifest stored nothing
    assert 0 < answers.count(201) < len(answers)
