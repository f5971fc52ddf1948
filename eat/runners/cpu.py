"""The CPU runner: C candidates built with the system compiler, timed on one pinned core.

The pipeline (build -> verify -> time) is NativeRunner's (native.py); CpuRunner says how to
build, which flags a candidate may ask for, and how the harness child is limited and pinned.
"""

from __future__ import annotations

import os
import shutil
from functools import lru_cache
from pathlib import Path

from eat.runners import sandbox
from eat.runners.base import Peaks
from eat.runners.job import NativeJob
from eat.runners.native import CC_FLAG_DENY, CC_FLAG_OK, NativeRunner, candidate_cflags
from eat.target import Build, EvalConfig, Target


class CpuRunner(NativeRunner):
    """Runner for C candidates on this machine's CPU (one core, pinned, for timing)."""

    name = "cpu"
    suffix = ".c"
    harness_module = "eat.runners.harness"
    lock_name = "cpu"

    def __init__(self, peaks: Peaks | None = None, cpu: int | None = None, lock_down: bool = True):
        self.peaks = peaks
        allowed = sorted(os.sched_getaffinity(0))
        self.cpu = allowed[-1] if cpu is None else cpu
        self.lock_down = lock_down

    def unavailable(self, target: Target | None = None) -> str | None:
        compiler = (target.build if target else Build()).compiler_for("cpu")
        if not shutil.which(compiler):
            return f"C compiler {compiler!r} not found on PATH"
        return None

    @property
    def device(self) -> str:
        return f"cpu: {cpu_model()} (core {self.cpu})"

    def flags(self, source: str, default: str) -> tuple[list[str], str | None]:
        return candidate_cflags(source, default, CC_FLAG_OK, CC_FLAG_DENY)

    def compile_command(self, target: Target, src: Path, flags: list[str]) -> list[str]:
        return [
            target.build.compiler_for("cpu"),
            "-shared",
            "-fPIC",
            "-std=gnu11",
            *flags,
            "-o",
            str(src.with_suffix(".so")),
            str(src),
            "-lm",
        ]

    def child_env(self) -> dict[str, str]:
        return {}  # cc and the harness need nothing beyond sandbox.clean_env's allow-list

    def harness_limits(self, cfg: EvalConfig) -> sandbox.Limits:
        # On the CPU everything the candidate maps is its own: the address space is the cap.
        return sandbox.Limits(
            wall_s=cfg.timeout_s,
            cpu_s=cfg.cpu_s,
            address_space_bytes=cfg.memory_mb << 20,
            max_output_chars=64_000,
        )

    def job_extra(self, job: NativeJob) -> None:
        job["flush_bytes"] = 2 * _llc_bytes()
        if job["mode"] == "time":
            job["cpu"] = self.cpu


@lru_cache(maxsize=1)
def cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return os.uname().machine


def _llc_bytes() -> int:
    """Size of the largest CPU cache, so a flush buffer can be made larger than it."""
    sizes = []
    for f in Path("/sys/devices/system/cpu/cpu0/cache").glob("index*/size"):
        text = f.read_text().strip()
        mult = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}.get(text[-1:], 1)
        sizes.append(int(text.rstrip("KMG")) * mult)
    return max(sizes, default=32 << 20)
