"""A job record's stored manifest: the one way every service reads it back.

The LCM stores the manifest as submitted, its connection secrets sealed (dlaas.domain.secretbox).
Readers want one of two things, and each has one function here instead of a re-parse
with its own fallback at every call site:
- `stored_manifest(record, box)`: the manifest, or InvalidManifest. Pass `box` where the
  store's credentials are handed on (deploy, reading a user's results or logs); without it
  the secrets stay sealed, which every other reader never looks at.
- `stored_manifest_or_none(record, box)`: None for a manifest accepted under older rules
  that no longer parses; for readers that can do without (a job listing, a learner count).
"""

from __future__ import annotations

from typing import Protocol

from dlaas.domain.errors import InvalidManifest
from dlaas.domain.manifest import Manifest, parse_manifest
from dlaas.domain.secretbox import SecretBox


class HasManifest(Protocol):
    """A job record (dlaas.adapters.store.base.JobRecord), as far as its manifest goes."""

    manifest_yaml: str


def stored_manifest(record: HasManifest, box: SecretBox | None = None) -> Manifest:
    """The record's manifest, its secrets opened when `box` is given.

    Raise InvalidManifest when the text no longer parses, or a secret is sealed and `box`
    cannot open it (no key, another key): the problem names the field.
    """
    text = box.open(record.manifest_yaml) if box is not None else record.manifest_yaml
    return parse_manifest(text)


def stored_manifest_or_none(record: HasManifest, box: SecretBox | None = None) -> Manifest | None:
    """The record's manifest, or None when it cannot be read back (see stored_manifest)."""
    try:
        return stored_manifest(record, box)
    except InvalidManifest:
        return None
