"""Team quotas in the pure policy core: guarantees, borrowing, reclaim, and quota-named reasons."""

from __future__ import annotations

from dataclasses import replace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from services.scheduler.policy import (
    POLICIES,
    Allocation,
    Node,
    PolicyConfig,
    QueuedJob,
    RunningJob,
    Snapshot,
    TeamQuota,
    queue_report,
    schedule,
    team_usage,
)
from services.scheduler.policy.quota import borrowed_jobs, guaranteed_first


def nodes(n: int, gpus: int = 4) -> list[Node]:
    return [Node(f"n{i}", gpus, 32.0, 256_000) for i in range(n)]


def q(job_id, team, gpus=1, learners=1, prio=0, t=0.0, **kw) -> QueuedJob:
    return QueuedJob(job_id, "u", learners, gpus, 1.0, 1000, prio, t, team=team, **kw)


def run(job_id, team, node_gpus, prio=0, start=0.0, attained=0.0, ckpt=None, **kw):
    allocs = tuple(
        Allocation(i, node, tuple(ix), 1.0, 1000) for i, (node, ix) in enumerate(node_gpus)
    )
    return RunningJob(job_id, "u", allocs, prio, start, attained, ckpt, team=team, **kw)


def quota(gpus: int) -> TeamQuota:
    return TeamQuota(gpus, 64.0, 1_000_000)


def acts(decisions) -> dict[str, str]:
    return {d.job_id: d.action for d in decisions if d.action != "wait"}


# --------------------------------------------------------------------------- classification


def test_guaranteed_is_first_fit_in_start_order_and_no_team_only_borrows():
    quotas = {"a": quota(4)}
    running = [
        run("a1", "a", [("n0", (0, 1, 2))], start=1),  # 3 of 4: guaranteed
        run("a2", "a", [("n1", (0, 1))], start=2),  # 3 + 2 > 4: borrowed
        run("a3", "a", [("n1", (2,))], start=3),  # 3 + 1 = 4: guaranteed (first fit)
        run("x", "", [("n2", (0,))]),  # no team: never guaranteed
        run("b", "b", [("n2", (1,))]),  # a team without a quota: never guaranteed
    ]
    assert borrowed_jobs(running, quotas) == {"a2", "x", "b"}
    usage = {u.team: u for u in team_usage(Snapshot(nodes(3), running, [q("w", "c")], quotas))}
    assert usage["a"].guaranteed[0] == 4 and usage["a"].borrowed[0] == 2
    assert usage["b"].borrowed[0] == 1 and usage["b"].quota == TeamQuota()
    assert usage["c"].queued == 1 and "" not in usage


def test_a_cpu_quota_binds_like_a_gpu_quota():
    quotas = {"a": TeamQuota(8, 1.5, 1_000_000)}
    running = [run("a1", "a", [("n0", (0,))], start=1), run("a2", "a", [("n0", (1,))], start=2)]
    assert borrowed_jobs(running, quotas) == {"a2"}  # 1 + 1 CPU > 1.5


# --------------------------------------------------------------------------- reclaim


def test_reclaim_preempts_borrowed_work_of_another_team_and_says_so():
    quotas = {"vision": quota(4), "nlp": quota(4)}
    snap = Snapshot(
        nodes(2),
        [
            run("n-own", "nlp", [("n0", (0, 1, 2, 3))], start=0),
            run("n-borrow", "nlp", [("n1", (0, 1, 2, 3))], start=10),
        ],
        [q("v", "vision", gpus=2)],
        quotas,
    )
    ds = schedule(snap, 20, "fifo")  # fifo never preempts by class; quotas reclaim anyway
    assert [(d.job_id, d.action) for d in ds] == [("n-borrow", "preempt"), ("v", "start")]
    assert "reclaimed for v: team vision is below its guarantee" in ds[0].cause
    assert "borrowed" in ds[0].cause
    # started 10 s ago, inside the thrash guard: borrowed work is not protected by it
    assert {a.node for a in ds[1].allocations} == {"n1"}


def test_reclaim_never_takes_a_guaranteed_job_even_of_lower_priority():
    quotas = {"vision": quota(4), "nlp": quota(4)}
    snap = Snapshot(
        nodes(2),
        [
            run("n-own", "nlp", [("n0", (0, 1, 2, 3))], prio=0, start=0),
            run("v-own", "vision", [("n1", (0, 1, 2, 3))], prio=9, start=0),
        ],
        # vision is at its quota, so this is a borrowed job: even its higher priority does not
        # let it preempt nlp's guaranteed job (without quotas it would)
        [q("v2", "vision", gpus=4, prio=9, t=1)],
        quotas,
    )
    assert acts(schedule(snap, 10_000, "priority")) == {}
    no_quotas = replace(snap, quotas={})
    assert acts(schedule(no_quotas, 10_000, "priority"))["v2"] == "start"


def test_reclaim_picks_lowest_priority_then_least_work_lost_and_takes_whole_gangs():
    quotas = {"a": quota(4), "b": quota(4)}
    own = run("b-own", "b", [("n0", (0, 1, 2, 3))], start=0)
    gang = run("b-gang", "b", [("n1", (0, 1)), ("n1", (2, 3))], start=5, ckpt=990)
    stale = run("b-stale", "b", [("n2", (0, 1, 2, 3))], start=6, ckpt=100)
    high = run("b-high", "b", [("n3", (0, 1, 2, 3))], prio=5, start=7, ckpt=999)
    snap = Snapshot(nodes(4), [own, gang, stale, high], [q("a1", "a", gpus=4)], quotas)
    ds = schedule(snap, 1000, "priority")
    # b-gang checkpointed 10 s ago (b-stale 900 s ago): it loses the least work, b-high is
    # never first for its priority; the gang goes whole, both learners
    (pre,) = [d for d in ds if d.action == "preempt"]
    assert pre.job_id == "b-gang" and len(pre.allocations) == 2
    assert acts(ds)["a1"] == "start"


def test_own_team_priority_preemption_still_works_under_quotas():
    quotas = {"a": quota(4), "b": quota(4)}
    snap = Snapshot(
        nodes(2),
        [
            run("a-low", "a", [("n0", (0, 1, 2, 3))], prio=0),
            run("b-own", "b", [("n1", (0, 1, 2, 3))], prio=0),
        ],
        [q("a-high", "a", gpus=4, prio=9)],
        quotas,
    )
    assert acts(schedule(snap, 10_000, "priority")) == {"a-low": "preempt", "a-high": "start"}


def test_guaranteed_jobs_go_before_borrowers_in_a_round():
    quotas = {"a": quota(4), "b": quota(4)}
    # b is at its quota; its older job would borrow the last free GPUs, but a's later job is
    # inside a's guarantee and goes first
    snap = Snapshot(
        nodes(2),
        [run("b-own", "b", [("n0", (0, 1, 2, 3))])],
        [q("b-more", "b", gpus=4, t=0), q("a1", "a", gpus=4, t=5)],
        quotas,
    )
    ds = schedule(snap, 100, "fifo")
    assert acts(ds) == {"a1": "start"}
    assert [
        e.job_id for e in sorted(queue_report(snap, 100, "fifo"), key=lambda e: e.position)
    ] == [
        "a1",
        "b-more",
    ]
    # and with idle capacity, a team borrows beyond its quota
    assert acts(schedule(replace(snap, queue=[snap.queue[0]]), 100, "fifo")) == {"b-more": "start"}


def test_pending_reason_names_the_quota_and_who_holds_the_rest():
    quotas = {"vision": quota(8), "nlp": quota(4)}
    snap = Snapshot(
        nodes(3),
        [
            run("v1", "vision", [("n0", (0, 1, 2, 3))]),
            run("v2", "vision", [("n1", (0, 1, 2, 3))]),
            run("n1", "nlp", [("n2", (0, 1, 2, 3))]),
        ],
        [q("v3", "vision", gpus=4)],
        quotas,
    )
    (entry,) = queue_report(snap, 100, "priority")
    assert entry.reason.startswith(
        "team vision uses 8/8 guaranteed GPUs (this job needs 4); "
        "4 borrowable GPUs are held by team nlp's guaranteed jobs"
    )
    no_team = replace(snap, queue=[q("x", "", gpus=4)])
    (entry,) = queue_report(no_team, 100, "priority")
    assert entry.reason.startswith(
        "no team: it only borrows idle capacity; 4 borrowable GPUs are held by team nlp's "
        "guaranteed jobs, 8 by team vision's guaranteed jobs; "
    )


def test_guaranteed_first_keeps_policy_order_inside_each_part():
    quotas = {"a": quota(2)}
    order = [q("a1", "a"), q("x", ""), q("a2", "a"), q("a3", "a")]
    assert [j.job_id for j in guaranteed_first(order, [], quotas)] == ["a1", "a2", "x", "a3"]


# --------------------------------------------------------------------------- properties

TEAMS = ("a", "b", "c", "")


@st.composite
def team_snapshots(draw):
    """Full-ish clusters of 1-2 GPU gangs of three teams (and no team), 1-GPU jobs queued.
    CPUs and memory never bind, so any freed GPU can take any queued job."""
    cluster = [
        Node(f"n{i}", draw(st.integers(1, 8)), 64.0, 1_000_000)
        for i in range(draw(st.integers(1, 5)))
    ]
    free = {n.name: list(range(n.gpus)) for n in cluster}
    running = []
    for k in range(draw(st.integers(0, 12))):
        g = draw(st.integers(1, 2))
        allocs = []
        for li in range(draw(st.integers(1, 2))):
            for name, gs in free.items():
                if len(gs) >= g:
                    allocs.append(Allocation(li, name, tuple(gs[:g]), 0.5, 512))
                    free[name] = gs[g:]
                    break
        if allocs:
            start = float(draw(st.integers(0, 5000)))
            running.append(
                RunningJob(
                    f"r{k}",
                    "u",
                    tuple(allocs),
                    draw(st.integers(0, 2)),
                    start,
                    float(draw(st.integers(0, 100_000))),
                    draw(st.one_of(st.none(), st.just(start + 10))),
                    team=draw(st.sampled_from(TEAMS)),
                )
            )
    queue = [
        QueuedJob(
            f"q{k}",
            "u",
            1,
            1,
            0.5,
            512,
            draw(st.integers(0, 2)),
            float(draw(st.integers(0, 5000))),
            attained_service=float(draw(st.integers(0, 50_000))),
            team=draw(st.sampled_from(TEAMS)),
        )
        for k in range(draw(st.integers(0, 10)))
    ]
    total = sum(n.gpus for n in cluster)
    quotas = {}
    left = total
    for team in TEAMS[:3]:
        if draw(st.booleans()):
            g = draw(st.integers(0, left))
            left -= g
            quotas[team] = TeamQuota(g, 1_000.0, 100_000_000)
    return Snapshot(cluster, running, queue, quotas)


def _gpus_by_team(snap: Snapshot, decisions) -> tuple[dict[str, int], dict[str, int]]:
    """GPUs each team holds after the decisions are carried out, and its GPUs still queued."""
    team = {r.job_id: r.team for r in snap.running} | {j.job_id: j.team for j in snap.queue}
    gpus = {r.job_id: r.gpus for r in snap.running}
    queued = {j.job_id for j in snap.queue}
    for d in decisions:
        if d.action == "preempt":
            del gpus[d.job_id]
            queued.add(d.job_id)
        elif d.action == "start":
            gpus[d.job_id] = sum(len(a.gpu_indices) for a in d.allocations)
            queued.discard(d.job_id)
        elif d.action in ("shrink", "grow"):
            sign = -1 if d.action == "shrink" else 1
            gpus[d.job_id] += sign * sum(len(a.gpu_indices) for a in d.allocations)
    held: dict[str, int] = {}
    for job_id, g in gpus.items():
        held[team[job_id]] = held.get(team[job_id], 0) + g
    waiting: dict[str, int] = {}
    for j in snap.queue:
        if j.job_id in queued:
            waiting[j.team] = waiting.get(j.team, 0) + 1
    return held, waiting


def _preemptors(decisions) -> dict[str, str]:
    """victim -> the job it made room for: preempts come right before the start they serve;
    a job moved out of the way restarts in the same round and is no victim."""
    restarted = {d.job_id for d in decisions if d.action == "start"}
    out, pending = {}, []
    for d in decisions:
        if d.action == "preempt":
            pending.append(d.job_id)
        elif d.action == "start" and pending:
            for v in pending:
                if v not in restarted:
                    out[v] = d.job_id
            pending = []
    return out


@settings(max_examples=300, deadline=None)
@given(team_snapshots(), st.sampled_from(POLICIES), st.integers(0, 20_000))
def test_a_team_below_its_guarantee_gets_it_back_in_one_round(snap, policy, now):
    before, demand = _gpus_by_team(snap, [])
    decisions = schedule(snap, float(now), policy)
    after, _ = _gpus_by_team(snap, decisions)
    team_of = {r.job_id: r.team for r in snap.running} | {j.job_id: j.team for j in snap.queue}
    # (a team may preempt its own work for its own higher class: that is its choice)
    own = {team_of[v] for v, p in _preemptors(decisions).items() if team_of[v] == team_of[p]}
    for team, quota_ in snap.quotas.items():
        if team in own or before.get(team, 0) > quota_.gpus:
            continue  # over its quota: it lost borrowed work; next round it is at or below
        want = min(quota_.gpus, before.get(team, 0) + demand.get(team, 0))
        assert after.get(team, 0) >= want, (team, before, after, demand)


@settings(max_examples=300, deadline=None)
@given(team_snapshots(), st.sampled_from(POLICIES), st.integers(0, 20_000))
def test_borrowed_work_is_the_only_victim_of_another_team(snap, policy, now):
    decisions = schedule(snap, float(now), policy, PolicyConfig(min_run_s=0))
    borrowed = borrowed_jobs(snap.running, snap.quotas)
    team_of = {r.job_id: r.team for r in snap.running} | {j.job_id: j.team for j in snap.queue}
    for victim, preemptor in _preemptors(decisions).items():
        if victim not in borrowed:
            assert team_of[victim] == team_of[preemptor] != "", (victim, preemptor)


@settings(max_examples=200, deadline=None)
@given(team_snapshots(), st.sampled_from(POLICIES), st.integers(0, 20_000))
def test_without_quotas_teams_change_no_decision(snap, policy, now):
    plain = Snapshot(
        snap.nodes,
        [replace(r, team="") for r in snap.running],
        [replace(j, team="") for j in snap.queue],
    )
    with_teams = replace(snap, quotas={})
    cfg = PolicyConfig(min_run_s=0)
    assert schedule(with_teams, float(now), policy, cfg) == schedule(plain, float(now), policy, cfg)


@pytest.mark.parametrize("policy", POLICIES)
def test_a_zero_quota_is_the_same_as_none(policy):
    snap = Snapshot(
        nodes(2),
        [run("b1", "b", [("n0", (0, 1, 2, 3))]), run("x", "", [("n1", (0, 1))])],
        [q("a1", "a", gpus=2), q("b2", "b", gpus=4)],
        {"a": TeamQuota(), "b": quota(4)},
    )
    no_a = replace(snap, quotas={"b": quota(4)})
    assert schedule(snap, 10_000, policy) == schedule(no_a, 10_000, policy)


@settings(max_examples=200, deadline=None)
@given(team_snapshots())
def test_round_usage_agrees_with_borrowed_jobs_and_held(snap):
    # the round's one-pass start state is the same as borrowed_jobs plus summing held()
    from services.scheduler.policy import quota as qt

    borrowed, used, used_b = qt.round_usage(snap.running, snap.quotas)
    assert borrowed == borrowed_jobs(snap.running, snap.quotas)
    want: dict = {}
    want_b: dict = {}
    for r in snap.running:
        want[r.team] = qt.add(want.get(r.team, qt.ZERO), qt.held(r.allocations))
        if r.job_id in borrowed:
            want_b[r.team] = qt.add(want_b.get(r.team, qt.ZERO), qt.held(r.allocations))
    for got, exp in ((used, want), (used_b, want_b)):
        assert set(got) == set(exp)
        for team, use in exp.items():
            assert got[team] == pytest.approx(use)


# --------------------------------------------------------------------------- CPU-only reasons


def cpu_nodes(n: int, cpus: float = 2.0) -> list[Node]:
    return [Node(f"c{i}", 0, cpus, 64_000) for i in range(n)]


def cpu_run(job_id, team, node, cpus, start=0.0):
    return RunningJob(job_id, "u", (Allocation(0, node, (), cpus, 1000),), 0, start, 0.0, None,
                      team=team)  # fmt: skip


def test_reasons_on_a_cpu_only_cluster_speak_of_cpus():
    # The bug: "team vision is below its guarantee (0/0 GPUs)" on a cluster without GPUs.
    quotas = {"vision": TeamQuota(0, 2.0, 64_000), "nlp": TeamQuota(0, 2.0, 64_000)}
    snap = Snapshot(
        cpu_nodes(2),
        [cpu_run("n-own", "nlp", "c0", 2.0), cpu_run("n-borrow", "nlp", "c1", 2.0, start=10)],
        [QueuedJob("v", "u", 1, 0, 1.0, 1000, team="vision")],
        quotas,
    )
    ds = schedule(snap, 20, "fifo")
    assert [(d.job_id, d.action) for d in ds] == [("n-borrow", "preempt"), ("v", "start")]
    assert "team vision is below its guarantee (0/2 CPUs)" in ds[0].cause
    assert "GPU" not in ds[0].cause


def test_an_elastic_start_below_its_size_says_how_many_of_how_many():
    # The bug: "fits now (3 x 0.5 CPU, 2 learner(s))": three of what, two of what?
    snap = Snapshot(cpu_nodes(1, cpus=1.0), [], [
        QueuedJob("e", "u", 3, 0, 0.5, 1000, min_learners=2, max_learners=3)
    ], {})  # fmt: skip
    (d,) = schedule(snap, 0, "fifo")
    assert d.action == "start" and len(d.allocations) == 2
    assert "fits now (2 x 0.5 CPU, 2 of 3 learners)" in d.cause, d.cause
