"""The Python runner: PyTorch, Triton and MLX candidates, on the CPU, a CUDA/ROCm GPU or MLX.

A candidate is a Python file defining the target's entry (a function, or for `kind = "module"`
an nn.Module class). The reference gives the call arguments (`inputs(seed, **params)`); what
the reference returns, and any argument it writes into, is what the candidate must reproduce.

input sets (once per target: `python -m eat.runners.py_harness prepare`, kept on disk as
sets.input_sets keeps them) -> syntax check -> verify (fresh `python -m eat.runners.py_harness`)
-> time (fresh process, under the device's lock, the baseline file timed in the same process,
interleaved).
"""

from __future__ import annotations

import importlib.metadata
import json
import os
import secrets
import subprocess
import sys
import time
from functools import lru_cache
from pathlib import Path

from eat.cache import device_lock
from eat.runners import sandbox
from eat.runners.base import (
    VERIFIED_ONLY,
    Evaluation,
    Peaks,
    eat_pythonpath,
    read_result,
    source_hash,
    summarize,
)
from eat.runners.cpu import cpu_model
from eat.runners.job import MakeSets, PythonJob, Sets
from eat.runners.sets import again_if_sets_changed, grown, input_sets, sets_detail, source_key
from eat.target import EvalConfig, Target

# glibc's malloc serves a large block with mmap, returns it on free, and moves its threshold as
# it goes: a call that allocates a 25 MB output then page-faults it in (12 ms) on some calls and
# not others, for candidate and baseline alike. Fixed thresholds keep freed memory for the next
# call, as torch's own allocator does on a GPU: the IQR of a 2 ms call fell from 9 ms to 0.3 ms.
STEADY_MALLOC = {"MALLOC_MMAP_THRESHOLD_": str(1 << 30), "MALLOC_TRIM_THRESHOLD_": str(1 << 32)}

# What each (runner, framework) needs, checked in a child so this process never imports torch.
_PROBES = {
    ("cpu", "torch"): "import torch; print(torch.__version__)",
    ("cuda", "torch"): "import torch; assert torch.cuda.is_available() and torch.version.cuda, "
    "'torch sees no CUDA device'; print(torch.cuda.get_device_name())",
    ("rocm", "torch"): "import torch; assert torch.cuda.is_available() and torch.version.hip, "
    "'torch sees no ROCm device'; print(torch.cuda.get_device_name())",
    ("mlx", "mlx"): "import mlx.core as mx; print(mx.default_device())",
}
_INSTALL = {"torch": "pip install 'eat[torch]'", "mlx": "pip install 'eat[mlx]'"}


@lru_cache(maxsize=8)
def _probe(runner: str, framework: str, triton: bool) -> tuple[str | None, str]:
    """(why it cannot run, device description): a short child process, cached per process."""
    code = _PROBES[(runner, framework)] + ("; import triton" if triton else "")
    try:
        out = subprocess.run(
            [sys.executable, "-c", code],
            capture_output=True,
            text=True,
            timeout=120,
            env=os.environ | {"PYTHONWARNINGS": "ignore"},
        )
    except subprocess.TimeoutExpired:
        return f"probing {framework} took over 120 s", ""
    if out.returncode == 0:
        return None, out.stdout.strip().splitlines()[-1] if out.stdout.strip() else ""
    last = (out.stderr.strip().splitlines() or ["failed"])[-1]
    if "No module named" in last:
        name = last.split("'")[1] if "'" in last else framework
        return f"{name} is not installed ({_INSTALL.get(name, f'pip install {name}')})", ""
    return last.removeprefix("AssertionError: ")[:200], ""


class PythonRunner:
    """Runner for Python candidates: `language` pytorch or triton (torch), or mlx."""

    def __init__(
        self, name: str, language: str, peaks: Peaks | None = None, cpu: int | None = None
    ):
        self.name, self.language, self.peaks = name, language, peaks
        self.framework = "mlx" if language == "mlx" else "torch"
        self.device_kind = {"cpu": "cpu", "cuda": "cuda", "rocm": "cuda", "mlx": "mlx"}[name]
        self.cpu = sorted(os.sched_getaffinity(0))[-1] if cpu is None else cpu

    def _info(self) -> tuple[str | None, str]:
        # One probe serves unavailable() and device (a probe imports torch: seconds).
        return _probe(self.name, self.framework, self.language == "triton")

    def unavailable(self, target: Target | None = None) -> str | None:
        return self._info()[0]

    def program(self, target: Target, source: str) -> str | None:
        return None  # a module is its source: what it runs is not known before it runs

    @property
    def device(self) -> str:
        what = self._info()[1]
        if self.name == "cpu":
            return f"cpu: {cpu_model()} (core {self.cpu}, torch {what})"
        return f"{self.name}: {what}"

    def evaluate(
        self,
        target: Target,
        source: str,
        *,
        config: EvalConfig | None = None,
        workdir: Path | None = None,
    ) -> Evaluation:
        cfg = config or target.evaluation
        return again_if_sets_changed(lambda: self._evaluate(target, source, cfg, workdir))

    def _evaluate(
        self, target: Target, source: str, cfg: EvalConfig, workdir: Path | None
    ) -> Evaluation:
        ev = dict(
            target=target.name,
            runner=self.name,
            device=self.device,
            source_hash=source_hash(source),
        )
        try:
            compile(source, "candidate.py", "exec")
        except (SyntaxError, ValueError) as e:
            return Evaluation(
                status="compile_error", message=f"{type(e).__name__}: {e}", compile_log=str(e), **ev
            )
        durations: dict[str, float] = {}
        with sandbox.scratch("cand", workdir) as tmp_name:
            tmp = Path(tmp_name)
            (tmp / "candidate.py").write_text(source)
            job = self._job(target, cfg, tmp / "candidate.py")
            t0 = time.monotonic()
            res, run = self._harness(job, tmp, cfg)
            durations["verify_s"] = time.monotonic() - t0
            if res["status"] == "ok" and not cfg.timed:
                return Evaluation(
                    status="ok", message=VERIFIED_ONLY, stderr=run.stderr, durations=durations, **ev
                )
            if res["status"] == "ok":
                # The GPU runner's slot for device 0 (the one torch uses): one timing per GPU.
                with device_lock(self.name if self.name in ("cpu", "mlx") else f"{self.name}0"):
                    t0 = time.monotonic()
                    timed = job.copy()
                    timed["mode"] = "time"
                    timed["baseline"] = str(target.path(target.baseline.file).resolve())
                    res, run = self._harness(timed, tmp, cfg)
                    durations["time_s"] = time.monotonic() - t0
            if res["status"] != "ok":
                return Evaluation(
                    status=res["status"],
                    message=res["message"],
                    detail=res.get("detail", {}),
                    stderr=run.stderr,
                    durations=durations,
                    **ev,
                )
            summary = summarize(target, res["workloads"], self.peaks)
            return Evaluation(
                status="ok",
                message="verified and timed",
                stderr=run.stderr,
                durations=durations,
                detail={"extra_cpu_s": res["extra_cpu_s"]} | sets_detail(job["sets"], cfg),
                **summary,
                **ev,
            )

    def _job(self, target: Target, cfg: EvalConfig, candidate: Path) -> PythonJob:
        entry, ref, tolerance = target.kernel
        make: MakeSets = {
            "framework": self.framework,
            "device": self.device_kind,
            "kind": entry.kind,
            "reference": {
                "file": str(target.path(ref.file).resolve()),
                "function": ref.function,
                "inputs": ref.inputs,
                "init_inputs": ref.init_inputs,
            },
            "workloads": target.workloads,
            "config": cfg.model_dump(),
        }
        return {
            "nonce": secrets.token_hex(16),
            "mode": "verify",
            "framework": self.framework,
            "device": self.device_kind,
            "entry": entry.name,
            "kind": entry.kind,
            "reference": make["reference"],
            "workloads": target.workloads,
            "tolerance": tolerance.model_dump(),
            "config": make["config"],
            "candidate": str(candidate),
            "cpu": self.cpu if self.device_kind == "cpu" else None,
            # Triton compiles with child processes (ptxas, a C compiler for its launcher).
            "lock_down": not (cfg.allow_processes or self.language == "triton"),
            "confine_writes": cfg.confine_writes,
            "unreadable": target.unreadable,
            "sets": self._input_sets(target, make, cfg),
        }

    def _input_sets(self, target: Target, make: MakeSets, cfg: EvalConfig) -> Sets:
        """The target's input sets, made by the reference on this runner's device once."""
        try:  # the reference runs in the framework: its version may change what it gives
            version = importlib.metadata.version(self.framework)
        except importlib.metadata.PackageNotFoundError:
            version = None
        return input_sets(
            target.name,
            [
                *source_key(make["reference"], target.root),
                {k: make[k] for k in ("framework", "device", "kind", "workloads")},
                version,
            ],
            make,
            [sys.executable, "-m", "eat.runners.py_harness", "prepare"],
            self._env(),
            self._limits(cfg),
        )

    def _limits(self, cfg: EvalConfig) -> sandbox.Limits:
        limits = sandbox.Limits(
            wall_s=cfg.timeout_s,
            cpu_s=cfg.cpu_s,
            address_space_bytes=cfg.memory_mb << 20,
            max_output_chars=64_000,
        )
        if self.device_kind == "cuda":
            # CUDA reserves far more address space than it uses: RLIMIT_AS would fail its start.
            limits.address_space_bytes, limits.data_bytes = None, cfg.memory_mb << 20
        return limits

    @staticmethod
    def _env() -> dict[str, str]:
        return {
            var: os.environ[var]
            for var in ("CUDA_VISIBLE_DEVICES", "HIP_VISIBLE_DEVICES", "ROCR_VISIBLE_DEVICES")
            if var in os.environ
        }

    def _harness(
        self, job: PythonJob, tmp: Path, cfg: EvalConfig
    ) -> tuple[dict, sandbox.Completed]:
        extra = {"PYTHONPATH": eat_pythonpath()} | self._env() | STEADY_MALLOC
        run = sandbox.run(
            [sys.executable, "-m", "eat.runners.py_harness"],
            cwd=tmp,
            env=sandbox.clean_env(tmp, extra),
            limits=grown(self._limits(cfg), job["sets"], cfg, job["mode"]),
            stdin=json.dumps(job),
        )
        run.stderr = sandbox.truncate(run.stderr, 4000)
        return read_result(job, run, cfg), run
