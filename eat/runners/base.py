"""The runner protocol and the Evaluation it returns.

A runner builds, verifies and times one candidate source against a target, and never sees the
workspace. This is the contract every runner's module imports; the registry (`runner_for`,
`get_runner`) is the package's, `eat.runners`.
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path
from typing import Literal, Protocol, get_args

from pydantic import BaseModel, Field

import eat
from eat.errors import EatError
from eat.runners.job import GradeJob, Job
from eat.runners.sandbox import Completed
from eat.target import EvalConfig, Target, geomean

Status = Literal["ok", "compile_error", "incorrect", "timeout", "crash", "rejected"]
STATUSES: tuple[str, ...] = get_args(Status)
# Failures a busy machine can cause whatever the program (a time limit hit under load, a
# process killed for memory others took): a program that failed so once is evaluated again.
BY_CHANCE: tuple[str, ...] = ("timeout", "crash")


class Stat(BaseModel):
    """Latency of one implementation on one workload."""

    median_s: float = Field(description="Median of the timed calls, in seconds.")
    iqr_s: float = Field(description="Interquartile range of the timed calls, in seconds.")
    n: int = Field(description="Number of timed calls.")


class WorkloadResult(BaseModel):
    """Timings on one workload, the candidate's throughput, and how it compares."""

    params: dict[str, int | float]
    candidate: Stat
    baseline: Stat | None = None
    vendor: Stat | None = None
    speedup: float | None = Field(None, description="baseline median / candidate median.")
    gflops: float | None = Field(None, description="Candidate GFLOP/s, where the target has flops.")
    gbps: float | None = Field(None, description="Candidate GB/s, where the target has bytes.")
    peak_fraction: float | None = Field(
        None, description="Candidate throughput / this machine's measured peak (eat doctor)."
    )
    vendor_gflops: float | None = None
    vendor_gbps: float | None = None

    def summary(self) -> str:
        """One line for people and prompts: times, throughput, fraction of peak."""
        ms = lambda s: f"{s.median_s * 1e3:.3f} ms"  # noqa: E731
        parts = [" ".join(f"{k}={v}" for k, v in self.params.items()) + ": " + ms(self.candidate)]
        others = [
            f"{name} {ms(s)}"
            for name, s in (("baseline", self.baseline), ("vendor", self.vendor))
            if s
        ]
        if others:
            parts[0] += f" ({', '.join(others)})"
        if self.gflops:
            parts.append(f"{self.gflops:.1f} GFLOP/s")
        if self.gbps:
            parts.append(f"{self.gbps:.1f} GB/s")
        if self.peak_fraction:
            parts.append(f"{self.peak_fraction:.0%} of peak")
        return ", ".join(parts)


class Grade(BaseModel):
    """A program's grades on one split: its metric's median over seeds, and the spread."""

    median: float = Field(description="Median of the metric over the seeds graded.")
    iqr: float = Field(description="Interquartile range of the metric over those seeds.")
    n: int = Field(description="Number of seeds graded.")
    metrics: dict[str, float] = Field({}, description="Every metric the grader gave: medians.")


VERIFIED_ONLY = "verified; not timed (evaluation.timed is off)"


class Evaluation(BaseModel):
    """The verdict on one candidate (the evaluation contract in DESIGN)."""

    status: Status
    speedup: float | None = Field(
        None,
        description="Geometric mean over workloads of baseline / candidate latency; on a "
        "program target, the metric's gain over the baseline (higher is better either way).",
    )
    metric: str | None = Field(None, description="Program targets: the metric graded.")
    split: str | None = Field(None, description="Program targets: the split graded.")
    score: Grade | None = Field(None, description="Program targets: the candidate's grades.")
    baseline_score: Grade | None = Field(
        None, description="Program targets: the baseline's, on the same split and seeds."
    )
    gain_rse: float | None = Field(
        None,
        description="Program targets: the relative standard error of the median of the "
        "per-seed gains, how far the headline would move on other seeds (the noise a later "
        "gain must beat).",
    )
    message: str = Field("", description="One line: why this status.")
    target: str = ""
    runner: str = ""
    device: str = ""
    arch: str | None = Field(
        None,
        description="The architecture the candidate was built for "
        "(a GPU's, e.g. sm_90a); None where the build has no target arch.",
    )
    vendor: str | None = Field(None, description="Name of the vendor library timed alongside.")
    vendor_speedup: float | None = Field(
        None, description="Geometric mean of baseline / vendor latency."
    )
    vs_vendor: float | None = Field(
        None, description="Geometric mean of vendor / candidate latency (>1: faster than it)."
    )
    workloads: list[WorkloadResult] = []
    detail: dict = Field({}, description="Status-specific facts, e.g. the first mismatch.")
    compile_log: str = ""
    stderr: str = Field("", description="What the candidate printed, truncated.")
    durations: dict[str, float] = Field({}, description="Seconds spent per phase.")
    source_hash: str = ""

    @property
    def ok(self) -> bool:
        return self.status == "ok"


class HarnessError(EatError):
    """The target itself is broken (its reference raised, its baseline does not build)."""

    code = "harness_error"


class SetsChanged(HarnessError):
    """An input set changed on disk after it was made (the harness's `detail.set_changed`): the
    runner makes the sets again and evaluates once more."""


class Peaks(BaseModel):
    """What `eat doctor` measured on one core of this machine."""

    gflops: float | None = None
    gbps: float | None = None


def source_hash(source: str) -> str:
    """Hash of the source with whitespace runs and blank lines normalized."""
    norm = "\n".join(" ".join(line.split()) for line in source.splitlines() if line.strip())
    return hashlib.sha256(norm.encode()).hexdigest()[:16]


def summarize(target: Target, timed: list[dict], peaks: Peaks | None) -> dict:
    """Per-workload results and the geometric means, from the harness's raw statistics."""
    rows = []
    for params, t in zip(target.workloads, timed):
        cand = Stat(**t["candidate"])
        base = Stat(**t["baseline"]) if "baseline" in t else None
        vend = Stat(**t["vendor"]) if "vendor" in t else None
        row = WorkloadResult(params=params, candidate=cand, baseline=base, vendor=vend)
        if base:
            row.speedup = base.median_s / cand.median_s
        flops, nbytes = target.metric("flops", params), target.metric("bytes", params)
        if flops:
            row.gflops = flops / cand.median_s / 1e9
            row.vendor_gflops = flops / vend.median_s / 1e9 if vend else None
        if nbytes:
            row.gbps = nbytes / cand.median_s / 1e9
            row.vendor_gbps = nbytes / vend.median_s / 1e9 if vend else None
        if peaks:
            fractions = [
                v / p for v, p in ((row.gflops, peaks.gflops), (row.gbps, peaks.gbps)) if v and p
            ]
            row.peak_fraction = max(fractions) if fractions else None
        rows.append(row)
    out: dict = {"workloads": rows}
    # each list is whole (one entry a row) where the `all` above it holds
    if all(r.baseline for r in rows):
        out["speedup"] = geomean([r.speedup for r in rows if r.speedup is not None])
    if all(r.vendor for r in rows):
        out["vs_vendor"] = geomean(
            [r.vendor.median_s / r.candidate.median_s for r in rows if r.vendor]
        )
        if all(r.baseline for r in rows):
            out["vendor_speedup"] = geomean(
                [r.baseline.median_s / r.vendor.median_s for r in rows if r.baseline and r.vendor]
            )
    return out


def read_result(job: Job | GradeJob, run: Completed, cfg: EvalConfig) -> dict:
    """The harness's tagged result line, or the status its end implies (timeout, crash)."""
    tag = f"EAT-RESULT {job['nonce']} "
    for line in run.stdout.splitlines():
        if line.startswith(tag):
            res = json.loads(line[len(tag) :])
            if res["status"] == "harness_error" and res.get("detail", {}).get("set_changed"):
                raise SetsChanged(f"target {job['entry']}: {res['message'].strip()}")
            if res["status"] == "harness_error":
                raise HarnessError(
                    f"target {job['entry']}: the harness failed before "
                    f"loading the candidate: {res['message'].strip()}"
                )
            return res
    if run.timed_out:
        return {
            "status": "timeout",
            "message": f"killed after the {cfg.timeout_s:g} s wall-clock limit ({job['mode']})",
        }
    # SIGXCPU at the soft CPU limit; SIGKILL at the hard one when SIGXCPU was caught.
    if run.signal_name in ("SIGXCPU", "SIGKILL"):
        return {
            "status": "timeout",
            "message": f"exceeded the {cfg.cpu_s} s CPU-time limit ({job['mode']})",
        }
    why = (
        f"killed by {run.signal_name}" if run.signal_name else f"exited with code {run.returncode}"
    )
    tail = run.stderr.strip().splitlines()[-1:] or [""]
    return {"status": "crash", "message": f"{why} during {job['mode']} {tail[0][:200]}".strip()}


def eat_pythonpath() -> str:
    """PYTHONPATH for a child that runs `python -m eat.runners...` (eat may not be installed)."""
    pkg_parent = str(Path(eat.__file__).resolve().parent.parent)
    return os.pathsep.join(filter(None, [pkg_parent, os.environ.get("PYTHONPATH")]))


class Runner(Protocol):
    """Builds, verifies and times candidates for one kind of hardware."""

    @property
    def name(self) -> str:
        """The runner's kind ("cpu", "cuda", ...), as a target's `runner` names it."""

    def unavailable(self, target: Target | None = None) -> str | None:
        """Why this runner cannot run `target` (or anything) here, in one line; None if it can."""

    def evaluate(
        self,
        target: Target,
        source: str,
        *,
        config: EvalConfig | None = None,
        workdir: Path | None = None,
    ) -> Evaluation:
        """Build, verify and time `source`; any candidate misbehaviour becomes a status."""

    def program(self, target: Target, source: str) -> str | None:
        """What `source` builds, as a key: two sources with one key are the same program, and
        the run evaluates it once. None where the runner cannot tell (each source its own)."""
