"""A job's error codes have one home (dlaas.domain.jobspec.JobErrorCode), and their values are kept.

They are stored with every FAILED status, shown to users and counted by the operator
metrics: a renamed value is a data migration, not a refactor. The scan fails on a code
spelled as a bare string where a status is written.
"""

from __future__ import annotations

import ast

from source_scan import offenders, walk

from dlaas.domain.jobspec import HELPER_EXIT_REASONS, JobErrorCode
from services.jobmonitor import classify, decide


def test_the_codes_keep_their_values():
    assert {c.name: c.value for c in JobErrorCode} == {
        "EXIT_CODE": "exit_code",
        "OOM_KILLED": "oom_killed",
        "KILLED": "killed",
        "TERMINATED": "terminated",
        "ENGINE_LOST": "engine_lost",
        "CONTAINERS_MISSING": "containers_missing",
        "GPU_OOM": "gpu_oom",
        "MISSING_MODULE": "missing_module",
        "DISK_FULL": "disk_full",
        "COLLECTIVE_TIMEOUT": "collective_timeout",
        "PEER_RESET": "peer_reset",
        "STALLED": "stalled",
        "DEADLINE_EXCEEDED": "deadline_exceeded",
        "HELPER_FAILED": "helper_failed",
        "STORE_TIMEOUT": "store_timeout",
        "DATA_NOT_FOUND": "data_not_found",
        "STORE_REFUSED": "store_refused",
        "UPLOAD_FAILED": "upload_failed",
        "BAD_ARCHIVE": "bad_archive",
        "STORE_UNREACHABLE": "store_unreachable",
        "RESTARTS_EXHAUSTED": "restarts_exhausted",
        "CAPACITY_EXCEEDED": "capacity_exceeded",
        "IMAGE_MISSING": "image_missing",
        "DEPLOY_REFUSED": "deploy_refused",
        "DEPLOY_FAILED": "deploy_failed",
    }


def test_the_detector_and_the_helper_contract_use_the_enum():
    named = [getattr(m, n) for m in (decide, classify) for n in dir(m) if n.startswith("ERROR_")]
    assert named and all(isinstance(c, JobErrorCode) for c in named)
    assert all(isinstance(code, JobErrorCode) for code, _ in HELPER_EXIT_REASONS.values())


def bare_codes(nodes) -> list[int]:
    """Lines passing a string literal as `error_code=` or as `_fail(job, reason, code)`."""
    found = []
    for node in nodes:
        if not isinstance(node, ast.Call):
            continue
        for kw in node.keywords:
            if kw.arg == "error_code" and isinstance(kw.value, ast.Constant) and kw.value.value:
                found.append(node.lineno)
        name = getattr(node.func, "attr", getattr(node.func, "id", ""))
        if name == "_fail" and len(node.args) >= 3 and isinstance(node.args[2], ast.Constant):
            found.append(node.lineno)
    return found


def scan(line: str) -> list[int]:
    return bare_codes(walk(ast.parse(line)))


def test_the_scan_finds_a_bare_code():
    assert scan('k.transition(j, S.FAILED, "r", error_code="image_missing")') == [1]
    assert scan('self._fail(job_id, exc.message, "deploy_failed")') == [1]
    assert scan("self._fail(job_id, exc.message, JobErrorCode.DEPLOY_FAILED)") == []


def test_no_status_write_spells_a_code_by_hand():
    found = offenders(bare_codes, ("dlaas", "services"))
    assert found == [], "use dlaas.domain.jobspec.JobErrorCode: " + ", ".join(found)
