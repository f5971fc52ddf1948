"""Evaluations per minute against workers, with the runner's work and the LLM faked by sleeps.

The real loop runs (start_run on examples/cpu_matmul: supervisor, teams, workspace, event log,
git) with two stand-ins whose costs are fixed, so the figures show what the executor does
with them, not what this machine's cores can do (a sleep takes no core):

- the runner: `build_s` (compile and verify, outside any lock), then `timed_s` holding the
  device's timing slot (eat.cache.device_lock, as the real runners hold it); it answers a
  speedup scripted from the candidate's knobs;
- the agent: the offline knob search, after a sleep of `llm_s` standing in for an LLM call.

Two cases, each at 1, 2, 4 and 8 workers, on the same 8 teams (two of each preset; one
turn per team at a time, so 8 teams are needed to fill 8 workers):
- llm-bound  (llm_s 1.0, build_s 0.1, timed_s 0.02): target 4 workers >= 3.2x, 8 >= 6x of 1;
- slot-bound (llm_s 0.05, build_s 0.05, timed_s 0.25): the timing slot is the limit
  (60 / timed_s evaluations a minute); target: slot busy >= 85% at 8 workers.
Throughput is evaluations (candidates and re-times) over the run's wall time, start-up and
the final git flush included. The llm-bound case runs again on the Ray executor (a local Ray
instance on loopback, started before the clock; the runner in its actor): "ray" in --json.

Run from the repository root:  python bench/throughput.py [--evals 32] [--json]
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
import tempfile
import threading
import time
from pathlib import Path

from eat.agents.offline import OfflineAgent
from eat.cache import device_lock
from eat.config import PlateauConfig
from eat.run import run_status, start_run
from eat.runners.base import Evaluation, Stat, WorkloadResult, source_hash
from eat.target import load_target

ROOT = Path(__file__).resolve().parents[1]
TARGET = ROOT / "examples" / "cpu_matmul"
WORKERS = (1, 2, 4, 8)
TEAMS = ["coordinate", "explorer", "refiner", "model"] * 2
CASES = {
    "llm-bound": dict(llm_s=1.0, build_s=0.1, timed_s=0.02),
    "slot-bound": dict(llm_s=0.05, build_s=0.05, timed_s=0.25),
}
_DEFINE = re.compile(r"^#define (\w+) (.+)$", re.M)


class SleepyRunner:
    """Builds and verifies in `build_s`, then times in `timed_s` holding the timing slot."""

    name = "cpu"

    def __init__(self, build_s: float, timed_s: float):
        self.build_s, self.timed_s = build_s, timed_s
        self.busy_s = 0.0
        self._lock = threading.Lock()

    def unavailable(self, target=None):
        return None

    def program(self, target, source):
        return None  # each source its own program

    def evaluate(self, target, source, *, config=None, workdir=None) -> Evaluation:
        time.sleep(self.build_s)
        with device_lock("bench-fake0"):
            t0 = time.monotonic()
            time.sleep(self.timed_s)
            spent = time.monotonic() - t0
        with self._lock:
            self.busy_s += spent
        knobs = dict(_DEFINE.findall(source))
        speedup = (
            {"IKJ": 3.0, "KIJ": 2.6}.get(knobs.get("LOOP_ORDER", ""), 1.0)
            * (1.0 + int(knobs.get("MR", "0")) * 0.3)
            * (1.0 + 0.1 * (knobs.get("TILE") == "64"))
        )
        base = 1e-3
        rows = [
            WorkloadResult(
                params=p,
                speedup=speedup,
                candidate=Stat(median_s=base / speedup, iqr_s=base / speedup / 100, n=9),
                baseline=Stat(median_s=base, iqr_s=base / 100, n=9),
            )
            for p in target.workloads
        ]
        return Evaluation(
            status="ok",
            speedup=speedup,
            target=target.name,
            runner="fake",
            device="fake",
            workloads=rows,
            source_hash=source_hash(source),
        )


class SlowAgent:
    """The offline knob search, after `llm_s` of waiting, as on a model's reply."""

    def __init__(self, inner: OfflineAgent, llm_s: float):
        self.inner, self.llm_s = inner, llm_s

    def propose(self, team, state):
        time.sleep(self.llm_s)
        return self.inner.propose(team, state)

    def repair(self, team, state, failed, log):
        return None


def measure(
    workers: int, evals: int, llm_s: float, build_s: float, timed_s: float, executor: str = "local"
) -> dict:
    """One run of `evals` evaluations: evaluations a minute and the timing slot's busy share
    (local only: on Ray the runner's count is in the actor)."""
    runner = SleepyRunner(build_s, timed_s)
    if executor == "ray":  # started before the clock: a cluster is up before a run begins
        from eat.executors.ray import RayRunner

        runner = RayRunner(
            load_target(TARGET), workers, make_runner=lambda: SleepyRunner(build_s, timed_s)
        )
    try:
        return _measure(runner, workers, evals, llm_s)
    finally:
        if executor == "ray":
            runner.close()


def _measure(runner, workers: int, evals: int, llm_s: float) -> dict:
    with tempfile.TemporaryDirectory(prefix="eat-throughput-") as tmp:
        ws = Path(tmp) / "ws"
        t0 = time.monotonic()
        _, stop = start_run(
            TARGET,
            ws,
            runner=runner,
            max_evals=evals,
            workers=workers,
            teams=TEAMS,
            max_teams=len(TEAMS),
            make_agent=lambda team, ctx: SlowAgent(OfflineAgent(ctx.target, seed=0), llm_s),
            # windows as long as the run: teams are not retired mid-measure
            plateau=PlateauConfig(team_window=evals, run_window=evals),
        )
        wall = time.monotonic() - t0
        done = run_status(ws)["evaluations"]
    return {
        "per_min": round(60 * done / wall, 1),
        "evaluations": done,
        "wall_s": round(wall, 2),
        "slot_busy": round(getattr(runner, "busy_s", 0.0) / wall, 3),
        "stop": stop.code,
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--evals", type=int, default=32, help="evaluations per run")
    ap.add_argument("--json", action="store_true", help="print one JSON object")
    ap.add_argument("--no-ray", action="store_true", help="skip the Ray executor's runs")
    args = ap.parse_args()
    os.environ.setdefault("EAT_CACHE_DIR", tempfile.mkdtemp(prefix="eat-throughput-cache-"))
    results = {
        case: {w: measure(w, args.evals, **costs) for w in WORKERS} for case, costs in CASES.items()
    }
    ray = None
    if not args.no_ray:
        results["llm-bound, ray"] = {
            w: measure(w, args.evals, **CASES["llm-bound"], executor="ray") for w in WORKERS
        }
        ray = {str(w): r["per_min"] for w, r in results["llm-bound, ray"].items()}
    llm, slot = results["llm-bound"], results["slot-bound"]
    out = {
        "local": {str(w): llm[w]["per_min"] for w in WORKERS},
        "ray": ray,
        "slot_busy": slot[max(WORKERS)]["slot_busy"],
        "slot_bound": {str(w): slot[w]["per_min"] for w in WORKERS},
        "slot_limit_per_min": round(60 / CASES["slot-bound"]["timed_s"], 1),
    }
    if args.json:
        print(json.dumps(out))
        return
    for case, rows in results.items():
        costs = ", ".join(f"{k} {v}" for k, v in CASES[case.split(",")[0]].items())
        print(f"{case} ({costs}; {args.evals} evaluations, {len(TEAMS)} teams)")
        print(f"  {'workers':>7} {'evals/min':>10} {'vs 1':>6} {'slot busy':>10} {'wall s':>7}")
        for w, r in rows.items():
            print(
                f"  {w:>7} {r['per_min']:>10} {r['per_min'] / rows[1]['per_min']:>5.2f}x "
                f"{r['slot_busy']:>10.0%} {r['wall_s']:>7}"
            )
    print(f"slot limit: {out['slot_limit_per_min']} evaluations/min")
    sys.stdout.flush()


if __name__ == "__main__":
    main()
