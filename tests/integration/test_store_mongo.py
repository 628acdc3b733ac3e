"""The job store's contract against a real MongoDB: every test of tests/unit/test_store_contract.py
that runs on a store, here on MongoJobStore over the server DLAAS_TEST_MONGO_URL names (a
database of its own per test, dropped after). No MongoDB server can run on this machine:
without the variable each test is skipped with that reason. tests/unit runs the same tests
on SQLite and on mongomock (an in-process fake).
"""

from __future__ import annotations

import inspect
import os
import sys
import uuid
from pathlib import Path

import pytest

# The suite is imported as pytest imports it (assertions rewritten), from its own directory.
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "unit"))
import test_store_contract as contract

MONGO_URL_ENV = "DLAAS_TEST_MONGO_URL"


@pytest.fixture
def store():
    url = os.environ.get(MONGO_URL_ENV)
    if not url:
        pytest.skip(f"no real MongoDB: set {MONGO_URL_ENV}=mongodb://host:port to run")
    from dlaas.adapters.store.mongo import MongoJobStore

    db = f"dlaas_test_{uuid.uuid4().hex[:12]}"
    s = MongoJobStore(url, db=db)
    yield s
    s._client.drop_database(db)
    s.close()


listed = contract.listed  # the suite's fixture, over this module's store

# The contract: every test of the suite that takes a store (its parametrize marks come along).
for _name, _test in vars(contract).items():
    if _name.startswith("test_") and {"store", "listed"} & set(inspect.signature(_test).parameters):
        globals()[_name] = _test
