"""What the platform changes in torch inside a learner, without the job's code asking.

Every Python process in a learner image runs this at start-up: the image's
/opt/dlaas/sitecustomize.py (images/Dockerfile.learner) calls `install()`. It imports no
torch: it registers an import hook, and patches two torch modules only when (and if) the
job's own code imports them.

1. The collective timeout (dlaas.domain.launch, DLAAS_COLLECTIVE_TIMEOUT, seconds). torch
   bounds a collective (`all_reduce`, `barrier`, ...) and the env:// store by the process
   group's timeout; a script that calls `init_process_group()` without `timeout=` gets
   torch's default: 30 minutes for gloo, 10 for NCCL (and only under
   TORCH_NCCL_ASYNC_ERROR_HANDLING, which the contract sets too). The defaults live in
   `torch.distributed.constants`, which `distributed_c10d` and `rendezvous` import their
   values from, so setting them there as it loads sets them everywhere; torch reads no
   variable for them. A learner whose peer hangs then fails its collective within the
   platform's bound instead of waiting half an hour, and the job monitor names the learner
   that stopped answering. A `timeout=` the script passes itself still wins.
2. torchrun's exit barrier. With the static rendezvous the store lives in the torchrun of
   learner 0. When another learner's agent is the last to reach the barrier, learner 0's
   returns as that agent sets the barrier's key and exits, taking the store along, while
   the other agent still waits on the key: it logs "Error waiting on exit barrier" with a
   traceback, then exits 0 all the same (pytorch/pytorch#69520). Here every agent checks
   out after the barrier, and learner 0's agent, the store's host, waits (bounded) until
   all have, so no agent talks to a store that is gone.
3. torchrun's failure summary. torchrun ends a failed run with a summary whose "traceback"
   is the worker's error file, which only a `@record`-decorated entry point writes; without
   it the summary says "To enable traceback see ..." and the cause (a collective that timed
   out, a peer that reset) is far above the last lines the job monitor triages. A torchrun
   worker (TORCHELASTIC_ERROR_FILE set) writes that file itself here, as `@record` would,
   when an exception ends it.

Stdlib only, and never in the way: a torch without these names is left as it is. The
image's sitecustomize shadows Debian's (/usr/lib/python3.11/sitecustomize.py), which only
installs apport's exception hook, and apport is not in the images.
"""

from __future__ import annotations

import contextlib
import importlib.abc
import importlib.machinery
import json
import os
import sys
import time
import traceback
from datetime import timedelta

TIMEOUT_ENV = "DLAAS_COLLECTIVE_TIMEOUT"
ERROR_FILE_ENV = "TORCHELASTIC_ERROR_FILE"  # torchrun gives each worker its own
_CONSTANTS = "torch.distributed.constants"
_AGENT = "torch.distributed.elastic.agent.server.api"
# How long learner 0's agent waits for the others to check out of the exit barrier: they
# have all reached it, so they are a round trip each away.
CHECKOUT_WAIT_S = 30.0
_CHECKOUT_KEY = "dlaas/exit_barrier/checked_out"
_CHECKOUT_LAST = "dlaas/exit_barrier/all_checked_out"


def collective_timeout(env=os.environ) -> timedelta | None:
    """The platform's collective timeout, or None when it sets none (or nothing sane)."""
    try:
        seconds = int(env.get(TIMEOUT_ENV, ""))
    except ValueError:
        return None
    return timedelta(seconds=seconds) if seconds > 0 else None


def patch_constants(module, timeout: timedelta | None) -> None:
    """torch's default process-group timeouts (gloo's and NCCL's) become `timeout`."""
    if timeout is None:
        return
    if isinstance(getattr(module, "default_pg_timeout", None), timedelta):
        module.default_pg_timeout = timeout
    # None where torch was built without NCCL: left so, torch warns on its own then.
    if isinstance(getattr(module, "default_pg_nccl_timeout", None), timedelta):
        module.default_pg_nccl_timeout = timeout


def check_out(store, world_size: int, host: bool, wait_s: float = CHECKOUT_WAIT_S) -> None:
    """After the exit barrier: count this agent out; the last one out marks it, and the
    store's host waits for that mark. Nobody touches the store after their last write but
    the host. Best effort: a store that is gone or a peer that never comes ends it quietly."""
    with contextlib.suppress(Exception):
        if store.add(_CHECKOUT_KEY, 1) >= world_size:
            store.set(_CHECKOUT_LAST, "1")
        if host:
            store.set_timeout(timedelta(seconds=wait_s))
            store.wait([_CHECKOUT_LAST])


def patch_agent(module) -> None:
    """torchrun's agents check out after the exit barrier (`check_out`)."""
    agent = getattr(module, "SimpleElasticAgent", None)
    barrier = getattr(agent, "_exit_barrier", None)
    if barrier is None or getattr(barrier, "_dlaas", False):
        return

    def _exit_barrier(self) -> None:
        barrier(self)
        group = getattr(self, "_worker_group", None)
        store = getattr(self, "_store", None)
        if group is None or store is None or not _static(group):
            return
        # The static rendezvous: the store is the TCPStore of the agent of node rank 0.
        check_out(store, group.group_world_size, group.group_rank == 0)

    _exit_barrier._dlaas = True  # type: ignore[attr-defined]
    agent._exit_barrier = _exit_barrier


def record_error(path: str, exc_type, exc, tb) -> None:
    """Write torchrun's error file for an exception that ends a worker (the JSON of torch's
    `ErrorHandler.record_exception`), unless the worker's own `@record` already did."""
    if not path or os.path.exists(path):
        return
    data = {
        "message": {
            "message": f"{exc_type.__name__}: {exc}",
            "extraInfo": {
                "py_callstack": "".join(traceback.format_exception(exc_type, exc, tb)),
                "timestamp": str(int(time.time())),
            },
        }
    }
    with contextlib.suppress(OSError), open(path, "w") as f:
        json.dump(data, f)


def _excepthook(previous):
    def hook(exc_type, exc, tb) -> None:
        if not issubclass(exc_type, KeyboardInterrupt):
            record_error(os.environ.get(ERROR_FILE_ENV, ""), exc_type, exc, tb)
        previous(exc_type, exc, tb)

    hook._dlaas = True  # type: ignore[attr-defined]
    return hook


def _static(group) -> bool:
    """Whether the agents met through the static rendezvous (the platform's): with another
    backend (a command that runs torchrun with its own), the store's host is not known."""
    with contextlib.suppress(Exception):
        return group.spec.rdzv_handler.get_backend() == "static"
    return False


_PATCHES = {_CONSTANTS: lambda m: patch_constants(m, collective_timeout()), _AGENT: patch_agent}


class _Loader(importlib.abc.Loader):
    """The module's own loader, then the patch."""

    def __init__(self, loader, patch) -> None:
        self.loader = loader
        self.patch = patch

    def create_module(self, spec):
        return self.loader.create_module(spec)

    def exec_module(self, module) -> None:
        self.loader.exec_module(module)
        with contextlib.suppress(Exception):  # a torch of another shape: left as it is
            self.patch(module)


class _Finder(importlib.abc.MetaPathFinder):
    """Finds the patched modules where Python would, and wraps their loader."""

    def find_spec(self, name, path, target=None):
        patch = _PATCHES.get(name)
        if patch is None:
            return None
        spec = importlib.machinery.PathFinder.find_spec(name, path, target)
        if spec is None or spec.loader is None:
            return spec
        spec.loader = _Loader(spec.loader, patch)
        return spec


def install() -> None:
    """Register the import hook, and in a torchrun worker the error file's writer (once)."""
    if not any(isinstance(f, _Finder) for f in sys.meta_path):
        sys.meta_path.insert(0, _Finder())
    if os.environ.get(ERROR_FILE_ENV) and not getattr(sys.excepthook, "_dlaas", False):
        sys.excepthook = _excepthook(sys.excepthook)
