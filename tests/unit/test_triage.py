"""The failure-triage catalog (dlaas.domain.triage) as the job monitor's detector reads it:
a failed learner's last log lines -> a label (the error code) and whose fault it is."""

from __future__ import annotations

import pytest

from dlaas.domain import triage
from dlaas.domain.errors import InvalidManifest
from dlaas.domain.manifest import parse_manifest
from dlaas.domain.ports import Container
from dlaas.domain.status import JobState, Status
from services.jobmonitor.decide import JobView, Requeue, TransitionTo, decide
from services.jobmonitor.main import load_triage_file

IMAGE = "dlaas/learner-pytorch:2.13"
BASE = "name: t\nframework: {name: python, version: '3', command: python3 t.py}\n"


def failed_job(tail: list[str], code: int = 1, rules=triage.CATALOG):
    helper = Container("h", "h", "job", "helper", None, "running")
    dead = Container("l1", "l1", "job", "learner", 1, "exited", "", code, finished_at=5.0)
    live = Container("l0", "l0", "job", "learner", 0, "running")
    view = JobView(
        state=JobState(Status.PROCESSING, 1.0, "started", seq=3),
        containers=[helper, live, dead],
        log_tails={1: tail},
        now=10.0,
        triage_rules=rules,
        image=IMAGE,
    )
    return decide(view).actions[0]


def test_cuda_out_of_memory_fails_gpu_oom_without_a_restart():
    t = failed_job(
        ["step 3", "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2 GiB"]
    )
    assert isinstance(t, TransitionTo) and t.target == Status.FAILED
    assert (t.error_code, t.exit_code) == ("gpu_oom", 1)
    assert t.reason.startswith("learner 1 exited with code 1: gpu_oom: the GPU ran out of memory")
    assert t.reason.endswith("CUDA out of memory. Tried to allocate 2 GiB")  # the last lines


@pytest.mark.parametrize(
    ("line", "label"),
    [
        ("[Rank 1] Watchdog caught collective operation timeout: WorkNCCL(...)", "collective_timeout"),
        ("RuntimeError: [../gloo/transport/tcp/unbound_buffer.cc:81] Timed out waiting 1800000ms for recv operation to complete", "collective_timeout"),
        ("ConnectionResetError: [Errno 104] Connection reset by peer", "peer_reset"),
    ],
)  # fmt: skip
def test_a_collective_timeout_or_a_peer_reset_restarts_as_the_platforms_fault(line, label):
    asked = failed_job(["epoch 2", line])
    assert isinstance(asked, Requeue) and asked.error_code == label
    # The LCM counts it against max_restarts like any infrastructure restart; its reason
    # names the label and the line (not the whole tail); learner 0, still running while
    # learner 1 gave up waiting for it, is named first (services/jobmonitor/gang.py).
    assert asked.reason.startswith("learner 0 stopped answering the gang's collectives")
    assert f"learner 1 exited with code 1: {label}: " in asked.reason
    assert line[:60] in asked.reason and "epoch 2" not in asked.reason


def test_a_missing_module_names_the_module_and_the_image():
    t = failed_job(
        ["Traceback (most recent call last):", "ModuleNotFoundError: No module named 'torchvision'"]
    )
    assert t.error_code == "missing_module"
    assert f"Python module 'torchvision' is not installed in image {IMAGE}" in t.reason


def test_disk_full_and_a_killed_python_are_named():
    assert failed_job(["OSError: [Errno 28] No space left on device"]).error_code == "disk_full"
    # The shell's "Killed" for a child the kernel's OOM killer took: the job's memory.
    t = failed_job(["epoch 1", "Killed"], code=137)
    assert isinstance(t, TransitionTo) and t.error_code == "oom_killed"


def test_no_match_keeps_the_generic_exit_code():
    t = failed_job(["ValueError: bad shape"])
    assert t.error_code == "exit_code" and t.reason.startswith("learner 1 exited with code 1; last")


def test_a_manifest_row_comes_before_the_builtin_ones():
    m = parse_manifest(
        BASE + "triage: [{pattern: 'CUDA out of memory', label: try_again, action: restart}]\n"
    )
    asked = failed_job(["CUDA out of memory"], rules=triage.rules_for(m.triage, ()))
    assert isinstance(asked, Requeue) and asked.error_code == "try_again"


@pytest.mark.parametrize(
    ("rows", "problem"),
    [
        ("[{pattern: '(a+)+$', label: x}]", "triage[0].pattern: a repetition inside a repetition"),
        ("[{pattern: '(', label: x}]", "triage[0].pattern: not a valid regular expression"),
        ("[{pattern: a, label: x}, {pattern: '" + "a" * 257 + "', label: y}]", "triage[1].pattern: at most 256"),
        ("[{pattern: a, label: Bad}]", "triage[0].label: must be 1-40 lower-case"),
        ("[{pattern: a, label: x, action: retry}]", "triage[0].action: must be one of fail, restart"),
        ("[{pattern: a, label: x, colour: red}]", "triage[0].colour: unknown field"),
        ("[" + ",".join(["{pattern: a, label: x}"] * 33) + "]", "triage: List should have at most 32"),
    ],
)  # fmt: skip
def test_manifest_rows_are_bounded_and_refused_naming_the_field(rows, problem):
    with pytest.raises(InvalidManifest) as exc:
        parse_manifest(BASE + f"triage: {rows}\n")
    assert problem in str(exc.value)


def test_the_operators_file_is_read_once_and_checked_naming_the_row(tmp_path):
    good = tmp_path / "triage.yaml"
    good.write_text(
        "- {pattern: 'XlaRuntimeError: RESOURCE_EXHAUSTED', label: tpu_oom, action: fail}\n"
        "- {pattern: 'lost my lease', label: lease_lost, action: restart, explain: 'the lease went'}\n"
    )
    rules = load_triage_file(str(good))
    assert [(r.label, r.action) for r in rules] == [("tpu_oom", "fail"), ("lease_lost", "restart")]
    verdict = triage.triage(["boom: lost my lease"], (*rules, *triage.CATALOG))
    assert verdict is not None and (verdict.label, verdict.what) == ("lease_lost", "the lease went")

    bad = tmp_path / "bad.yaml"
    bad.write_text("- {pattern: a, label: ok}\n- {pattern: '[', label: broken}\n")
    with pytest.raises(ValueError, match=r"bad.yaml: row 2: pattern: not a valid regular"):
        load_triage_file(str(bad))
    bad.write_text("pattern: a\n")
    with pytest.raises(ValueError, match="must be a list"):
        load_triage_file(str(bad))
    with pytest.raises(ValueError, match="cannot be read"):
        load_triage_file(str(tmp_path / "none.yaml"))
    assert load_triage_file("") == ()


def test_a_long_line_against_an_allowed_pattern_stays_bounded():
    # Two unbounded repeats is the most a manifest may use; the line is cut to MAX_LINE.
    rule = triage.rule(r"x+x+y", "slow", "fail")
    assert triage.triage(["x" * 100_000], [rule]) is None
    assert triage.pattern_problem(r"x*x*x*y").startswith("at most 2 unbounded repeats")


# The last lines of real failures, captured 2026-11-26: torch 2.11 on an H200 asked for
# more than the GPU has; torch 2.13 (CPU, gloo) in the learner image, a 2-process group
# whose rank 1 exited, or slept, while rank 0 was in all_reduce (timeout 5 s).
REAL = [
    (
        (
            "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 279.40 GiB. GPU 0 has a "
            "total capacity of 139.80 GiB of which 139.29 GiB is free. Including non-PyTorch "
            "memory, this process has 518.00 MiB memory in use."
        ),
        "gpu_oom",
    ),
    (
        (
            "[rank0]: RuntimeError: [/__w/pytorch/pytorch/third_party/gloo/gloo/transport/tcp/"
            "pair.cc:537] Read error [127.0.0.1]:21914: Connection reset by peer. This is typically "
            "caused by a remote worker hanging or bugs in the application."
        ),
        "peer_reset",
    ),
    (
        (
            "[rank0]: RuntimeError: [/__w/pytorch/pytorch/third_party/gloo/gloo/transport/tcp/"
            "unbound_buffer.cc:78] Timed out waiting 5000ms for recv operation to complete"
        ),
        "collective_timeout",
    ),
]


@pytest.mark.parametrize(("line", "label"), REAL)
def test_real_failures_get_their_labels(line, label):
    tail = ['[rank0]:   File ".../distributed_c10d.py", line 3252, in all_reduce', line]
    verdict = triage.triage(tail, triage.CATALOG)
    assert verdict is not None and verdict.label == label
