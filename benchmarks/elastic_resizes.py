"""Elastic thrash in the simulator: resizes per job-hour and the learner-seconds they cost.

    python benchmarks/elastic_resizes.py [--windows A,B] [--elastic 0.3] [--json]

Replays Philly windows (those of `policy_table.py`; A: VC 6c71a0 on 16 x 4 GPUs, B: VC 6214e9
on 24 x 4) through the simulator with a share of the jobs made elastic with `auto_grow`
(`--elastic`, by a hash of the job id: min half their learners, max twice them; replay.py says
how a resize is modelled) under two grow rules of the default policy:

  before  the rule as it was: grow into any idle capacity nobody waiting can use, at once
          (`resize_interval_s` 0, `grow_payback` 0);
  after   the configuration's defaults: no grow within `resize_interval_s` of a (re)start or
          resize, and a loan only if the capacity is expected to stay idle long enough to pay
          for its restarts (policy/elastic.py);
  interval-only, payback-only, interval-600, payback-2 (with --rules): one half of the
          rule alone, or another setting of it.

Per window and rule: resizes, elastic job-hours, resizes per elastic job-hour, learner-seconds
lost to resizes (each resize: checkpoint save x learners before + restore x learners after),
and avg JCT / utilization so a rule that only stops growing is seen too. `--json`: the last
line is a list of {window, rule, metrics}.
"""

from __future__ import annotations

import argparse
import json
import time
from dataclasses import replace

from services.scheduler.policy import DEFAULT_CONFIG
from services.scheduler.replay import simulate

try:  # run as a script: benchmarks/ is on the path
    from policy_table import TRACE, load_window, unknown_window, window_names
except ImportError:  # imported as benchmarks.elastic_resizes
    from benchmarks.policy_table import TRACE, load_window, unknown_window, window_names

RULES = {
    "before": replace(DEFAULT_CONFIG, resize_interval_s=0.0, grow_payback=0.0),
    "after": DEFAULT_CONFIG,
    # each half of the rule alone, and other settings (--rules)
    "interval-only": replace(DEFAULT_CONFIG, grow_payback=0.0),
    "payback-only": replace(DEFAULT_CONFIG, resize_interval_s=0.0),
    "interval-600": replace(DEFAULT_CONFIG, resize_interval_s=600.0),
    "payback-2": replace(DEFAULT_CONFIG, grow_payback=2.0),
}
KEYS = (
    "elastic_jobs",
    "resizes",
    "elastic_job_hours",
    "resizes_per_job_hour",
    "resize_learner_s",
    "avg_jct",
    "utilization",
    "preemptions",
)


def run(window: str, rule: str, share: float, trace: str = TRACE) -> dict:
    jobs, nodes, gpn = load_window(window, trace)
    m = simulate(jobs, nodes, gpn, "default", config=RULES[rule], elastic=share)
    return {k: m[k] for k in KEYS}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--windows", default="A,B", help="comma-separated, of policy_table.py's")
    p.add_argument("--rules", default="before,after", help=f"of {', '.join(RULES)}")
    p.add_argument("--elastic", type=float, default=0.3, help="share of elastic jobs, 0..1")
    p.add_argument("--trace", default=TRACE)
    p.add_argument("--json", action="store_true")
    a = p.parse_args(argv)
    if not 0 < a.elastic <= 1:
        p.error("--elastic: expected a share in (0, 1]")
    windows = [w for w in a.windows.split(",") if w]
    for w in windows:
        if w not in window_names():
            p.error(f"--windows: {unknown_window(w)}")
    rules = [r for r in a.rules.split(",") if r]
    for r in rules:
        if r not in RULES:
            p.error(f"--rules: unknown rule {r!r}; expected some of {', '.join(RULES)}")
    rows = []
    for w in windows:
        for r in rules:
            t0 = time.perf_counter()
            m = run(w, r, a.elastic, a.trace)
            print(
                f"{w:>4} {r:<6} {m['elastic_jobs']:>5} elastic jobs, {m['resizes']:>6} resizes "
                f"({m['resizes_per_job_hour']:.3f}/job-h over {m['elastic_job_hours']:,.0f} h), "
                f"{m['resize_learner_s']:>10,.0f} learner-s lost; avg JCT {m['avg_jct']:,.0f} s, "
                f"util {m['utilization']:.1%}  [{time.perf_counter() - t0:.0f} s]",
                flush=True,
            )
            rows.append({"window": w, "rule": r, "elastic": a.elastic, "metrics": m})
    if a.json:
        print(json.dumps(rows))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
