"""The job store port (`base.JobStore`) and its backends: SQLite (`sqlite`) and MongoDB
(`mongo`); `open_store` picks one by URL. The backends import `base`, never this package's
factory: the backend not chosen is never imported (no pymongo for a SQLite store)."""

from dlaas.adapters.store.base import JobRecord, JobStore

__all__ = ["JobRecord", "JobStore", "open_store"]


def open_store(url: str) -> JobStore:
    """A store for `url`: `mongodb://...` selects MongoDB, `sqlite:///path` or a path SQLite."""
    if url.startswith(("mongodb://", "mongodb+srv://")):
        from dlaas.adapters.store.mongo import MongoJobStore

        return MongoJobStore(url)
    from dlaas.adapters.store.sqlite import SqliteJobStore

    path = url.removeprefix("sqlite:///") if url.startswith("sqlite:///") else url
    return SqliteJobStore(path)
