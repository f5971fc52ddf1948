"""What this machine has, and its measured single-core peaks (cached once per machine).

Peaks are what the roofline fractions in reports divide by: FLOP/s from a compiled FMA loop with
independent accumulators, bandwidth from a STREAM-style triad over arrays far larger than the
last-level cache. Both run pinned to the core the CPU runner times on.
"""

from __future__ import annotations

import importlib.util
import json
import os
import platform
import shutil
import socket
import subprocess
import tempfile
import time
from pathlib import Path

import numpy as np

from eat.cache import doctor_file
from eat.runners.base import Peaks
from eat.runners.cpu import compiler_version, cpu_model

_FMA = r"""
#include <stdio.h>
#include <time.h>
typedef float v16 __attribute__((vector_size(64)));
static double now(void) { struct timespec t; clock_gettime(CLOCK_MONOTONIC, &t);
                          return t.tv_sec + t.tv_nsec * 1e-9; }
int main(void) {
    enum { ACC = 12 };
    v16 acc[ACC], mul, add;
    for (int l = 0; l < 16; l++) { mul[l] = 0.999999f; add[l] = 1e-7f; }
    double best = 0;
    for (int trial = 0; trial < 5; trial++) {
        for (int i = 0; i < ACC; i++) for (int l = 0; l < 16; l++) acc[i][l] = i + l * 1e-3f;
        long iters = 20000000;
        double t0 = now();
        for (long n = 0; n < iters; n++)
            for (int i = 0; i < ACC; i++) acc[i] = acc[i] * mul + add;
        double dt = now() - t0, sum = 0;
        for (int i = 0; i < ACC; i++) for (int l = 0; l < 16; l++) sum += acc[i][l];
        double gflops = 2.0 * 16 * ACC * iters / dt / 1e9;
        if (gflops > best && sum == sum) best = gflops;
    }
    printf("%f\n", best);
    return 0;
}
"""

_TRIAD = r"""
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
static double now(void) { struct timespec t; clock_gettime(CLOCK_MONOTONIC, &t);
                          return t.tv_sec + t.tv_nsec * 1e-9; }
int main(void) {
    long n = 1L << 24;
    float *a = malloc(n * 4), *b = malloc(n * 4), *c = malloc(n * 4);
    for (long i = 0; i < n; i++) { a[i] = 0; b[i] = 1; c[i] = 2; }
    double best = 0;
    for (int trial = 0; trial < 8; trial++) {
        double t0 = now();
        for (long i = 0; i < n; i++) a[i] = b[i] + 0.5f * c[i];
        double gbps = 3.0 * 4 * n / (now() - t0) / 1e9;
        if (gbps > best) best = gbps;
    }
    printf("%f %f\n", best, a[n / 2]);
    return 0;
}
"""


def _run_c(source: str, cpu: int, compiler: str = "cc") -> float:
    with tempfile.TemporaryDirectory(prefix="eat-doctor-") as tmp:
        src, exe = Path(tmp) / "bench.c", Path(tmp) / "bench"
        src.write_text(source)
        subprocess.run([compiler, "-O3", "-march=native", "-o", str(exe), str(src)], check=True,
                       capture_output=True, timeout=120)
        out = subprocess.run([str(exe)], check=True, capture_output=True, text=True, timeout=120,
                             preexec_fn=lambda: os.sched_setaffinity(0, {cpu}))
        return float(out.stdout.split()[0])


def measure_peaks(cpu: int | None = None) -> Peaks:
    """Measure single-core FLOP/s and memory bandwidth on `cpu` (default: the last one)."""
    cpu = sorted(os.sched_getaffinity(0))[-1] if cpu is None else cpu
    return Peaks(gflops=_run_c(_FMA, cpu), gbps=_run_c(_TRIAD, cpu))


def machine_key() -> str:
    return f"{socket.gethostname()}|{cpu_model()}|{os.cpu_count()}"


def load_peaks(runner: str = "cpu", measure: bool = True, refresh: bool = False) -> Peaks | None:
    """Cached peaks of `runner`'s device here; measured and cached when missing (if `measure`).

    The Python harness on the CPU times with one thread on one core, as the C harness does, so
    both use the single-core peaks. Devices eat cannot measure here have none.
    """
    if runner != "cpu":
        return None
    file = doctor_file()
    if file.exists() and not refresh:
        try:
            data = json.loads(file.read_text())
            if data.get("machine") == machine_key():
                return Peaks(**data["peaks"])
        except (ValueError, KeyError, TypeError):
            pass  # a damaged cache is measured again
    if not measure or not shutil.which("cc"):
        return None
    peaks = measure_peaks()
    tmp = file.with_suffix(".tmp")
    tmp.write_text(json.dumps({"machine": machine_key(), "measured_at": time.time(),
                               "peaks": peaks.model_dump()}, indent=2))
    os.replace(tmp, file)
    return peaks


def _version(cmd: list[str]) -> str | None:
    if not shutil.which(cmd[0]):
        return None
    try:
        out = subprocess.run(cmd, capture_output=True, text=True, timeout=30)
        lines = (out.stdout or out.stderr).strip().splitlines()
        return lines[-1].strip() if lines else "present"
    except (OSError, subprocess.TimeoutExpired):
        return "present, but failed to run"


def machine_report(refresh: bool = False) -> dict:
    """Everything `eat doctor` prints: hardware, toolchains, optional extras and peaks."""
    blas = "unknown"
    try:
        cfg = np.show_config(mode="dicts")
        blas = cfg["Build Dependencies"]["blas"]["name"]
    except Exception:  # numpy's config layout is not a stable API
        pass
    gpu = _version(["nvidia-smi", "--query-gpu=name,driver_version", "--format=csv,noheader"])
    peaks = load_peaks(refresh=refresh)
    return {
        "python": platform.python_version(),
        "platform": platform.platform(),
        "cpu": cpu_model(),
        "cores": os.cpu_count(),
        "compiler": compiler_version("cc") if shutil.which("cc") else None,
        "numpy": f"{np.__version__} ({blas})",
        "nvcc": _version(["nvcc", "--version"]),
        "nvidia_gpu": gpu,
        "hipcc": _version(["hipcc", "--version"]),
        "extras": {name: importlib.util.find_spec(name) is not None
                   for name in ("torch", "triton", "ray", "mlx")},
        "peak_gflops_1core": peaks and round(peaks.gflops, 1),
        "peak_gbps_1core": peaks and round(peaks.gbps, 1),
        "cache": str(doctor_file()),
    }
