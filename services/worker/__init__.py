"""The worker: asynchronous work on a Redis broker (result purges, retention)."""
