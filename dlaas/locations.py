"""Where a job's data and results live in S3 (pure: no client, no I/O).

A manifest's data store without an endpoint means the platform's own S3. The host side
(API, LCM) and the containers reach the platform's S3 at different addresses, hence
`for_containers`.
"""

from __future__ import annotations

from dataclasses import dataclass

from dlaas.config import PlatformSettings
from dlaas.manifest import Manifest

DEFAULT_RESULTS_BUCKET = "dlaas-results"


@dataclass(frozen=True)
class S3Location:
    endpoint: str
    access_key: str
    secret_key: str
    bucket: str
    prefix: str = ""

    def __repr__(self) -> str:  # never show the secret
        return f"S3Location(endpoint={self.endpoint!r}, bucket={self.bucket!r}, prefix={self.prefix!r})"


def job_locations(
    manifest: Manifest, settings: PlatformSettings, *, for_containers: bool = False
) -> tuple[S3Location | None, S3Location]:
    """(training data, results) for a job; results default to the platform's results bucket."""
    store = manifest.data_store()
    platform_endpoint = settings.s3_endpoint
    if for_containers and settings.s3_endpoint_for_containers:
        platform_endpoint = settings.s3_endpoint_for_containers
    if store is not None and store.connection.endpoint:
        endpoint = store.connection.endpoint
        access = store.connection.access_key or ""
        secret = (
            store.connection.secret_key.get_secret_value() if store.connection.secret_key else ""
        )
    else:
        endpoint = platform_endpoint
        access = settings.s3_access_key
        secret = settings.s3_secret_key.get_secret_value()
    data = None
    if store is not None and store.training_data is not None:
        data = S3Location(endpoint, access, secret, store.training_data.container)
    results_bucket = (
        store.training_results.container
        if store is not None and store.training_results is not None
        else DEFAULT_RESULTS_BUCKET
    )
    return data, S3Location(endpoint, access, secret, results_bucket)
