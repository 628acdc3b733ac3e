from dlaas.adapters.store.base import JobRecord, JobStore, open_store

__all__ = ["JobRecord", "JobStore", "open_store"]
