"""A benchmark suite end to end: every problem imported, and its reference judged as a candidate.

    python bench/suite.py kernelbench DIR [--level N ...] [--runner cpu] [--sizes fit|published]
                          [--jobs N] [--only TEXT] [--json]

DIR is a KernelBench checkout (its `level1/`, `level2/`, `level3/` of problem files). Each
problem is imported (`eat import kernelbench`, fitted sizes by default on the CPU) into a
temporary folder, then its baseline, the problem's own Model as ModelNew, is evaluated as the
candidate, with the evaluation settings below (fewer timed rounds than a run's default, so a
level takes minutes, not hours). A reference judged against itself should be `ok` at ~1.0x.

Prints a line per problem as it ends (level, name, status, speedup, wall seconds, why it
failed), then `N ok / M` and how many of the ok ones are within 0.8-1.25x; `--json`: one object
{"problems": [...], "ok", "total", "within", "wall_s"}. Problems run `--jobs` at a time (default
1). Timing takes one slot per device; on the CPU, with more than one job, the last core is kept
for timing alone (this process and every child but the timing one run on the others), so one
problem's import, input sets and verification overlap another's timing without sharing its
core. Each problem's input sets are removed once it is judged.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from eat.cache import inputs_dir
from eat.errors import EatError
from eat.formats.kernelbench import import_kernelbench
from eat.runners import runner_for
from eat.target import EvalConfig, load_target

# The sweep's evaluation: every check of a run's, fewer timed rounds.
SWEEP = EvalConfig(
    seeds=2,
    warmup=1,
    min_repeats=30,
    max_repeats=60,
    budget_s=2.0,
    pool_mb=128,
    timeout_s=300,
    cpu_s=600,
    allow_processes=True,
)
WITHIN = (0.8, 1.25)


def problems(root: Path, levels: list[int], only: str | None) -> list[tuple[int, Path]]:
    """(level, file) of every problem, in KernelBench's order (by the number in its name)."""
    found = []
    for level in levels:
        files = sorted(
            (root / f"level{level}").glob("*.py"),
            key=lambda f: (int(m.group()) if (m := re.match(r"\d+", f.name)) else 10**9, f.name),
        )
        found += [(level, f) for f in files if not only or only in f.name]
    return found


def judge(
    level: int,
    src: Path,
    runner: str,
    sizes: str | None,
    runners: dict,
    lock: threading.Lock,
    timing_core: dict,
) -> dict:
    """Import one problem and evaluate its reference as the candidate."""
    t0 = time.monotonic()
    row = {
        "level": level,
        "problem": src.stem,
        "import": "ok",
        "status": None,
        "speedup": None,
        "message": "",
    }
    with tempfile.TemporaryDirectory(prefix="eat-suite-") as tmp:
        try:
            folder = import_kernelbench(src, Path(tmp) / "target", runner, sizes)
            target = load_target(folder)
        except EatError as e:
            row |= {"import": "failed", "message": str(e)[:300]}
            return row | {"wall_s": round(time.monotonic() - t0, 1)}
        with lock:  # one runner per kind: its probe (a torch import) is paid once
            kind = (target.runner, target.language)
            if kind not in runners:
                runners[kind] = runner_for(target, **timing_core)
        try:
            ev = runners[kind].evaluate(target, target.baseline_source(), config=SWEEP)
            row |= {
                "status": ev.status,
                "speedup": ev.speedup,
                "message": "" if ev.ok else ev.message[:300],
                "workload": target.workloads[0],
            }
        except EatError as e:
            row |= {"status": "harness_error", "message": str(e)[:300]}
        finally:  # its input sets serve no later problem: a level's would fill a disk (35 GB)
            for sets in inputs_dir().glob(f"{target.name}-*"):
                shutil.rmtree(sets, ignore_errors=True)
    return row | {"wall_s": round(time.monotonic() - t0, 1)}


def line(row: dict) -> str:
    speed = f"{row['speedup']:.2f}x" if row["speedup"] else "-"
    status = row["status"] or f"import {row['import']}"
    return (
        f"L{row['level']} {row['problem'][:48]:<48} {status:<14} {speed:>7} "
        f"{row['wall_s']:>6.1f}s  {row['message'][:160]}"
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("suite", choices=["kernelbench"])
    ap.add_argument("dir", type=Path)
    ap.add_argument(
        "--level", type=int, action="append", help="1, 2 or 3 (repeatable; default: 1 and 2)"
    )
    ap.add_argument("--runner", default="cpu")
    ap.add_argument("--sizes", choices=["fit", "published"])
    ap.add_argument("--jobs", type=int, default=1)
    ap.add_argument("--only", help="only problems whose file name contains this")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    todo = problems(args.dir, args.level or [1, 2], args.only)
    if not todo:
        raise SystemExit(f"{args.dir}: no problems (level*/NN_*.py) found")
    t0, runners, lock, rows = time.monotonic(), {}, threading.Lock(), []
    timing_core = {}
    cores = sorted(os.sched_getaffinity(0))
    if args.runner == "cpu" and args.jobs > 1 and len(cores) > 1:
        timing_core = {"cpu": cores[-1]}
        os.sched_setaffinity(0, cores[:-1])  # inherited by every child; the timer pins itself
    with ThreadPoolExecutor(args.jobs) as pool:
        for row in pool.map(
            lambda p: judge(*p, args.runner, args.sizes, runners, lock, timing_core), todo
        ):
            rows.append(row)
            if not args.json:
                print(line(row), flush=True)
    ok = [r for r in rows if r["status"] == "ok"]
    within = [r for r in ok if r["speedup"] and WITHIN[0] <= r["speedup"] <= WITHIN[1]]
    wall = round(time.monotonic() - t0, 1)
    if args.json:
        print(
            json.dumps(
                {
                    "problems": rows,
                    "ok": len(ok),
                    "total": len(rows),
                    "within": len(within),
                    "wall_s": wall,
                }
            )
        )
    else:
        print(
            f"{len(ok)} ok / {len(rows)}; {len(within)} of them within "
            f"{WITHIN[0]}-{WITHIN[1]}x; {wall:.0f} s"
        )
    sys.exit(0 if len(ok) == len(rows) else 1)


if __name__ == "__main__":
    main()
