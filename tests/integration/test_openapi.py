"""The REST API's OpenAPI spec: every error answer documented with the error model, and
the manifest's schema on the submit route.

The spec is what clients and `/docs` read; these tests pin what it promises against what
the routes answer (app.py maps every domain error to a status and an `ErrorReply`).
No server is needed: the spec is built from the app's routes alone.
"""

from __future__ import annotations

import json
from pathlib import Path

import jsonschema_rs
import pytest
import yaml
from test_api import MANIFEST

from dlaas.clients.sdk import LcmClient, SchedulerClient
from dlaas.config import ApiSettings, PlatformSettings
from services.api.app import create_app

ERROR_MODEL = {"$ref": "#/components/schemas/ErrorReply"}
EXAMPLES = Path(__file__).resolve().parents[2] / "examples"

# Each /v1 route's own error statuses, besides the 401 and 503 that every one documents.
OWN_ERRORS = {
    ("post", "/v1/jobs"): {413, 422},
    ("get", "/v1/jobs"): {422},
    ("get", "/v1/jobs/{job_id}"): {404},
    ("post", "/v1/jobs/{job_id}/halt"): {404, 409},
    ("post", "/v1/jobs/{job_id}/resume"): {404, 409},
    ("post", "/v1/jobs/{job_id}/scale"): {404, 409, 422},
    ("get", "/v1/jobs/{job_id}/logs"): {404, 422, 429},
    ("get", "/v1/jobs/{job_id}/metrics"): {404, 422, 429},
    ("get", "/v1/jobs/{job_id}/results"): {404, 422},
    ("delete", "/v1/jobs/{job_id}"): {404, 409, 422},
    ("get", "/v1/queue"): set(),
    ("get", "/v1/nodes"): set(),
    ("put", "/v1/nodes/{name}/availability"): {403, 422},
    ("get", "/v1/me"): set(),
    ("get", "/v1/statuses"): set(),
    ("post", "/v1/users"): {403, 409, 422},
    ("get", "/v1/users"): {403},
    ("post", "/v1/users/{name}/tokens"): {403, 422},
    ("post", "/v1/revoke"): {403, 422},
    ("get", "/v1/teams"): set(),
    ("post", "/v1/teams"): {403, 409, 422},
    ("put", "/v1/teams/{name}/quota"): {403, 422},
    ("put", "/v1/teams/{name}/max-priority"): {403, 422},
    ("put", "/v1/teams/{name}/storage-quota"): {403, 422},
    ("put", "/v1/teams/{name}/run-times"): {403, 422},
    ("get", "/v1/audit"): {403, 422},
    ("get", "/v1/data"): set(),
    ("get", "/v1/data/{bucket}"): {422},
    ("put", "/v1/data/{bucket}/{key}"): {413, 422},
    ("post", "/v1/hooks"): {422},
    ("get", "/v1/hooks"): set(),
    ("delete", "/v1/hooks/{hook_id}"): {404},
    ("get", "/v1/hooks/{hook_id}/deliveries"): {404, 422},
    ("get", "/v1/usage"): {422},
}
PENDING: set[tuple[str, str]] = set()


@pytest.fixture(scope="module")
def spec(tmp_path_factory) -> dict:
    db = tmp_path_factory.mktemp("spec") / "jobs.db"
    nowhere = "127.0.0.1:1"  # never called: building the spec talks to nothing
    settings = PlatformSettings(
        s3_endpoint="http://127.0.0.1:1", s3_access_key="k", s3_secret_key="s",
        s3_bucket="b", store_url=f"sqlite:///{db}", lcm_addr=nowhere, scheduler_addr=nowhere,
    )  # fmt: skip
    app = create_app(
        settings, ApiSettings(admin_token="t"), lcm=LcmClient(nowhere), s3=object(),
        docker=False, scheduler=SchedulerClient(nowhere),
    )  # fmt: skip
    return app.openapi()


def _operations(spec: dict):
    for path, operations in spec["paths"].items():
        for method, operation in operations.items():
            yield method, path, operation


def _error_schema(operation: dict, status: int) -> dict | None:
    answer = operation["responses"].get(str(status), {})
    return answer.get("content", {}).get("application/json", {}).get("schema")


def test_every_v1_route_is_in_the_table(spec):
    routes = {(m, p) for m, p, _ in _operations(spec) if p.startswith("/v1")}
    assert routes == set(OWN_ERRORS)


def test_every_error_answer_is_documented_with_the_error_model(spec):
    for method, path, operation in _operations(spec):
        errors = [int(s) for s in operation["responses"] if s.isdigit() and int(s) >= 400]
        for status in errors:
            assert _error_schema(operation, status) == ERROR_MODEL, (method, path, status)
            assert operation["responses"][str(status)]["description"], (method, path, status)
        if path.startswith("/v1"):
            assert {401, 503} <= set(errors), (method, path)
    # FastAPI's own validation body is never promised: the API answers with ErrorReply.
    assert "HTTPValidationError" not in json.dumps(spec)
    model = spec["components"]["schemas"]["ErrorReply"]
    assert set(model["properties"]) == {"error", "message", "problems"}
    assert set(model["required"]) == {"error", "message"}


@pytest.mark.parametrize(
    ("method", "path"),
    [
        pytest.param(*route, marks=pytest.mark.xfail(strict=True, reason="declared by the delete change"))
        if route in PENDING
        else route
        for route in OWN_ERRORS
    ],
)  # fmt: skip
def test_each_route_documents_its_own_error_statuses(spec, method, path):
    documented = {
        int(s) for s in spec["paths"][path][method]["responses"] if s.isdigit() and int(s) >= 400
    }
    assert documented - {401, 503} >= OWN_ERRORS[(method, path)]


def _manifest_validator(spec: dict):
    """A validator of the documented Manifest schema (its references resolved in the spec)."""
    root = {"components": spec["components"], "$ref": "#/components/schemas/Manifest"}
    return jsonschema_rs.validator_for(root)


def test_the_submit_route_documents_the_manifest_schema(spec):
    body = spec["paths"]["/v1/jobs"]["post"]["requestBody"]["content"]
    assert {"multipart/form-data", "application/yaml", "application/json"} <= set(body)
    assert {"$ref": "#/components/schemas/Manifest"} in body["application/json"]["schema"]["anyOf"]
    manifest = spec["components"]["schemas"]["Manifest"]
    assert {"name", "learners", "cpus", "gpus", "memory", "framework", "data_stores"} <= set(
        manifest["properties"]
    )
    assert manifest["required"] == ["name", "framework"]
    # Every reference in the spec names a schema that is there.
    refs = {
        part.split('"')[0] for part in json.dumps(spec).split('"$ref": "#/components/schemas/')[1:]
    }
    assert refs <= set(spec["components"]["schemas"])


@pytest.mark.parametrize(
    "text",
    [
        MANIFEST.format(learners=2, results="r"),
        (EXAMPLES / "digits" / "manifest.yaml").read_text(),
        (EXAMPLES / "pytorch-ddp" / "manifest-torchrun.yaml").read_text(),
        MANIFEST.format(learners=1, results="r").replace("memory: 512MiB", "memory: 2048")
        + "priority: high\n",
    ],
    ids=["test-manifest", "digits", "pytorch-ddp-torchrun", "memory-number-priority-class"],
)
def test_accepted_manifests_match_the_documented_schema(spec, text):
    from dlaas.domain.manifest import parse_manifest

    parse_manifest(text)  # the platform accepts it ...
    errors = [e.message for e in _manifest_validator(spec).iter_errors(yaml.safe_load(text))]
    assert errors == []  # ... and so does the schema clients read


@pytest.mark.parametrize(
    ("old", "new"),
    [("learners: 1", "learners: 0"), ("name: python", "nom: python"), ("cpus: 1", "cpus: many")],
)
def test_the_schema_refuses_what_the_platform_refuses(spec, old, new):
    data = yaml.safe_load(MANIFEST.format(learners=1, results="r").replace(old, new))
    assert not _manifest_validator(spec).is_valid(data)
