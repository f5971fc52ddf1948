"""Does the supervised loop find faster kernels than its own static teams and than the
autotuners people already use, at equal evaluations?

Three of eat's arms run the real loop (start_run, offline agents) against a fake runner, with
the same budget of evaluations and the same seeds:

- (a) "supervised": the default RunConfig: its default teams, supervise=True (plateau
  detection, elite re-times, restructuring);
- (b) "no restructuring": the same starting teams with supervise=False;
- (c) "best static team": every preset of eat.team.load_presets() alone (teams=[name],
  supervise=False); per landscape and budget the best is the preset with the highest median
  true best over the seeds (ties: the higher mean).

Three peers search the same landscape, with the same noise model, budget and seeds, asking and
telling directly (no workspace): Optuna's TPE ("tpe"), nevergrad's NGOpt ("ngopt"), each knob
categorical over its values, and random sampling of the grid without repeats ("random"). A
peer's best is the configuration it measured highest (what Optuna's best_trial gives); it never
re-times. Peers whose package is missing are skipped with a line saying so
(`pip install 'eat[bench]'`).

Landscapes (the target is examples/cpu_matmul copied to a temp folder, its [knobs] replaced by
the landscape's grid; the runner parses the knob values back from the rendered source --
the `#define NAME value` lines and the `// eat:cflags` line before the baseline's text (whose
own #defines, VEC among them, are its defaults); a knob missing there is at its first value --
and answers at once, its speedup times seeded log-normal noise, with per-workload rows whose
IQRs are 1-2.5 times that noise; a configuration's n-th measurement on a seed draws the same
noise in every arm, eat's and the peers'):

- "needle" and "broad": five synthetic knobs of 4-6 values (2,880 configurations, the first
  value of each is the baseline's); the speedup is three Gaussian bumps over the knob-index grid (a
  broad local optimum near the defaults, a medium one in a far corner, the highest elsewhere),
  normalized so the defaults give 1.0x; noise 2%; one corner fails to compile. The far optima's
  basins cover ~1% of the space in "needle", ~10% in "broad".
- one replay per file of bench/landscapes/ (named by the file: "cpu_matmul", "cpu_softmax"),
  every configuration of a grid of a real target's knobs measured on a real machine by
  bench/record_landscape.py (the target is examples/<the file's "target">): the runner answers
  a configuration's recorded status, or its recorded speedup times noise of its recorded spread
  (at least 1%). The recorder timed each distinct program once and recorded its figures for
  every configuration that builds it, so the runner's program key (Runner.program) is a
  configuration's record: configurations whose ok records are the same are one program, and eat
  evaluates it once (the synthetic landscapes' configurations are each their own). The peers
  see configurations, as Optuna and nevergrad do.

What is compared, per seed: the true (noise-free) speedup of the configuration each run reports
as its best (RunState.best at the end), and how soon it got there. Two bests are equal within
noise when neither is more than 2% above the other (on the recorded landscape: more than
max(2%, the recorded noise of either configuration)). Two runs whose bests are equal within
noise are compared on one yardstick: the evaluations each took (candidate evaluations and
re-times counted in log order) up to and including its first evaluation of a configuration
whose true speedup is within that noise of the higher best (`reach`). (Each run's own
"reached", in the tables and --json's median_reached, is the same count against its own best
and that best's noise; scored that way a run whose best is a noisy configuration counted as
there early, one whose best is steady late.) (a) is compared against the better of (b) and (c)
on the same seed (the higher true best; equal within noise, the one that got there in fewer
evaluations): a win when (a)'s true best is higher beyond noise, or equal within noise and
reached in at most 90% of the evaluations; a loss the reverse; otherwise a tie.
The same rule scores (a) against each peer, against (b) and against (c) alone, per seed: the
summary's "vs" line and, with --json, "vs": {"tpe": {"wins", "ties", "losses"}, ...}.
How honest each run's claim is, is reported too: its own estimate of its best over that best's
true speedup, the median over seeds ("median_overclaim" in --json); keeping the highest timing
picks whichever noisy configuration drew the luckiest one.
Whether the goal's bar can be met at all on a landscape is measured too: every contender (the
supervised loop, the best static team, each peer) is scored against every other by the same
rule ("pairs" in --json, a table with --pairs), and the summary names the contenders that meet
the bar against all the others ("bar": at 150 evaluations at least 7 wins and at most 1 loss of
10, below that more wins than losses). On a landscape whose top is flat within noise, seeds
are decided by how soon each search happens on the top tier, and no contender may meet it:
"ceiling" gives, per peer, the wins of an oracle that measures the best configuration first.
Seeds 0-9 have chosen eat's defaults; --first-seed 10 runs seeds no choice was made on.

A run's evaluations are its candidate_evaluated events (copies of an evaluated program's
result, `same_as`, spent none) plus its elite_retimed events; a warning line says
when a run used more than its budget. Runs that stop early (a team with nothing left to try)
keep what they found. An arm that never reads its budget but to stop ((b), (c), TPE, random
search) runs once a seed, at the largest budget, and each smaller budget is read from that
run's history cut where it had spent it (tests/test_bench.py holds this to separate runs);
the supervised loop, whose plateau windows scale with the budget, and NGOpt, which picks its
optimizer by the budget, run once a budget. Runs go in parallel processes (--jobs), each in
its own temporary workspace, deleted once read; --verbose adds a table per seed and notes on
how the runs stopped, the evaluations they used, and how often (a) and (b) evaluated the same
candidates.

Run from the repository root:
    python bench/search_efficiency.py [--landscape all] [--seeds 10] [--first-seed 0]
                                      [--budgets 60 150] [--jobs N] [--json] [--verbose] [--pairs]
"""

from __future__ import annotations

import argparse
import ctypes
import ctypes.util
import itertools
import json
import math
import os
import random
import re
import shutil
import statistics
import sys
import tempfile
import time
import tomllib
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import tomli_w

from eat.run import start_run
from eat.runners.base import STATUSES, Evaluation, Stat, WorkloadResult, source_hash
from eat.runners.native import CFLAGS_LINE
from eat.state import RunState
from eat.team import load_presets
from eat.workspace import Workspace

ROOT = Path(__file__).resolve().parents[1]
TABLES = ROOT / "bench" / "landscapes"  # recorded landscapes, one JSON file each
# Workspaces fsync what they write; on a RAM file system that costs nothing, so the runs'
# time goes to the search rather than to the disk (about half of it otherwise, measured).
TMP = os.environ.get("TMPDIR") or ("/dev/shm" if os.access("/dev/shm", os.W_OK) else None)
MIN_GAIN = 0.02  # what counts as "beyond noise" on the synthetic landscapes (their noise)
SOONER = 0.9  # equal bests: reached in at most 90% of the other's evaluations is a win
BAR_BUDGET = 150  # from this budget on, the goal's bar is strict (meets_bar)
M_TRIM_THRESHOLD, M_MMAP_THRESHOLD = -1, -3  # glibc's mallopt parameters (malloc.h)

SIZES = [16, 32, 64, 128, 256, 512]
KNOBS = {
    "BLOCK_M": {"values": SIZES, "help": "Rows of C per block."},
    "BLOCK_N": {"values": SIZES, "help": "Columns of C per block."},
    "UNROLL": {"values": [1, 2, 4, 8], "help": "Inner unroll factor."},
    "VEC": {"values": [1, 2, 4, 8, 16], "help": "Vector width."},
    "CFLAGS": {
        "kind": "cflags",
        "values": ["-O2", "-O3", "-O3 -march=native", "-O3 -march=native -ffast-math"],
    },
}
# (centre in [0, 1]^5 over knob indices, height), and per landscape each bump's width.
CENTRES = [
    ((0.2, 0.2, 0.33, 0.25, 0.33), 1.2),
    ((1.0, 0.0, 1.0, 0.0, 0.67), 1.6),
    ((0.6, 1.0, 0.67, 1.0, 1.0), 2.8),
]
WIDTHS = {"needle": (0.35, 0.20, 0.15), "broad": (0.35, 0.30, 0.25)}


def norm(value) -> str:
    """A knob value as the runner reads it back from a source."""
    return " ".join(str(value).split())


class Landscape:
    """A grid of knob values; a configuration is a tuple of value indices, knobs in order."""

    name: str
    example: str  # the example target (examples/<example>) whose knobs it replaces
    knobs: dict  # name -> {"values": [...], "kind"?, "help"?}, as target.toml takes it

    def measure(self, idx: tuple[int, ...]) -> tuple[str, float | None, float]:
        """(status, noise-free speedup or None, relative noise) of a configuration."""
        raise NotImplementedError

    def program(self, idx: tuple[int, ...]) -> str | None:
        """What the configuration builds, as a key (None: its own program)."""
        return None

    def index(self, knobs: dict) -> tuple[int, ...]:
        return tuple(
            [norm(v) for v in k["values"]].index(norm(knobs.get(n, k["values"][0])))
            for n, k in self.knobs.items()
        )

    def parse(self, source: str) -> tuple[int, ...]:
        """The configuration of a rendered source: the lines render() puts before the baseline
        (the baseline's own #defines are its defaults, and may share a knob's name)."""
        head = "\n".join(
            itertools.takewhile(
                lambda line: line.startswith(("#define ", "// eat:cflags")), source.splitlines()
            )
        )
        found: dict[str, str] = {}
        for m in re.finditer(r"^#define (\w+) (.+)$", head, re.M):
            found.setdefault(m.group(1), m.group(2))
        cflags = next((n for n, k in self.knobs.items() if k.get("kind") == "cflags"), None)
        if cflags and (flags := CFLAGS_LINE.findall(head)):
            found[cflags] = flags[0]
        return self.index({n: v for n, v in found.items() if n in self.knobs})

    def true(self, idx) -> float | None:
        return None if idx is None else self.measure(idx)[1]

    def tol(self, a, b) -> float:
        """How far apart two configurations' true values may be and still be equal."""
        return max([MIN_GAIN] + [self.measure(i)[2] for i in (a, b) if i is not None])

    def top(self) -> tuple[int, ...]:
        """The configuration with the highest true speedup."""
        grid = [range(len(k["values"])) for k in self.knobs.values()]
        return max((c for c in itertools.product(*grid) if self.true(c)), key=self.true)

    def describe(self) -> str:
        grid = [range(len(k["values"])) for k in self.knobs.values()]
        ok = {c: v for c in itertools.product(*grid) if (v := self.true(c)) is not None}
        optima = sorted(
            (
                v
                for c, v in ok.items()
                if all(
                    ok.get(c[:k] + (x,) + c[k + 1 :], 0.0) < v
                    for k, r in enumerate(grid)
                    for x in r
                    if x != c[k]
                )
            ),
            reverse=True,
        )
        total = math.prod(map(len, grid))
        top = self.top()
        # Runs whose bests both lie here tie on the best, and the rule compares how soon each
        # got there: on a flat top that is mostly luck.
        level = sum(v >= ok[top] / (1 + self.tol(top, c)) for c, v in ok.items())
        return (
            f"{total} configurations ({total - len(ok)} fail; {level} within noise of the "
            f"top); local optima under one-knob "
            f"moves: {', '.join(f'{v:.2f}x' for v in optima[:8])}"
            + (f" and {len(optima) - 8} more" if len(optima) > 8 else "")
        )


class Synthetic(Landscape):
    """Three Gaussian bumps over the knob-index grid; see the module docstring."""

    def __init__(self, name: str):
        self.name, self.example, self.knobs = name, "cpu_matmul", KNOBS
        self.bumps = [(c, h, w) for (c, h), w in zip(CENTRES, WIDTHS[name])]
        self.scale = 1 + sum(self._bumps((0,) * len(KNOBS)))  # so that the defaults give 1.0x

    def _bumps(self, idx) -> list[float]:
        u = [i / (len(k["values"]) - 1) for i, k in zip(idx, KNOBS.values())]
        return [
            h * math.exp(-sum((a - b) ** 2 for a, b in zip(u, c)) / (2 * w * w))
            for c, h, w in self.bumps
        ]

    def measure(self, idx):
        if idx[2] == 3 and idx[3] == 4:  # UNROLL=8 with VEC=16: "does not compile"
            return "compile_error", None, MIN_GAIN
        return "ok", (1 + sum(self._bumps(idx))) / self.scale, MIN_GAIN


RECORDED = ("speedup", "noise", "gflops", "vendor_gflops")  # a configuration's recorded figures


class Replay(Landscape):
    """A table recorded from the real target: every configuration of its grid."""

    def __init__(self, path: Path):
        data = json.loads(path.read_text())
        self.name, self.example = path.stem, data["target"]
        real = tomllib.loads((ROOT / "examples" / self.example / "target.toml").read_text())
        self.about = f"recorded {data.get('recorded', '?')} on {data.get('device', '?')}"
        # Each knob keeps its kind and help from the real target; its values are the grid's.
        self.knobs = {
            n: {k: v for k, v in real["knobs"].get(n, {}).items() if k != "values"}
            | {"values": values}
            for n, values in data["knobs"].items()
        }
        self.table = {}
        # The recorder timed each program once and recorded it for every configuration that
        # builds it: configurations with one record (each of its figures the same) are one
        # program. A failure's record is the same for many programs: each is its own.
        self.programs: dict[tuple[int, ...], str] = {}
        for row in data["configs"]:
            idx = self.index(row["knobs"])
            self.table[idx] = (
                row["status"] if row["status"] in STATUSES else "crash",
                row.get("speedup") if row["status"] == "ok" else None,
                row.get("noise") or 0.0,
            )
            if row["status"] == "ok":
                self.programs[idx] = json.dumps([row.get(k) for k in RECORDED])
        missing = math.prod(len(v) for v in data["knobs"].values()) - len(self.table)
        if missing:
            print(
                f"warning: {path.name}: {missing} configurations of the grid are not "
                "recorded; the runner answers them with a crash",
                file=sys.stderr,
            )

    def measure(self, idx):
        return self.table.get(idx, ("crash", None, 0.0))

    def program(self, idx):
        return self.programs.get(idx)

    def describe(self) -> str:
        return f"{self.about}: {super().describe()}"


class Draws:
    """A seed's noise on a landscape: a configuration's n-th measurement draws the same in every
    arm (eat's runner and the peers'), and each re-measurement draws anew."""

    def __init__(self, land: Landscape, seed: int):
        self.land, self.seed = land, seed
        self.calls: dict[tuple[int, ...], int] = {}

    def next(self, idx: tuple[int, ...]) -> tuple[str, float | None, float, random.Random]:
        """(status, measured speedup or None, the noise's sigma, the generator for any further
        draws) of the configuration's next measurement."""
        self.calls[idx] = self.calls.get(idx, 0) + 1
        status, true, noise = self.land.measure(idx)
        rng = random.Random(f"{self.seed}:{idx}:{self.calls[idx]}")
        sigma = max(noise, 0.01)
        speedup = true * math.exp(rng.gauss(0, sigma)) if status == "ok" else None
        return status, speedup, sigma, rng


class LandscapeRunner:
    """Answers at once from the landscape, with its seed's noise (Draws): fresh on each
    re-measurement, so re-times see fresh noise."""

    name = "cpu"

    def __init__(self, land: Landscape, seed: int):
        self.land, self.draws = land, Draws(land, seed)

    def unavailable(self, target=None):
        return None

    def program(self, target, source) -> str | None:
        return self.land.program(self.land.parse(source))

    def evaluate(self, target, source, *, config=None, workdir=None) -> Evaluation:
        h, idx = source_hash(source), self.land.parse(source)
        status, speedup, sigma, rng = self.draws.next(idx)
        if speedup is None:
            return Evaluation(
                status=status,
                message=f"{self.land.name}: {status} (landscape)",
                target=target.name,
                runner="fake",
                source_hash=h,
            )
        rows = []
        for p in target.workloads:
            flops = target.metric("flops", p)  # None on a memory-bound target
            base = (flops or target.metric("bytes", p) or 1e9) / 1e11
            cand = base / speedup
            rows.append(
                WorkloadResult(
                    params=p,
                    speedup=speedup,
                    gflops=flops / cand / 1e9 if flops else None,
                    candidate=Stat(median_s=cand, iqr_s=cand * sigma * rng.uniform(1, 2.5), n=25),
                    baseline=Stat(median_s=base, iqr_s=base * sigma * rng.uniform(1, 2.5), n=25),
                )
            )
        return Evaluation(
            status="ok",
            speedup=speedup,
            target=target.name,
            runner="fake",
            device="synthetic",
            workloads=rows,
            source_hash=h,
        )


# -- peers: what a kernel engineer would run instead, on the same landscape and noise -------------

PEERS = {
    "tpe": "Optuna's TPE (TPESampler, each knob categorical over its values)",
    "ngopt": "nevergrad's NGOpt (each knob a Choice over its values)",
    "random": "random sampling of the grid, without repeats",
}
FAILED_LOSS = 10.0  # what NGOpt is told for a configuration that fails (a speedup of e^-10)


class Measure:
    """The landscape as a peer sees it: a configuration's measured speedup (None: it failed),
    with the seed's noise (Draws, as LandscapeRunner); keeps the trail."""

    def __init__(self, land: Landscape, seed: int):
        self.draws = Draws(land, seed)
        self.trail: list[tuple[tuple[int, ...], float | None]] = []

    def __call__(self, idx: tuple[int, ...]) -> float | None:
        _, value, _, _ = self.draws.next(idx)
        self.trail.append((idx, value))
        return value


def choices(land: Landscape) -> dict[str, int]:
    """Each knob's number of values: a configuration is an index per knob."""
    return {n: len(k["values"]) for n, k in land.knobs.items()}


def tpe(land: Landscape, budget: int, seed: int, measure: Measure) -> None:
    import optuna

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    study = optuna.create_study(direction="maximize", sampler=optuna.samplers.TPESampler(seed=seed))
    for _ in range(budget):
        trial = study.ask()
        idx = tuple(trial.suggest_categorical(n, list(range(k))) for n, k in choices(land).items())
        value = measure(idx)
        if value is None:
            study.tell(trial, state=optuna.trial.TrialState.FAIL)
        else:
            study.tell(trial, value)


def ngopt(land: Landscape, budget: int, seed: int, measure: Measure) -> None:
    import nevergrad as ng
    import numpy as np

    space = ng.p.Tuple(*(ng.p.Choice(list(range(k))) for k in choices(land).values()))
    space.random_state = np.random.RandomState(seed)
    opt = ng.optimizers.NGOpt(parametrization=space, budget=budget, num_workers=1)
    for _ in range(budget):
        cand = opt.ask()
        value = measure(tuple(int(i) for i in cand.value))
        opt.tell(cand, FAILED_LOSS if value is None else -math.log(value))


def random_search(land: Landscape, budget: int, seed: int, measure: Measure) -> None:
    sizes = list(choices(land).values())
    order = list(range(math.prod(sizes)))
    random.Random(seed).shuffle(order)  # a shuffle, so a smaller budget is a prefix of a larger
    for flat in order[:budget]:
        idx = []
        for n in reversed(sizes):
            flat, i = divmod(flat, n)
            idx.append(i)
        measure(tuple(reversed(idx)))


SEARCHES = {"tpe": tpe, "ngopt": ngopt, "random": random_search}
UNBUDGETED = {"tpe", "random"}  # what they ask next never depends on the budget


def missing_peers() -> dict[str, str]:
    """Peers whose package is not installed (pip install 'eat[bench]'), with the reason."""
    missing = {}
    for peer, module in (("tpe", "optuna"), ("ngopt", "nevergrad")):
        try:
            __import__(module)
        except ImportError as e:
            missing[peer] = f"{module} is not installed ({e})"
    return missing


def peer_run(land: Landscape, budgets: list[int], seed: int, peer: str) -> dict[int, dict]:
    """Runs of a peer per budget: each evaluates that many configurations; its best is the
    configuration it measured highest (what Optuna's best_trial gives), and it never re-times.
    TPE and random search never read their budget, so one run at the largest serves every
    budget, cut where it had spent it; NGOpt picks its optimizer by the budget, so it runs anew.
    Errors come back as {"error": ...}."""
    try:
        if peer in UNBUDGETED:
            trail = peer_trail(land, max(budgets), seed, peer)
            return {b: peer_result(land, trail[:b]) for b in budgets}
        return {b: peer_result(land, peer_trail(land, b, seed, peer)) for b in budgets}
    except Exception as e:
        return {b: {"error": f"{type(e).__name__}: {e}"} for b in budgets}


def peer_trail(land: Landscape, budget: int, seed: int, peer: str) -> list:
    """What a peer measured, in order: (configuration, measured speedup or None)."""
    measure = Measure(land, seed)
    SEARCHES[peer](land, budget, seed, measure)
    return measure.trail


def peer_result(land: Landscape, trail: list) -> dict:
    ok = [(value, idx) for idx, value in trail if value is not None]
    measured, best = max(ok) if ok else (None, None)
    true = land.true(best) or 0.0
    reached = next(
        (
            i
            for i, (idx, _) in enumerate(trail, 1)
            if (v := land.true(idx)) is not None and v * (1 + land.tol(idx, best)) >= true
        ),
        len(trail),
    )
    return {
        "best": best,
        "true": true,
        "measured": measured,
        "used": len(trail),
        "reached": reached,
        "why": "budget",
        "plateaus": 0,
        "restructures": 0,
        "trail": [idx for idx, _ in trail],
        "curve": [(i, land.true(idx) or 0.0) for i, (idx, _) in enumerate(trail, 1)],
    }


def make_target(land: Landscape, folder: Path) -> Path:
    shutil.copytree(ROOT / "examples" / land.example, folder)
    toml = folder / "target.toml"
    data = tomllib.loads(toml.read_text())
    toml.write_text(tomli_w.dumps(data | {"name": land.name, "knobs": land.knobs}))
    return folder


def one_run(
    land: Landscape, target: Path, budgets: list[int], seed: int, overrides: dict
) -> dict[int, dict]:
    """Runs of the loop per budget, read back from their histories; errors come back as
    {"error": ...}. An arm that does not supervise reads its budget only to stop, so one run at
    the largest budget serves every budget: each is read from that run's history up to where it
    had spent the budget (tests/test_bench.py holds this against separate runs)."""
    if supervises(overrides):  # plateau windows scale with the budget
        return {b: read_run(land, *history(land, target, b, seed, overrides)) for b in budgets}
    events, why = history(land, target, max(budgets), seed, overrides)
    return {b: read_run(land, *spent(events, why, b)) for b in budgets}


def history(land: Landscape, target: Path, budget: int, seed: int, overrides: dict):
    """One run of the loop: its events and why it stopped (an Exception where it failed)."""
    tmp = Path(tempfile.mkdtemp(prefix="eat-bench-", dir=TMP))
    try:
        _, why = start_run(
            target,
            tmp / "ws",
            runner=LandscapeRunner(land, seed),
            max_evals=budget,
            seed=seed,
            **overrides,
        )
        events, _ = Workspace.open(tmp / "ws").read_events()
    except Exception as e:  # e.g. a preset whose strategy the offline agent lacks
        return [], e
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return events, why


def spends(e) -> bool:
    """Whether the event spent an evaluation: a candidate evaluated (not a copy of an
    evaluated program's result), or a re-time."""
    return e.type == "elite_retimed" or (e.type == "candidate_evaluated" and not e.same_as)


def spent(events: list, why, budget: int):
    """A history cut where it had spent `budget` evaluations (candidates and re-times), and
    why it stopped there: its own reason if it stopped sooner, else the budget."""
    used = 0
    for i, e in enumerate(events):
        used += spends(e)
        if used == budget:
            later = any(spends(x) for x in events[i + 1 :])
            return events[: i + 1], ("max_evals" if later else why)
    return events, why


def read_run(land: Landscape, events: list, why) -> dict:
    """A run's figures from its history: the true speedup of its best, the evaluations it used
    and those it took to reach its best (within noise), and the configurations in log order."""
    if isinstance(why, Exception):
        return {"error": f"{type(why).__name__}: {why}"}
    state = RunState.from_events(events)
    best = land.index(state.best.knobs) if state.best else None
    true = land.true(best) or 0.0
    used, reached, trail, curve = 0, None, [], []
    for e in events:
        used += spends(e)
        if e.type == "candidate_evaluated":
            idx = land.index(e.knobs)
            trail.append(idx)
            v = land.true(idx)
            curve.append((used, v or 0.0))
            if reached is None and v is not None and v * (1 + land.tol(idx, best)) >= true:
                reached = used
    return {
        "best": best,
        "true": true,
        "measured": state.best_speedup,
        "used": used,
        "reached": reached or used,
        "why": stop_reason(why),
        "plateaus": state.plateaus,
        "restructures": state.restructures,
        "trail": trail,
        "curve": curve,
    }


def stop_reason(stop) -> str:
    """Why a run stopped, without its figures: the Stop's code, or the start of its line."""
    return getattr(stop, "code", None) or re.sub(r" \(.*\)$", "", str(stop))


def cell(r: dict) -> str:
    return f"{r['true']:5.2f}x ({r['measured'] or 0:.2f}x) {r['used']:>3} {r['reached']:>3}"


def reach(r: dict, level: float) -> int:
    """The evaluations a run took up to its first configuration with a true speedup of `level`
    or more (its whole run if none)."""
    return next((at for at, v in r["curve"] if v >= level), r["used"])


def tie_level(land: Landscape, x: dict, y: dict) -> float | None:
    """Where two runs' bests are equal within noise, the level both are timed to: the higher
    best less that noise; None where one is higher beyond it."""
    tol = land.tol(x["best"], y["best"])
    high, low = max(x["true"], y["true"]), min(x["true"], y["true"])
    return None if high > low * (1 + tol) else high / (1 + tol)


def beats(land: Landscape, x: dict, y: dict) -> bool:
    """x's best is higher beyond noise, or equal within noise and x got within that noise of
    the higher best in at most 90% of y's evaluations."""
    level = tie_level(land, x, y)
    if level is None:
        return x["true"] > y["true"]
    return reach(x, level) <= SOONER * reach(y, level)


def record(land: Landscape, xs: list[dict], ys: list[dict]) -> dict[str, int]:
    """Wins, ties and losses of the runs `xs` against `ys`, seed by seed."""
    wins = sum(beats(land, x, y) for x, y in zip(xs, ys))
    losses = sum(beats(land, y, x) and not beats(land, x, y) for x, y in zip(xs, ys))
    return {"wins": wins, "ties": len(xs) - wins - losses, "losses": losses}


def meets_bar(r: dict[str, int], budget: int) -> bool:
    """The bar of the search's goal, scaled to the seeds: at BAR_BUDGET evaluations and beyond,
    at least 70% wins and at most 10% losses; below it, more wins than losses."""
    seeds = r["wins"] + r["ties"] + r["losses"]
    if budget >= BAR_BUDGET:
        return r["wins"] >= 0.7 * seeds and r["losses"] <= 0.1 * seeds
    return r["wins"] > r["losses"]


def overclaim(r: dict) -> float:
    """How far a run's own estimate of its best is above that best's true speedup (1.0: exact):
    what a user who times the reported kernel again would find missing."""
    return (r["measured"] or 0.0) / r["true"] if r["true"] else 1.0


def better(land: Landscape, x: dict, y: dict) -> dict:
    level = tie_level(land, x, y)
    if level is None:
        return max(x, y, key=lambda r: r["true"])
    return min(x, y, key=lambda r: reach(r, level))


def arms(presets) -> dict[str, dict]:
    """eat's arms: name -> RunConfig overrides."""
    return {"supervised": {}, "unrestructured": {"supervise": False}} | {
        f"static {p}": {"teams": [p], "supervise": False} for p in presets
    }


def supervises(overrides: dict) -> bool:
    """Whether an arm of eat's runs the supervisor (RunConfig.supervise)."""
    return overrides.get("supervise", True)


def shares_runs(arm: str, overrides: dict) -> bool:
    """Whether one run of the arm at the largest budget serves every budget."""
    return arm in UNBUDGETED if arm in PEERS else not supervises(overrides)


def submit(pool, land: Landscape, target: Path, budgets, seed: int, arm: str, overrides):
    """Futures of the arm's runs on one seed, by budget: one future for every budget where one
    run serves them all, else one a budget."""
    groups = [list(budgets)] if shares_runs(arm, overrides) else [[b] for b in budgets]
    futures = {}
    for group in groups:
        if arm in PEERS:
            f = pool.submit(peer_run, land, group, seed, arm)
        else:
            f = pool.submit(one_run, land, target, group, seed, overrides)
        futures |= dict.fromkeys(group, f)
    return futures


def prepare_worker() -> None:
    """Runs in each worker before its first run: one BLAS and OpenMP thread per worker, and
    freed memory kept for reuse.

    numpy, scipy and scikit-learn would each start a thread per core; with --jobs workers on as
    many cores those threads fight, and the bench took 4.3x the wall time (2 seeds of needle with
    --jobs 2 on 2 cores: 108 s, 25 s with one thread each). The matrices are small, so one
    thread loses nothing. The libraries already loaded are limited through threadpoolctl; the
    variables cover those a run loads later.

    The surrogate's fits allocate matrices of some megabytes many times a pick, and glibc
    hands such memory back to the kernel when it is freed, so each fit faulted in zeroed pages
    again: a supervised 150-evaluation run of cpu_matmul_vec took 220,000 page faults and a
    quarter of its CPU time in the kernel. With mallopt's mmap threshold at 32 MB and its trim
    threshold at 512 MB the memory is reused: 3,000-12,000 faults, 5.0 s -> 4.4 s a run."""
    for var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
        os.environ[var] = "1"
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        libc.mallopt(M_MMAP_THRESHOLD, 32 << 20)
        libc.mallopt(M_TRIM_THRESHOLD, 512 << 20)
    except (OSError, AttributeError):  # not glibc: the bench is slower, not wrong
        pass
    try:
        from threadpoolctl import threadpool_limits
    except ImportError:  # without it the bench is slower, not wrong
        return
    threadpool_limits(1)


def landscapes(which: str) -> list[Landscape]:
    out: list[Landscape] = [Synthetic(n) for n in WIDTHS if which in (n, "all")]
    return out + [Replay(t) for t in sorted(TABLES.glob("*.json")) if which in (t.stem, "all")]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    recorded = sorted(t.stem for t in TABLES.glob("*.json"))
    ap.add_argument("--landscape", choices=[*WIDTHS, *recorded, "all"], default="all")
    ap.add_argument("--seeds", type=int, default=10, help="how many seeds to run")
    ap.add_argument(
        "--first-seed",
        type=int,
        default=0,
        help="the first seed (10: ones no default was chosen on)",
    )
    ap.add_argument(
        "--budgets", type=int, nargs="+", default=[60, 150], help="evaluations per run (every arm)"
    )
    ap.add_argument("--jobs", type=int, default=os.cpu_count(), help="worker processes")
    ap.add_argument("--json", action="store_true", help="print only one JSON object")
    ap.add_argument("--verbose", action="store_true", help="a table per seed, and notes")
    ap.add_argument(
        "--pairs", action="store_true", help="every arm against every other (wins/ties/losses)"
    )
    args = ap.parse_args()
    say = (lambda *a: None) if args.json else print
    started, presets = time.time(), list(load_presets())
    missing = missing_peers()
    for peer, why in missing.items():
        print(f"{peer}: skipped, {why}; pip install 'eat[bench]'", file=sys.stderr)
    every = arms(presets) | {p: {} for p in PEERS if p not in missing}
    report: dict = {}
    with (
        tempfile.TemporaryDirectory(prefix="eat-bench-", dir=TMP) as tmp,
        ProcessPoolExecutor(args.jobs, initializer=prepare_worker) as pool,
    ):
        pending = []  # every run is submitted now; each group is reported when it is done
        for land in landscapes(args.landscape):
            target = make_target(land, Path(tmp) / land.name)
            pending.append(
                (
                    land,
                    {
                        arm: [
                            submit(pool, land, target, args.budgets, seed, arm, overrides)
                            for seed in range(args.first_seed, args.first_seed + args.seeds)
                        ]
                        for arm, overrides in every.items()
                    },
                )
            )
        for land, futures in pending:
            for budget in args.budgets:
                runs = {
                    arm: [fs[budget].result()[budget] for fs in seeds]
                    for arm, seeds in futures.items()
                }
                report.setdefault(land.name, {})[str(budget)] = compare(
                    land, budget, runs, say if args.verbose else (lambda *a: None), args.first_seed
                )
                r = report[land.name][str(budget)]
                vs = r["vs"]
                say(
                    f"{land.name} {budget}: supervised wins {r['wins']}, ties {r['ties']}, "
                    f"losses {r['losses']} of {args.seeds}; median best {r['median_best']:.2f}x "
                    f"(no restructuring {r['median_best_unrestructured']:.2f}x, best static team "
                    f"{r['static_team']} {r['median_best_static']:.2f}x"
                    + "".join(f", {p} {m:.2f}x" for p, m in r["median_best_peers"].items())
                    + ")\n    vs (wins/ties/losses): "
                    + ", ".join(f"{a} {v['wins']}/{v['ties']}/{v['losses']}" for a, v in vs.items())
                    + "\n    an oracle's wins (the best configuration at evaluation 1): "
                    + ", ".join(f"{a} {v}" for a, v in r["ceiling"].items())
                    + "\n    the reported best over its true speedup (median): "
                    + ", ".join(f"{a} {v:.2f}" for a, v in r["median_overclaim"].items())
                    + "\n    the bar (meets_bar against every other arm) is met by: "
                    + (", ".join(r["bar"]) or "no arm")
                )
                if args.pairs:
                    say(matrix(r["pairs"]))
    wall = time.time() - started
    if args.json:
        print(json.dumps(report))
    print(f"wall time {wall:.0f} s with {args.jobs} workers", file=sys.stderr)


def matrix(pairs: dict[str, dict[str, dict]]) -> str:
    """The pairwise records as a table: row against column, wins/ties/losses."""
    names = list(pairs)
    lines = ["    row vs column " + "".join(f"{n:>11}" for n in names)]
    for x in names:
        cells = (
            f"{r['wins']}/{r['ties']}/{r['losses']}" if (r := pairs[x].get(y)) else "-"
            for y in names
        )
        lines.append(f"    {x:<13} " + "".join(f"{c:>11}" for c in cells))
    return "\n".join(lines)


def compare(
    land: Landscape, budget: int, runs: dict[str, list[dict]], say, first_seed: int = 0
) -> dict:
    """Pick the best static team, score (a) against the better of (b) and (c) per seed."""
    for arm, rs in list(runs.items()):
        if errors := [r["error"] for r in rs if "error" in r]:
            print(
                f"warning: {land.name} {budget}: {arm} failed on {len(errors)} seeds: {errors[0]}",
                file=sys.stderr,
            )
            if not arm.startswith("static"):
                raise SystemExit(1)
            del runs[arm]
        elif over := [r["used"] for r in rs if r["used"] > budget]:
            print(
                f"warning: {land.name} {budget}: {arm} used more than its budget on "
                f"{len(over)} of {len(rs)} seeds (up to {max(over)} evaluations)",
                file=sys.stderr,
            )
    med = {arm: statistics.median(r["true"] for r in rs) for arm, rs in runs.items()}
    static = max(
        (a for a in runs if a.startswith("static")),
        key=lambda a: (med[a], statistics.mean(r["true"] for r in runs[a])),
    )
    a, b, c = runs["supervised"], runs["unrestructured"], runs[static]
    others = {"static": c, "unrestructured": b} | {p: runs[p] for p in PEERS if p in runs}
    vs = {name: record(land, a, rs) for name, rs in others.items()}
    # What the rule lets anyone win: an oracle that measures the best configuration first ties
    # a peer that reached the same tier at its first evaluation too, so the bar is out of reach
    # where that happens on more than 3 seeds of 10.
    top = land.top()
    oracle = {"best": top, "true": land.true(top), "curve": [(1, land.true(top))], "used": 1}
    ceiling = {name: record(land, [oracle] * len(rs), rs)["wins"] for name, rs in others.items()}
    contenders = {"supervised": a, "static": c} | {p: runs[p] for p in PEERS if p in runs}
    shown = {arm: rs for arm, rs in runs.items() if arm in ("supervised", static, *PEERS)}
    pairs = {
        x: {y: record(land, xs, ys) for y, ys in contenders.items() if y != x}
        for x, xs in contenders.items()
    }
    score = {"win": 0, "tie": 0, "loss": 0}
    say(f"\n=== {land.name}, {budget} evaluations per run: {land.describe()}")
    say(
        "each run: true best (the run's own estimate), evaluations used, evaluations to reach "
        "it; P, R: the supervised run's plateaus and restructures"
    )
    say(f"{'seed':>4} | {'supervised':<30} | {'no restructuring':<22} | {static:<22} | result")
    for seed, (x, y, z) in enumerate(zip(a, b, c), first_seed):
        opp = better(land, y, z)
        result = "win" if beats(land, x, opp) else "loss" if beats(land, opp, x) else "tie"
        score[result] += 1
        say(
            f"{seed:>4} | {cell(x)} P{x['plateaus']:>2} R{x['restructures']:>2} | {cell(y)} | "
            f"{cell(z)} | {result} vs {'(b)' if opp is y else '(c)'}"
        )
    say("medians by arm: " + ", ".join(f"{arm} {v:.2f}x" for arm, v in med.items()))
    for arm, rs in runs.items():
        stops = {w: sum(r["why"] == w for r in rs) for w in {r["why"] for r in rs}}
        say(
            f"  {arm}: evaluations used {min(r['used'] for r in rs)}-"
            f"{max(r['used'] for r in rs)}; stopped: "
            + "; ".join(f"{w} x{n}" for w, n in sorted(stops.items()))
        )
    same = sum(x["trail"] == y["trail"] for x, y in zip(a, b))
    say(
        f"  (a) evaluated exactly what (b) did on {same} of {len(a)} seeds; reported the same "
        f"best on {sum(x['best'] == y['best'] for x, y in zip(a, b))}\n"
    )
    return {
        "wins": score["win"],
        "ties": score["tie"],
        "losses": score["loss"],
        "median_best": round(med["supervised"], 3),
        "median_best_static": round(med[static], 3),
        "static_team": static.split()[1],
        "median_best_unrestructured": round(med["unrestructured"], 3),
        "median_best_peers": {p: round(med[p], 3) for p in PEERS if p in med},
        "median_reached": {
            arm: statistics.median(r["reached"] for r in rs) for arm, rs in shown.items()
        },
        "median_overclaim": {
            arm: round(statistics.median(overclaim(r) for r in rs), 3) for arm, rs in shown.items()
        },
        "vs": vs,
        "ceiling": ceiling,
        "pairs": pairs,
        "bar": [x for x, row in pairs.items() if all(meets_bar(v, budget) for v in row.values())],
        "median_best_by_static_team": {
            a.split()[1]: round(v, 3) for a, v in med.items() if a.startswith("static")
        },
    }


if __name__ == "__main__":
    main()
