"""Where a job's data and results live in S3 (pure: no client, no I/O).

A manifest's data store without an endpoint means the platform's own S3; there its bucket
names resolve inside the submitting team's namespace (dlaas.domain.namespace), and the
credentials are the platform's (the host side) or, in containers, the job's own scoped
identity (the LCM swaps them in). A store with an endpoint is the user's own: its buckets
and credentials are used as given. The host side (API, LCM) and the containers reach the
platform's S3 at different addresses, hence `for_containers`.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from dlaas.config import PlatformSettings
from dlaas.domain.errors import InvalidManifest
from dlaas.domain.manifest import Manifest
from dlaas.domain.namespace import (
    DEFAULT_RESULTS,
    NamespaceError,
    check_bucket,
    s3_name,
    team_bucket,
)

# Where jobs from before teams existed (team "") kept their results by default.
LEGACY_RESULTS_BUCKET = "dlaas-results"


@dataclass(frozen=True)
class S3Location:
    endpoint: str
    access_key: str
    secret_key: str
    bucket: str
    prefix: str = ""
    # True: the platform's own S3 (team namespaces, scoped job identities apply).
    platform: bool = False
    # A user's own store: the inside networks the operator lets the platform reach it in
    # (DLAAS_EGRESS_ALLOW_NETWORKS; dlaas.domain.egress is the rule, applied at connect).
    allow_networks: str = ""

    def __repr__(self) -> str:  # never show the secret
        return f"S3Location(endpoint={self.endpoint!r}, bucket={self.bucket!r}, prefix={self.prefix!r})"

    def with_keys(self, access_key: str, secret_key: str) -> S3Location:
        return replace(self, access_key=access_key, secret_key=secret_key)


def check_buckets(manifest: Manifest, team: str) -> None:
    """Refuse bucket names of the platform's S3 that leave the team's namespace."""
    problems = []
    for i, store in enumerate(manifest.data_stores):
        if store.connection.endpoint:
            continue  # the user's own store: their names, their credentials
        for field, bucket in (
            ("training_data", store.training_data),
            ("training_results", store.training_results),
        ):
            if bucket is None:
                continue
            try:
                check_bucket(team, bucket.container)
            except NamespaceError as exc:
                problems.append(f"data_stores[{i}].{field}.container: {exc}")
        data, results = store.training_data, store.training_results
        if (
            data is not None
            and results is not None
            and data.container != results.container
            and s3_name(data.container) == s3_name(results.container)
        ):
            problems.append(
                f"data_stores[{i}].training_results.container: {results.container!r} and "
                f"training_data's {data.container!r} are one bucket in the platform's store "
                f"({s3_name(data.container)!r}: '_' is '-' there); name them apart"
            )
    if problems:
        raise InvalidManifest(problems)


def job_locations(
    manifest: Manifest, settings: PlatformSettings, team: str, *, for_containers: bool = False
) -> tuple[S3Location | None, S3Location]:
    """(training data, results) for a job; results default to the team's results bucket."""
    store = manifest.data_store()
    own = store is not None and bool(store.connection.endpoint)
    if own:
        assert store is not None
        endpoint = store.connection.endpoint or ""
        access = store.connection.access_key or ""
        secret = (
            store.connection.secret_key.get_secret_value() if store.connection.secret_key else ""
        )
    else:
        endpoint = settings.s3_endpoint
        if for_containers and settings.s3_endpoint_for_containers:
            endpoint = settings.s3_endpoint_for_containers
        access = settings.s3_access_key
        secret = settings.s3_secret_key.get_secret_value()

    allowed = settings.egress_allow_networks if own else ""

    def bucket(name: str) -> str:
        return name if own else team_bucket(team, name)

    data = None
    if store is not None and store.training_data is not None:
        data = S3Location(endpoint, access, secret, bucket(store.training_data.container),
                          platform=not own, allow_networks=allowed)  # fmt: skip
    results_name = (
        store.training_results.container
        if store is not None and store.training_results is not None
        else (DEFAULT_RESULTS if team else LEGACY_RESULTS_BUCKET)
    )
    return data, S3Location(
        endpoint, access, secret, bucket(results_name), platform=not own, allow_networks=allowed
    )
