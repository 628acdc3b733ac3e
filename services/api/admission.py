"""The submit route's admission checks (services/api/routes.py `_submit`), before anything is
stored or uploaded: the platform's one set (dlaas.adapters.admission), for the caller the
API authenticated. The LCM runs the same checks again at its submit, the door of every
transport, so a gRPC client cannot pass what the API refuses.
"""

from __future__ import annotations

from dlaas.adapters import admission
from dlaas.adapters.store.base import JobStore
from dlaas.config import PlatformSettings
from dlaas.domain.manifest import Manifest
from services.api.auth import Caller


def admit(manifest: Manifest, caller: Caller, store: JobStore, settings: PlatformSettings) -> None:
    """Raise the first reason the caller may not submit `manifest` (a 4xx)."""
    admission.admit(
        manifest,
        user=caller.user,
        team=caller.team,
        accounts=store,
        allow_networks=settings.egress_allow_networks,
        max_disk_mb=settings.max_learner_disk_mb,
        admin=caller.admin,
    )
