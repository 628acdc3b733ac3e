"""The browser the dashboard tests drive: Debian's Chromium, headless, through Playwright
(PyPI `playwright`; its own browser download is never used).

Importable as `chromium` from tests/integration and tests/e2e (pytest puts tests/ on
sys.path for tests/conftest.py). Where Chromium or Playwright is missing the tests are
skipped saying why, except in CI (CI=true), where scripts/install.sh installs both and a
missing one is a failure.
"""

from __future__ import annotations

import contextlib
import os
import shutil
from collections.abc import Iterator
from typing import Any

import pytest

CHROMIUM = "/usr/bin/chromium"
# Headless in a container, with nothing phoning home (ENVIRONMENT.md's flags).
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-dev-shm-usage",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]


def browser_or_skip():
    """Playwright's sync API and the path of Debian's Chromium, or a skip naming what is
    missing (a failure in CI, where scripts/install.sh must have installed both)."""
    missing = []
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        sync_playwright = None
        missing.append("the Python package playwright (pip install -e '.[test]')")
    if not (os.access(CHROMIUM, os.X_OK) or shutil.which("chromium")):
        missing.append(f"{CHROMIUM} (apt-get install chromium; scripts/install.sh does)")
    if missing:
        reason = "no browser for the dashboard test: missing " + " and ".join(missing)
        if os.environ.get("CI") == "true":
            pytest.fail(reason)
        pytest.skip(reason)
    return sync_playwright, (CHROMIUM if os.access(CHROMIUM, os.X_OK) else shutil.which("chromium"))


@contextlib.contextmanager
def launched() -> Iterator[Any]:
    """A headless Chromium (a Playwright Browser), closed after; skipped as browser_or_skip."""
    sync_playwright, chromium = browser_or_skip()
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=chromium, headless=True, args=CHROMIUM_ARGS)
        try:
            yield browser
        finally:
            browser.close()
