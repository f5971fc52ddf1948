"""Profiles as a tool: what an agent (or the debugger) learns about a candidate beyond its time.

On the CPU: the compiler's vectorization remarks for the candidate's own lines (gcc
`-fopt-info-vec-all`, with the candidate's flags), which loops were vectorized and why the
others were not. On CUDA, where `ncu` runs: Nsight Compute's speed-of-light section of each
kernel the candidate launches (SM and memory throughput as a share of peak, duration), from
its CSV. The per-workload times and fractions of peak come from the evaluation itself
(`WorkloadResult.summary`). Every command is contained and has a timeout.
"""

from __future__ import annotations

import csv
import io
import re
import shutil
import subprocess
import sys
from pathlib import Path

from eat.runners import sandbox
from eat.target import Target

_REMARK = re.compile(r"^candidate\.c:(\d+):\d+: (optimized|missed): (.*)$")
MAX_REMARKS = 25


def profile(target: Target, source: str, timeout_s: float = 60.0) -> str:
    """What the toolchain says of `source`, in lines for people and prompts ('' if nothing)."""
    if target.language == "c":
        return vectorization(target, source, timeout_s)
    if target.language == "cuda" and shutil.which("ncu"):
        return ncu_summary(target, source, timeout_s)
    return ""


def vectorization(target: Target, source: str, timeout_s: float = 60.0) -> str:
    """gcc's vectorization remarks on the candidate's lines, loops it vectorized first."""
    from eat.runners.cpu import CpuRunner

    flags, refused = CpuRunner().flags(source, target.build.cflags)
    if refused:
        return refused
    with sandbox.scratch("prof") as tmp:
        src = Path(tmp) / "candidate.c"
        src.write_text(source)
        cmd = [
            target.build.compiler_for("cpu"),
            "-std=gnu11",
            "-fPIC",
            *flags,
            "-fopt-info-vec-all",
            "-c",
            src.name,
            "-o",
            "candidate.o",
        ]
        run = sandbox.run(
            cmd,
            cwd=Path(tmp),
            env=sandbox.clean_env(Path(tmp)),
            limits=sandbox.Limits(wall_s=timeout_s, max_output_chars=200_000),
        )
    return remarks(run.stderr + run.stdout, source)


def remarks(log: str, source: str) -> str:
    """The distinct remarks on the candidate's lines, each with its line of code."""
    lines = source.splitlines()
    seen: set[tuple[str, str, str]] = set()
    done: list[str] = []
    missed: list[str] = []
    for raw in log.splitlines():
        m = _REMARK.match(raw.strip())
        if not m or (m.group(1), m.group(2), m.group(3)) in seen:
            continue
        seen.add((m.group(1), m.group(2), m.group(3)))
        n = int(m.group(1))
        code = lines[n - 1].strip()[:80] if 0 < n <= len(lines) else ""
        text = f"line {n} ({code}): {m.group(3)}"
        (done if m.group(2) == "optimized" else missed).append(text)
    if not done and not missed:
        return "the compiler vectorized no loop and said nothing about one"
    out = ["vectorized: " + t for t in done] + ["not vectorized: " + t for t in missed]
    return "\n".join(out[:MAX_REMARKS])


def ncu_summary(target: Target, source: str, timeout_s: float = 300.0) -> str:
    """Nsight Compute's speed of light for the kernels one evaluation of `source` launches
    (`ncu --section SpeedOfLight --csv` over `eat eval`); needs a GPU where ncu may profile."""
    with sandbox.scratch("ncu") as tmp:
        src = Path(tmp) / "candidate.cu"
        src.write_text(source)
        cmd = [
            "ncu",
            "--section",
            "SpeedOfLight",
            "--csv",
            "--target-processes",
            "all",
            "--launch-count",
            "20",
            sys.executable,
            "-m",
            "eat",
            "eval",
            str(target.root),
            str(src),
        ]
        try:
            run = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout_s)
        except subprocess.TimeoutExpired:
            return f"ncu did not finish in {timeout_s:g} s"
    return speed_of_light(run.stdout) or f"ncu gave no metrics: {run.stderr.strip()[-300:]}"


def speed_of_light(csv_text: str) -> str:
    """One line per kernel from ncu's CSV: SM and memory throughput (% of peak), duration."""
    start = csv_text.find('"ID"')
    if start < 0:
        return ""
    kernels: dict[str, dict[str, str]] = {}
    for row in csv.DictReader(io.StringIO(csv_text[start:])):
        unit = row.get("Metric Unit", "")
        value = row.get("Metric Value", "") + ("%" if unit == "%" else f" {unit}" if unit else "")
        kernels.setdefault(row.get("Kernel Name", "?"), {})[row.get("Metric Name", "")] = value
    lines = []
    for name, m in kernels.items():
        parts = [
            f"{k.lower()} {m[k]}"
            for k in ("Compute (SM) Throughput", "Memory Throughput", "DRAM Throughput", "Duration")
            if k in m
        ]
        lines.append(f"{name[:60]}: " + ", ".join(parts))
    return "\n".join(lines)
