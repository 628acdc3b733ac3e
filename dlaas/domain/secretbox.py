"""Secrets in stored manifests, encrypted at rest.

A manifest's `connection` block may carry the credentials (key id and password) of a user's
own data store. The LCM seals it before the job is stored: the value becomes `dlaas-enc:v1:<Fernet
token>` (AES-128-CBC + HMAC-SHA256, from the `cryptography` package) under the platform's
key (DLAAS_SECRETS_KEY; `dlaas up` keeps it in the state directory's secrets.json, 0600).
Only the code that hands the store's credentials on (the deploy, the API reading a user's
results) opens it again. Without a key a password is never stored: the LCM refuses it.
"""

from __future__ import annotations

from typing import Any

import yaml
from cryptography.fernet import Fernet, InvalidToken

from dlaas.domain.errors import InvalidManifest
from dlaas.domain.manifest_yaml import load_yaml

PREFIX = "dlaas-enc:v1:"
# The store's credentials: the password and, with it, the key id (FfDL's and our names).
SECRET_FIELDS = ("password", "secret_key", "user_name", "access_key")
NO_KEY = (
    "data_stores[0].connection.secret_key: this platform has no key to keep secrets with "
    "(DLAAS_SECRETS_KEY); it stores no password"
)


def new_key() -> str:
    return Fernet.generate_key().decode()


def _secret_slots(data: Any):
    """(mapping, field) of every connection secret in a parsed manifest."""
    if not isinstance(data, dict):
        return
    for store in data.get("data_stores") or []:
        conn = store.get("connection") if isinstance(store, dict) else None
        if isinstance(conn, dict):
            for field in SECRET_FIELDS:
                if isinstance(conn.get(field), str) and conn[field]:
                    yield conn, field


class SecretBox:
    def __init__(self, key: str):
        self._fernet = Fernet(key.encode()) if key else None

    def seal(self, manifest_yaml: str) -> str:
        """The manifest with every connection secret encrypted (as is if it holds none)."""
        # Read as the manifest parser reads it: a plain safe_load keeps the line breaks of a
        # folded `command: >`, and the dump below would store them as a multi-line command.
        data = load_yaml(manifest_yaml)
        slots = [(c, f) for c, f in _secret_slots(data) if not c[f].startswith(PREFIX)]
        if not slots:
            return manifest_yaml
        if self._fernet is None:
            raise InvalidManifest([NO_KEY])
        for conn, field in slots:
            conn[field] = PREFIX + self._fernet.encrypt(conn[field].encode()).decode()
        return yaml.safe_dump(data, sort_keys=False, allow_unicode=True)

    def open(self, manifest_yaml: str) -> str:
        """The manifest with its secrets readable again (for handing them to their store)."""
        if PREFIX not in manifest_yaml:
            return manifest_yaml
        data = load_yaml(manifest_yaml)
        for conn, field in _secret_slots(data):
            if conn[field].startswith(PREFIX):
                if self._fernet is None:
                    raise InvalidManifest([f"connection.{field}: sealed, and no key to open it"])
                try:
                    conn[field] = self._fernet.decrypt(conn[field][len(PREFIX) :].encode()).decode()
                except InvalidToken:
                    raise InvalidManifest(
                        [f"connection.{field}: sealed under another key; submit the job again"]
                    ) from None
        return yaml.safe_dump(data, sort_keys=False, allow_unicode=True)
