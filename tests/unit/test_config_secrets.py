"""Secret settings from files (dlaas.config): what a swarm or docker-compose mounts at
/run/secrets/<variable in lower case> is read for SecretStr fields only, and a variable of
the same name wins."""

from __future__ import annotations

import warnings

import pytest

from dlaas.config import ApiSettings, PlatformSettings

VARIABLES = ("DLAAS_S3_ACCESS_KEY", "DLAAS_S3_SECRET_KEY", "DLAAS_API_ADMIN_TOKEN",
             "DLAAS_SECRETS_KEY", "DLAAS_STORE_URL")  # fmt: skip


@pytest.fixture(autouse=True)
def clean_env(monkeypatch):
    for name in VARIABLES:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("DLAAS_S3_ACCESS_KEY", "ak")


def test_secret_fields_come_from_files_named_after_their_variables(tmp_path):
    (tmp_path / "dlaas_s3_secret_key").write_text("s3-from-file\n")  # `echo` adds a newline
    (tmp_path / "dlaas_secrets_key").write_text("box-key")
    (tmp_path / "dlaas_api_admin_token").write_text("admin-from-file")
    settings = PlatformSettings(_secrets_dir=tmp_path)
    assert settings.s3_secret_key.get_secret_value() == "s3-from-file"
    assert settings.secrets_key.get_secret_value() == "box-key"
    assert ApiSettings(_secrets_dir=tmp_path).admin_token.get_secret_value() == "admin-from-file"


def test_a_variable_wins_over_the_file(tmp_path, monkeypatch):
    (tmp_path / "dlaas_s3_secret_key").write_text("from-file")
    monkeypatch.setenv("DLAAS_S3_SECRET_KEY", "from-env")
    settings = PlatformSettings(_secrets_dir=tmp_path)
    assert settings.s3_secret_key.get_secret_value() == "from-env"


def test_settings_that_are_not_secret_are_never_read_from_files(tmp_path):
    (tmp_path / "dlaas_s3_secret_key").write_text("sk")
    (tmp_path / "dlaas_store_url").write_text("mongodb://elsewhere/x")
    (tmp_path / "dlaas_s3_access_key").write_text("other")
    settings = PlatformSettings(_secrets_dir=tmp_path)
    assert settings.store_url == "sqlite:///dlaas.db"
    assert settings.s3_access_key == "ak"


def test_without_the_directory_a_missing_secret_is_named_and_nothing_warns(tmp_path):
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with pytest.raises(ValueError, match="s3_secret_key"):
            PlatformSettings(_secrets_dir=tmp_path / "absent")
        with pytest.raises(ValueError, match="admin_token"):
            ApiSettings(_secrets_dir=tmp_path / "absent")
