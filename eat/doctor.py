"""What this machine has, and its measured peaks (cached once per machine, and per GPU).

Peaks are what the roofline fractions in reports divide by: FLOP/s from a compiled FMA loop with
independent accumulators, bandwidth from a STREAM-style triad over arrays far larger than the
last-level cache. On the CPU both run pinned to the core the CPU runner times on. On an NVIDIA
GPU the same two kernels, compiled with nvcc, run across every multiprocessor of CUDA device 0
(the one the GPU runner times on by default).
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import os
import platform
import shutil
import socket
import subprocess
import time
from pathlib import Path

import numpy as np

from eat.agents.fence import holds as agent_fence
from eat.cache import device_lock, doctor_file
from eat.runners.base import Peaks
from eat.runners.cpu import cpu_model
from eat.runners.native import compiler_version
from eat.runners.sandbox import containment, scratch

_FMA = r"""
#include <stdio.h>
#include <time.h>
/* The widest vector the core has: a wider GCC vector is split into pieces kept in memory. */
#if defined(__AVX512F__)
#define LANES 16
#elif defined(__AVX__)
#define LANES 8
#else
#define LANES 4
#endif
typedef float vf __attribute__((vector_size(4 * LANES)));
static double now(void) { struct timespec t; clock_gettime(CLOCK_MONOTONIC, &t);
                          return t.tv_sec + t.tv_nsec * 1e-9; }
int main(void) {
    enum { ACC = 12 };
    vf acc[ACC], mul, add;
    for (int l = 0; l < LANES; l++) { mul[l] = 0.999999f; add[l] = 1e-7f; }
    double best = 0;
    for (int trial = 0; trial < 10; trial++) {
        for (int i = 0; i < ACC; i++) for (int l = 0; l < LANES; l++) acc[i][l] = i + l * 1e-3f;
        long iters = 40000000;
        double t0 = now();
        for (long n = 0; n < iters; n++)
            for (int i = 0; i < ACC; i++) acc[i] = acc[i] * mul + add;
        double dt = now() - t0, sum = 0;
        for (int i = 0; i < ACC; i++) for (int l = 0; l < LANES; l++) sum += acc[i][l];
        double gflops = 2.0 * LANES * ACC * iters / dt / 1e9;
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


# Triad over three arrays of max(256 MiB, 8x L2) each, and an FMA chain with 16 independent
# accumulators per thread, both with one full wave of blocks on every multiprocessor; each figure
# is the best of several timed batches of launches (CUDA events).
GPU_PEAKS_CU = r"""
#include <cstdio>
#include <cuda_runtime.h>

#define CHECK(call)                                                                  \
    do {                                                                             \
        cudaError_t err = (call);                                                    \
        if (err != cudaSuccess) {                                                    \
            fprintf(stderr, "%s: %s\n", #call, cudaGetErrorString(err));             \
            return 1;                                                                \
        }                                                                            \
    } while (0)

__global__ void triad(float4 *a, const float4 *__restrict__ b, const float4 *__restrict__ c,
                      size_t n, float s)
{
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x) {
        const float4 x = b[i], y = c[i];
        a[i] = make_float4(x.x + s * y.x, x.y + s * y.y, x.z + s * y.z, x.w + s * y.w);
    }
}

enum { ACC = 16 };

__global__ void fma_chain(float *out, int iters, float mul, float add)
{
    float acc[ACC];
#pragma unroll
    for (int i = 0; i < ACC; i++)
        acc[i] = threadIdx.x + i;
    for (int n = 0; n < iters; n++)
#pragma unroll
        for (int i = 0; i < ACC; i++)
            acc[i] = fmaf(acc[i], mul, add);
    float sum = 0;
#pragma unroll
    for (int i = 0; i < ACC; i++)
        sum += acc[i];
    out[blockIdx.x * blockDim.x + threadIdx.x] = sum; /* keeps the chains alive */
}

/* Best milliseconds per launch over `trials` batches of `reps` launches. */
template <class Launch>
static float best_ms(Launch launch, int trials, int reps)
{
    cudaEvent_t t0, t1;
    cudaEventCreate(&t0);
    cudaEventCreate(&t1);
    launch(); /* warm-up: first-launch costs, clocks ramping up */
    float best = 1e30f;
    for (int t = 0; t < trials; t++) {
        cudaEventRecord(t0);
        for (int r = 0; r < reps; r++)
            launch();
        cudaEventRecord(t1);
        cudaEventSynchronize(t1);
        float ms = 0;
        cudaEventElapsedTime(&ms, t0, t1);
        if (ms / reps < best)
            best = ms / reps;
    }
    cudaEventDestroy(t0);
    cudaEventDestroy(t1);
    return best;
}

int main()
{
    cudaDeviceProp p;
    CHECK(cudaGetDeviceProperties(&p, 0));
    const int threads = 256;
    const int wave = p.multiProcessorCount * (p.maxThreadsPerMultiProcessor / threads);

    size_t free_bytes, total_bytes;
    CHECK(cudaMemGetInfo(&free_bytes, &total_bytes));
    size_t bytes = (size_t)8 * p.l2CacheSize;
    if (bytes < ((size_t)256 << 20))
        bytes = (size_t)256 << 20;
    if (bytes > free_bytes / 4)
        bytes = free_bytes / 4 / 16 * 16;
    const size_t n = bytes / sizeof(float4);
    float4 *a, *b, *c;
    CHECK(cudaMalloc(&a, bytes));
    CHECK(cudaMalloc(&b, bytes));
    CHECK(cudaMalloc(&c, bytes));
    CHECK(cudaMemset(b, 0, bytes));
    CHECK(cudaMemset(c, 0, bytes));
    const float triad_ms = best_ms([&] { triad<<<wave, threads>>>(a, b, c, n, 0.5f); }, 10, 5);
    CHECK(cudaGetLastError());

    const int iters = 16384, blocks = 2 * wave;
    float *out;
    CHECK(cudaMalloc(&out, sizeof(float) * blocks * threads));
    const float fma_ms =
        best_ms([&] { fma_chain<<<blocks, threads>>>(out, iters, 0.999999f, 1e-7f); }, 5, 2);
    CHECK(cudaGetLastError());
    CHECK(cudaDeviceSynchronize());

    printf("device %s\n", p.name);
    printf("gbps %.1f\n", 3.0 * bytes / (triad_ms * 1e-3) / 1e9);
    printf("gflops %.1f\n", 2.0 * ACC * iters * (double)blocks * threads / (fma_ms * 1e-3) / 1e9);
    return 0;
}
"""
_SMI_TIMEOUT_S = 30.0
_NVCC_TIMEOUT_S = 300.0
_GPU_RUN_TIMEOUT_S = 120.0


def _run_c(source: str, cpu: int, compiler: str = "cc") -> float:
    with scratch("doctor") as tmp:
        src, exe = Path(tmp) / "bench.c", Path(tmp) / "bench"
        src.write_text(source)
        subprocess.run(
            [compiler, "-O3", "-march=native", "-o", str(exe), str(src)],
            check=True,
            capture_output=True,
            timeout=120,
        )
        out = subprocess.run(
            [str(exe)],
            check=True,
            capture_output=True,
            text=True,
            timeout=120,
            preexec_fn=lambda: os.sched_setaffinity(0, {cpu}),
        )
        return float(out.stdout.split()[0])


def measure_peaks(cpu: int | None = None) -> Peaks:
    """Measure single-core FLOP/s and memory bandwidth on `cpu` (default: the last one)."""
    cpu = sorted(os.sched_getaffinity(0))[-1] if cpu is None else cpu
    return Peaks(gflops=_run_c(_FMA, cpu), gbps=_run_c(_TRIAD, cpu))


def machine_key() -> str:
    return f"{socket.gethostname()}|{cpu_model()}|{os.cpu_count()}"


def _cpu_program() -> str:
    """Digest of the CPU peak programs: peaks cached by another version are measured again."""
    return hashlib.sha256((_FMA + _TRIAD).encode()).hexdigest()[:12]


def _read_cache() -> dict:
    try:
        data = json.loads(doctor_file().read_text())
    except (OSError, ValueError):
        return {}  # missing or damaged: measured again
    return data if isinstance(data, dict) else {}


def _write_cache(fields: dict) -> None:
    """Merge `fields` into the cache: the CPU's and the GPU's entries live in one file."""
    file = doctor_file()
    tmp = file.with_suffix(f".{os.getpid()}.tmp")
    tmp.write_text(json.dumps(_read_cache() | fields, indent=2))
    os.replace(tmp, file)


def _cached_peaks(entry: object) -> Peaks | None:
    try:
        return Peaks(**entry["peaks"])  # type: ignore[index]
    except (KeyError, TypeError, ValueError):
        return None


def load_peaks(runner: str = "cpu", measure: bool = True, refresh: bool = False) -> Peaks | None:
    """Cached peaks of `runner`'s device here; measured and cached when missing (if `measure`).

    The Python harness on the CPU times with one thread on one core, as the C harness does, so
    both use the single-core peaks. "cuda" has the peaks of CUDA device 0, or None without an
    NVIDIA GPU and nvcc. Devices eat cannot measure (ROCm, MLX) have none. Never raises.
    """
    if runner == "cuda":
        return gpu_peaks(measure, refresh)[0]
    if runner != "cpu":
        return None
    data = _read_cache()
    if (
        data.get("machine") == machine_key()
        and data.get("program") == _cpu_program()
        and not refresh
    ):
        if peaks := _cached_peaks(data):
            return peaks
    if not measure or not shutil.which("cc"):
        return None
    peaks = measure_peaks()
    _write_cache(
        {
            "machine": machine_key(),
            "program": _cpu_program(),
            "measured_at": time.time(),
            "peaks": peaks.model_dump(),
        }
    )
    return peaks


def _last_line(done: subprocess.CompletedProcess) -> str:
    lines = (done.stderr.strip() or done.stdout.strip()).splitlines()
    return lines[-1][:300] if lines else f"exit code {done.returncode}"


def nvidia_gpus(timeout_s: float = _SMI_TIMEOUT_S) -> tuple[list[dict], str | None]:
    """The NVIDIA GPUs nvidia-smi lists ({name, driver, uuid} each), or why there are none
    (one that has not answered within `timeout_s` seconds is given up on)."""
    if not shutil.which("nvidia-smi"):
        return [], "nvidia-smi not found on PATH"
    try:
        done = subprocess.run(
            ["nvidia-smi", "--query-gpu=name,driver_version,uuid", "--format=csv,noheader"],
            capture_output=True,
            text=True,
            timeout=timeout_s,
        )
    except subprocess.TimeoutExpired:
        return [], f"nvidia-smi did not answer within {timeout_s:g} s"
    except OSError as e:
        return [], f"nvidia-smi did not run: {e}"
    # rsplit: a GPU's name might hold a comma, its driver version and UUID do not.
    gpus = [
        dict(zip(("name", "driver", "uuid"), (f.strip() for f in line.rsplit(",", 2))))
        for line in done.stdout.splitlines()
        if line.count(",") >= 2
    ]
    if done.returncode or not gpus:
        return [], f"nvidia-smi lists no GPU ({_last_line(done)})"
    return gpus, None


def gpu_key(gpus: list[dict]) -> str:
    """What the GPU peaks hold for: this machine, its driver, its GPUs, and which are visible
    (CUDA device 0 is the first visible one); any change measures again."""
    visible = os.environ.get("CUDA_VISIBLE_DEVICES", "")
    return "|".join(
        [machine_key(), gpus[0]["driver"], *(g["uuid"] for g in gpus), f"visible={visible}"]
    )


def parse_gpu_peaks(stdout: str) -> tuple[str, Peaks]:
    """(device name, peaks) from the output of GPU_PEAKS_CU; raises RuntimeError."""
    fields = dict(line.split(" ", 1) for line in stdout.splitlines() if " " in line)
    try:
        return fields["device"].strip(), Peaks(
            gflops=float(fields["gflops"]), gbps=float(fields["gbps"])
        )
    except (KeyError, ValueError):
        raise RuntimeError(f"unexpected output of the peak program: {stdout[-300:]!r}") from None


def cuda_arch() -> str | None:
    """The arch the GPU runner builds for on CUDA device 0 (from its probe), or None."""
    from eat.runners.gpu import GpuRunner

    return GpuRunner("cuda").device_arch()


def measure_gpu_peaks() -> tuple[str, Peaks]:
    """Build GPU_PEAKS_CU with nvcc and run it on CUDA device 0: (device name, peaks).

    Raises RuntimeError (or subprocess.TimeoutExpired) saying why it could not.
    """
    with scratch("doctor") as tmp:
        src, exe = Path(tmp) / "peaks.cu", Path(tmp) / "peaks"
        src.write_text(GPU_PEAKS_CU)
        # The device's arch as the GPU runner finds it; else `native` (a visible GPU and nvcc
        # >= 11.5); else nvcc's default target, whose PTX the driver compiles at load time.
        device = cuda_arch()
        for arch in ([[f"-arch={device}"]] if device else []) + [["-arch=native"], []]:
            built = subprocess.run(
                ["nvcc", "-O3", *arch, "-o", str(exe), str(src)],
                capture_output=True,
                text=True,
                timeout=_NVCC_TIMEOUT_S,
            )
            if built.returncode == 0:
                break
        else:
            raise RuntimeError(f"nvcc could not build the peak program: {_last_line(built)}")
        # The GPU runner's timing slot for device 0 (GpuRunner.lock_name): no candidate is timed
        # while the peak kernels saturate the GPU.
        with device_lock("cuda0"):
            ran = subprocess.run(
                [str(exe)], capture_output=True, text=True, timeout=_GPU_RUN_TIMEOUT_S
            )
    if ran.returncode:
        raise RuntimeError(f"the peak program failed: {_last_line(ran)}")
    return parse_gpu_peaks(ran.stdout)


def gpu_peaks(measure: bool = True, refresh: bool = False) -> tuple[Peaks | None, str | None]:
    """Peaks of CUDA device 0 (cached per GPU, see gpu_key), or None and why. Never raises;
    every command it runs has a timeout."""
    gpus, why = nvidia_gpus()
    if not gpus:
        return None, f"no NVIDIA GPU: {why}"
    key = gpu_key(gpus)
    entry = _read_cache().get("cuda")
    if isinstance(entry, dict) and entry.get("key") == key and not refresh:
        if peaks := _cached_peaks(entry):
            return peaks, None
    if not measure:
        return None, "not measured yet (eat doctor measures them)"
    if not shutil.which("nvcc"):
        return None, "nvcc not found on PATH: cannot build the peak program"
    try:
        device, peaks = measure_gpu_peaks()
    except subprocess.TimeoutExpired as e:
        return None, f"{Path(str(e.cmd[0])).name} did not finish within {e.timeout:g} s"
    except (RuntimeError, OSError) as e:
        return None, str(e)
    _write_cache(
        {
            "cuda": {
                "key": key,
                "device": device,
                "measured_at": time.time(),
                "peaks": peaks.model_dump(),
            }
        }
    )
    return peaks, None


def _version(
    cmd: list[str], env: dict[str, str] | None = None, mark: str | None = None
) -> str | None:
    """The tool's version line: the first with `mark` in it, else its last line."""
    if not shutil.which(cmd[0]):
        return None
    try:
        out = subprocess.run(
            cmd, capture_output=True, text=True, timeout=30, env=os.environ | (env or {})
        )
        lines = (out.stdout or out.stderr).strip().splitlines()
        marked = [line for line in lines if mark and mark in line]
        return (marked or lines or ["present"])[0 if marked else -1].strip()
    except (OSError, subprocess.TimeoutExpired):
        return "present, but failed to run"


def _round1(value: float | None) -> float | None:
    return None if value is None else round(value, 1)


def machine_report(refresh: bool = False) -> dict:
    """Everything `eat doctor` prints: hardware, toolchains, optional extras and peaks."""
    blas = "unknown"
    try:
        cfg = np.show_config(mode="dicts")
        blas = cfg["Build Dependencies"]["blas"]["name"]
    except Exception:  # numpy's config layout is not a stable API
        pass
    gpus, _ = nvidia_gpus()
    peaks = load_peaks(refresh=refresh)
    gpu, gpu_why = gpu_peaks(refresh=refresh)
    return {
        "python": platform.python_version(),
        "platform": platform.platform(),
        "cpu": cpu_model(),
        "cores": os.cpu_count(),
        "compiler": compiler_version("cc") if shutil.which("cc") else None,
        "numpy": f"{np.__version__} ({blas})",
        "nvcc": _version(["nvcc", "--version"]),
        "nvidia_gpu": ", ".join(g["name"] for g in gpus) or None,
        "gpu_driver": gpus[0]["driver"] if gpus else None,
        "gpu_arch": cuda_arch() if gpus and shutil.which("nvcc") else None,
        # hipcc builds for NVIDIA (and prints nvcc's version) when it finds nvcc, unless told.
        "hipcc": _version(["hipcc", "--version"], {"HIP_PLATFORM": "amd"}, "HIP version"),
        "extras": {
            name: importlib.util.find_spec(name) is not None
            for name in ("torch", "triton", "ray", "mlx")
        },
        "peak_gflops_1core": _round1(peaks.gflops) if peaks else None,
        "peak_gbps_1core": _round1(peaks.gbps) if peaks else None,
        "peak_gflops_gpu": _round1(gpu.gflops) if gpu else None,
        "peak_gbps_gpu": _round1(gpu.gbps) if gpu else None,
        "gpu_peaks_note": gpu_why,
        "containment": containment(),
        "agents": agent_fence(),
        "cache": str(doctor_file()),
    }
