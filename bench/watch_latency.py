"""How soon does `eat watch` show an evaluation after its event is written?

A short real run (start_run on examples/cpu_matmul, the offline agents, the real loop with its
event log, git commits and supervisor) goes on one thread while `eat.watch.watch` draws it on
another, into a console that is not a terminal. For each candidate_evaluated event the delay is
the time from the event's `time` (set when the loop makes it, before it is appended and synced)
to the first frame whose view counts that candidate. Events written before the watcher started
are left out.

`--runner cpu` builds, verifies and times every candidate with the CPU runner (a cheap
evaluation: one seed, few timed calls); `--runner fake` (the default) answers from the knobs
after `--spacing` seconds, so the run's pace is known and the figure is eat's alone.

Contract (issue 13): every delay under 1 s.
Run from the repository root:  python bench/watch_latency.py [--evals 40] [--runner fake|cpu]
[--spacing 0.1] [--json]
"""

from __future__ import annotations

import argparse
import io
import json
import statistics
import tempfile
import threading
import time
from pathlib import Path

from overhead import FakeRunner
from rich.console import Console

from eat.run import start_run
from eat.target import load_target
from eat.watch import watch
from eat.workspace import Workspace

TARGET = Path(__file__).resolve().parents[1] / "examples" / "cpu_matmul"
CONTRACT_S = 1.0


class PacedRunner(FakeRunner):
    """overhead.py's instant fake runner, slowed to a known pace."""

    def __init__(self, spacing: float):
        super().__init__()
        self.spacing = spacing

    def evaluate(self, *args, **kwargs):
        time.sleep(self.spacing)
        return super().evaluate(*args, **kwargs)


def measure(evals: int, runner_name: str, spacing: float) -> dict:
    target = load_target(TARGET)
    runner = PacedRunner(spacing) if runner_name == "fake" else None
    cheap = target.evaluation.model_copy(
        update=dict(seeds=1, warmup=1, min_repeats=3, max_repeats=5, budget_s=0.05)
    )
    with tempfile.TemporaryDirectory() as tmp:
        ws = Path(tmp) / "ws"
        run = threading.Thread(
            target=start_run,
            args=(TARGET, ws),
            kwargs=dict(runner=runner, eval_config=cheap, max_evals=evals, seed=1),
        )
        t0 = time.time()
        run.start()
        while not (ws / "history.jsonl").exists():
            time.sleep(0.005)
        shown: list[tuple[float, int]] = []  # (when, candidates the frame counts)
        stop = threading.Event()
        started = time.time()
        watcher = threading.Thread(
            target=watch,
            args=(ws, Console(file=io.StringIO()), stop),
            kwargs=dict(
                on_frame=lambda view, _: shown.append((time.time(), view.state.evaluations))
            ),
        )
        watcher.start()
        run.join()
        wall = time.time() - t0
        deadline = time.time() + 5
        events = Workspace.open(ws).read_events()[0]
        evaluated = [e for e in events if e.type == "candidate_evaluated"]
        while (not shown or shown[-1][1] < len(evaluated)) and time.time() < deadline:
            time.sleep(0.01)
        stop.set()
        watcher.join()
    delays = []
    for k, e in enumerate(evaluated, 1):
        if e.time > started:
            first = next((t for t, n in shown if n >= k), None)
            delays.append(float("inf") if first is None else first - e.time)
    return {
        "runner": runner_name,
        "evaluations": len(evaluated),
        "measured": len(delays),
        "frames": len(shown),
        "run_s": round(wall, 2),
        "median_ms": round(statistics.median(delays) * 1e3, 2),
        "max_ms": round(max(delays) * 1e3, 2),
        "within_contract": max(delays) < CONTRACT_S,
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--evals", type=int, default=40, help="evaluations of the run")
    ap.add_argument("--runner", choices=["fake", "cpu"], default="fake")
    ap.add_argument(
        "--spacing", type=float, default=0.1, help="seconds per evaluation of the fake runner"
    )
    ap.add_argument("--json", action="store_true", help="print one JSON object")
    args = ap.parse_args()
    r = measure(args.evals, args.runner, args.spacing)
    if args.json:
        print(json.dumps(r))
        return
    print(
        f"eat watch, {r['runner']} runner: {r['evaluations']} evaluations in {r['run_s']} s, "
        f"{r['frames']} frames"
    )
    print(
        f"event -> frame delay over {r['measured']} evaluations: median {r['median_ms']} ms, "
        f"max {r['max_ms']} ms ({'within' if r['within_contract'] else 'OVER'} the 1 s "
        "contract)"
    )


if __name__ == "__main__":
    main()
