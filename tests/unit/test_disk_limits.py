"""Disk sizes (dlaas.domain.sizes): the manifest's `disk`, the platform's default and
maximum (DLAAS_LEARNER_DISK_MB, DLAAS_MAX_LEARNER_DISK_MB) and the refusal at submit of a
manifest above the maximum (services/api/admission.py)."""

from __future__ import annotations

import pytest

from dlaas.config import PlatformSettings
from dlaas.domain.errors import InvalidManifest, InvalidRequest
from dlaas.domain.manifest import parse_manifest
from dlaas.domain.sizes import parse_memory_mb, parse_quota_bytes, size_text
from services.api.admission import admit
from services.api.auth import Caller

BASE = "name: job\nframework: {name: python, command: python3 train.py}\n"


def settings(**kw) -> PlatformSettings:
    return PlatformSettings(s3_access_key="ak", s3_secret_key="sk", **kw)


@pytest.mark.parametrize(
    ("text", "mib"),
    [("10GiB", 10240), ("2Gb", round(2 * 1000**3 / 2**20)), ("512", 512), ("1TiB", 2**20)],
)
def test_disk_parses_like_memory(text, mib):
    assert parse_manifest(BASE + f"disk: {text}\n").disk_mb == mib == parse_memory_mb(text)


def test_no_disk_means_the_platforms_default():
    m = parse_manifest(BASE)
    assert m.disk_mb == 0
    assert settings().learner_disk_for(m.disk_mb) == 10240
    assert settings(learner_disk_mb="2GiB").learner_disk_for(m.disk_mb) == 2048
    assert settings().learner_disk_for(parse_manifest(BASE + "disk: 1GiB\n").disk_mb) == 1024


@pytest.mark.parametrize("bad", ["0GiB", "-1Gb", "lots", "true", "[1]", "2PiB"])
def test_a_bad_disk_names_the_field(bad):
    with pytest.raises(InvalidManifest) as info:
        parse_manifest(BASE + f"disk: {bad}\n")
    assert len(info.value.problems) == 1 and info.value.problems[0].startswith("disk:")


def test_the_default_may_not_exceed_the_maximum():
    with pytest.raises(ValueError, match="learner_disk_mb"):
        settings(learner_disk_mb="20GiB", max_learner_disk_mb="10GiB")
    assert settings(max_learner_disk_mb="1TiB").max_learner_disk_mb == 2**20


def test_submit_above_the_maximum_is_refused_naming_field_and_maximum():
    s = settings(max_learner_disk_mb="50GiB")
    for admin in (False, True):  # a platform bound: administrators too
        caller = Caller(user="root" if admin else "alice", team="nlp", admin=admin)
        with pytest.raises(InvalidRequest) as info:
            admit(parse_manifest(BASE + "disk: 51GiB\n"), caller, store=None, settings=s)
        assert str(info.value.message) == (
            "disk: 51 GiB per learner is above the platform's maximum 50 GiB"
        )
    ok = Caller(user="root", team="nlp", admin=True)
    admit(parse_manifest(BASE + "disk: 50GiB\n"), ok, store=None, settings=s)


def test_quota_sizes_are_bytes_when_bare():
    assert parse_quota_bytes("50GiB") == 50 * 2**30
    assert parse_quota_bytes(1000) == 1000
    assert parse_quota_bytes("1.5KB") == 1500
    assert size_text(50 * 2**30) == "50 GiB" and size_text(1536) == "1.5 KiB"
    with pytest.raises(ValueError, match="greater than zero"):
        parse_quota_bytes(0)
