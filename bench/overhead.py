"""What does the framework itself cost per candidate, and does it grow with the run's history?

A real evaluation takes seconds, so eat's own work per candidate (agent, event log, state,
plateau checks, LEARNING.md, notes, git commit, LangGraph checkpoint) should be small next to
it, and it must not grow as the run gets long, or long runs slow down for no reason.
Both parts run the real loop (start_run / resume_run on examples/cpu_matmul) with an injected
fake runner that answers at once, and subtract the time spent inside that runner:

(a) framework ms per candidate: a fresh run of --evals evaluations; wall time minus runner time,
    divided by the evaluations; broken down by timing eat's own functions (wrapped here, for
    this process only: git commits, the LangGraph checkpoint's SQLite calls, the event log,
    candidate files, LEARNING.md, team notes, the agent's proposal; the rest is LangGraph
    itself, the state, plateau checks and the run's one-off setup).
(b) supervisor step time against history length: workspaces whose history.jsonl already holds
    10, 1,000 and 10,000 events (written directly, each candidate with its folder of source,
    meta.json and result.json, all committed once, as a real run would have left them), then
    resume_run for --steps more evaluations. A step is the time between two consecutive
    candidate_evaluated events, less the runner's time; the one-off resume cost (reading the log,
    folding the state, re-rendering EVOLUTION.md, the resume commit) is reported apart.
    Unlike a real run, the synthetic workspaces start with an empty LangGraph checkpoint.

Targets: <= 20 ms per candidate; a step cost that does not grow with the history's length.
Run from the repository root:  python bench/overhead.py [--evals 200] [--steps 30] [--sizes ...]
"""

from __future__ import annotations

import argparse
import hashlib
import json
import random
import statistics
import tempfile
import time
from collections import defaultdict
from pathlib import Path

from langgraph.checkpoint.sqlite import SqliteSaver

import eat.learning
import eat.run
import eat.supervisor
import eat.turn
import eat.workspace
from eat.agents.offline import OfflineAgent, render
from eat.config import RunConfig
from eat.events import CandidateEvaluated, RunStarted, TeamSpawned
from eat.run import resume_run, start_run
from eat.runners.base import Evaluation, Stat, WorkloadResult, source_hash
from eat.target import load_target
from eat.team import load_presets
from eat.turn import evaluated_event
from eat.workspace import Workspace

ROOT = Path(__file__).resolve().parents[1]
TARGET = ROOT / "examples" / "cpu_matmul"
TARGET_MS, TEAMS = 20.0, ["coordinate", "explorer"]


class FakeRunner:
    """Answers at once: speedup in [0.5, 3.5) from a hash of the source, 1% timing spread."""

    name = "cpu"

    def __init__(self):
        self.seconds, self.calls = 0.0, 0

    def unavailable(self, target=None):
        return None

    def program(self, target, source):
        return None  # each source its own program

    def evaluate(self, target, source, *, config=None, workdir=None) -> Evaluation:
        t0 = time.perf_counter()
        h = int(hashlib.sha256(source.encode()).hexdigest()[:8], 16) / 2**32
        speedup = 0.5 + 3.0 * h
        rows = [
            WorkloadResult(
                params=p,
                candidate=Stat(median_s=1e-3 / speedup, iqr_s=1e-5 / speedup, n=30),
                baseline=Stat(median_s=1e-3, iqr_s=1e-5, n=30),
                speedup=speedup,
                gflops=target.metric("flops", p) / (1e-3 / speedup) / 1e9,
            )
            for p in target.workloads
        ]
        ev = Evaluation(
            status="ok",
            speedup=speedup,
            target=target.name,
            runner="fake",
            device="none",
            workloads=rows,
            source_hash=source_hash(source),
        )
        self.seconds += time.perf_counter() - t0
        self.calls += 1
        return ev


class Probe:
    """Wraps eat functions with timers, and clocks every candidate_evaluated event."""

    SPOTS = [
        ("git commit", [(eat.workspace.Workspace, "commit")]),
        ("git backlog at stop", [(eat.workspace.Workspace, "flush")]),
        ("event log", [(eat.workspace.Workspace, "append")]),
        (
            "candidate files",
            [(eat.workspace.Workspace, "write_candidate"), (eat.workspace.Workspace, "set_best")],
        ),
        ("LEARNING.md", [(eat.learning, "update")]),
        (
            "team notes",
            [(eat.turn, "write_notes"), (eat.supervisor, "write_notes"), (eat.run, "write_notes")],
        ),
        ("agent", [(OfflineAgent, "propose")]),
        (
            "graph checkpoint",
            [(SqliteSaver, "put"), (SqliteSaver, "put_writes"), (SqliteSaver, "get_tuple")],
        ),
    ]

    def __init__(self, runner: FakeRunner):
        self.runner, self.spent, self.saved = runner, defaultdict(float), []
        self.marks: list[tuple[float, float, float]] = []  # (clock, runner s, git s) per event

    def __enter__(self):
        for label, places in self.SPOTS:
            for owner, attr in places:
                fn = getattr(owner, attr)
                self.saved.append((owner, attr, fn))
                setattr(owner, attr, self._timed(label, fn))
        return self

    def __exit__(self, *exc):
        for owner, attr, fn in reversed(self.saved):
            setattr(owner, attr, fn)

    def _timed(self, label, fn):
        def wrapper(*args, **kwargs):
            t0 = time.perf_counter()
            try:
                return fn(*args, **kwargs)
            finally:
                self.spent[label] += time.perf_counter() - t0

        return wrapper

    def on_event(self, event, state):
        if isinstance(event, CandidateEvaluated):
            self.mark()

    def mark(self):
        self.marks.append((time.perf_counter(), self.runner.seconds, self.spent["git commit"]))

    def steps_ms(self) -> tuple[list[float], list[float]]:
        """Per step between consecutive marks: (ms without the runner, ms in git commits)."""
        pairs = zip(self.marks, self.marks[1:])
        out = [((b[0] - a[0]) - (b[1] - a[1]), b[2] - a[2]) for a, b in pairs]
        return [1e3 * s for s, _ in out], [1e3 * g for _, g in out]


def part_a(evals: int, tmp: Path, seed: int) -> dict:
    runner = FakeRunner()
    with Probe(runner) as probe:
        t0 = time.perf_counter()
        _, why = start_run(
            TARGET, tmp / "a", runner=runner, on_event=probe.on_event, max_evals=evals, seed=seed
        )
        wall = time.perf_counter() - t0
    n = len(probe.marks)
    # Commits run on a background thread beside the loop; with an instant runner they fall
    # behind and the stop waits for them. That wait is reported, not counted per candidate.
    backlog = probe.spent.pop("git backlog at stop", 0.0)
    framework = wall - runner.seconds - backlog
    print(
        f"(a) fresh run of {n} evaluations ({runner.calls} runner calls incl. re-times): "
        f"stopped: {why}"
    )
    print(
        f"    wall {wall:.2f} s, runner {1e3 * runner.seconds:.1f} ms, framework "
        f"{1e3 * framework / n:.1f} ms per candidate (target <= {TARGET_MS:g} ms)"
    )
    for label, s in sorted(probe.spent.items(), key=lambda kv: -kv[1]):
        print(f"    {label:<16} {1e3 * s / n:6.2f} ms/candidate  {s / framework:6.1%}")
    rest = framework - sum(probe.spent.values())  # LangGraph itself, state, plateaus, setup
    print(f"    {'rest':<16} {1e3 * rest / n:6.2f} ms/candidate  {rest / framework:6.1%}")
    print(
        f"    git backlog waited for at stop (background commits behind an instant runner):"
        f" {backlog:.2f} s"
    )
    return {"ms": 1e3 * framework / n, "git": probe.spent["git commit"] / framework}


def synthetic_workspace(root: Path, events: int, seed: int) -> int:
    """A workspace whose log holds `events` events: a run start, two teams, then candidates
    (unique sources, so the agents' whole knob space stays untried). Returns the candidates."""
    target, runner, rng = load_target(TARGET), FakeRunner(), random.Random(seed)
    n = max(1, events - 1 - len(TEAMS))
    config = RunConfig(target=str(TARGET), max_evals=n, teams=TEAMS, seed=seed)
    ws = Workspace.create(root, config)
    presets, lines, clock = load_presets(), [], time.time() - 2.0 * n

    def add(event):
        event.seq, event.time, event.elapsed_s = len(lines) + 1, clock, 2.0 * len(lines)
        lines.append(event.model_dump_json())

    add(
        RunStarted(
            target=target.name,
            target_path=str(TARGET),
            model="offline",
            config=config.model_dump(mode="json"),
        )
    )
    teams = []
    for i, name in enumerate(TEAMS):
        p = presets[name]
        teams.append(f"{p.name}-{i + 1}")
        add(
            TeamSpawned(
                team=teams[-1],
                preset=p.name,
                strategy=p.strategy,
                directive=p.directive,
                share=p.share,
                seed=seed + i,
            )
        )
    for i in range(n):
        cid, team = f"c{i + 1:04d}", teams[i % len(teams)]
        knobs = {k: rng.choice(v.values) for k, v in target.knobs.items()}
        source = render(target, knobs) + f"// synthetic candidate {i + 1}\n"
        ev = runner.evaluate(target, source)
        meta = {"team": team, "idea": "synthetic", "knobs": knobs, "parent": None}
        folder = ws.paths.candidate(team, cid)
        folder.mkdir(parents=True)
        (folder / "candidate.c").write_text(source)
        (folder / "meta.json").write_text(json.dumps(meta, indent=2))
        (folder / "result.json").write_text(json.dumps(ev.model_dump(mode="json"), indent=2))
        add(evaluated_event(cid, meta, ev))
        clock += 2.0
    ws.paths.history.write_text("\n".join(lines) + "\n")
    ws.commit(f"synthetic history of {len(lines)} events")
    ws.flush()
    return n


def part_b(sizes: list[int], steps: int, tmp: Path, seed: int) -> list[dict]:
    print(f"\n(b) resume_run for {steps} more evaluations after histories of each length")
    rows = []
    for size in sizes:
        t0 = time.perf_counter()
        n = synthetic_workspace(tmp / f"b{size}", size, seed)
        print(f"    {size} events written and committed in {time.perf_counter() - t0:.1f} s")
        runner = FakeRunner()
        with Probe(runner) as probe:
            inner = eat.supervisor.run  # mark where resuming ends and the supervisor starts
            eat.supervisor.run = lambda ctx, inner=inner: (probe.mark(), inner(ctx))[1]
            try:
                t0 = time.perf_counter()
                resume_run(
                    tmp / f"b{size}", runner=runner, on_event=probe.on_event, max_evals=n + steps
                )
            finally:
                eat.supervisor.run = inner
        step, git = probe.steps_ms()
        rest = [s - g for s, g in zip(step[1:], git[1:])]
        rows.append(
            {
                "events": size,
                "resume": 1e3 * (probe.marks[0][0] - t0 - probe.marks[0][1]),
                "first": step[0],  # also compiles the graph and opens its checkpoint
                "mean": statistics.mean(step[1:]),
                "median": statistics.median(step[1:]),
                "git": statistics.median(git[1:]),
                "rest": statistics.median(rest),
            }
        )
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--evals", type=int, default=200, help="evaluations of the fresh run (a)")
    ap.add_argument("--steps", type=int, default=30, help="evaluations after each resume (b)")
    ap.add_argument(
        "--sizes",
        type=int,
        nargs="*",
        default=[10, 1000, 10000],
        help="history lengths in events (b)",
    )
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="eat-bench-") as tmp:
        a = part_a(args.evals, Path(tmp), args.seed)
        rows = part_b(args.sizes, args.steps, Path(tmp), args.seed) if args.sizes else []
    print("\nsummary (framework time only: the fake runner's time is subtracted)")
    print(
        f"  per candidate, fresh run of {args.evals}: {a['ms']:.1f} ms "
        f"(target <= {TARGET_MS:g} ms); {a['git']:.0%} of it in git commits"
    )
    if not rows:
        return
    print(
        f"  steps after resume, ms:  {'events':>7} {'resume':>7} {'1st step':>8} {'mean':>6} "
        f"{'median':>6} {'git med':>7} {'rest med':>8}"
    )
    for r in rows:
        print(
            f"  {'':<23} {r['events']:>7} {r['resume']:>7.0f} {r['first']:>8.1f} "
            f"{r['mean']:>6.1f} {r['median']:>6.1f} {r['git']:>7.1f} {r['rest']:>8.1f}"
        )
    lo, hi = rows[0], rows[-1]
    print(
        f"  median step at {hi['events']} events vs {lo['events']}: "
        f"{hi['median'] / lo['median']:.2f}x (git {hi['git'] / lo['git']:.2f}x, rest "
        f"{hi['rest'] / lo['rest']:.2f}x); target: no growth with the history's length"
    )


if __name__ == "__main__":
    main()
