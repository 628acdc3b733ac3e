"""The trace replay behind `dlaas simulate`: events in, the same pure `schedule()` out.

`simulate(jobs, nodes, gpus_per_node, policy)` calls the SAME pure `schedule()` the live
scheduler service calls, once per batch of events (submits and finishes at the same instant,
plus LAS level crossings and a coarse tick while jobs wait so starvation promotion is
noticed). Time only jumps between events; nothing ticks per second. The trace is read by
trace.py; the command line is simulator.py.

Modelling choices (all stated, none hidden):
- a job of n GPUs on G-GPU nodes is a gang of learners: n <= G is one learner of n GPUs; a bigger
  job is n/d learners of d GPUs, d the largest divisor of n that is <= G (16 GPUs on 4-GPU nodes:
  4 learners of 4 GPUs, which need 4 whole nodes at once; on 8-GPU nodes, `--nodes 14
  --gpus-per-node 8`, a 16-GPU job is 2 learners of 8 GPUs on two whole nodes);
- `--gpu-count` replaces that with the placement model of Tiresias' simulator (its `count`
  scheme, which its 2D-LAS uses): every job is n learners of 1 GPU that may land on any free
  GPUs of any nodes (packed onto the fewest nodes when it can), so a gang never waits for
  whole nodes. Only to compare with figures from that simulator: a real gang's learners are
  not 1-GPU pieces;
- a job larger than the cluster, or whose learners can never be placed on it (15 GPUs as 3
  learners of 5 on two 8-GPU nodes), is REFUSED at submit and counted, never silently dropped
  (it would wait forever);
- a preemption costs the victim a checkpoint save (`--checkpoint-save-s`, the preemptor starts
  that much later on the freed GPUs) and a restore on its next start (`--restore-s`); the victim
  loses no other work (cooperative checkpoint-on-preempt);
- `--teams N` splits the jobs into N teams by a hash of the job id (CRC-32: the same split on
  every run) and gives each team an equal guarantee, together the whole cluster; it prints
  each team's avg JCT and share of the GPU time. Without it no job has a team and no quota is
  set: the policy decides exactly as it does without teams;
- `elastic` > 0 makes that share of the jobs (by a hash of the job id) elastic with
  `auto_grow`: min half its learners, max twice them, its target the trace's size. A job runs at
  speed (learners now / target); every resize (a grow, a shrink) pauses it for a checkpoint
  save and a restore, and costs each learner before the save and after the restore those
  seconds: the `resize_learner_s` reported, beside the resizes per elastic job-hour. The
  grow rule reads that pause as the live service reads its measured ones (policy.restarts;
  every job's is the same here, so the platform's figure is each job's);
- the policy never sees durations; the ETA, predicted once at submission, learns run times only
  from the jobs that finished before then (the last `DURATION_WINDOW` of them) and conditions each
  running job's remaining time on how long it has run so far, as the live service would.
"""

from __future__ import annotations

import heapq
import math
import statistics
import zlib
from dataclasses import dataclass, replace

from services.scheduler.policy import (
    DEFAULT_CONFIG,
    LEVEL_HISTORY,
    DurationModel,
    Node,
    Policy,
    PolicyConfig,
    QueuedJob,
    RunningJob,
    Snapshot,
    can_ever_fit,
    learned_config,
    policy_for,
    predict_waiting,
    schedule,
)
from services.scheduler.policy.elastic import IdleForecast
from services.scheduler.policy.restarts import RestartTimes
from services.scheduler.trace import TraceJob, equal_quotas, team_of

_FINISH, _SUBMIT, _TICK = 0, 1, 2

# The ETA is also judged on its own over the jobs that waited at least this long (seconds).
WAITED_S = 600.0


@dataclass(slots=True)
class _State:
    job: TraceJob
    learners: int
    gpl: int
    remaining: float
    attained: float = 0.0
    run_start: float = 0.0  # when the current run's allocation began
    work_start: float = 0.0  # when it began making progress (after save/restore delays)
    epoch: int = 0
    first_start: float | None = None
    end: float | None = None
    preemptions: int = 0
    restore_due: bool = False
    eta: tuple[float, float] | None = None
    running: RunningJob | None = None
    queued: QueuedJob | None = None
    team: str = ""
    cur: int = 0  # learners it runs with now (an elastic job's may differ from `learners`)
    max_learners: int | None = None  # elastic (auto_grow) jobs only
    last_resize: float | None = None

    @property
    def rate(self) -> float:
        """Work done per second: its size now over the size the trace ran it at."""
        return self.cur / self.learners

    def queued_job(self, **kw) -> QueuedJob:
        el = self.max_learners is not None
        return QueuedJob(
            self.job.job_id,
            "trace",
            self.learners,
            self.gpl,
            0.0,
            0,
            0,
            self.job.submit,
            team=self.team,
            min_learners=max(1, self.learners // 2) if el else None,
            max_learners=self.max_learners,
            auto_grow=el,
            **kw,
        )

    def running_job(self, allocs, start: float, attained: float) -> RunningJob:
        return RunningJob(
            self.job.job_id,
            "trace",
            allocs,
            0,
            start,
            attained,
            start,
            submit_time=self.job.submit,
            gpus_per_learner=self.gpl,
            cpus_per_learner=0.0,
            memory_mb_per_learner=0,
            team=self.team,
            min_learners=max(1, self.learners // 2) if self.max_learners else None,
            max_learners=self.max_learners,
            target_learners=self.learners,
            auto_grow=self.max_learners is not None,
            last_resize_time=self.last_resize,
        )


def _gang(n: int, g: int) -> tuple[int, int]:
    if n <= g:
        return 1, max(n, 0)
    d = max(x for x in range(1, g + 1) if n % x == 0)
    return n // d, d


def _pct(xs: list[float], p: float) -> float:
    if not xs:
        return 0.0
    xs = sorted(xs)
    k = min(len(xs) - 1, max(0, round(p / 100 * len(xs) + 0.5) - 1))
    return xs[k]


def simulate(
    jobs: list[TraceJob],
    nodes: int,
    gpus_per_node: int,
    policy: str | Policy,
    save_s: float = 20.0,
    restore_s: float = 30.0,
    tick_s: float = 300.0,
    config: PolicyConfig | None = None,
    round_s: float = 10.0,
    per_job: bool = False,
    teams: int = 0,
    guarantees: bool = True,
    gpu_count: bool = False,
    elastic: float = 0.0,
    progress: bool = True,
) -> dict:
    """Replay `jobs`; metrics as a dict. `teams` > 0 labels the jobs with teams (see
    `team_of`) and reports per team; `guarantees=False` then leaves the quotas out of the
    snapshots (the baseline: the same teams, no quotas, decisions as without teams).
    `elastic` (0..1): the share of jobs made elastic with auto_grow; resizes are reported.
    `progress`: the ETA knows each running job's time left (from the trace, as the live
    service reads it off the job's progress); False: the run-time model guesses it."""
    cfg = config or DEFAULT_CONFIG
    cluster = tuple(
        Node(
            f"n{i:04d}",
            gpus_per_node,
            float(8 * gpus_per_node),
            64_000 * gpus_per_node,
            labels={"rack": f"r{i // 8}"},
        )
        for i in range(nodes)
    )
    capacity = nodes * gpus_per_node
    team_quotas = equal_quotas(teams, cluster) if teams > 0 else {}
    quotas = team_quotas if guarantees else {}
    busy_by_team: dict[str, float] = dict.fromkeys(team_quotas, 0.0)
    # Over a whole replay every job runs to its end, so each team's share of ALL the GPU time
    # is its share of the trace's work whatever the policy does. What quotas change is who gets
    # the GPUs while the teams compete: the share while every team has jobs waiting, and the
    # GPU-seconds a team with jobs waiting held less than min(its guarantee, what it asked for).
    waiting_gpus: dict[str, int] = dict.fromkeys(team_quotas, 0)
    contended_by_team: dict[str, float] = dict.fromkeys(team_quotas, 0.0)
    short_by_team: dict[str, float] = dict.fromkeys(team_quotas, 0.0)
    contended_s = 0.0
    reclaims = 0
    events: list[tuple[float, int, int, str]] = []
    seq = 0
    states: dict[str, _State] = {}
    refused = 0
    placeable: dict[tuple[int, int], bool] = {}  # (learners, GPUs each) -> fits an empty cluster
    for j in jobs:
        if j.gpus > capacity or j.gpus <= 0:
            refused += 1
            continue
        learners, gpl = (j.gpus, 1) if gpu_count else _gang(j.gpus, gpus_per_node)
        ok = placeable.get((learners, gpl))
        if ok is None:
            probe = QueuedJob("probe", "trace", learners, gpl, 0.0, 0)
            ok = placeable[(learners, gpl)] = can_ever_fit(probe, cluster)[0]
        if not ok:
            refused += 1
            continue
        states[j.job_id] = _State(j, learners, gpl, j.duration)
        if elastic > 0 and zlib.crc32(f"elastic {j.job_id}".encode()) < elastic * 2**32:
            states[j.job_id].max_learners = 2 * learners
        if teams > 0:
            states[j.job_id].team = team_of(j.job_id, teams)
        events.append((j.submit, _SUBMIT, seq, j.job_id))
        seq += 1
    heapq.heapify(events)
    queue: dict[str, QueuedJob] = {}
    running: dict[str, _State] = {}
    model = DurationModel()
    # GPU-seconds of every finished job: the default's first level threshold is learned from
    # them (eta.learned_config), as the live scheduler does
    gpu_model = DurationModel(window=LEVEL_HISTORY)
    base_cfg = cfg
    preemptions = 0
    resizes, resize_learner_s = 0, 0.0
    forecast = IdleForecast()  # the grow rule's pace of arrivals and finishes
    restarts = RestartTimes(cfg.restart_s)  # and what its restarts cost, as simulated
    busy_gpu_s = 0.0
    last_t = None
    tick_pending = False
    pol = policy_for(policy)
    thresholds = pol.thresholds(cfg) if pol.leveled else ()
    first_t = events[0][0] if events else 0.0
    last_end = first_t

    def push(t: float, kind: int, jid: str) -> None:
        nonlocal seq
        heapq.heappush(events, (t, kind, seq, jid))
        seq += 1

    def book_work(st: _State, t: float) -> None:
        """Book the work done since work_start (a preemption or resize stops the run)."""
        done = max(0.0, t - st.work_start)
        st.remaining = max(0.0, st.remaining - done * st.rate)
        st.attained += done * (st.cur * st.gpl)
        st.work_start = max(st.work_start, t)

    def start_run(st: _State, t: float, allocs, extra_delay: float) -> None:
        delay = extra_delay + (restore_s if st.restore_due else 0.0)
        st.restore_due = False
        st.run_start = t
        st.work_start = t + delay
        st.cur = len(allocs)
        st.last_resize = None
        if st.first_start is None:
            st.first_start = t
        st.running = st.running_job(tuple(allocs), t, st.attained)
        running[st.job.job_id] = st
        finish_at(st)
        # wake up when it drops a LAS level: someone may preempt it
        scale = pol.service(1.0, st.job.gpus, cfg)  # level = attained * scale
        for thr in thresholds:
            thr /= scale
            if st.attained < thr:
                push(st.work_start + (thr - st.attained) / st.job.gpus + 1e-3, _TICK, "")

    def growable() -> bool:
        """Elastic jobs below their max may grow: rounds (and ticks) go on for them, as the
        live loop runs rounds all the time."""
        return elastic > 0 and any(
            s.max_learners and s.cur < s.max_learners for s in running.values()
        )

    def finish_at(st: _State) -> None:
        st.epoch += 1  # any earlier finish event is stale now
        push(st.work_start + st.remaining / st.rate, _FINISH, f"{st.job.job_id}#{st.epoch}")

    while events:
        t = events[0][0]
        if round_s > 0:  # rounds on a fixed cadence, as a live scheduler loop runs them
            t = math.ceil(t / round_s) * round_s
        # utilization: GPUs held by running jobs between events
        if last_t is not None:
            busy_gpu_s += (t - last_t) * sum(s.cur * s.gpl for s in running.values())
            if team_quotas:
                dt = t - last_t
                holds = dict.fromkeys(team_quotas, 0)
                for s in running.values():
                    holds[s.team] += s.cur * s.gpl
                contended = all(waiting_gpus.values())
                contended_s += dt if contended else 0.0
                for name, g in holds.items():
                    busy_by_team[name] += dt * g
                    if contended:
                        contended_by_team[name] += dt * g
                    if waiting_gpus[name]:
                        owed = min(team_quotas[name].gpus, g + waiting_gpus[name])
                        short_by_team[name] += dt * max(0, owed - g)
        last_t = t
        submitted = []
        while events and events[0][0] <= t:
            te, kind, _, jid = heapq.heappop(events)
            if kind == _FINISH:
                job_id, _, ep = jid.partition("#")
                st = running.get(job_id)
                if st is None or st.epoch != int(ep):
                    continue  # stale finish of a run that was preempted
                del running[job_id]
                st.end = te
                st.remaining = 0.0
                last_end = max(last_end, te)
                model.add(st.job.duration)
                forecast.finished(te)
                gpu_model.add(st.job.duration * st.job.gpus)
                cfg = learned_config(gpu_model, base_cfg)
                thresholds = pol.thresholds(cfg) if pol.leveled else ()
            elif kind == _SUBMIT:
                st = states[jid]
                if team_quotas:
                    waiting_gpus[st.team] += st.job.gpus
                queue[jid] = st.queued_job()
                forecast.arrived(te)
                submitted.append(jid)
            elif jid == "tick":
                tick_pending = False
        # progress of running jobs so far (attained service is what LAS ranks by, and what the
        # ETA conditions a running job's remaining time on); kept on the state for the ETA below
        run_jobs = []
        for st in running.values():
            done = max(0.0, t - max(st.work_start, st.run_start))
            att = st.attained + done * (st.cur * st.gpl)
            r = st.running
            if r.attained_service != att:
                st.running = r = st.running_job(r.allocations, r.start_time, att)
            run_jobs.append(r)
        if not queue and not growable():
            continue
        snap = Snapshot(cluster, run_jobs, list(queue.values()), quotas)
        round_cfg = restarts.config(forecast.config(cfg, t)) if elastic > 0 else cfg
        decisions = schedule(snap, t, policy, round_cfg, include_waits=False)
        preempted_now = False
        for d in decisions:
            st = states[d.job_id]
            if d.action == "preempt":
                preemptions += 1
                if quotas and d.cause.startswith("reclaimed"):
                    reclaims += 1
                preempted_now = True
                book_work(st, t)
                st.preemptions += 1
                st.restore_due = True
                del running[d.job_id]
                if team_quotas:
                    waiting_gpus[st.team] += st.job.gpus
                queue[d.job_id] = st.queued_job(
                    attained_service=st.attained,
                    preemptions=st.preemptions,
                    last_preempted_time=t,
                )
            elif d.action in ("grow", "shrink"):  # a gang restart from its checkpoint
                book_work(st, t)
                held, before = st.running.allocations, st.cur
                if d.action == "grow":
                    allocs = (*held, *d.allocations)
                else:
                    allocs = tuple(a for a in held if a not in d.allocations)
                    preempted_now = True  # who gets them waits for the checkpoint
                st.cur = len(allocs)
                st.work_start = t + save_s + restore_s
                st.last_resize = t
                st.running = st.running_job(allocs, st.run_start, st.attained)
                finish_at(st)
                resizes += 1
                resize_learner_s += save_s * before + restore_s * st.cur
                restarts.add(d.job_id, save_s + restore_s)
            elif d.action == "start":
                del queue[d.job_id]
                if team_quotas:
                    waiting_gpus[st.team] -= st.job.gpus
                start_run(st, t, d.allocations, save_s if preempted_now else 0.0)
        if submitted:  # ETA predicted at submission for jobs that had to wait
            waiting = [j for j in submitted if j in queue]
            for j in submitted:
                if j not in queue:
                    states[j].eta = (t, t)
            if waiting:
                ran = [s.running for s in running.values()]
                if progress:  # its end is due at work_start + remaining / rate (finish_at)
                    ran = [
                        replace(
                            s.running,
                            remaining_s=max(0.0, s.work_start + s.remaining / s.rate - t),
                        )
                        for s in running.values()
                    ]
                snap = Snapshot(cluster, ran, list(queue.values()), quotas)
                for j, eta in predict_waiting(snap, t, policy, model, waiting, cfg).items():
                    states[j].eta = eta
        if (growable() or (queue and pol.preempts)) and not tick_pending:
            push(t + tick_s, _TICK, "tick")
            tick_pending = True

    done = [s for s in states.values() if s.end is not None]
    jct = [s.end - s.job.submit for s in done]
    qd = [s.first_start - s.job.submit for s in done]
    in_range, errors, widths = 0, [], []
    # Jobs that waited long enough for their ETA to matter: a job that starts within a round
    # or two is "in range" almost by construction, and would hide how the ETA does for the
    # jobs a user actually looks up. Each job is judged on the ETA it got at submit, never on a
    # later one: the live `show`/`queue` re-estimate on every call (a range that narrows as the
    # start nears), so this is the hardest of the ranges a user sees, and the one that lets a
    # user plan.
    waited_in, waited_widths, waited_waits = 0, [], []
    for s in done:
        lo, hi = s.eta or (s.job.submit, s.job.submit)
        ok = lo - 1e-6 <= s.first_start <= hi + 1e-6
        in_range += ok
        mid = (lo + hi) / 2 if hi != float("inf") else lo
        errors.append(abs(s.first_start - mid))
        widths.append(hi - lo)  # a range can be right by being wide: report how wide
        wait = s.first_start - s.job.submit
        if wait >= WAITED_S:
            waited_in += ok
            waited_widths.append(hi - lo)
            waited_waits.append(wait)
    waited = len(waited_widths)
    span = max(last_end - first_t, 1e-9)
    out = {
        "jobs": len(done),
        "refused": refused,
        "avg_jct": statistics.fmean(jct) if jct else 0.0,
        "p50_jct": _pct(jct, 50),
        "p95_jct": _pct(jct, 95),
        "p99_jct": _pct(jct, 99),
        "avg_queue": statistics.fmean(qd) if qd else 0.0,
        "p99_queue": _pct(qd, 99),
        "utilization": busy_gpu_s / (capacity * span),
        "preemptions": preemptions,
        "eta_in_range": in_range / len(done) if done else 1.0,
        "eta_median_abs_error": statistics.median(errors) if errors else 0.0,
        "eta_median_width": statistics.median(widths) if widths else 0.0,
        "waited": waited,
        "eta_in_range_waited": waited_in / waited if waited else 1.0,
        "eta_median_width_waited": statistics.median(waited_widths) if waited else 0.0,
        "median_wait_waited": statistics.median(waited_waits) if waited else 0.0,
    }
    if elastic > 0:
        hours = sum(s.end - s.first_start for s in done if s.max_learners) / 3600
        out["elastic_jobs"] = sum(1 for s in done if s.max_learners)
        out["elastic_job_hours"] = hours
        out["resizes"] = resizes
        out["resizes_per_job_hour"] = resizes / hours if hours else 0.0
        out["resize_learner_s"] = resize_learner_s
    if team_quotas:
        busy = sum(busy_by_team.values()) or 1.0
        contended = sum(contended_by_team.values()) or 1.0
        out["reclaims"] = reclaims
        out["teams"] = {}
        for name, q in team_quotas.items():
            tj = [s.end - s.job.submit for s in done if s.team == name]
            out["teams"][name] = {
                "jobs": len(tj),
                "avg_jct": statistics.fmean(tj) if tj else 0.0,
                "p99_jct": _pct(tj, 99),
                "gpu_share": busy_by_team[name] / busy,
                "contended_gpu_share": contended_by_team[name] / contended,
                "contended_hours": contended_s / 3600,
                "short_gpu_hours": short_by_team[name] / 3600,
                "quota_gpus": q.gpus,
            }
    if per_job:  # for analysis: (submit, duration, gpus, first start, end, preemptions, eta)
        out["_per_job"] = [
            (s.job.submit, s.job.duration, s.job.gpus, s.first_start, s.end, s.preemptions, s.eta)
            for s in done
        ]
    return out
