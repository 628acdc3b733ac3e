"""Connection passwords are encrypted at rest and opened only for their store."""

from __future__ import annotations

import pytest

from dlaas.domain.errors import InvalidManifest
from dlaas.domain.manifest import parse_manifest
from dlaas.domain.secretbox import PREFIX, SecretBox, new_key

MANIFEST = """\
name: m
framework: {name: python, command: python3 t.py}
data_stores:
  - id: own
    type: s3
    training_data: {container: data}
    connection: {auth_url: "http://10.9.9.9:9000", user_name: me, password: Zq9-distinctive-pw}
"""


def test_sealed_manifest_holds_no_password_and_opens_back():
    box = SecretBox(new_key())
    sealed = box.seal(MANIFEST)
    assert "Zq9-distinctive-pw" not in sealed
    assert PREFIX in sealed
    assert parse_manifest(sealed).learners == 1  # still a valid manifest for everything else
    opened = parse_manifest(box.open(sealed))
    assert opened.data_store().connection.secret_key.get_secret_value() == "Zq9-distinctive-pw"
    assert box.seal(sealed) == sealed  # sealing twice changes nothing


def test_manifest_without_secrets_is_kept_as_written():
    box = SecretBox(new_key())
    text = "name: m\nframework: {name: python, command: x}\n# a comment\n"
    assert box.seal(text) == text and box.open(text) == text


def test_no_key_means_the_password_is_refused_not_stored():
    with pytest.raises(InvalidManifest, match="stores no password"):
        SecretBox("").seal(MANIFEST)


def test_another_key_cannot_open_it():
    sealed = SecretBox(new_key()).seal(MANIFEST)
    with pytest.raises(InvalidManifest, match="another key"):
        SecretBox(new_key()).open(sealed)
