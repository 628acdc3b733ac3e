"""The learner image's torch hooks (dlaas/learner/torch_hooks.py), against stand-ins for
torch's modules: the platform's collective timeout becomes torch's default, torchrun's
agents check out after the exit barrier with learner 0 last, a failed torchrun worker
leaves torchrun its error file."""

from __future__ import annotations

import json
from datetime import timedelta
from types import SimpleNamespace

from dlaas.learner import torch_hooks


def test_the_timeout_comes_from_the_env_in_seconds_and_nonsense_sets_none():
    assert torch_hooks.collective_timeout({"DLAAS_COLLECTIVE_TIMEOUT": "90"}) == timedelta(
        seconds=90
    )
    for bad in ({}, {"DLAAS_COLLECTIVE_TIMEOUT": "x"}, {"DLAAS_COLLECTIVE_TIMEOUT": "0"}):
        assert torch_hooks.collective_timeout(bad) is None


def test_both_defaults_are_set_but_a_torch_without_nccl_keeps_none():
    gloo_and_nccl = SimpleNamespace(
        default_pg_timeout=timedelta(minutes=30), default_pg_nccl_timeout=timedelta(minutes=10)
    )
    torch_hooks.patch_constants(gloo_and_nccl, timedelta(seconds=20))
    assert gloo_and_nccl.default_pg_timeout == timedelta(seconds=20)
    assert gloo_and_nccl.default_pg_nccl_timeout == timedelta(seconds=20)
    cpu = SimpleNamespace(default_pg_timeout=timedelta(minutes=30), default_pg_nccl_timeout=None)
    torch_hooks.patch_constants(cpu, timedelta(seconds=20))
    assert cpu.default_pg_nccl_timeout is None
    torch_hooks.patch_constants(cpu, None)  # no platform timeout: torch's own
    assert cpu.default_pg_timeout == timedelta(seconds=20)


class Store:
    """A stand-in for torch's store: counts, keys, and who touched it after what."""

    def __init__(self, world: int) -> None:
        self.counts: dict[str, int] = {}
        self.keys: dict[str, str] = {}
        self.log: list[tuple[str, str]] = []
        self.world = world

    def add(self, key, n):
        self.counts[key] = self.counts.get(key, 0) + n
        self.log.append(("add", key))
        return self.counts[key]

    def set(self, key, value):
        self.keys[key] = value
        self.log.append(("set", key))

    def set_timeout(self, timeout):
        self.log.append(("timeout", str(timeout.total_seconds())))

    def wait(self, keys):
        assert all(k in self.keys for k in keys), "would block"
        self.log.append(("wait", keys[0]))


def test_every_agent_checks_out_and_only_the_host_waits_for_the_last():
    store = Store(2)
    torch_hooks.check_out(store, 2, host=False)  # learner 1 out first: no wait
    assert [op for op, _ in store.log] == ["add"]
    torch_hooks.check_out(store, 2, host=True)  # learner 0, the store's host, last: waits
    assert [op for op, _ in store.log] == ["add", "add", "set", "timeout", "wait"]


def test_the_last_agent_out_marks_it_and_then_leaves_the_store_alone():
    store = Store(2)
    store.counts[torch_hooks._CHECKOUT_KEY] = 1  # learner 0 is out, waiting for the mark
    torch_hooks.check_out(store, 2, host=False)
    assert [op for op, _ in store.log] == ["add", "set"]  # its last touch is the mark


def test_a_check_out_on_a_store_that_is_gone_is_quiet():
    class Gone:
        def add(self, key, n):
            raise RuntimeError("Connection reset by peer")

    torch_hooks.check_out(Gone(), 2, host=False)  # no exception


def test_the_agents_exit_barrier_is_wrapped_once_and_checks_out():
    calls = []

    class SimpleElasticAgent:
        def __init__(self, rank):
            self._store = Store(2)
            self._worker_group = SimpleNamespace(
                group_world_size=2, group_rank=rank, spec=SimpleNamespace(rdzv_handler=self)
            )

        def get_backend(self):
            return backend

        def _exit_barrier(self):
            calls.append("barrier")

    module = SimpleNamespace(SimpleElasticAgent=SimpleElasticAgent)
    torch_hooks.patch_agent(module)
    torch_hooks.patch_agent(module)  # a second import: not wrapped twice
    backend = "static"
    agent = SimpleElasticAgent(rank=1)
    agent._exit_barrier()
    assert calls == ["barrier"]
    assert agent._store.log == [("add", torch_hooks._CHECKOUT_KEY)]
    backend = "c10d"  # the store's host unknown: torch's own barrier alone
    agent = SimpleElasticAgent(rank=0)
    agent._exit_barrier()
    assert calls == ["barrier", "barrier"] and agent._store.log == []


def test_a_failed_worker_leaves_torchruns_error_file_unless_record_wrote_it(tmp_path):
    path = tmp_path / "error.json"
    try:
        raise RuntimeError("Timed out waiting 5000ms for recv operation to complete")
    except RuntimeError as exc:
        torch_hooks.record_error(str(path), RuntimeError, exc, exc.__traceback__)
    data = json.loads(path.read_text())["message"]
    assert data["message"].startswith("RuntimeError: Timed out waiting 5000ms")
    assert data["extraInfo"]["py_callstack"].startswith("Traceback (most recent call last)")
    assert data["extraInfo"]["py_callstack"].rstrip().endswith("operation to complete")
    path.write_text('{"message": "from @record"}')
    torch_hooks.record_error(str(path), RuntimeError, RuntimeError("later"), None)
    assert path.read_text() == '{"message": "from @record"}'
