"""The platform's admission checks of a submission: what must hold before a job is stored.

One function, `admit`, run by the LCM's submit (services/lcm/use_cases.py), the one door of
both transports: the REST API submits through the LCM's gRPC, and an integrator's gRPC SDK
calls it directly, so neither can pass a job the other refuses. The API runs it too before
it uploads a job's code archive, so a refused job leaves nothing behind.

- every data store `connection` the user names passes the egress rule (dlaas.domain.egress):
  the API and the LCM will connect there for logs, metrics and results, from inside the
  platform. A name that resolves to nothing yet is let through: it is checked again, and
  pinned, at every connection (dlaas.adapters.s3.client_for).
- the manifest's `disk` is at most the platform's maximum (DLAAS_MAX_LEARNER_DISK_MB), for
  everyone: it bounds what one learner may fill on a node's disk.
- the manifest's priority is at most the team's ceiling (`dlaas teams set --max-priority`),
  and its max_duration at most the team's maximum run time (`--max-duration`).
  Administrators are exempt: they run the platform, and they set the ceilings.
"""

from __future__ import annotations

from dlaas.adapters import egress as egress_pin
from dlaas.domain import egress
from dlaas.domain.account_ops import check_max_duration, check_priority
from dlaas.domain.authz import on_behalf_of
from dlaas.domain.errors import InvalidRequest
from dlaas.domain.manifest import Manifest
from dlaas.domain.ports import AccountStore
from dlaas.domain.sizes import MIB, size_text


def check_endpoints(
    manifest: Manifest, allow_networks: str, resolve: egress_pin.Resolve = egress_pin.resolve
) -> None:
    """Raise EgressRefused for a user-named store endpoint at an inside address
    (`allow_networks`: the operator's DLAAS_EGRESS_ALLOW_NETWORKS)."""
    allowed = egress.allowed_networks(allow_networks)
    for i, store in enumerate(manifest.data_stores):
        if not store.connection.endpoint:
            continue  # the platform's own S3
        field = f"data_stores[{i}].connection.endpoint"
        try:
            egress_pin.check_url(field, store.connection.endpoint, allowed, resolve)
        except egress_pin.Unresolved:
            continue  # checked again when the platform connects


def is_admin(accounts: AccountStore, user: str) -> bool:
    """Whether `user` is an administrator: the bootstrap one, or a user the store says is."""
    if on_behalf_of(user).admin:
        return True
    found = accounts.get_user(user)
    return found is not None and found.admin


def admit(
    manifest: Manifest,
    *,
    user: str,
    team: str,
    accounts: AccountStore,
    allow_networks: str,
    max_disk_mb: int,
    admin: bool | None = None,
    resolve: egress_pin.Resolve = egress_pin.resolve,
) -> None:
    """Raise the first reason `user` of `team` may not submit `manifest` (an InvalidRequest:
    a 4xx at the API, INVALID_ARGUMENT over gRPC). `admin`: whether the caller is an
    administrator, where the caller knows it (None: the store says; see `is_admin`)."""
    check_endpoints(manifest, allow_networks, resolve)
    if manifest.disk_mb > max_disk_mb:
        raise InvalidRequest(
            f"disk: {size_text(manifest.disk_mb * MIB)} per learner is above the platform's "
            f"maximum {size_text(max_disk_mb * MIB)}"
        )
    if not (is_admin(accounts, user) if admin is None else admin):
        check_priority(accounts, team, manifest.priority)
        check_max_duration(accounts, team, manifest.max_duration)
