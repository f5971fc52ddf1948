"""The GPU runner (eat/runners/gpu.py, gpu_harness.py, gpurt.py) on a machine without a GPU.

What is real here: the runner's code, its contained processes, the seccomp lock-down, the probe
subprocess, nvcc (where installed: compile-only, real CUDA sources), the real libcudart's answer
when there is no driver, and the CLI.

What is FAKE: the device. tests/fake_gpu/fakert.c implements the CUDA runtime calls eat binds on
host memory (events read the host clock; cudaLaunchHostFunc runs on a thread that
cudaDeviceSynchronize joins), and tests/fake_gpu/fake-gpucc stands in for nvcc/hipcc by calling
g++, so candidates here are plain C++ loops over "device" pointers that are host memory. These
tests prove the pipeline (copies, poison, synchronize, events, flush, statuses, speedup), not
anything about a GPU; the conformance kit `cuda` (real kernels) runs where a GPU is.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import fake_gpu
import numpy as np
import pytest

from eat.errors import RunnerUnavailable
from eat.runners import gpu
from eat.runners.gpu import GpuRunner
from eat.runners.gpurt import ENV, GpuError, Runtime, describe
from eat.target import Build, EvalConfig, geomean, load_target

ROOT = Path(__file__).resolve().parent.parent
FAKE_KIT = ROOT / "tests" / "conformance" / "kits" / "cuda_fake"
CUDA_KIT = ROOT / "tests" / "conformance" / "kits" / "cuda"
QUICK = EvalConfig(seeds=2, warmup=1, min_repeats=3, max_repeats=5, budget_s=0.05, timeout_s=20)
needs_nvcc = pytest.mark.skipif(not shutil.which("nvcc"), reason="nvcc is not installed here")


@pytest.fixture(scope="module")
def fake_rt() -> str:
    return str(fake_gpu.build_runtime("cuda"))


@pytest.fixture(scope="module")
def runner(fake_rt) -> GpuRunner:
    return GpuRunner("cuda", runtime=fake_rt)


@pytest.fixture(scope="module")
def target():
    return load_target(FAKE_KIT)


def _kit(name: str) -> str:
    return (FAKE_KIT / f"{name}.cu").read_text()


# -- the runtime binding ------------------------------------------------------------------------


def test_binding_moves_memory_and_times_events(fake_rt):
    rt = Runtime("cuda", fake_rt)
    assert rt.device_count() == 1 and rt.name() == "eat fake GPU (host memory)"
    assert rt.l2_bytes() == 1 << 20 and rt.versions() == (13000, 13000)
    host = np.arange(12, dtype=np.float32)
    ptr = rt.malloc(host.nbytes)
    rt.to_device(ptr, host)
    back = np.zeros_like(host)
    rt.to_host(back, ptr)
    assert np.array_equal(back, host)
    rt.memset(ptr, 0xFF, host.nbytes)  # the poison: all ones is a NaN
    rt.to_host(back, ptr)
    assert np.isnan(back).all()
    start, end = rt.event(), rt.event()
    rt.record(start)
    time.sleep(0.01)
    rt.record(end)
    assert rt.elapsed_s(start, end) > 0.009  # the events bracket the sleep
    rt.free(ptr)


def test_binding_errors_carry_the_runtime_string(fake_rt):
    with pytest.raises(GpuError, match=r"cudaSetDevice failed: invalid device ordinal \(error 101"):
        Runtime("cuda", fake_rt).set_device(3)
    with pytest.raises(GpuError, match="cannot load the CUDA runtime: /no/such/libcudart.so"):
        Runtime("cuda", "/no/such/libcudart.so")


def test_env_var_picks_the_runtime(fake_rt, monkeypatch):
    monkeypatch.setenv(ENV, fake_rt)
    assert Runtime("cuda").path == os.path.realpath(fake_rt)
    assert GpuRunner("cuda").runtime == fake_rt


def test_real_cuda_runtime_without_a_gpu_says_why():
    info = describe("cuda")
    if "reason" not in info:
        pytest.skip(f"this machine has a CUDA device: {info['name']}")
    assert info["reason"].startswith(
        ("no CUDA device: cudaGetDeviceCount failed: ", "cannot load the CUDA runtime: ")
    )


# -- unavailable() and the probe ----------------------------------------------------------------


def test_unavailable_names_a_missing_compiler(fake_rt, target):
    no_cc = target.model_copy(update={"build": Build(compiler="no-such-nvcc")})
    assert (
        GpuRunner("cuda", runtime=fake_rt).unavailable(no_cc)
        == "CUDA compiler 'no-such-nvcc' not found on PATH"
    )


def test_unavailable_names_a_missing_runtime_and_a_missing_device(target):
    missing = GpuRunner("cuda", runtime="/no/such/libcudart.so").unavailable(target)
    assert missing.startswith("cannot load the CUDA runtime: /no/such/libcudart.so")
    no_device = GpuRunner("cuda", runtime=str(fake_gpu.build_runtime("no_device")))
    assert no_device.unavailable(target) == (
        "no CUDA device: cudaGetDeviceCount failed: no CUDA-capable device is detected (error 100)"
    )
    assert no_device.device == "cuda:0 (unavailable)"


def test_probe_runs_once_per_process_and_setting(fake_rt, target):
    gpu.probe.cache_clear()
    first, second = GpuRunner("cuda", runtime=fake_rt), GpuRunner("cuda", runtime=fake_rt)
    assert first.unavailable(target) is None and second.unavailable(target) is None
    assert second.device == "cuda:0 eat fake GPU (host memory)"
    assert gpu.probe.cache_info().misses == 1
    GpuRunner("cuda", runtime=fake_rt, device=1).unavailable(target)  # another GPU: its own probe
    assert gpu.probe.cache_info().misses == 2


def test_evaluate_without_a_device_raises_once_the_candidate_is_built(target):
    no_device = GpuRunner("cuda", runtime=str(fake_gpu.build_runtime("no_device")))
    with pytest.raises(RunnerUnavailable, match="no CUDA-capable device"):
        no_device.evaluate(target, _kit("baseline"), config=QUICK)


# -- build: command line, flags, refusals -------------------------------------------------------


def test_compile_commands(fake_rt, target):
    src = Path("/w/candidate.cu")
    cuda = target.model_copy(update={"build": Build(compiler="nvcc", arch="sm_90a")})
    assert GpuRunner("cuda", runtime=fake_rt).compile_command(cuda, src, ["-O3"]) == [
        "nvcc",
        "-shared",
        "-Xcompiler",
        "-fPIC",
        "-cudart",
        "shared",
        "-arch=sm_90a",
        "-O3",
        "-o",
        "/w/candidate.so",
        "/w/candidate.cu",
    ]
    rocm = target.model_copy(update={"build": Build(arch="gfx942")})
    assert GpuRunner("rocm").compile_command(rocm, src.with_suffix(".hip"), []) == [
        "hipcc",
        "-shared",
        "-fPIC",
        "--offload-arch=gfx942",
        "-o",
        "/w/candidate.so",
        "/w/candidate.hip",
    ]


# -- the arch: the device's (from the probe), unless the target names one ------------------------


def test_probe_reports_what_the_arch_comes_from(fake_rt):
    assert Runtime("cuda", fake_rt).compute_capability() == (9, 0)
    assert describe("cuda", fake_rt)["compute_capability"] == [9, 0]
    hip = str(fake_gpu.build_runtime("hip"))
    assert Runtime("rocm", hip).gcn_arch() == "gfx942:sramecc+:xnack-"
    assert describe("rocm", hip)["gcn_arch"] == "gfx942:sramecc+:xnack-"


NVCC13 = [75, 80, 86, 87, 88, 89, 90, 100, 103, 110, 120, 121]  # its --list-gpu-arch


@pytest.mark.parametrize(
    "cc, accepted, known, arch",
    [
        ((9, 0), {"sm_90a", "sm_90"}, NVCC13, "sm_90a"),  # H100, H200: wgmma and TMA
        ((10, 0), {"sm_100a", "sm_100"}, NVCC13, "sm_100a"),  # B200
        ((9, 0), {"sm_90"}, NVCC13, "sm_90"),  # an nvcc without arch-specific targets
        ((8, 6), {"sm_86", "sm_86a"}, NVCC13, "sm_86"),  # no `a` before 9.0
        ((13, 0), set(), NVCC13, "compute_121"),  # newer than nvcc: PTX, JIT at load
        ((7, 0), set(), NVCC13, "sm_70"),  # older than nvcc: nvcc says so
        ((9, 0), set(), [], "sm_90"),  # a compiler that cannot tell
    ],
)
def test_cuda_arch_from_the_compute_capability(cc, accepted, known, arch):
    assert gpu.cuda_arch(*cc, accepts=accepted.__contains__, known=lambda: known) == arch


def test_arch_is_the_devices_unless_the_target_names_one(fake_rt, target):
    runner = GpuRunner("cuda", runtime=fake_rt)
    assert runner.arch(target) == "sm_90a"  # fake-gpucc takes every arch, as it ignores them
    assert "-arch=sm_90a" in runner.compile_command(target, Path("/w/c.cu"), [])
    named = target.model_copy(update={"build": target.build.model_copy(update={"arch": "sm_80"})})
    assert runner.arch(named) == "sm_80"
    assert "-arch=sm_80" in runner.compile_command(named, Path("/w/c.cu"), [])
    hip = GpuRunner("rocm", runtime=str(fake_gpu.build_runtime("hip")))
    assert hip.arch(target) == "gfx942"  # without feature flags: code for either xnack mode
    assert "--offload-arch=gfx942" in hip.compile_command(target, Path("/w/c.hip"), [])


def test_without_a_device_the_build_asks_for_native(target):
    no_device = GpuRunner("cuda", runtime=str(fake_gpu.build_runtime("no_device")))
    assert no_device.arch(target) is None
    assert "-arch=native" in no_device.compile_command(target, Path("/w/c.cu"), [])


def test_the_arch_is_in_the_evaluation(runner, target):
    """Even a candidate that does not compile says what it was built for; the target's arch
    wins over the device's."""
    ev = runner.evaluate(target, _kit("syntax_error"), config=QUICK)
    assert ev.status == "compile_error" and ev.arch == "sm_90a"
    named = target.model_copy(update={"build": target.build.model_copy(update={"arch": "sm_80"})})
    ev = runner.evaluate(named, _kit("syntax_error"), config=QUICK)
    assert json.loads(ev.model_dump_json())["arch"] == "sm_80"


@needs_nvcc
def test_real_nvcc_knows_the_arch_specific_targets(fake_rt, target):
    """nvcc 12+ builds for sm_90a; nobody builds for sm_91a; the runner asks, once per arch."""
    assert gpu.nvcc_accepts("nvcc", "sm_90a") and gpu.nvcc_accepts("nvcc", "sm_90")
    assert not gpu.nvcc_accepts("nvcc", "sm_91a")
    assert 90 in gpu.nvcc_virtual_archs("nvcc")
    nvcc = target.model_copy(update={"build": target.build.model_copy(update={"compiler": "nvcc"})})
    assert GpuRunner("cuda", runtime=fake_rt).arch(nvcc) == "sm_90a"
    hits = gpu.nvcc_accepts.cache_info().hits
    GpuRunner("cuda", runtime=fake_rt).arch(nvcc)
    assert gpu.nvcc_accepts.cache_info().hits == hits + 1


@pytest.mark.parametrize(
    "name, flags, refused",
    [
        (
            "cuda",
            "-O3 -use_fast_math -maxrregcount=64 -Xptxas=-v,-O3 -lineinfo -std=c++17 -DT=32",
            None,
        ),
        ("cuda", "-O3 --ftz=true -Xcompiler=-march=native --expt-relaxed-constexpr", None),
        ("cuda", "-O3 -arch=sm_80", "-arch=sm_80"),  # the architecture is the target's
        ("cuda", "--compiler-bindir=/tmp/evil", "--compiler-bindir=/tmp/evil"),
        ("cuda", "-Xcompiler=-fplugin=/tmp/x.so", "-Xcompiler=-fplugin=/tmp/x.so"),
        ("cuda", "-I/etc", "-I/etc"),
        ("cuda", "-Xptxas -v", "-Xptxas"),  # values go with '='
        ("rocm", "-O3 -ffast-math -munsafe-fp-atomics -std=c++17", None),
        ("rocm", "-fplugin=/tmp/x.so", "-fplugin=/tmp/x.so"),
        ("rocm", "--offload-arch=gfx90a", "--offload-arch=gfx90a"),
    ],
)
def test_candidate_flags(name, flags, refused):
    got, why = GpuRunner(name).flags(f"// eat:cflags {flags}\n", "-O2")
    assert got == flags.split()
    assert why == (refused and f"compiler flag {refused!r} is not allowed")


def test_refusals_come_before_any_build(runner, target):
    ev = runner.evaluate(target, "// eat:cflags -O3 --compiler-bindir=/tmp\n" + _kit("baseline"))
    assert ev.status == "rejected" and "--compiler-bindir=/tmp" in ev.message
    ev = runner.evaluate(target, '#include "/etc/passwd"\n' + _kit("baseline"))
    assert ev.status == "rejected" and "outside" in ev.message
    assert "compile_s" not in ev.durations


@needs_nvcc
def test_real_nvcc_builds_the_kit_baseline_and_reports_errors(tmp_path):
    runner, kit = GpuRunner("cuda"), load_target(CUDA_KIT)
    src = tmp_path / "candidate.cu"
    src.write_text(kit.baseline_source())
    built = runner._compile(kit, src, ["-O2"], QUICK)
    assert built.returncode == 0, built.stderr
    assert src.with_suffix(".so").stat().st_size > 0
    ev = runner.evaluate(kit, (CUDA_KIT / "syntax_error.cu").read_text(), workdir=tmp_path)
    assert ev.status == "compile_error" and ev.speedup is None
    assert 'identifier "accumulator" is undefined' in ev.message + ev.compile_log


KEYED = """
#include <cuda_runtime.h>
#define TILE {tile}
#define HOST_STEP {step}
__global__ void scale(float *x, int n) {{
    int i = blockIdx.x * TILE + threadIdx.x;
#ifdef __CUDA_ARCH__
    if (i < n) x[i] *= {device};
#endif
}}
extern "C" void run(float *x, int n) {{
#ifndef __CUDA_ARCH__
    scale<<<(n + HOST_STEP - 1) / HOST_STEP, TILE>>>(x, n);
#endif
}}
"""


@needs_nvcc
def test_real_nvcc_program_key_reads_the_device_and_the_host_pass():
    """Two sources are one program only where both of nvcc's passes read the same: a change the
    host pass alone sees (a launch under #ifndef __CUDA_ARCH__), or the device pass alone, is
    another program; a comment is not. hipcc's passes are not known here: no key."""
    kit = load_target(CUDA_KIT)
    kit = kit.model_copy(update={"build": kit.build.model_copy(update={"arch": "sm_90"})})
    runner = GpuRunner("cuda")

    def key(extra: str = "", **knobs) -> str | None:
        values = {"tile": 16, "step": 256, "device": "2.0f"} | knobs
        return runner.program(kit, KEYED.format(**values) + extra)

    assert gpu.nvcc_preprocesses_device("nvcc", "sm_90")
    first = key()
    assert first is not None and key("// a comment\n") == first
    assert len({first, key(step=128), key(device="3.0f"), key(tile=32)}) == 4
    assert GpuRunner("rocm").program(kit, KEYED.format(tile=16, step=256, device="2.0f")) is None


def test_no_program_key_where_the_compilers_e_is_not_the_device_pass(runner, target):
    """The tests' stand-in for nvcc preprocesses as g++ (no __CUDA_ARCH__): keyed on that pass
    alone, two kernels differing only in device code would read as one program."""
    assert not gpu.nvcc_preprocesses_device(target.build.compiler_for("cuda"), "sm_90")
    assert runner.program(target, _kit("baseline")) is None


HIP_SOURCE = """
#include <hip/hip_runtime.h>
__global__ void fill(float *C, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) C[i] = 1.0f;
}
extern "C" void matmul(const float *A, const float *B, float *C, int M, int N, int K) {
    fill<<<(M * N + 255) / 256, 256>>>(C, M * N);
}
"""


@pytest.mark.skipif(not shutil.which("hipcc"), reason="hipcc is not installed here")
def test_real_hipcc_builds_a_hip_candidate(tmp_path):
    """hipcc's command line as the rocm runner gives it (an explicit arch: hipcc may predate
    --offload-arch=native), next to an nvcc that would otherwise make hipcc target NVIDIA."""
    target = load_target(CUDA_KIT).model_copy(update={"build": Build(arch="gfx90a")})
    src = tmp_path / "candidate.hip"
    src.write_text(HIP_SOURCE)
    built = GpuRunner("rocm")._compile(target, src, ["-O3"], QUICK)
    assert built.returncode == 0, built.stderr
    assert src.with_suffix(".so").stat().st_size > 0


@needs_nvcc
@pytest.mark.parametrize("source", sorted(p.name for p in CUDA_KIT.glob("*.cu")))
def test_cuda_kit_compiles_to_ptx(source, tmp_path):
    """Every real kernel of the cuda kit is valid CUDA (sm_90); only syntax_error is not."""
    done = subprocess.run(
        ["nvcc", "--ptx", "-arch=sm_90", "-o", str(tmp_path / "out.ptx"), str(CUDA_KIT / source)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    if source == "syntax_error.cu":
        assert done.returncode != 0 and "accumulator" in done.stdout + done.stderr
    else:
        assert done.returncode == 0, done.stdout + done.stderr
        kernels = (CUDA_KIT / source).read_text().count("__global__")
        assert (tmp_path / "out.ptx").read_text().count(".entry") == kernels


# -- the whole pipeline on the fake device ------------------------------------------------------


def test_baseline_is_verified_and_timed_on_the_fake(runner, target):
    ev = runner.evaluate(target, _kit("baseline"), config=QUICK)
    assert ev.status == "ok", ev.message
    assert ev.device == "cuda:0 eat fake GPU (host memory)" and ev.runner == "cuda"
    assert ev.arch == "sm_90a"
    assert len(ev.workloads) == 3 and all(w.gflops > 0 for w in ev.workloads)
    # the baseline against itself: how near 1 is the machine's noise; the figure follows from
    # the medians beside it
    assert all(w.speedup == w.baseline.median_s / w.candidate.median_s for w in ev.workloads)
    assert ev.speedup == pytest.approx(geomean([w.speedup for w in ev.workloads]))


ASYNC = """
#include <chrono>
#include <cstddef>
#include <thread>
// The real API (cuda_runtime.h): run a host function in stream order. The fake runs it on a
// thread that cudaDeviceSynchronize joins, like work a kernel does on a side stream.
extern "C" int cudaLaunchHostFunc(void *stream, void (*fn)(void *), void *arg);
struct Job { const float *A, *B; float *C; int M, N, K; };
static Job job;
static void work(void *p) {
    Job j = *(Job *)p;
    std::this_thread::sleep_for(std::chrono::milliseconds(3));
    for (int i = 0; i < j.M; i++)
        for (int n = 0; n < j.N; n++) {
            float acc = 0.0f;
            for (int k = 0; k < j.K; k++)
                acc += j.A[(size_t)i * j.K + k] * j.B[(size_t)k * j.N + n];
            j.C[(size_t)i * j.N + n] = acc;
        }
}
extern "C" void matmul(const float *A, const float *B, float *C, int M, int N, int K) {
    job = Job{A, B, C, M, N, K};
    cudaLaunchHostFunc(nullptr, work, &job);
}
"""


def test_work_left_on_a_stream_is_waited_for_and_timed(runner, target):
    """The call returns at once; the device-wide synchronize makes the result count and the
    timer include the 3 ms the work takes."""
    ev = runner.evaluate(target, ASYNC, config=QUICK)
    assert ev.status == "ok", ev.message
    assert all(w.candidate.median_s > 0.003 for w in ev.workloads)
    assert ev.workloads[2].speedup < 0.1  # the 33x17x65 baseline takes microseconds


def test_unwritten_outputs_stay_poisoned(runner, target):
    half = _kit("constant").replace("i < (size_t)M * N;", "i < (size_t)M * N / 2;")
    ev = runner.evaluate(target, half, config=QUICK)
    assert ev.status == "incorrect" and "4608 never written" in ev.message, ev.message


def test_rocm_runner_on_the_fake_hip_runtime(tmp_path):
    """The HIP path: hip* names, hipcc's command line, a .hip candidate."""
    for f in ("reference.py", "baseline.cu"):
        shutil.copy(FAKE_KIT / f, tmp_path / f.replace(".cu", ".hip"))
    toml = (FAKE_KIT / "target.toml").read_text()
    toml = (
        toml.replace('runner = "cuda"', 'runner = "rocm"')
        .replace('language = "cuda"', 'language = "hip"')
        .replace("baseline.cu", "baseline.hip")
        .replace("../../../fake_gpu/fake-gpucc", str(fake_gpu.COMPILER))
    )
    (tmp_path / "target.toml").write_text(toml)
    target = load_target(tmp_path)
    runner = GpuRunner("rocm", runtime=str(fake_gpu.build_runtime("hip")))
    assert runner.unavailable(target) is None
    ev = runner.evaluate(target, target.baseline_source(), config=QUICK)
    assert ev.status == "ok", ev.message
    assert ev.device == "rocm:0 eat fake GPU (HIP names, host memory)" and ev.speedup > 0
    assert ev.arch == "gfx942"


# -- the CLI ------------------------------------------------------------------------------------


def test_eval_on_a_cuda_target_without_a_gpu_exits_2_with_one_line():
    if "reason" not in describe("cuda"):
        pytest.skip("this machine has a CUDA device")
    env = {k: v for k, v in os.environ.items() if k != ENV}
    done = subprocess.run(
        [sys.executable, "-m", "eat", "eval", str(CUDA_KIT), str(CUDA_KIT / "baseline.cu")],
        capture_output=True,
        text=True,
        timeout=300,
        env=env,
        cwd=ROOT,
    )
    assert done.returncode == 2, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and "cuda" in lines[0], done.stderr
    assert done.stdout == ""


# -- the harness's device checks ----------------------------------------------------------------


def test_device_checks_agree_with_the_host_comparison(fake_rt, runner, target, tmp_path):
    """device_check.cu's kernels, as the runner builds them (here by fake-gpucc, which runs
    them on the CPU through tests/gpu_emu.h), pass exactly what verify.py's comparison passes
    on its fast path, and count changed bytes to the last one."""
    from eat.runners.gpu_harness import DeviceChecks
    from eat.runners.verify import _close_fast

    job: dict = {}
    runner.support_libs(target, QUICK, job)
    lib = job["check_lib"]
    checks = DeviceChecks(lib, Runtime("cuda", fake_rt))  # "device" pointers are host memory
    rng = np.random.default_rng(0)
    rtol, atol = 1e-4, 1e-6
    for dtype in (np.float32, np.float64):
        ref = (rng.standard_normal(3001) * 100).astype(dtype)
        slack = atol + rtol * float(np.abs(ref).mean(dtype=np.float64))
        bound = np.abs(ref) * dtype(rtol) + dtype(slack)
        cases = {
            "equal": ref.copy(),
            "within": ref + bound * dtype(0.999),
            "at the bound": ref + bound,
        }
        off = ref.copy()
        off[[3, 1000, 3000]] += dtype(1.0)
        nan = ref.copy()
        nan[7] = np.nan
        inf = ref.copy()
        inf[9] = np.inf
        cases |= {"three off": off, "a NaN": nan, "an Inf": inf}
        for name, out in cases.items():
            out = np.ascontiguousarray(out, dtype=dtype)
            far = checks.far(out.ctypes.data, ref.ctypes.data, out.size, out.dtype, rtol, slack)
            assert (far == 0) == _close_fast(out, ref, rtol, atol), (dtype, name, far)
        assert checks.far(off.ctypes.data, ref.ctypes.data, off.size, off.dtype, rtol, slack) == 3
    ints = np.arange(10, dtype=np.int32)
    assert checks.far(ints.ctypes.data, ints.ctypes.data, 10, ints.dtype, rtol, atol) is None
    a = rng.integers(0, 255, 4099, dtype=np.uint8)
    for changed in ([], [0], [4098], [5, 6, 7, 4097]):
        b = a.copy()
        b[changed] ^= 1
        words = len({i // 4 for i in changed if i < 4096}) + len([i for i in changed if i >= 4096])
        assert checks.differ(a.ctypes.data, b.ctypes.data, a.nbytes) == words


def test_torch_takes_the_vendors_device_buffers():
    """torch.as_tensor reads a vendor's buffer through __cuda_array_interface__ and refuses
    one marked read-only (it did on the H200, inputs included). Here torch has no GPU: its
    parsing of the interface is what runs, and then it says it cannot reach CUDA."""
    torch = pytest.importorskip("torch")
    from eat.runners.gpu_harness import DeviceArray

    buffer = DeviceArray(0x7F0000000000, np.zeros((4, 3), np.float32))
    try:
        torch.as_tensor(buffer, device="cuda")
    except TypeError as e:
        pytest.fail(f"torch refused the buffer itself: {e}")
    except (RuntimeError, AssertionError) as e:  # no CUDA in this torch: past the parsing
        assert "read only" not in str(e)
