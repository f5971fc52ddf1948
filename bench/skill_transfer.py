"""Does a skill from an earlier run make a later run reach that run's best sooner?

An earlier run (the default offline teams, seed 100) optimizes the target; `eat skill export`
writes its SKILL.md. Then, for each seed 0 .. N-1, a run started with `--skill` and one
started without it, both with the same budget of evaluations and the same seed.

Per run: the evaluations (candidates and re-times, in log order) up to and including the first
candidate that reaches the earlier best, where "reaches" means a measured speedup of at least
THRESHOLD (default 0.95) times the earlier best as measured now: the earlier run's best source
evaluated REMEASURE times more before the later runs, the median taken. Each run measures
against its own baseline, and real timing on a shared machine drifts: the figure the earlier run
recorded is the highest of many noisy measurements, taken under other load (here it was seen
to re-measure at 0.6 of itself), so a goal set from it may be out of every later run's reach. A
run that never gets there counts as not reached. The skill helped on a seed when the run with it
reached the earlier best and the run without it did not, or did so in more evaluations.

Runners: the real one of the target (default examples/cpu_matmul; runs go one after another,
timing is exclusive anyway), or with --fake a replay of bench/landscapes/cpu_matmul.json (the
real target's knobs measured on a real machine, answered at once with its recorded noise; see
bench/search_efficiency.py) for a quick check.

Run from the repository root:
    python bench/skill_transfer.py [--target examples/cpu_matmul] [--earlier-evals 40]
                                   [--evals 30] [--seeds 5] [--threshold 0.95] [--fake] [--json]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

from eat.run import run_status, start_run
from eat.runners import runner_for
from eat.skill import evaluations_to_reach, export, parse
from eat.target import load_target
from eat.workspace import Workspace, source_name

sys.path.insert(0, str(Path(__file__).resolve().parent))
from search_efficiency import TABLES, TMP, LandscapeRunner, Replay, make_target  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
EARLIER_SEED = 100
REMEASURE = 3


class Reached(KeyboardInterrupt):
    """Raised from a run's on_event once it has reached the goal: what follows cannot change
    its count, so the run ends there (as if interrupted) and the bench saves that time."""


def stop_at(goal: float):
    def on_event(e, state) -> None:
        if e.type == "candidate_evaluated" and (e.speedup or 0.0) >= goal:
            raise Reached

    return on_event


def evals_to_reach(ws: Path, speedup: float) -> int | None:
    return evaluations_to_reach(Workspace.open(ws).read_events()[0], speedup)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--target", type=Path, default=ROOT / "examples" / "cpu_matmul")
    ap.add_argument(
        "--earlier-evals",
        type=int,
        default=40,
        help="evaluations of the run whose skill is exported",
    )
    ap.add_argument("--evals", type=int, default=30, help="evaluations of each later run")
    ap.add_argument("--seeds", type=int, default=5, help="later runs' seeds 0 .. N-1")
    ap.add_argument(
        "--threshold",
        type=float,
        default=0.95,
        help="a run reaches the earlier best at this fraction of its speedup",
    )
    ap.add_argument(
        "--earlier",
        type=Path,
        help="the workspace of a finished run to take as "
        "the earlier run (default: run one with --earlier-evals)",
    )
    ap.add_argument(
        "--fake",
        action="store_true",
        help="replay the recorded cpu_matmul landscape instead of timing",
    )
    ap.add_argument("--json", action="store_true", help="print only one JSON object")
    args = ap.parse_args()
    say = (lambda *a: None) if args.json else print
    started = time.time()
    with tempfile.TemporaryDirectory(prefix="eat-skill-", dir=TMP) as tmp:
        tmp = Path(tmp)
        if args.fake:
            land = Replay(TABLES / "cpu_matmul.json")
            target = make_target(land, tmp / "target")
            runner = lambda seed: LandscapeRunner(land, seed)  # noqa: E731
        else:
            target, runner = args.target, lambda seed: None

        def run(name: str, seed: int, evals: int, **kw) -> Path:
            start_run(target, tmp / name, runner=runner(seed), max_evals=evals, seed=seed, **kw)
            return tmp / name

        earlier = args.earlier or run("earlier", EARLIER_SEED, args.earlier_evals)
        skill = export(earlier, tmp / "SKILL.md")
        recorded = run_status(earlier)["best_speedup"]
        t = load_target(target)
        source = (Workspace.open(earlier).paths.best / source_name(t.language)).read_text()
        judge = runner(EARLIER_SEED) or runner_for(t)
        best = statistics.median(judge.evaluate(t, source).speedup or 0.0 for _ in range(REMEASURE))
        goal = args.threshold * best
        data = parse(skill.read_text()).data
        say(
            f"earlier run: {data.evaluations} evaluations, best {recorded:.2f}x "
            f"({data.best.candidate}: {', '.join(f'{k}={v}' for k, v in data.best.knobs.items())})"
            f"; measured again now: {best:.2f}x (median of {REMEASURE})"
        )
        say(
            f"reaching it: a candidate measured at >= {args.threshold:g} x {best:.2f}x = "
            f"{goal:.2f}x over its own run's baseline"
        )
        say("runs end once they reach it; best: each run's best when it ended")
        say(
            f"{'seed':>4}  {'with skill':>10}  {'without':>8}  {'best with':>9}  "
            f"{'best without':>12}  helped"
        )
        rows = []
        for seed in range(args.seeds):
            ws_with = run(f"with{seed}", seed, args.evals, skill=skill, on_event=stop_at(goal))
            ws_without = run(f"without{seed}", seed, args.evals, on_event=stop_at(goal))
            with_, without = evals_to_reach(ws_with, goal), evals_to_reach(ws_without, goal)
            helped = with_ is not None and (without is None or with_ < without)
            row = {
                "seed": seed,
                "with_skill": with_,
                "without": without,
                "helped": helped,
                "best_with": run_status(ws_with)["best_speedup"],
                "best_without": run_status(ws_without)["best_speedup"],
            }
            rows.append(row)
            shown = lambda n: "-" if n is None else str(n)  # noqa: E731
            say(
                f"{seed:>4}  {shown(with_):>10}  {shown(without):>8}  "
                f"{row['best_with'] or 0:>8.2f}x  {row['best_without'] or 0:>11.2f}x  "
                f"{'yes' if helped else 'no'}"
            )
    helped = sum(r["helped"] for r in rows)
    reached = {k: sum(r[k] is not None for r in rows) for k in ("with_skill", "without")}
    say(
        f"the skill helped on {helped} of {len(rows)} seeds; the earlier best was reached by "
        f"{reached['with_skill']} runs with it and {reached['without']} without "
        "('-': not within the budget)"
    )
    say(f"{time.time() - started:.0f} s, {'replayed landscape' if args.fake else 'real runner'}")
    if args.json:
        print(
            json.dumps(
                {
                    "target": str(args.target) if not args.fake else "cpu_matmul (replay)",
                    "fake": args.fake,
                    "earlier_evals": data.evaluations,
                    "evals": args.evals,
                    "threshold": args.threshold,
                    "earlier_best_recorded": recorded,
                    "earlier_best": best,
                    "goal": goal,
                    "earlier_best_knobs": data.best.knobs,
                    "seeds": rows,
                    "helped": helped,
                    "reached": reached,
                    "seconds": round(time.time() - started),
                }
            )
        )


if __name__ == "__main__":
    main()
