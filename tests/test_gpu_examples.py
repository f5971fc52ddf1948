"""The GPU examples without a GPU: they load, their references are right, and the baseline with
every knob value (plus the shipped tuned candidate and a few extreme combinations) compiles with
nvcc (hipcc where installed) and computes the right thing when its kernels run on the CPU
through tests/gpu_emu.h; the tuned candidates also pass the GPU runner's whole pipeline on the
fake device of tests/fake_gpu. Nothing here times a GPU: scripts/gpu_check.sh does, where one
is."""

from __future__ import annotations

import ast
import ctypes
import importlib.util
import os
import re
import shutil
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import pytest

from eat.agents.offline import render
from eat.runners.native import CFLAGS_LINE
from eat.runners.verify import Mismatch, compare, poison
from eat.target import Target, eval_expr, load_target

TESTS = Path(__file__).resolve().parent
EXAMPLES_DIR = TESTS.parent / "examples"
# The examples in CUDA C++ and HIP (cuda_triton_softmax has tests/test_triton_example.py).
GPU_EXAMPLES = sorted(
    p.parent
    for p in EXAMPLES_DIR.glob("*/target.toml")
    if re.search(r'^language\s*=\s*"(cuda|hip)"', p.read_text(), re.M)
)
CUDA = [p for p in GPU_EXAMPLES if p.name.startswith("cuda_")]
HIP = [p for p in GPU_EXAMPLES if p.name.startswith("rocm_")]
SUFFIX = {"cuda": ".cu", "hip": ".hip"}

# Knob combinations beyond one knob at a time: the largest blocks and tiles, the smallest groups.
CORNERS = {
    "cuda_matmul": [{"TILE": 32, "WPT": 8, "UNROLL": 16}, {"TILE": 8, "WPT": 8, "UNROLL": 2}],
    "cuda_softmax": [
        {"ROW_THREADS": 1024, "BLOCK": 128, "VEC": 4, "ONLINE": 1},
        {"ROW_THREADS": 8, "BLOCK": 1024, "VEC": 2, "ONLINE": 1},
        # The row in registers (ROW_REGS × ROW_THREADS floats at most), next to
        # rows too long for them (EMU_SHAPES' 1030 columns: the passes again).
        {"ROW_THREADS": 32, "BLOCK": 128, "VEC": 4, "ROW_REGS": 32},
        {"ROW_THREADS": 8, "BLOCK": 256, "VEC": 4, "ROW_REGS": 16, "ONLINE": 1},
        {"ROW_THREADS": 1024, "BLOCK": 1024, "VEC": 2, "ROW_REGS": 8},
        {"ROW_THREADS": 1, "BLOCK": 128, "VEC": 1, "ROW_REGS": 32},
    ],
}
CORNERS["rocm_softmax"] = CORNERS["cuda_softmax"]

# Small shapes for the CPU emulation (a coroutine per GPU thread): edges that are
# multiples of nothing, single elements, rows shorter and longer than a block; `True` moves every
# buffer 4 bytes off its alignment, so vector loads must fall back to scalar ones.
EMU_SHAPES = {
    "cuda_matmul": [
        (dict(M=37, N=45, K=29), False),
        (dict(M=70, N=33, K=130), False),
        (dict(M=1, N=1, K=1), False),
    ],
    "cuda_softmax": [
        (dict(rows=3, cols=333), False),
        (dict(rows=6, cols=64), False),
        (dict(rows=6, cols=64), True),
        (dict(rows=2, cols=1030), False),
        (dict(rows=2, cols=1), False),
    ],
}
EMU_SHAPES["rocm_softmax"] = EMU_SHAPES["cuda_softmax"]


def tuned_file(target: Target) -> Path | None:
    path = target.root / f"tuned{SUFFIX[target.language]}"
    return path if path.is_file() else None


def variants(target: Target, cflags: bool = True) -> dict[str, str]:
    """label -> source: the baseline, each other knob value alone (the first is the baseline's,
    see test_gpu_example_loads), the corners, the tuned file; `cflags` False leaves out the
    values of flag knobs."""
    out = {"baseline": target.baseline_source()}
    for name, knob in target.knobs.items():
        if knob.kind == "cflags" and not cflags:
            continue
        for value in knob.values[1:]:
            out[f"{name}={value}"] = render(target, {name: value})
    for combo in CORNERS.get(target.name, []):
        out[" ".join(f"{k}={v}" for k, v in combo.items())] = render(target, combo)
    if tuned := tuned_file(target):
        out["tuned"] = tuned.read_text()
    return out


def flags(target: Target, source: str) -> list[str]:
    lines = CFLAGS_LINE.findall(source)
    return " ".join(lines).split() if lines else target.build.cflags.split()


def run_all(jobs: dict[str, list[str]], cwd: Path, env: dict | None = None) -> dict[str, str]:
    """Run each command (two at a time: the machine has two cores); label -> output, for those
    that failed or printed a warning."""

    def one(item):
        label, cmd = item
        done = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, timeout=300, env=env)
        text = done.stdout + done.stderr
        return label, (text or "failed") if done.returncode or "warning" in text else None

    with ThreadPoolExecutor(max_workers=2) as pool:
        return {label: text for label, text in pool.map(one, jobs.items()) if text}


def write_sources(target: Target, tmp: Path, suffix: str) -> dict[str, Path]:
    """Each variant in its own file (named by its index: labels hold spaces and '=')."""
    paths = {}
    for i, (label, source) in enumerate(variants(target).items()):
        paths[label] = tmp / f"v{i}{suffix}"
        paths[label].write_text(source)
    return paths


# -- the targets ---------------------------------------------------------------------------------


def test_gpu_examples_exist():
    assert {"cuda_matmul", "cuda_softmax", "rocm_softmax"} <= {p.name for p in GPU_EXAMPLES}


@pytest.mark.parametrize("folder", GPU_EXAMPLES, ids=lambda p: p.name)
def test_gpu_example_loads(folder: Path):
    target = load_target(folder)
    assert (target.runner, target.language) in {("cuda", "cuda"), ("rocm", "hip")}
    assert target.baseline.file.endswith(SUFFIX[target.language])
    assert target.flops or target.bytes
    assert all(target.metric("flops" if target.flops else "bytes", w) > 0 for w in target.workloads)
    assert len(target.workloads) >= 3 and target.knobs
    source = target.baseline_source()
    assert re.search(rf'extern "C" void {target.entry.name}\(', source)
    # The first value of every knob is the baseline's own (the offline agents start there).
    for name, knob in target.knobs.items():
        if knob.kind == "cflags":
            assert knob.values[0] == target.build.cflags, name
        else:
            default = re.search(rf"^#ifndef {name}\n#define {name} (\S+)", source, re.M)
            assert default and default[1] == str(knob.values[0]), name


@pytest.mark.parametrize("folder", CUDA, ids=lambda p: p.name)
def test_tuned_candidate_is_the_baseline_with_knobs_set(folder: Path):
    """tuned.cu is what render() makes of its knob lines, after a comment: it cannot drift from
    the baseline, and the offline agents can reach it."""
    target = load_target(folder)
    text = tuned_file(target).read_text()
    knobs = dict(re.findall(r"^#define (\w+) (\S+)$", text, re.M))
    knobs = {k: int(v) if v.isdigit() else v for k, v in knobs.items() if k in target.knobs}
    knobs |= {
        name: " ".join(CFLAGS_LINE.findall(text)).strip()
        for name, k in target.knobs.items()
        if k.kind == "cflags"
    }
    for name, value in knobs.items():
        assert value in target.knobs[name].values, (name, value)
    rendered = render(target, knobs)
    assert text.endswith(rendered)
    assert all(line.startswith("//") for line in text[: -len(rendered)].splitlines())
    assert knobs != {n: k.values[0] for n, k in target.knobs.items()}


# -- the references --------------------------------------------------------------------------------


def _reference(name: str):
    target = load_target(EXAMPLES_DIR / name)
    namespace: dict = {}
    exec(
        compile(target.path(target.reference.file).read_text(), target.reference.file, "exec"),
        namespace,
    )
    return target, namespace


def test_matmul_reference_is_the_product():
    target, ns = _reference("cuda_matmul")
    A = np.array([[1, 2, 3], [4, 5, 6]], np.float32)
    B = np.array([[7, 8], [9, 10], [11, 12]], np.float32)
    got = ns[target.reference.function](A, B, 2, 2, 3)
    assert got.dtype == np.float64
    assert got.tolist() == [[58, 64], [139, 154]]  # by hand: 1*7 + 2*9 + 3*11 = 58 ...


@pytest.mark.parametrize("name", ["cuda_softmax", "rocm_softmax"])
def test_softmax_reference_and_inputs(name: str):
    target, ns = _reference(name)
    # exp(ln k) = k: the row [ln 1, ln 2, ln 3] is [1, 2, 3] / 6, whatever constant it is shifted by
    X = (np.log(np.array([[1, 2, 3], [1, 2, 3]])) + np.array([[1000], [-1000]])).astype(np.float32)
    got = ns[target.reference.function](X, 2, 3)
    assert got.dtype == np.float64
    np.testing.assert_allclose(got, [[1 / 6, 2 / 6, 3 / 6]] * 2, rtol=1e-4)
    inputs = ns[target.reference.inputs](np.random.default_rng(0), rows=64, cols=100)
    X = inputs["X"]
    assert X.shape == (64, 100) and X.dtype == np.float32
    with np.errstate(over="ignore", under="ignore"):
        assert not np.isfinite(np.exp(X).sum(axis=1)).all()  # the max must be subtracted
    np.testing.assert_allclose(ns[target.reference.function](X, 64, 100).sum(axis=1), 1.0)


# -- the vendors ----------------------------------------------------------------------------------

VENDOR_MATH = {
    "cuda_matmul": "torch.matmul",
    "cuda_softmax": "torch.softmax",
    "rocm_softmax": "torch.softmax",
}


@pytest.mark.parametrize("folder", GPU_EXAMPLES, ids=lambda p: p.name)
def test_gpu_example_declares_a_vendor(folder: Path):
    """Every GPU example times what a user would call instead. The vendor file imports torch
    (only the timing harness loads it), so it is read here, not imported: its function takes
    the entry's parameters by name, and the reference file stays free of torch."""
    target = load_target(folder)
    assert target.vendor and VENDOR_MATH[folder.name].split(".")[1] in target.vendor.name
    tree = ast.parse(target.path(target.vendor.file).read_text())
    fn = next(
        n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == target.vendor.function
    )
    assert [a.arg for a in fn.args.args] == [a.name for a in target.args]
    assert VENDOR_MATH[folder.name] in ast.unparse(fn)
    assert target.vendor.file != target.reference.file
    assert "torch" not in target.path(target.reference.file).read_text()


def _vendor_on_the_cpu(folder: Path):
    """The example's vendor module with its buffers on the CPU instead of the GPU."""
    pytest.importorskip("torch")
    target = load_target(folder)
    spec = importlib.util.spec_from_file_location(
        f"vendor_{folder.name}", target.path(target.vendor.file)
    )
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    module.DEVICE = "cpu"
    return target, getattr(module, target.vendor.function)


@pytest.mark.parametrize("name", ["cuda_softmax", "rocm_softmax"])
def test_softmax_vendor_matches_the_reference_on_the_cpu(name: str):
    """The vendor's math and its writing into Y, with numpy arrays standing in for the GPU
    harness's device buffers (torch wraps both without a copy). On the GPU it runs PyTorch's GPU
    kernel on __cuda_array_interface__ buffers: that part needs a GPU and torch built for it
    (scripts/gpu_check.sh)."""
    target, vendor = _vendor_on_the_cpu(EXAMPLES_DIR / name)
    _, ns = _reference(name)
    X = ns[target.reference.inputs](np.random.default_rng(1), rows=16, cols=333)["X"]
    Y = np.full_like(X, np.nan)
    for _ in range(2):  # the second call reuses the tensors made for these buffers
        vendor(X=X, Y=Y, rows=16, cols=333)
    np.testing.assert_allclose(
        Y, ns[target.reference.function](X, 16, 333), rtol=target.tolerance.rtol
    )


def test_matmul_vendor_is_fp32_and_matches_the_reference_on_the_cpu():
    """As above for cuBLAS's stand-in: torch.matmul writing into C, TF32 switched off at load
    (the flag is torch's, on any build; cuBLAS honours it on the GPU)."""
    import torch

    target, vendor = _vendor_on_the_cpu(EXAMPLES_DIR / "cuda_matmul")
    assert torch.backends.cuda.matmul.allow_tf32 is False
    _, ns = _reference("cuda_matmul")
    rng = np.random.default_rng(2)
    A, B = (rng.random(s, dtype=np.float32) * 2 - 1 for s in ((37, 29), (29, 45)))
    C = np.full((37, 45), np.nan, np.float32)
    vendor(A=A, B=B, C=C, M=37, N=45, K=29)
    np.testing.assert_allclose(
        C, ns[target.reference.function](A, B, 37, 45, 29), rtol=target.tolerance.rtol, atol=1e-6
    )


def _timing_fidelity():
    """bench/timing_fidelity.py (bench/ is no package)."""
    spec = importlib.util.spec_from_file_location(
        "timing_fidelity", TESTS.parent / "bench" / "timing_fidelity.py"
    )
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


# -- compiling -------------------------------------------------------------------------------------

# nvcc takes seconds a variant: every test that needs it is also marked slow, as hipcc's are
# (CI runs them all).
needs_nvcc = pytest.mark.skipif(
    not shutil.which("nvcc"),
    reason="nvcc not found on PATH: the CUDA examples are only loaded and run in the CPU emulation",
)


@pytest.mark.slow
@needs_nvcc
@pytest.mark.parametrize("folder", CUDA, ids=lambda p: p.name)
def test_cuda_variants_compile(folder: Path, tmp_path: Path):
    """Device code through ptxas for sm_90 (--cubin: PTX, then shared-memory and register
    limits), each variant with its own flags, without a warning."""
    target = load_target(folder)
    paths = write_sources(target, tmp_path, ".cu")
    jobs = {
        label: [
            "nvcc",
            "-arch=sm_90",
            "--cubin",
            *flags(target, path.read_text()),
            "-o",
            str(path.with_suffix(".cubin")),
            str(path),
        ]
        for label, path in paths.items()
    }
    failed = run_all(jobs, tmp_path)
    assert not failed, "\n".join(f"{k}: {v[:1000]}" for k, v in failed.items())


@pytest.mark.slow
@needs_nvcc
@pytest.mark.parametrize("folder", CUDA, ids=lambda p: p.name)
def test_cuda_baseline_and_tuned_build_as_the_runner_builds(folder: Path, tmp_path: Path):
    """The runner's build (a shared library, host code too) exports the entry unmangled; the
    tuned candidate's kernel keeps its accumulators in registers."""
    target = load_target(folder)
    for label in ("baseline", "tuned"):
        source = target.baseline_source() if label == "baseline" else tuned_file(target).read_text()
        src, lib = tmp_path / f"{label}.cu", tmp_path / f"{label}.so"
        src.write_text(source)
        done = subprocess.run(
            [
                "nvcc",
                "-shared",
                "-Xcompiler",
                "-fPIC",
                "-arch=sm_90",
                "-Xptxas",
                "-v",
                *flags(target, source),
                "-o",
                str(lib),
                str(src),
            ],
            capture_output=True,
            text=True,
            timeout=300,
        )
        assert done.returncode == 0, done.stderr[-2000:]
        assert " 0 bytes spill stores" in done.stderr, done.stderr
        if shutil.which("nm"):
            symbols = subprocess.run(
                ["nm", "-D", "--defined-only", str(lib)], capture_output=True, text=True
            ).stdout
            assert re.search(rf"\bT {target.entry.name}$", symbols, re.M), symbols


@pytest.mark.slow
@needs_nvcc
def test_softmax_row_in_registers_builds_without_spills(tmp_path: Path):
    """Each ROW_REGS value with the threads per row that hold the workloads' rows (up to 1024
    columns with 32, 4096 with 128, 32000 with 1024), compiled for an H100 or H200 (sm_90a)
    with the runner's flags: the register array stays in registers, even at 1024 threads a
    block (device code only: registers are ptxas's, whatever host code is built around it)."""
    target = load_target(EXAMPLES_DIR / "cuda_softmax")
    jobs = {}
    for regs in target.knobs["ROW_REGS"].values[1:]:
        for threads, block in [(32, 256), (128, 256), (1024, 1024)]:
            label = f"ROW_REGS={regs} ROW_THREADS={threads}"
            source = render(
                target,
                {"ROW_REGS": regs, "ROW_THREADS": threads, "BLOCK": block, "VEC": 4, "ONLINE": 1},
            )
            src = tmp_path / f"r{regs}_{threads}.cu"
            src.write_text(source)
            jobs[label] = [
                "nvcc",
                "--cubin",
                "-arch=sm_90a",
                "-Xptxas=-v",
                *flags(target, source),
                "-o",
                str(src.with_suffix(".cubin")),
                str(src),
            ]

    def spills(item):
        label, cmd = item
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
        kernels = re.findall(r"Compiling entry function '(\w+)'", done.stderr)
        # A stack frame would be the array in local memory, spilled or not.
        if (
            done.returncode
            or len(kernels) != 2
            or done.stderr.count(" 0 bytes stack frame, 0 bytes spill stores") != 2
        ):
            return f"{label}: {done.stderr[-1500:]}"
        return None

    with ThreadPoolExecutor(max_workers=2) as pool:
        failed = [f for f in pool.map(spills, jobs.items()) if f]
    assert not failed, "\n".join(failed)


@pytest.mark.slow
@needs_nvcc
@pytest.mark.parametrize("folder", CUDA, ids=lambda p: p.name)
def test_timing_fidelity_wrapper_builds(folder: Path, tmp_path: Path):
    """bench/timing_fidelity.py's 2x variant (scripts/gpu_check.sh runs it on a GPU) compiles,
    host code included, and exports both the wrapper and the renamed entry with C linkage."""
    fidelity = _timing_fidelity()
    target = load_target(folder)
    source = fidelity.repeated(target, fidelity.tuned(target), 2)
    src, obj = tmp_path / "twice.cu", tmp_path / "twice.o"
    src.write_text(source)
    done = subprocess.run(
        ["nvcc", "-c", "-arch=sm_90", *flags(target, source), "-o", str(obj), str(src)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    if shutil.which("nm"):
        symbols = subprocess.run(
            ["nm", "--defined-only", str(obj)], capture_output=True, text=True
        ).stdout
        for name in (target.entry.name, f"eat_once_{target.entry.name}"):
            assert re.search(rf"\bT {name}$", symbols, re.M), (name, symbols)


@pytest.mark.slow
@pytest.mark.parametrize("folder", HIP, ids=lambda p: p.name)
def test_hip_variants_compile(folder: Path, tmp_path: Path):
    """hipcc for an AMD GPU (build.arch, else gfx90a, which every ROCm since 4 knows)."""
    target = load_target(folder)
    if not shutil.which("hipcc"):
        pytest.skip(
            "hipcc not found on PATH: the HIP example is only loaded and run in the CPU emulation"
        )
    env = os.environ | {"HIP_PLATFORM": "amd"}  # hipcc picks nvcc when it sees one otherwise
    paths = write_sources(target, tmp_path, ".hip")
    arch = target.build.arch or "gfx90a"
    jobs = {
        label: [
            "hipcc",
            f"--offload-arch={arch}",
            "-c",
            *flags(target, path.read_text()),
            "-o",
            str(path.with_suffix(".o")),
            str(path),
        ]
        for label, path in paths.items()
    }
    failed = run_all(jobs, tmp_path, env)
    assert not failed, "\n".join(f"{k}: {v[:1000]}" for k, v in failed.items())


# -- running on the CPU ----------------------------------------------------------------------------

_LAUNCH = re.compile(r"(\w+)<<<\s*([^,>]+?)\s*,\s*([^,>]+?)\s*>>>\s*\(")
_GPU_INCLUDE = re.compile(r"^\s*#\s*include\s*<(hip/hip_runtime\.h|cuda_runtime\.h)>\s*$", re.M)


def emulated(source: str) -> str:
    """The source as plain C++ for gpu_emu.h: launches become calls, runtime headers go."""
    return _LAUNCH.sub(r"emu_launch(\2, \3, \1, ", _GPU_INCLUDE.sub("", source))


def call(lib, target: Target, ref: dict, params: dict, misalign: bool) -> Mismatch | None:
    """One call of the entry on fresh inputs; the mismatch with the reference, if any."""
    rng = np.random.default_rng(sum(params.values()))
    made = ref[target.reference.inputs](rng, **params) if target.reference.inputs else {}
    values, inputs, outputs = {}, {}, {}
    for a in target.args:
        if not a.pointer:
            values[a.name] = ctypes.c_int(params[a.name])
            continue
        shape = tuple(int(eval_expr(d, params)) for d in target.shapes[a.name])
        size = int(np.prod(shape))
        buf = np.empty(size + 1, np.float32)[int(misalign) :][:size].reshape(shape)
        if a.const:
            buf[...] = made.get(a.name, rng.random(shape) * 2 - 1)
            inputs[a.name] = buf
        else:
            poison(buf)
            outputs[a.name] = buf
        values[a.name] = ctypes.c_void_p(buf.ctypes.data)
    getattr(lib, target.entry.name)(*(values[a.name] for a in target.args))
    want = ref[target.reference.function](**{k: v.copy() for k, v in inputs.items()}, **params)
    (out,) = outputs.values()
    return compare(out, np.asarray(want, out.dtype), target.tolerance.rtol, target.tolerance.atol)


# Every variant of every GPU example built with g++ and run: seconds an example.
@pytest.mark.slow
@pytest.mark.skipif(
    not shutil.which("g++"), reason="g++ not found: the kernels cannot be emulated on the CPU"
)
@pytest.mark.parametrize("folder", GPU_EXAMPLES, ids=lambda p: p.name)
def test_variants_compute_right_on_the_cpu(folder: Path, tmp_path: Path):
    target = load_target(folder)
    _, ref = _reference(folder.name)
    paths = {}
    for i, (label, source) in enumerate(variants(target, cflags=False).items()):
        paths[label] = tmp_path / f"v{i}.cpp"
        paths[label].write_text(emulated(source))
    # The emulator's header, precompiled once: parsing it is most of each variant's build.
    header, options = tmp_path / "gpu_emu.h", ["-std=c++20", "-O1", "-fPIC"]
    shutil.copy(TESTS / "gpu_emu.h", header)
    subprocess.run(
        ["g++", *options, "-x", "c++-header", str(header), "-o", f"{header}.gch"],
        check=True,
        capture_output=True,
    )
    jobs = {
        label: [
            "g++",
            *options,
            "-shared",
            "-include",
            str(header),
            "-Winvalid-pch",
            str(path),
            "-o",
            str(path.with_suffix(".so")),
        ]
        for label, path in paths.items()
    }
    failed = run_all(jobs, tmp_path)
    assert not failed, "\n".join(f"{k}: {v[:1000]}" for k, v in failed.items())
    wrong = []
    for label, path in paths.items():
        lib = ctypes.CDLL(str(path.with_suffix(".so")))
        for params, misalign in EMU_SHAPES[target.name]:
            if bad := call(lib, target, ref, params, misalign):
                wrong.append(f"{label} {params} misaligned={misalign}: {bad.summary}")
    assert not wrong, "\n".join(wrong)


# A stand-in for nvcc: the candidate as plain C++ for gpu_emu.h, built by tests/fake_gpu's
# fake-gpucc (g++, linked with the fake runtime).
_EMU_GPUCC = """#!{python}
import re, subprocess, sys
from pathlib import Path
launch = re.compile({launch!r})
include = re.compile({include!r}, re.M)
args = []
for arg in sys.argv[1:]:
    if arg.endswith((".cu", ".hip")):
        src = Path(arg)
        emulated = src.with_name(src.stem + "_emu.cu")
        text = include.sub("", src.read_text())
        emulated.write_text(launch.sub(r"emu_launch(\\2, \\3, \\1, ", text))
        arg = str(emulated)
    args.append(arg)
sys.exit(subprocess.call([{gpucc!r}, "-std=c++20", "-include", {header!r}, *args]))
"""

# Sizes the emulation runs in a blink.
SMALL_WORKLOADS = {
    "cuda_matmul": [dict(M=37, N=45, K=29), dict(M=64, N=48, K=16), dict(M=5, N=70, K=33)],
    "cuda_softmax": [dict(rows=3, cols=333), dict(rows=6, cols=64), dict(rows=2, cols=1030)],
}


@pytest.mark.skipif(
    not shutil.which("g++"), reason="g++ not found: the kernels cannot be emulated on the CPU"
)
@pytest.mark.parametrize("folder", CUDA, ids=lambda p: p.name)
def test_tuned_candidate_evaluates_ok_through_the_gpu_runner(folder: Path, tmp_path: Path):
    """The GPU runner's whole pipeline (build, verify with poison and seeds, time) on the example
    with small workloads: the device is tests/fake_gpu's host-memory runtime and the kernels run
    on the CPU through gpu_emu.h. The tuned candidate and the timing-fidelity wrapper of it come
    out ok; what their timings say means nothing here."""
    import tomllib

    import fake_gpu

    from eat.runners.gpu import GpuRunner
    from eat.target import EvalConfig

    compiler = tmp_path / "emu-gpucc"
    compiler.write_text(
        _EMU_GPUCC.format(
            python=sys.executable,
            launch=_LAUNCH.pattern,
            include=_GPU_INCLUDE.pattern,
            gpucc=str(fake_gpu.COMPILER),
            header=str(TESTS / "gpu_emu.h"),
        )
    )
    compiler.chmod(0o755)
    data = tomllib.loads((folder / "target.toml").read_text())
    data["workloads"] = SMALL_WORKLOADS[folder.name]
    data["build"] = data.get("build", {}) | {"compiler": str(compiler)}
    data.pop("vendor")  # torch on a GPU: the fake device has none (test_vendor_* below)
    target = Target.model_validate(data | {"root": folder})
    runner = GpuRunner("cuda", runtime=str(fake_gpu.build_runtime("cuda")))
    quick = EvalConfig(
        seeds=2, warmup=1, min_repeats=3, max_repeats=3, budget_s=0.05, timeout_s=120
    )
    fidelity = _timing_fidelity()
    for what, source in [
        ("tuned", tuned_file(target).read_text()),
        ("2x", fidelity.repeated(target, fidelity.tuned(target), 2)),
    ]:
        ev = runner.evaluate(target, source, config=quick)
        assert ev.status == "ok", (what, ev.message, ev.compile_log[-2000:])
        assert len(ev.workloads) == len(SMALL_WORKLOADS[folder.name]) and ev.speedup > 0
