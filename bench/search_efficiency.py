"""Does the supervisor find faster kernels than one unsupervised team, at the same budget?

The supervisor's claim is that detecting plateaus and restructuring the teams (fork, spawn,
redirect, retire) gets a run out of local optima that a single search strategy gets stuck in.
This tests that claim, repeatably, on a synthetic landscape, so it runs in about a minute:

- the target: examples/cpu_matmul copied to a temp folder with its [knobs] replaced by five
  knobs of 4-6 values (2,880 configurations; the first value of each is the baseline's);
- the runner: a fake whose speedup is a fixed function of the knob values it parses back from
  the rendered source (`#define NAME value` lines, the `// eat:cflags` line): three Gaussian
  bumps over the knob-index grid (a broad local optimum near the defaults, a medium one in a
  far corner, a narrow global one elsewhere), normalized so the defaults give 1.0x, times a
  seeded measurement noise (2%), with IQRs of 2-5% of the median as a real machine reports;
  one corner of the space fails to compile;
- "unsupervised": one team (teams=["coordinate"]) with plateau windows so large that no plateau
  is ever declared (its history is checked for plateau and restructure events);
- "supervised": the default RunConfig (default teams and plateau settings).

Both get the same --evals per run, for each of --seeds run seeds. The figure compared is the
true (noise-free) speedup of the configuration each run reports as its best; the run's own
measured estimate is printed beside it. "far" counts the candidates a run tried where one of the
two better bumps adds at least 0.1x (well above the noise): where a climb towards them can start.
Run from the repository root:  python bench/search_efficiency.py [--evals 60] [--seeds 10]
"""

from __future__ import annotations

import argparse
import itertools
import math
import random
import re
import shutil
import statistics
import tempfile
import tomllib
from pathlib import Path

import tomli_w

from eat.config import PlateauConfig
from eat.run import start_run
from eat.runners.base import Evaluation, Stat, WorkloadResult, source_hash
from eat.runners.cpu import CFLAGS_LINE
from eat.state import RunState
from eat.workspace import Workspace

ROOT = Path(__file__).resolve().parents[1]
SIZES = [16, 32, 64, 128, 256, 512]
KNOBS = {
    "BLOCK_M": {"values": SIZES, "help": "Rows of C per block."},
    "BLOCK_N": {"values": SIZES, "help": "Columns of C per block."},
    "UNROLL": {"values": [1, 2, 4, 8], "help": "Inner unroll factor."},
    "VEC": {"values": [1, 2, 4, 8, 16], "help": "Vector width."},
    "CFLAGS": {"kind": "cflags", "values": ["-O2", "-O3", "-O3 -march=native",
                                           "-O3 -march=native -ffast-math"]},
}
# (centre in [0, 1]^5 over knob indices, height, width): broad near the defaults (index 0),
# medium in a far corner, highest elsewhere. "needle": the far optima are narrow (their basins
# cover ~1% of the space); "broad": the same optima with wider basins (~10%).
CENTRES = [((0.2, 0.2, 0.33, 0.25, 0.33), 1.2), ((1.0, 0.0, 1.0, 0.0, 0.67), 1.6),
           ((0.6, 1.0, 0.67, 1.0, 1.0), 2.8)]
LANDSCAPES = {"needle": (0.35, 0.20, 0.15), "broad": (0.35, 0.30, 0.25)}
BUMPS: list = []
SCALE = 1.0
UNSUPERVISED = PlateauConfig(team_window=10**9, run_window=10**9, fail_window=10**9)


def bumps(idx: tuple[int, ...]) -> list[float]:
    """What each bump adds at a configuration (knob indices), before normalization."""
    u = [i / (len(k["values"]) - 1) for i, k in zip(idx, KNOBS.values())]
    return [h * math.exp(-sum((a - b) ** 2 for a, b in zip(u, c)) / (2 * w * w))
            for c, h, w in BUMPS]


def use_landscape(name: str) -> None:
    global BUMPS, SCALE
    BUMPS = [(c, h, w) for (c, h), w in zip(CENTRES, LANDSCAPES[name])]
    SCALE = 1 + sum(bumps((0,) * len(KNOBS)))  # so that the defaults give 1.0x


def height(idx: tuple[int, ...]) -> float:
    """Noise-free speedup of a configuration."""
    return (1 + sum(bumps(idx))) / SCALE


def far(idx: tuple[int, ...]) -> bool:
    return any(b / SCALE >= 0.1 for b in bumps(idx)[1:])


def fails(idx: tuple[int, ...]) -> bool:
    return idx[2] == 3 and idx[3] == 4  # UNROLL=8 with VEC=16: "does not compile"


def indices(knobs: dict) -> tuple[int, ...]:
    return tuple([str(v) for v in k["values"]].index(str(knobs.get(n, k["values"][0])))
                 for n, k in KNOBS.items())


def parse(source: str) -> tuple[int, ...]:
    """Knob indices from a rendered source (the first #define of a name wins)."""
    found: dict[str, str] = {}
    for m in re.finditer(r"^#define (\w+) (.+)$", source, re.M):
        found.setdefault(m.group(1), m.group(2).strip())
    if flags := CFLAGS_LINE.findall(source):
        found["CFLAGS"] = " ".join(flags[0].split())
    return indices({n: v for n, v in found.items() if n in KNOBS})


class LandscapeRunner:
    """Answers at once from `height`, with seeded noise that differs on each re-measurement."""

    name = "cpu"

    def __init__(self, seed: int, noise: float = 0.02):
        self.seed, self.noise, self.calls = seed, noise, {}

    def unavailable(self, target=None):
        return None

    def evaluate(self, target, source, *, config=None, workdir=None) -> Evaluation:
        h = source_hash(source)
        self.calls[h] = self.calls.get(h, 0) + 1
        rng = random.Random(f"{self.seed}:{h}:{self.calls[h]}")
        idx = parse(source)
        if fails(idx):
            return Evaluation(status="compile_error", message="candidate.c: register spill",
                              target=target.name, runner="fake", source_hash=h)
        speedup = height(idx) * math.exp(rng.gauss(0, self.noise))
        rows = []
        for p in target.workloads:
            flops = target.metric("flops", p)
            base = flops / 1e11
            cand = base / speedup
            rows.append(WorkloadResult(
                params=p, speedup=speedup, gflops=flops / cand / 1e9,
                candidate=Stat(median_s=cand, iqr_s=cand * rng.uniform(0.02, 0.05), n=25),
                baseline=Stat(median_s=base, iqr_s=base * rng.uniform(0.02, 0.05), n=25)))
        return Evaluation(status="ok", speedup=speedup, target=target.name, runner="fake",
                          device="synthetic", workloads=rows, source_hash=h)


def describe_landscape() -> str:
    grid = [range(len(k["values"])) for k in KNOBS.values()]
    ok = {c: height(c) for c in itertools.product(*grid) if not fails(c)}
    optima = sorted((v for c, v in ok.items() if all(
        ok.get(c[:k] + (x,) + c[k + 1:], 0.0) < v for k, r in enumerate(grid) for x in r
        if x != c[k])), reverse=True)
    total = math.prod(len(r) for r in grid)
    return (f"landscape: {total} configurations ({total - len(ok)} fail); local optima under "
            f"one-knob moves: {', '.join(f'{v:.2f}x' for v in optima)}; a better bump adds "
            f">= 0.1x on {sum(map(far, ok))} configurations ({sum(map(far, ok)) / len(ok):.1%})")


def one_run(tmp: Path, name: str, seed: int, evals: int, supervised: bool) -> dict:
    extra = {} if supervised else {"teams": ["coordinate"], "plateau": UNSUPERVISED}
    _, why = start_run(tmp / "target", tmp / name, runner=LandscapeRunner(seed),
                       max_evals=evals, seed=seed, **extra)
    events, _ = Workspace.open(tmp / name).read_events()
    shutil.rmtree(tmp / name)
    state = RunState.from_events(events)
    tried = [indices(e.knobs) for e in events if e.type == "candidate_evaluated"]
    return {"true": height(indices(state.best.knobs)), "measured": state.best.estimate,
            "evals": state.evaluations, "plateaus": state.plateaus,
            "restructures": state.restructures, "teams": len(state.teams), "why": why,
            "far": sum(map(far, tried))}


def summary(name: str, values: list[float]) -> str:
    return (f"{name:<13} median {statistics.median(values):.2f}x  mean "
            f"{statistics.mean(values):.2f}x  min {min(values):.2f}x  max {max(values):.2f}x")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--evals", type=int, default=60, help="evaluations per run (both arms)")
    ap.add_argument("--seeds", type=int, default=10, help="run seeds 0 .. N-1")
    ap.add_argument("--landscape", choices=[*LANDSCAPES, "both"], default="both")
    args = ap.parse_args()
    for name in LANDSCAPES if args.landscape == "both" else [args.landscape]:
        use_landscape(name)
        print(f"\n=== {name} ===")
        compare(args)


def compare(args) -> None:
    print(describe_landscape())
    print(f"{args.evals} evaluations per run; speedup: true value of the run's best (measured "
          "estimate in brackets)\n")
    print(f"{'seed':>4} | {'unsupervised':>15} {'evals':>5} {'far':>3} | {'supervised':>15} "
          f"{'evals':>5} {'far':>3} {'plateaus':>8} {'restructures':>12} {'teams':>5} | winner")
    rows = []
    with tempfile.TemporaryDirectory(prefix="eat-bench-") as tmp:
        shutil.copytree(ROOT / "examples" / "cpu_matmul", Path(tmp) / "target")
        toml = Path(tmp) / "target" / "target.toml"
        data = tomllib.loads(toml.read_text())
        toml.write_text(tomli_w.dumps(data | {"name": "landscape", "knobs": KNOBS}))
        for seed in range(args.seeds):
            u = one_run(Path(tmp), f"u{seed}", seed, args.evals, False)
            s = one_run(Path(tmp), f"s{seed}", seed, args.evals, True)
            win = "supervised" if s["true"] > u["true"] else \
                "unsupervised" if u["true"] > s["true"] else "tie"
            rows.append((u, s, win))
            print(f"{seed:>4} | {u['true']:>5.2f}x ({u['measured']:.2f}x) {u['evals']:>5} "
                  f"{u['far']:>3} | {s['true']:>5.2f}x ({s['measured']:.2f}x) {s['evals']:>5} "
                  f"{s['far']:>3} {s['plateaus']:>8} {s['restructures']:>12} {s['teams']:>5} "
                  f"| {win}")
    unsup, sup = [u for u, _, _ in rows], [s for _, s, _ in rows]
    print("\nstop reasons: " + "; ".join(sorted({r["why"] for r in unsup + sup})))
    print(summary("unsupervised", [r["true"] for r in unsup]))
    print(summary("supervised", [r["true"] for r in sup]))
    print(f"supervised wins on {sum(w == 'supervised' for *_, w in rows)} of {len(rows)} seeds, "
          f"loses on {sum(w == 'unsupervised' for *_, w in rows)}, ties on "
          f"{sum(w == 'tie' for *_, w in rows)}")
    print(f"supervised runs: plateaus mean {statistics.mean(r['plateaus'] for r in sup):.1f}, "
          f"restructures mean {statistics.mean(r['restructures'] for r in sup):.1f}; runs that "
          f"tried a 'far' candidate: {sum(r['far'] > 0 for r in sup)} supervised, "
          f"{sum(r['far'] > 0 for r in unsup)} unsupervised")
    print("unsupervised runs with a plateau or restructure event (should be 0): "
          f"{sum(r['restructures'] + r['plateaus'] > 0 for r in unsup)}")


if __name__ == "__main__":
    main()
