"""`eat import`: KernelBench, GPU MODE and FlashInfer-Bench problems become Python targets.

The problems here are small ones written for these tests in each project's published format.
`verdict` judges a candidate file in this process the way the target contract says the harness
does (imported from a folder of its own after the reference; return value and written
arguments compared, other arguments unchanged); the slow tests run the real runner.
"""

import copy
import importlib.util
import json
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest
import tomli_w
import torch  # the test extra installs it: importers are tested end to end on the CPU
from conftest import QUICK_EVALUATION

from eat.errors import BadInput
from eat.formats.common import on_cpu
from eat.formats.flashinfer_bench import import_flashinfer
from eat.formats.gpumode import import_gpumode
from eat.formats.kernelbench import import_kernelbench
from eat.target import load_target

ROOT = Path(__file__).parent.parent

# ---- KernelBench: a problem file, a solution in KernelBench's own format, a wrong one --------

KB_PROBLEM = '''
import torch
import torch.nn as nn


class Model(nn.Module):
    """A linear layer followed by ReLU."""

    def __init__(self, in_features, out_features):
        super().__init__()
        self.linear = nn.Linear(in_features, out_features)

    def forward(self, x):
        return torch.relu(self.linear(x))


batch_size = 8
in_features = 32
out_features = 16
input_shape = (batch_size, in_features)


def get_inputs():
    return [torch.randn(*input_shape).cuda()]


def get_init_inputs():
    return [in_features, out_features]
'''

KB_SOLUTION = """
import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self, in_features, out_features):
        super().__init__()
        self.linear = nn.Linear(in_features, out_features)

    def forward(self, x):
        return torch.addmm(self.linear.bias, x, self.linear.weight.t()).clamp_min_(0)
"""

KB_WRONG = KB_SOLUTION.replace(".clamp_min_(0)", "")

# ---- GPU MODE: a task folder (helpers one level up, as in reference-kernels) ----------------

GM_UTILS = """
import torch


def make_match_reference(reference, **kwargs):
    def check(data, output):
        return torch.allclose(output, reference(data), **kwargs), ""
    return check
"""

GM_TASK_YML = """
# name: grayscale-py
files:
  - {"name": "submission.py", "source": "@SUBMISSION@"}
  - {"name": "task.py", "source": "task.py"}
  - {"name": "utils.py", "source": "../utils.py"}
  - {"name": "reference.py", "source": "reference.py"}
  - {"name": "eval.py", "source": "../eval.py"}
lang: "py"
description: |
  Convert an RGB image (H, W, 3) to grayscale (H, W), written into the preallocated output.
config:
  main: "eval.py"
tests:
  - {"size": 8, "seed": 5236, "scale": "unit"}
benchmarks:
  - {"size": 32, "seed": 1001, "scale": "unit"}
  - {"size": 48, "seed": 1002, "scale": "half"}
  - {"size": 48, "seed": 1003, "scale": "half"}
ranking_by: "geom"
"""

GM_TASK = """
from typing import TypeVar
import torch

input_t = TypeVar("input_t", bound=tuple[torch.Tensor, torch.Tensor])
output_t = TypeVar("output_t", bound=torch.Tensor)
"""

GM_REFERENCE = """
from utils import make_match_reference
import torch
from task import input_t, output_t


def ref_kernel(data: input_t) -> output_t:
    rgb, out = data
    w = torch.tensor([0.2989, 0.5870, 0.1140], device=rgb.device, dtype=rgb.dtype)
    out[...] = (rgb * w).sum(dim=-1)
    return out


def generate_input(size: int, scale: str, seed: int) -> input_t:
    gen = torch.Generator(device="cuda")
    gen.manual_seed(seed)
    rgb = torch.rand(size, size, 3, device="cuda", dtype=torch.float32, generator=gen)
    if scale == "half":
        rgb = rgb * 0.5
    out = torch.empty(size, size, device='cuda', dtype=torch.float32)
    return rgb.contiguous(), out


check_implementation = make_match_reference(ref_kernel, rtol=1e-4, atol=1e-4)
"""

GM_SUBMISSION = """
from task import input_t, output_t
import torch


def custom_kernel(data: input_t) -> output_t:
    rgb, out = data
    w = torch.tensor([0.2989, 0.5870, 0.1140], device=rgb.device, dtype=rgb.dtype)
    out[...] = (rgb * w).sum(dim=-1)
    return out
"""

GM_SOLUTION = """
from task import input_t, output_t
import torch


def custom_kernel(data: input_t) -> output_t:
    rgb, out = data
    torch.matmul(rgb, torch.tensor([0.2989, 0.5870, 0.1140], dtype=rgb.dtype), out=out)
    return out
"""

GM_WRONG = GM_SOLUTION.replace("0.1140", "0.2140")

# ---- FlashInfer-Bench: a definition, two workloads, a DPS solution -------------------------

FI_REFERENCE = """import torch

EPS = 1e-6


@torch.no_grad()
def run(hidden_states, weight, scale):
    x = hidden_states.to(torch.float32)
    rstd = torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + EPS)
    return (x * rstd * weight.to(torch.float32) * scale).to(hidden_states.dtype)
"""

FI_DEFINITION = {
    "name": "rmsnorm_h64",
    "op_type": "rmsnorm",
    "description": "RMSNorm over the hidden dimension, times a scale.",
    "axes": {"batch_size": {"type": "var"}, "hidden_size": {"type": "const", "value": 64}},
    "inputs": {
        "hidden_states": {"shape": ["batch_size", "hidden_size"], "dtype": "float32"},
        "weight": {"shape": ["hidden_size"], "dtype": "float32"},
        "scale": {"shape": None, "dtype": "float32"},
    },
    "outputs": {"output": {"shape": ["batch_size", "hidden_size"], "dtype": "float32"}},
    "reference": FI_REFERENCE,
}

FI_WORKLOADS = [
    {
        "definition": "rmsnorm_h64",
        "workload": {
            "uuid": "w-0",
            "axes": {"batch_size": 4},
            "inputs": {
                "hidden_states": {"type": "random"},
                "weight": {"type": "random"},
                "scale": {"type": "random"},
            },
        },
    },
    {
        "definition": "rmsnorm_h64",
        "workload": {
            "uuid": "w-1",
            "axes": {"batch_size": 7},
            "inputs": {"scale": {"type": "scalar", "value": 0.5}},
        },
    },
]

FI_SOLUTION = """
import torch


def run(hidden_states, weight, scale, output):
    x = hidden_states
    output.copy_(x * torch.rsqrt(x.square().mean(-1, keepdim=True) + 1e-6) * (weight * scale))
"""

FI_WRONG = FI_SOLUTION.replace("+ 1e-6", "+ 1.0")


@pytest.fixture
def kb_file(tmp_path):
    path = tmp_path / "src" / "76_Linear_ReLU.py"
    path.parent.mkdir()
    path.write_text(KB_PROBLEM)
    return path


def _gm_task(root: Path, *, submission: bool = True, yml: str = GM_TASK_YML) -> Path:
    task = root / "problems" / "grayscale_py"
    task.mkdir(parents=True)
    (root / "problems" / "utils.py").write_text(GM_UTILS)
    (task / "task.yml").write_text(yml)
    (task / "task.py").write_text(GM_TASK)
    (task / "reference.py").write_text(GM_REFERENCE)
    if submission:
        (task / "submission.py").write_text(GM_SUBMISSION)
    return task


@pytest.fixture
def gm_task(tmp_path):
    return _gm_task(tmp_path / "src")


def _fi_files(
    folder: Path, definition: dict = FI_DEFINITION, workloads: list = FI_WORKLOADS
) -> tuple[Path, Path]:
    folder.mkdir(parents=True, exist_ok=True)
    d, w = folder / "rmsnorm_h64.json", folder / "rmsnorm_h64.jsonl"
    d.write_text(json.dumps(definition, indent=2))
    w.write_text("".join(json.dumps(line) + "\n" for line in workloads))
    return d, w


@pytest.fixture
def fi_files(tmp_path):
    return _fi_files(tmp_path / "src")


def _module(path: Path, name: str):
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _reference(target):
    return _module(target.path(target.reference.file), f"ref_{target.name}")


def _leaves(value) -> list:
    if isinstance(value, torch.Tensor):
        return [value]
    if isinstance(value, (tuple, list)):
        return [t for v in value for t in _leaves(v)]
    if isinstance(value, dict):
        return [t for v in value.values() for t in _leaves(v)]
    return []


def _equal(a, b) -> bool:
    """The tensors in `a` and in `b` are equal, one for one."""
    a, b = _leaves(a), _leaves(b)
    return len(a) == len(b) and all(x.shape == y.shape and torch.equal(x, y) for x, y in zip(a, b))


def verdict(target_dir: Path, candidate: Path, folder: Path, seeds: int = 2) -> str:
    """'ok', or why the candidate file fails the target (see the module docstring)."""
    target = load_target(target_dir)
    ref = _reference(target)
    folder.mkdir()
    (folder / "candidate.py").write_text(candidate.read_text())
    sys.path.insert(0, str(folder))
    try:
        cand = _module(folder / "candidate.py", f"cand_{folder.name}")
    finally:
        sys.path.remove(str(folder))
    entry, fn = getattr(cand, target.entry.name), getattr(ref, target.reference.function)
    make, tol = getattr(ref, target.reference.inputs), target.tolerance
    with torch.no_grad():
        for params in target.workloads:
            if target.entry.kind == "module":
                init = getattr(ref, target.reference.init_inputs)(**params)
                torch.manual_seed(0)
                fn = getattr(ref, target.reference.function)(*init)
                torch.manual_seed(0)
                entry = getattr(cand, target.entry.name)(*init)
            for seed in range(seeds):
                args = make(seed, **params)
                before = [t.clone() for t in _leaves(args)]
                ref_args = copy.deepcopy(args)
                want = _leaves(fn(*ref_args))
                written = [
                    i
                    for i, (a, b) in enumerate(zip(_leaves(ref_args), before))
                    if not torch.equal(a, b)
                ]
                want += [_leaves(ref_args)[i] for i in written]
                cand_args = copy.deepcopy(args)
                for i in written:
                    _leaves(cand_args)[i].fill_(float("nan"))
                got = _leaves(entry(*cand_args))
                got += [_leaves(cand_args)[i] for i in written]
                kept = [t for i, t in enumerate(_leaves(cand_args)) if i not in written]
                if not _equal(kept, [t for i, t in enumerate(before) if i not in written]):
                    return f"an input changed ({params}, seed {seed})"
                if len(got) != len(want) or not all(
                    g.shape == w.shape and torch.allclose(g, w, rtol=tol.rtol, atol=tol.atol)
                    for g, w in zip(got, want)
                ):
                    return f"wrong output ({params}, seed {seed})"
    return "ok"


def eat(*args: str, cwd: Path = ROOT) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "eat", *map(str, args)],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=120,
    )


def _one_line_error(done: subprocess.CompletedProcess, *words: str) -> None:
    assert done.returncode == 2, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), done.stderr
    for w in words:
        assert w in lines[0], lines[0]


@pytest.mark.parametrize(
    "source, want",
    [
        ("x = torch.ones(2, device='cuda')\n", 'x = torch.ones(2, device="cpu")\n'),
        ('g = torch.Generator(device="cuda:1")\n', 'g = torch.Generator(device="cpu")\n'),
        ("y = x.cuda()  # 'cuda'\n", "y = x.cpu()  # 'cuda'\n"),
        ("torch.cuda.synchronize()\nname = 'cudagraph'\n", None),
        ("x.cuda(0)\n", None),
    ],
)
def test_on_cpu_renames_only_device_names(source, want):
    assert on_cpu(source) == (source if want is None else want)


# ---- KernelBench ---------------------------------------------------------------------------


def test_kernelbench_target_has_the_problem_sizes_as_its_workload(kb_file, tmp_path):
    done = eat("import", "kernelbench", kb_file, "--runner", "cpu", "--out", tmp_path / "kb")
    assert done.returncode == 0, done.stderr
    t = load_target(tmp_path / "kb")
    assert (t.name, t.runner, t.language) == ("76_Linear_ReLU", "cpu", "pytorch")
    assert (t.entry.name, t.entry.kind, t.reference.function) == ("ModelNew", "module", "Model")
    assert t.workloads == [{"batch_size": 8, "in_features": 32, "out_features": 16}]
    assert "linear layer followed by ReLU" in t.description
    assert ".cpu()" in t.path("reference.py").read_text()  # `.cuda()` under --runner cpu


def test_kernelbench_inputs_are_seeded_and_follow_the_workload_sizes(kb_file, tmp_path):
    t = load_target(import_kernelbench(kb_file, tmp_path / "kb", "cpu", "published"))
    ref = _reference(t)
    w = t.workloads[0]
    assert _equal(ref.inputs(0, **w), ref.inputs(0, **w))
    assert not _equal(ref.inputs(0, **w), ref.inputs(1, **w))
    assert ref.inputs(0, **w)[0].shape == (8, 32)
    # input_shape is derived from the constants: it follows a workload's values
    assert ref.inputs(0, batch_size=3, in_features=5)[0].shape == (3, 5)
    assert ref.init_inputs(in_features=5) == [5, 16]
    assert ref.input_shape == (8, 32)  # the module itself keeps its values
    with pytest.raises(TypeError, match="unknown workload parameter"):
        ref.inputs(0, batch=3)


def test_kernelbench_solution_and_baseline_are_candidates_unchanged(kb_file, tmp_path):
    target = import_kernelbench(kb_file, tmp_path / "kb", "cpu", "published")
    for name, source in [("solution", KB_SOLUTION), ("wrong", KB_WRONG)]:
        (tmp_path / f"{name}.py").write_text(source)
    assert verdict(target, target / "baseline.py", tmp_path / "c0") == "ok"
    assert verdict(target, tmp_path / "solution.py", tmp_path / "c1") == "ok"
    assert verdict(target, tmp_path / "wrong.py", tmp_path / "c2").startswith("wrong output")


# ---- GPU MODE ------------------------------------------------------------------------------


def test_gpumode_target_takes_benchmarks_helpers_and_tolerance(gm_task, tmp_path):
    done = eat("import", "gpumode", gm_task, "--runner", "cpu", "--out", tmp_path / "gm")
    assert done.returncode == 0, done.stderr
    t = load_target(tmp_path / "gm")
    assert (t.name, t.entry.name, t.entry.kind) == ("grayscale_py", "custom_kernel", "function")
    # seeds dropped (the harness gives them), duplicates merged, the string by `case`
    assert t.workloads == [{"size": 32, "case": 0}, {"size": 48, "case": 1}]
    assert (t.tolerance.rtol, t.tolerance.atol) == (1e-4, 1e-4)
    assert sorted(p.name for p in t.root.iterdir()) == [
        "baseline.py",
        "eat_reference.py",
        "reference.py",
        "target.toml",
        "task.py",
        "utils.py",
    ]
    assert t.path("utils.py").read_text() == GM_UTILS
    assert "cuda" not in t.path("reference.py").read_text()
    assert t.baseline_source() == GM_SUBMISSION
    assert "preallocated output" in t.description


def test_gpumode_inputs_are_seeded_with_the_cases_parameters(gm_task, tmp_path):
    t = load_target(import_gpumode(gm_task, tmp_path / "gm", "cpu"))
    ref = _reference(t)
    [(rgb, out)] = ref.inputs(0, **t.workloads[1])
    assert rgb.shape == (48, 48, 3) and out.shape == (48, 48)
    assert float(rgb.max()) <= 0.5  # the "half" case
    assert torch.equal(ref.inputs(0, **t.workloads[1])[0][0], rgb)
    assert not torch.equal(ref.inputs(1, **t.workloads[1])[0][0], rgb)


def test_gpumode_submissions_are_candidates_unchanged(gm_task, tmp_path):
    target = import_gpumode(gm_task, tmp_path / "gm", "cpu")
    for name, source in [
        ("solution", GM_SOLUTION),
        ("wrong", GM_WRONG),
        ("fresh", GM_SUBMISSION.replace("out[...] = ", "out = ")),
    ]:
        (tmp_path / f"{name}.py").write_text(source)
    assert verdict(target, target / "baseline.py", tmp_path / "c0") == "ok"
    assert verdict(target, tmp_path / "solution.py", tmp_path / "c1") == "ok"
    assert verdict(target, tmp_path / "wrong.py", tmp_path / "c2").startswith("wrong output")
    # ref_kernel fills the preallocated buffer, so a candidate must too
    assert verdict(target, tmp_path / "fresh.py", tmp_path / "c3").startswith("wrong output")


def test_gpumode_without_benchmarks_or_submission_uses_tests_and_ref_kernel(tmp_path):
    yml = GM_TASK_YML.split("benchmarks:")[0]
    task = _gm_task(tmp_path / "src", submission=False, yml=yml)
    target = import_gpumode(task, tmp_path / "gm", "cpu")
    assert load_target(target).workloads == [{"size": 8, "case": 0}]
    assert "ref_kernel(data)" in (target / "baseline.py").read_text()
    assert verdict(target, target / "baseline.py", tmp_path / "c0") == "ok"


# ---- FlashInfer-Bench ----------------------------------------------------------------------


def test_flashinfer_target_has_axes_as_parameters_and_a_bytes_formula(fi_files, tmp_path):
    done = eat("import", "flashinfer", *fi_files, "--runner", "cpu", "--out", tmp_path / "fi")
    assert done.returncode == 0, done.stderr
    t = load_target(tmp_path / "fi")
    assert (t.name, t.entry.name, t.entry.kind) == ("rmsnorm_h64", "run", "function")
    assert t.workloads == [{"batch_size": 4}, {"batch_size": 7, "workload": 0}]
    assert t.metric("bytes", {"batch_size": 4}) == 4 * (4 * 64 + 64 + 4 * 64)
    assert (t.tolerance.rtol, t.tolerance.atol) == (1e-2, 1e-2)


def test_flashinfer_inputs_are_seeded_then_zeroed_outputs(fi_files, tmp_path):
    t = load_target(import_flashinfer(*fi_files, tmp_path / "fi", "cpu"))
    ref = _reference(t)
    x, weight, scale, out = ref.eat_inputs(0, **t.workloads[1])
    assert (x.shape, weight.shape, out.shape) == ((7, 64), (64,), (7, 64))
    assert scale == 0.5 and not out.any()
    assert _equal(ref.eat_inputs(0, **t.workloads[0]), ref.eat_inputs(0, **t.workloads[0]))
    assert not _equal(ref.eat_inputs(0, **t.workloads[0]), ref.eat_inputs(1, **t.workloads[0]))
    assert ref.eat_reference(x, weight, scale, out) is None and out.abs().sum() > 0


def test_flashinfer_dps_solution_and_baseline_are_candidates_unchanged(fi_files, tmp_path):
    target = import_flashinfer(*fi_files, tmp_path / "fi", "cpu")
    for name, source in [("solution", FI_SOLUTION), ("wrong", FI_WRONG)]:
        (tmp_path / f"{name}.py").write_text(source)
    assert verdict(target, target / "baseline.py", tmp_path / "c0") == "ok"
    assert verdict(target, tmp_path / "solution.py", tmp_path / "c1") == "ok"
    assert verdict(target, tmp_path / "wrong.py", tmp_path / "c2").startswith("wrong output")


def test_flashinfer_safetensors_inputs_are_copied_and_loaded(tmp_path):
    st = pytest.importorskip("safetensors.torch")
    # A trace set's layout: paths in a workload are relative to its root.
    root = tmp_path / "traceset"
    (root / "blob").mkdir(parents=True)
    weight = torch.linspace(-1, 1, 64)
    st.save_file({"w": weight}, str(root / "blob" / "rms.safetensors"))
    stored = {
        "definition": "rmsnorm_h64",
        "workload": {
            "uuid": "w-2",
            "axes": {"batch_size": 2},
            "inputs": {
                "weight": {"type": "safetensors", "path": "blob/rms.safetensors", "tensor_key": "w"}
            },
        },
    }
    d, w = _fi_files(root / "workloads" / "rmsnorm", workloads=[stored])
    t = load_target(import_flashinfer(d, w, tmp_path / "fi", "cpu"))
    assert t.workloads == [{"batch_size": 2, "workload": 0}]
    assert [p.name for p in (t.root / "data").iterdir()] == ["0_rms.safetensors"]
    args = _reference(t).eat_inputs(0, **t.workloads[0])
    assert torch.equal(args[1], weight)
    assert verdict(t.root, t.path("baseline.py"), tmp_path / "c0") == "ok"

    stored["workload"]["inputs"]["weight"]["tensor_key"] = "nope"
    w.write_text(json.dumps(stored) + "\n")
    with pytest.raises(BadInput, match="no tensor 'nope' of float32"):
        import_flashinfer(d, w, tmp_path / "fi2", "cpu")
    assert not (tmp_path / "fi2").exists()


def test_flashinfer_safetensors_without_the_package_is_bad_input(tmp_path):
    stored = copy.deepcopy(FI_WORKLOADS[1])
    stored["workload"]["inputs"]["weight"] = {
        "type": "safetensors",
        "path": "w.safetensors",
        "tensor_key": "w",
    }
    d, w = _fi_files(tmp_path / "src", workloads=[stored])
    with pytest.raises(BadInput, match="install the safetensors package"):
        import_flashinfer(d, w, tmp_path / "fi", "cpu", has_safetensors=lambda: False)


# ---- Malformed inputs, existing folders ----------------------------------------------------


def _malformed(tmp_path: Path, case: str) -> tuple[list, str]:
    """Arguments of `eat import` for a broken problem, and a word its error must name."""
    src = tmp_path / "src"
    src.mkdir()
    if case.startswith("kernelbench"):
        path = src / "1_Bad.py"
        path.write_text(
            KB_PROBLEM.replace("def get_inputs", "def make_inputs")
            if case == "kernelbench-no-get-inputs"
            else "class Model(:\n"
        )
        return ["kernelbench", path], "1_Bad.py"
    if case.startswith("gpumode"):
        task = _gm_task(src)
        yml = task / "task.yml"
        if case == "gpumode-cuda-task":
            yml.write_text(GM_TASK_YML.replace('lang: "py"', 'lang: "cu"'))
        elif case == "gpumode-bad-yaml":
            yml.write_text("files: [unclosed\n")
        elif case == "gpumode-missing-helper":
            (src / "problems" / "utils.py").unlink()
        return ["gpumode", task], "task.yml"
    definition = copy.deepcopy(FI_DEFINITION)
    workloads = copy.deepcopy(FI_WORKLOADS)
    if case == "flashinfer-dtype":
        definition["inputs"]["weight"]["dtype"] = "float4_e2m1"
    elif case == "flashinfer-axis":
        del workloads[1]["workload"]["axes"]["batch_size"]
    elif case == "flashinfer-no-run":
        definition["reference"] = FI_REFERENCE.replace("def run", "def forward")
    d, w = _fi_files(src, definition, workloads)
    if case == "flashinfer-json":
        d.write_text("{not json")
    if case == "flashinfer-no-workloads":
        return ["flashinfer", d], "batch_size"
    return ["flashinfer", d, w], "rmsnorm_h64.json" if case != "flashinfer-axis" else "line 2"


@pytest.mark.parametrize(
    "case",
    [
        "kernelbench-no-get-inputs",
        "kernelbench-syntax",
        "gpumode-cuda-task",
        "gpumode-bad-yaml",
        "gpumode-missing-helper",
        "flashinfer-json",
        "flashinfer-dtype",
        "flashinfer-axis",
        "flashinfer-no-run",
        "flashinfer-no-workloads",
    ],
)
def test_malformed_problems_exit_2_with_one_line(tmp_path, case):
    args, word = _malformed(tmp_path, case)
    _one_line_error(eat("import", *args, "--runner", "cpu", "--out", tmp_path / "out"), word)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["src"]  # nothing else written


def test_unknown_runner_exits_2(kb_file, tmp_path):
    _one_line_error(
        eat("import", "kernelbench", kb_file, "--runner", "mlx", "--out", tmp_path / "out"),
        "--runner 'mlx'",
    )
    assert not (tmp_path / "out").exists()


def test_existing_folder_is_left_untouched_and_an_empty_one_is_filled(kb_file, tmp_path):
    out = tmp_path / "taken"
    out.mkdir()
    (out / "notes.txt").write_text("mine")
    _one_line_error(
        eat("import", "kernelbench", kb_file, "--out", out), "taken", "not an empty folder"
    )
    assert [p.name for p in out.iterdir()] == ["notes.txt"]
    assert (out / "notes.txt").read_text() == "mine"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["src", "taken"]  # no temp folder left

    (out / "notes.txt").unlink()
    done = eat("import", "kernelbench", kb_file, "--out", out)
    assert done.returncode == 0, done.stderr
    assert load_target(out).runner == "cuda"


def test_default_folder_is_the_problem_name_in_the_working_folder(kb_file, tmp_path):
    done = eat("import", "kernelbench", kb_file, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert load_target(tmp_path / "76_Linear_ReLU").name == "76_Linear_ReLU"
    assert "76_Linear_ReLU" in done.stdout


# ---- Through the runner (a --runner cpu import, evaluated as `eat eval` would) -------------


def _evaluate(target_dir: Path, source: str) -> str:
    from eat.runners import runner_for

    target = load_target(target_dir)
    runner = runner_for(target)
    why = runner.unavailable(target)
    if why:
        pytest.skip(why)
    return runner.evaluate(target, source).status


def _quick(target_dir: Path) -> Path:
    """The imported target, its [evaluation] table merged with the tests' quick settings."""
    file = target_dir / "target.toml"
    data = tomllib.loads(file.read_text())
    data["evaluation"] = data.get("evaluation", {}) | tomllib.loads(QUICK_EVALUATION)["evaluation"]
    file.write_text(tomli_w.dumps(data))
    return target_dir


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["kernelbench", "gpumode", "flashinfer"])
def test_runner_accepts_baseline_and_solution_and_rejects_wrong(
    kind, tmp_path, kb_file, gm_task, fi_files
):
    if kind == "kernelbench":
        target = import_kernelbench(kb_file, tmp_path / "t", "cpu", "published")
        good, bad = KB_SOLUTION, KB_WRONG
    elif kind == "gpumode":
        target, good, bad = import_gpumode(gm_task, tmp_path / "t", "cpu"), GM_SOLUTION, GM_WRONG
    else:
        target, good, bad = (
            import_flashinfer(*fi_files, tmp_path / "t", "cpu"),
            FI_SOLUTION,
            FI_WRONG,
        )
    _quick(target)
    assert _evaluate(target, (target / "baseline.py").read_text()) == "ok"
    assert _evaluate(target, good) == "ok"
    assert _evaluate(target, bad) == "incorrect"
