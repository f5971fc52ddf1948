"""Record a target's knob landscape: every configuration of a grid, evaluated on this machine.

A recorded landscape lets a benchmark replay the search of a real target (which configurations
are fast, which fail, where the local optima are) without compiling or timing anything. This
script evaluates the full product of a grid of knob values through the same path as `eat eval`
(`runner_for(target).evaluate` on `eat.agents.offline.render(target, knobs)`) and writes:

    {"target": "cpu_matmul", "recorded": "YYYY-MM-DD", "device": "<Evaluation.device>",
     "eval": {...},                      # how it was measured (see below)
     "knobs": {"NAME": [values ...]},    # the grid; knobs left out stay at their first value
     "configs": [{"knobs": {...}, "status": "ok", "speedup": 9.65, "noise": 0.03,
                  "gflops": 17.3, "vendor_gflops": 63.7}, ...]}

`speedup` is the evaluation's (geometric mean over workloads of baseline / candidate latency);
`noise` the median over workloads of the candidate's IQR / median; `gflops` and `vendor_gflops`
the geometric means over workloads of the candidate's and the vendor's GFLOP/s. A configuration
that is not `ok` has its status and nulls.

Evaluation uses a cheaper EvalConfig than the target's (one seed: speedups, not verification,
are what is recorded); timing keeps the target's repeats. Configurations whose preprocessed
source and compiler flags are identical (a knob that has no effect where the others stand, e.g.
LOOP_ORDER once cpu_matmul's micro-kernel replaces the loop nest) are the same program: it is
timed as one and its result recorded for each of them. Every program is evaluated --passes
times, each pass in its own shuffled order (a drift of the machine does not line up with one
knob), and recorded from its evaluation of median speedup: each evaluation times the baseline
anew, and on a busy machine one slow baseline timing would otherwise make a false optimum.

Run from the repository root (about 4 s per program and pass on two cores):
    python bench/record_landscape.py [--target examples/cpu_matmul]
        [--out bench/landscapes/cpu_matmul.json] [--grid grid.json] [--passes 3] [--seed 0]
`--grid` also takes a recorded landscape, to record its grid again on another machine:
    python bench/record_landscape.py --grid bench/landscapes/cpu_matmul_vec.json \
        --out bench/landscapes/cpu_matmul_vec_avx2.json
"""

from __future__ import annotations

import argparse
import datetime
import hashlib
import itertools
import json
import math
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from eat.agents.offline import render  # noqa: E402
from eat.doctor import load_peaks  # noqa: E402
from eat.runners import runner_for  # noqa: E402
from eat.runners.base import Evaluation  # noqa: E402
from eat.target import Target, load_target  # noqa: E402

# cpu_matmul's grid (384 configurations, 156 distinct programs): the loop nest's best order
# against the naive one; the micro-kernel's shapes from latency-bound (4x8) through the ones
# whose accumulators fit the 16 vector registers (6x16, 4x24, 8x8) to the ones that spill (8x16,
# 6x24, 8x32); no packing against A and B packed; k blocks of all of K, 128 and a shallow 16;
# with and without -march=native. UNROLL, PACK 1 and the other flags move speed by a few
# percent and are left out (UNROLL stays at 1); so is MR 2 (2x32 is strong once packed), to keep
# the grid under 400 configurations.
GRID = {
    "LOOP_ORDER": ["IJK", "IKJ"],
    "TILE": [0, 16, 128],
    "CFLAGS": ["-O2", "-O3 -march=native"],
    "MR": [0, 4, 6, 8],
    "NR": [8, 16, 24, 32],
    "PACK": [0, 2],
}

# Cheaper than the target's own settings: one input set (verification is not what is recorded);
# the timing as the target's, since this machine's noise needs the repeats.
EVAL = {"seeds": 1}
TIMING = ("seeds", "warmup", "min_repeats", "max_repeats", "budget_s")  # written to the JSON


def check_grid(target: Target, grid: dict) -> None:
    """Every grid knob is the target's, every value one of the knob's, first value included."""
    for name, values in grid.items():
        knob = target.knobs.get(name)
        if knob is None:
            raise SystemExit(f"grid: {target.name} has no knob {name!r}")
        if not values or len(set(map(repr, values))) != len(values):
            raise SystemExit(f"grid: {name} needs distinct values")
        for v in values:
            if not any(v == x and type(v) is type(x) for x in knob.values):
                raise SystemExit(f"grid: {v!r} is not a value of {name} ({knob.values})")
        if knob.values[0] not in values:
            raise SystemExit(f"grid: {name} must include its first value {knob.values[0]!r}")


def program_key(target: Target, runner, source: str) -> str:
    """What the compiler builds: the preprocessed source and the flags (the source's own hash
    where preprocessing fails)."""
    flags, _ = runner.flags(source, target.build.cflags)
    with tempfile.TemporaryDirectory(prefix="eat-landscape-") as tmp:
        src = Path(tmp) / f"candidate{runner.suffix}"
        src.write_text(source)
        cmd = runner.compile_command(target, src, flags)
        out = cmd.index("-o")
        cmd = cmd[:out] + cmd[out + 2 :] + ["-E", "-P"]
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=60)
    text = done.stdout if done.returncode == 0 else source
    return hashlib.sha256("\0".join([text, *flags]).encode()).hexdigest()


def geomean(xs: list[float]) -> float:
    return math.exp(sum(math.log(x) for x in xs) / len(xs))


def summary(ev: Evaluation) -> dict:
    """One configuration's record."""
    if not ev.ok:
        return {
            "status": ev.status,
            "speedup": None,
            "noise": None,
            "gflops": None,
            "vendor_gflops": None,
        }
    ws = ev.workloads
    return {
        "status": "ok",
        "speedup": round(ev.speedup, 4),
        "noise": round(statistics.median(w.candidate.iqr_s / w.candidate.median_s for w in ws), 4),
        # a memory-bound target declares bytes, not flops: no GFLOP/s to record
        "gflops": round(geomean([w.gflops for w in ws]), 2) if all(w.gflops for w in ws) else None,
        "vendor_gflops": round(geomean([w.vendor_gflops for w in ws]), 2)
        if all(w.vendor_gflops for w in ws)
        else None,
    }


def pick(records: list[dict]) -> dict:
    """The record of median speedup (the lower middle of an even count), or, where any
    evaluation failed, the first failure: a program that fails once is not a safe choice."""
    failed = [r for r in records if r["status"] != "ok"]
    if failed:
        return failed[0]
    return sorted(records, key=lambda r: r["speedup"])[(len(records) - 1) // 2]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--target", type=Path, default=ROOT / "examples" / "cpu_matmul")
    ap.add_argument("--out", type=Path, default=ROOT / "bench" / "landscapes" / "cpu_matmul.json")
    ap.add_argument(
        "--grid",
        type=Path,
        help="JSON object {knob: [values]}, or a recorded landscape, whose grid is taken (to "
        "record it again on another machine); default: GRID",
    )
    ap.add_argument("--seed", type=int, default=0, help="Seed of the timing orders.")
    ap.add_argument(
        "--passes",
        type=int,
        default=3,
        help="Evaluations of each program; the median speedup's is recorded.",
    )
    args = ap.parse_args()

    target = load_target(args.target)
    grid = json.loads(args.grid.read_text()) if args.grid else GRID
    if isinstance(grid.get("configs"), list):  # a recorded landscape: the grid it was made of
        grid = grid["knobs"]
    check_grid(target, grid)
    runner = runner_for(target, peaks=load_peaks(target.runner))
    if why := runner.unavailable(target):
        raise SystemExit(f"{target.name} needs the {target.runner} runner: {why}")
    cfg = target.evaluation.model_copy(update=EVAL)

    names = list(grid)
    configs = [dict(zip(names, combo)) for combo in itertools.product(*grid.values())]
    sources = [render(target, c) for c in configs]
    keys = [program_key(target, runner, s) for s in sources]
    programs = list(dict.fromkeys(keys))  # distinct, in grid order
    first = {k: keys.index(k) for k in programs}
    print(
        f"{target.name}: {len(configs)} configurations, {len(programs)} distinct programs",
        flush=True,
    )
    # Each program is evaluated once per pass (each pass in its own shuffled order) and
    # recorded from its evaluation of median speedup: the baseline is timed anew in every
    # evaluation, and on a busy machine one slow baseline timing would make a false optimum.
    runs: dict[str, list[dict]] = {k: [] for k in programs}
    device = ""
    rng = random.Random(args.seed)
    t_start = time.monotonic()
    total = len(programs) * args.passes
    done = 0
    for p in range(args.passes):
        order = programs[:]
        rng.shuffle(order)
        for key in order:
            i = first[key]
            t0 = time.monotonic()
            ev = runner.evaluate(target, sources[i], config=cfg)
            runs[key].append(r := summary(ev))
            device = device or (ev.device if ev.ok else "")
            done += 1
            shown = " ".join(f"{k}={v}" for k, v in configs[i].items())
            what = (
                f"{r['speedup']:.2f}x {r['gflops']:.1f} GFLOP/s "
                f"({r['gflops'] / r['vendor_gflops']:.2f} of the vendor)"
                if r["status"] == "ok" and r["vendor_gflops"]
                else f"{ev.status}: {ev.message}"
            )
            elapsed = time.monotonic() - t_start
            print(
                f"[pass {p + 1}/{args.passes}, {done}/{total}] {shown}: {what}  "
                f"{time.monotonic() - t0:.1f} s (eta {elapsed / done * (total - done) / 60:.0f}"
                " min)",
                flush=True,
            )
    results = {k: pick(rs) for k, rs in runs.items()}

    data = {
        "target": target.name,
        "recorded": datetime.date.today().isoformat(),
        "device": device,
        "eval": {
            **{k: getattr(cfg, k) for k in TIMING},
            "programs": len(programs),
            "passes": args.passes,
            "minutes": round((time.monotonic() - t_start) / 60, 1),
            "shared": "configurations whose preprocessed source and flags are "
            "identical were timed as one program",
            "recorded": "per program, its evaluation of median speedup over the passes",
        },
        "knobs": grid,
        "configs": [{"knobs": c, **results[k]} for c, k in zip(configs, keys)],
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    tmp = args.out.with_suffix(f".{os.getpid()}.tmp")
    # One configuration per line: small, and a re-recording diffs line by line.
    lines = ",\n".join("  " + json.dumps(c) for c in data.pop("configs"))
    head = json.dumps(data)[:-1]
    tmp.write_text(f'{head}, "configs": [\n{lines}\n]}}\n')
    json.loads(tmp.read_text())  # well-formed before it replaces anything
    os.replace(tmp, args.out)
    print(
        f"wrote {args.out} ({args.out.stat().st_size // 1024} KiB) in "
        f"{data['eval']['minutes']} min",
        flush=True,
    )


if __name__ == "__main__":
    main()
