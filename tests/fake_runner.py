"""A fake runner for loop tests that need a known landscape: it answers at once, without timing.

Tests of the loop's decisions (plateaus, restructures, budgets) cannot rest on real timings: a
real run on a shared machine may or may not plateau. This runner reads the knob values back from
the rendered source (`#define NAME value` lines, the `// eat:cflags` line) and answers the
speedup that `score(knobs)` gives (None: the candidate fails to compile). It stands in for the
CPU runner only where a test is about the loop, not about measuring.
"""

from __future__ import annotations

import re
from collections.abc import Callable

from eat.runners.base import Evaluation, Stat, WorkloadResult, source_hash

_DEFINE = re.compile(r"^#define (\w+) (.+)$", re.M)
_CFLAGS = re.compile(r"^// eat:cflags (.*)$", re.M)


def knobs_of(source: str) -> dict[str, str]:
    """Knob values as the offline agent renders them (the first definition of a name wins)."""
    found: dict[str, str] = {}
    for name, value in _DEFINE.findall(source):
        found.setdefault(name, value.strip())
    if flags := _CFLAGS.findall(source):
        found["CFLAGS"] = " ".join(flags[0].split())
    return found


class FakeRunner:
    """Answers `score(knobs)` for every candidate; `calls` counts evaluations. `program(knobs)`
    keys what a candidate builds (default: nothing known, each source its own program)."""

    name = "cpu"

    def __init__(
        self,
        score: Callable[[dict[str, str]], float | None],
        noise: float = 0.01,
        program: Callable[[dict[str, str]], str | None] = lambda knobs: None,
    ):
        self.score, self.noise, self.calls = score, noise, 0
        self.keyer = program

    def unavailable(self, target=None):
        return None

    def program(self, target, source) -> str | None:
        return self.keyer(knobs_of(source))

    def evaluate(self, target, source, *, config=None, workdir=None) -> Evaluation:
        self.calls += 1
        digest = source_hash(source)
        speedup = self.score(knobs_of(source))
        if speedup is None:
            return Evaluation(
                status="compile_error",
                message="candidate.c: does not compile",
                target=target.name,
                runner="fake",
                source_hash=digest,
            )
        rows = []
        for params in target.workloads:
            base = 1e-3
            cand = base / speedup
            rows.append(
                WorkloadResult(
                    params=params,
                    speedup=speedup,
                    candidate=Stat(median_s=cand, iqr_s=cand * self.noise, n=9),
                    baseline=Stat(median_s=base, iqr_s=base * self.noise, n=9),
                )
            )
        return Evaluation(
            status="ok",
            speedup=speedup,
            target=target.name,
            runner="fake",
            device="fake",
            workloads=rows,
            source_hash=digest,
        )
