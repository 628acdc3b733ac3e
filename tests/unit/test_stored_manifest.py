"""A job record's stored manifest is read back in one place (dlaas/domain/stored.py).

Pins the two readings (strict, lenient) and that nothing else re-parses a record's
`manifest_yaml` with a fallback of its own.
"""

from __future__ import annotations

import ast

import pytest
from source_scan import offenders, walk
from test_secretbox import MANIFEST

from dlaas.adapters.store.base import JobRecord
from dlaas.domain.errors import InvalidManifest
from dlaas.domain.secretbox import PREFIX, SecretBox, new_key
from dlaas.domain.stored import stored_manifest, stored_manifest_or_none

# Owned by another change in flight; it reads the manifest its own way until then.
NOT_YET = {"services/api/dashboard/nodes.py"}


def record(manifest_yaml: str) -> JobRecord:
    return JobRecord(job_id="j", user="u", name="m", manifest_yaml=manifest_yaml, created_at=0.0)


def test_secrets_open_only_with_the_box():
    box = SecretBox(new_key())
    r = record(box.seal(MANIFEST))
    opened = stored_manifest(r, box).data_stores[0].connection.secret_key
    assert opened.get_secret_value() == "Zq9-distinctive-pw"
    sealed = stored_manifest(r).data_stores[0].connection.secret_key
    assert sealed.get_secret_value().startswith(PREFIX)


def test_an_unreadable_manifest_is_refused_or_none():
    r = record("name: [unclosed")
    with pytest.raises(InvalidManifest):
        stored_manifest(r)
    assert stored_manifest_or_none(r) is None
    assert stored_manifest_or_none(record(MANIFEST)).name == "m"


def test_a_secret_sealed_under_another_key_is_refused_or_none():
    r = record(SecretBox(new_key()).seal(MANIFEST))
    with pytest.raises(InvalidManifest, match="another key"):
        stored_manifest(r, SecretBox(new_key()))
    assert stored_manifest_or_none(r, SecretBox(new_key())) is None


def reparses(nodes) -> list[int]:
    """Lines calling parse_manifest(...) on anything's `.manifest_yaml` (or an opened one)."""
    found = []
    for node in nodes:
        if (
            isinstance(node, ast.Call)
            and getattr(node.func, "id", getattr(node.func, "attr", "")) == "parse_manifest"
            and any(
                isinstance(n, ast.Attribute) and n.attr == "manifest_yaml"
                for arg in node.args
                for n in ast.walk(arg)
            )
        ):
            found.append(node.lineno)
    return found


def scan(line: str) -> list[int]:
    return reparses(walk(ast.parse(line)))


def test_the_scan_finds_a_reparse():
    assert scan("m = parse_manifest(box.open(record.manifest_yaml))") == [1]
    assert scan("m = manifest.parse_manifest(r.manifest_yaml).learners") == [1]
    assert scan("m = parse_manifest(text)") == []


def test_no_module_reparses_a_stored_manifest_by_hand():
    found = offenders(reparses, ("dlaas", "services"), NOT_YET | {"dlaas/domain/stored.py"})
    assert found == [], "use dlaas.domain.stored.stored_manifest: " + ", ".join(found)
