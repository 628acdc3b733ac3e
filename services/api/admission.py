"""What the API checks of a submission that needs to know who submits it.

Run by the submit route (services/api/routes.py `_submit`) before anything is stored:
- every data store `connection` the user names passes the egress rule (dlaas.domain.egress):
  the API and the LCM will connect there for logs, metrics and results, from inside the
  platform. A name that resolves to nothing yet is let through: it is checked again, and
  pinned, at every connection (dlaas.adapters.s3.client_for).
- the manifest's priority is at most the team's ceiling (`dlaas teams set --max-priority`).
  Administrators are exempt: they run the platform, and they set the ceilings.
- the manifest's `disk` is at most the platform's maximum (DLAAS_MAX_LEARNER_DISK_MB), for
  everyone: it bounds what one learner may fill on a node's disk.
"""

from __future__ import annotations

from dlaas.adapters import egress as egress_pin
from dlaas.adapters.store.base import JobStore
from dlaas.config import PlatformSettings
from dlaas.domain import egress
from dlaas.domain.account_ops import check_max_duration, check_priority
from dlaas.domain.errors import InvalidRequest
from dlaas.domain.manifest import Manifest
from dlaas.domain.sizes import MIB, size_text
from services.api.auth import Caller


def check_endpoints(
    manifest: Manifest, settings: PlatformSettings, resolve: egress_pin.Resolve = egress_pin.resolve
) -> None:
    """Raise EgressRefused for a user-named store endpoint at an inside address."""
    allowed = egress.allowed_networks(settings.egress_allow_networks)
    for i, store in enumerate(manifest.data_stores):
        if not store.connection.endpoint:
            continue  # the platform's own S3
        field = f"data_stores[{i}].connection.endpoint"
        try:
            egress_pin.check_url(field, store.connection.endpoint, allowed, resolve)
        except egress_pin.Unresolved:
            continue  # checked again when the platform connects


def admit(manifest: Manifest, caller: Caller, store: JobStore, settings: PlatformSettings) -> None:
    """Raise the first reason the caller may not submit `manifest` (a 4xx)."""
    check_endpoints(manifest, settings)
    if manifest.disk_mb > settings.max_learner_disk_mb:
        raise InvalidRequest(
            f"disk: {size_text(manifest.disk_mb * MIB)} per learner is above the platform's "
            f"maximum {size_text(settings.max_learner_disk_mb * MIB)}"
        )
    if not caller.admin:
        check_priority(store, caller.team, manifest.priority)
        check_max_duration(store, caller.team, manifest.max_duration)
