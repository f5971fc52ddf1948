"""How faithful is a runner's timing? Two figures, both from plain Runner.evaluate calls, on the
runner the target names (CPU, or CUDA/HIP on a machine with a GPU).

(a) Repeatability: one candidate (the target's tuned.cu/.hip where it ships one; else its
    baseline with faster flags, `-O3 -march=native` in ikj order for cpu_matmul) is evaluated
    --runs times; the coefficient of variation (stdev / mean) of the reported median latency
    and of the reported speedup across runs says how far apart two evaluations of the *same*
    code land. Differences between candidates smaller than this are noise to the agents that
    compare them.
(b) Proportionality: the same candidate doing its whole computation once and twice (the entry
    is wrapped in `for (rep = 0; rep < REPS; rep++)` with a compiler barrier between reps; on a
    GPU each rep launches its kernels again, after the previous ones in stream order) is
    evaluated alternately, so the latency ratio should be exactly 2; its error bounds how much
    fixed overhead or bias the harness adds to what it reports.

Run from the repository root:  python bench/timing_fidelity.py [--target DIR] [--runs 10]
It prints figures and fails only when an evaluation is not "ok".
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

from eat.runners import runner_for
from eat.runners.base import Evaluation, Runner
from eat.target import Target, geomean, load_target

ROOT = Path(__file__).resolve().parents[1]
FLAGS = {"cpu": "-O3 -march=native", "cuda": "-O3", "rocm": "-O3"}
TUNING = {"LOOP_ORDER": "IKJ"}  # knob values set where the target declares them (cpu_matmul)
TUNED_FILE = {"cuda": "tuned.cu", "hip": "tuned.hip"}


def tuned_file(target: Target) -> Path | None:
    """The tuned candidate the target folder ships, if any (the GPU examples do)."""
    name = TUNED_FILE.get(target.language)
    return target.root / name if name and (target.root / name).is_file() else None


def tuned(target: Target) -> str:
    """The target's tuned file; else the baseline source with faster flags and, where
    declared, the knob values in TUNING."""
    if path := tuned_file(target):
        return path.read_text()
    defines = "".join(
        f"#define {k} {v}\n"
        for k, v in TUNING.items()
        if k in target.knobs and v in target.knobs[k].values
    )
    return f"// eat:cflags {FLAGS[target.runner]}\n{defines}{target.baseline_source()}"


def repeated(target: Target, source: str, reps: int) -> str:
    """`source` with its entry renamed and wrapped so that a call does all its work `reps` times.

    The empty asm with a memory clobber sits between reps, so the compiler can neither merge
    the calls nor drop the first one's stores. CUDA and HIP entries are C++ with C linkage.
    """
    name, inner = target.entry.name, f"eat_once_{target.entry.name}"
    call_args = ", ".join(a.name for a in target.args)
    linkage = 'extern "C" ' if target.language in TUNED_FILE else ""
    return (
        f"#define {name} {inner}\n{source}\n#undef {name}\n\n"
        f"{linkage}{target.entry.signature.strip().rstrip(';')}\n{{\n"
        f"    for (int rep = 0; rep < {reps}; rep++) {{\n"
        f'        __asm__ volatile("" ::: "memory");\n'
        f"        {inner}({call_args});\n    }}\n}}\n"
    )


def cv(values: list[float]) -> float:
    return statistics.stdev(values) / statistics.mean(values)


def latency_ratio(a, b, w: int | None = None) -> float:
    """Candidate latency of evaluation b / of evaluation a, on workload w or the geomean."""
    ws = range(len(a.workloads)) if w is None else [w]
    return geomean(
        [b.workloads[i].candidate.median_s / a.workloads[i].candidate.median_s for i in ws]
    )


def full(target: Target):
    """The target's timing settings with racing off: the 2x variant is exactly at the racing
    margin, and timing it out early on some runs and not others would say nothing about the
    timing itself."""
    return target.evaluation.model_copy(update={"race_rounds": 0})


def evaluate(runner: Runner, target: Target, source: str, what: str) -> Evaluation:
    ev = runner.evaluate(target, source, config=full(target))
    if ev.status != "ok":
        sys.exit(f"{what}: status {ev.status}: {ev.message}")
    return ev


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--target", default=str(ROOT / "examples" / "cpu_matmul"))
    ap.add_argument("--runs", type=int, default=10, help="evaluations of each candidate")
    args = ap.parse_args()
    if args.runs < 2:
        ap.error("--runs must be at least 2 to measure a spread")
    target = load_target(args.target)
    runner = runner_for(target)
    if why := runner.unavailable(target):
        sys.exit(f"{target.name} needs the {target.runner} runner: {why}")
    once, twice = repeated(target, tuned(target), 1), repeated(target, tuned(target), 2)
    print(
        f"target {target.name}, {getattr(runner, 'device', runner.name)}, {args.runs} runs of "
        "each candidate"
    )
    if path := tuned_file(target):
        print(f"candidate: {path.name}")

    # Both candidates alternately: the runs of `once` make (a); each run pairs with one of
    # `twice` for (b), so slow drift of the machine hits both sides of a ratio alike.
    ones, twos, skip_b = [], [], None
    for i in range(args.runs):
        t0 = time.monotonic()
        ones.append(evaluate(runner, target, once, "candidate"))
        line = f"run {i + 1:2d}/{args.runs}: speedup {ones[-1].speedup:6.3f}"
        if skip_b is None:
            ev = runner.evaluate(target, twice, config=full(target))
            if ev.status != "ok":
                skip_b = f"the 2x variant is {ev.status} ({ev.message}); (b) skipped"
                print(skip_b)
            else:
                twos.append(ev)
                line += f", 2x/1x latency {latency_ratio(ones[-1], ev):5.3f}"
        print(f"{line}  ({time.monotonic() - t0:.1f} s)", flush=True)

    print("\n(a) the same candidate evaluated", args.runs, "times")
    print(f"  {'workload':28s} {'median latency':>15s} {'CV':>6s} {'speedup':>8s} {'CV':>6s}")
    lat_cols = []
    for w, wl in enumerate(target.workloads):
        lat = [ev.workloads[w].candidate.median_s for ev in ones]
        spd = [ev.workloads[w].speedup for ev in ones]
        lat_cols.append(lat)
        label = ", ".join(f"{k}={v}" for k, v in wl.items())
        print(
            f"  {label:28s} {statistics.mean(lat) * 1e3:12.3f} ms {cv(lat):6.1%} "
            f"{statistics.mean(spd):8.3f} {cv(spd):6.1%}"
        )
    gm_lat = [geomean(list(run)) for run in zip(*lat_cols)]
    spd = [ev.speedup for ev in ones]
    cv_lat, cv_spd = cv(gm_lat), cv(spd)
    print(
        f"  {'geomean over workloads':28s} {statistics.mean(gm_lat) * 1e3:12.3f} ms "
        f"{cv_lat:6.1%} {statistics.mean(spd):8.3f} {cv_spd:6.1%}"
    )

    ratio = None
    if twos:
        print(f"\n(b) 2x work vs 1x work, {len(twos)} alternating pairs (median of pair ratios)")
        per_w = []
        for w, wl in enumerate(target.workloads):
            r = statistics.median(latency_ratio(a, b, w) for a, b in zip(ones, twos))
            per_w.append(r)
            label = ", ".join(f"{k}={v}" for k, v in wl.items())
            print(f"  {label:28s} ratio {r:6.3f}  error {abs(r / 2 - 1):6.1%}")
        ratio = geomean(per_w)
        print(
            f"  {'geomean over workloads':28s} ratio {ratio:6.3f}  error {abs(ratio / 2 - 1):6.1%}"
        )

    print("\nsummary")
    print(f"  CV of median latency: {cv_lat:.1%} (target <= 3%)")
    print(f"  CV of speedup: {cv_spd:.1%} (GPU target <= 2%)")
    if ratio is None:
        print(f"  2x work ratio: not measured ({skip_b})")
    else:
        print(
            f"  2x work ratio: {ratio:.3f}x (error {abs(ratio / 2 - 1):.1%}, "
            "target <= 5%; GPU <= 3%)"
        )


if __name__ == "__main__":
    main()
