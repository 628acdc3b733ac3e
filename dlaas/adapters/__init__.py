"""Adapters to the outside world shared by the services: etcd (status, leadership), the job
store, S3 (clients, per-job identities, stored files and logs), Docker, Celery on Redis, and
the gRPC transport (server start, error mapping)."""
