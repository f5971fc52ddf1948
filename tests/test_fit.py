"""Benchmark problems sized for a GPU, on the CPU: `--sizes fit` halves the largest size
constants until inputs, outputs and parameters fit and a reference call is quick; published
sizes stay where they fit, and a set larger than the sandbox's file cap is still made.

The problems here are written in KernelBench's format for these tests (not copies of
KernelBench's files)."""

import pytest

from eat.errors import BadInput
from eat.formats.common import fitted
from eat.formats.kernelbench import import_kernelbench
from eat.runners import runner_for
from eat.target import load_target

ELEMENTWISE = '''import torch
import torch.nn as nn

class Model(nn.Module):
    """max(x, 0)"""
    def __init__(self):
        super().__init__()

    def forward(self, x):
        return torch.relu(x)

batch_size = {batch}
dim = {dim}

def get_inputs():
    return [torch.rand(batch_size, dim)]

def get_init_inputs():
    return []
'''

MATMUL = """import torch
import torch.nn as nn

class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, A, B):
        return A @ B

N = 2048 * 2

def get_inputs():
    return [torch.rand(N, N), torch.rand(N, N)]

def get_init_inputs():
    return []
"""

GROUPED_CONV = """import torch
import torch.nn as nn

class Model(nn.Module):
    def __init__(self, channels, kernel_size, groups):
        super().__init__()
        self.conv = nn.Conv2d(channels, channels, kernel_size, groups=groups)

    def forward(self, x):
        return self.conv(x)

batch_size = 64
channels = 64
kernel_size = 3
groups = 32
height = 512
width = 512

def get_inputs():
    return [torch.rand(batch_size, channels, height, width)]

def get_init_inputs():
    return [channels, kernel_size, groups]
"""


def problem(tmp_path, name: str, text: str):
    path = tmp_path / "src" / name
    path.parent.mkdir(exist_ok=True)
    path.write_text(text)
    return path


def reference(tmp_path, name: str, text: str) -> tuple[str, dict]:
    """The reference an import writes for the problem, and its published workload."""
    t = load_target(
        import_kernelbench(problem(tmp_path, name, text), tmp_path / name[:-3], "cpu", "published")
    )
    return t.path("reference.py").read_text(), t.workloads[0]


def test_an_import_for_the_cpu_fits_a_gpu_sized_problem_and_says_so(tmp_path):
    src = problem(tmp_path, "19_Relu.py", ELEMENTWISE.format(batch=4096, dim=393216))
    t = load_target(import_kernelbench(src, tmp_path / "fit", "cpu"))
    # 2 x 4096 x 393216 floats (in and out) is 12 GiB; halving the largest size first gives
    # dim 3072, then batch_size 2048: 48 MiB
    assert t.workloads == [{"batch_size": 2048, "dim": 3072}]
    header = (tmp_path / "fit" / "target.toml").read_text()
    assert "batch_size = 4096 -> 2048; dim = 393216 -> 3072" in header
    assert "--sizes published" in header
    small = problem(tmp_path, "20_Small.py", ELEMENTWISE.format(batch=16, dim=256))
    assert load_target(import_kernelbench(small, tmp_path / "small", "cpu")).workloads == [
        {"batch_size": 16, "dim": 256}
    ]  # what fits is kept as published
    assert "the published ones fit" in (tmp_path / "small" / "target.toml").read_text()
    with pytest.raises(BadInput, match="sizes are fitted to the CPU only"):
        import_kernelbench(src, tmp_path / "gpu", "cuda", "fit")


def test_fitting_halves_the_largest_size_a_model_allows(tmp_path):
    ref, published = reference(tmp_path, "1_Matmul.py", MATMUL)
    assert published == {"N": 4096}  # `N = 2048 * 2` is a size constant too
    # Bytes alone (no time budget): A, B and A @ B at 4 bytes a float, within 16 MiB
    params, note = fitted(ref, published, tmp_path, max_bytes=16 << 20, max_call_s=1e9)
    assert params == {"N": 1024} and "N = 4096 -> 1024" in note
    # A call that is never quick enough: every size is halved down to its floor (under 16)
    params, _ = fitted(ref, published, tmp_path, max_bytes=16 << 20, max_call_s=0)
    assert params == {"N": 8}

    ref, published = reference(tmp_path, "2_Conv.py", GROUPED_CONV)
    params, _ = fitted(ref, published, tmp_path, max_bytes=16 << 20, max_call_s=1e9)
    assert params["kernel_size"] == 3  # under 16: a kernel size, never halved
    assert params["channels"] % params["groups"] == 0  # halving further would break the conv
    assert params["groups"] <= 32 and params["height"] < 512


def test_a_problem_that_does_not_run_is_a_clear_error(tmp_path):
    broken = ELEMENTWISE.format(batch=4, dim=8).replace(
        "return [torch.rand(batch_size, dim)]", "raise ValueError('no inputs today')"
    )
    with pytest.raises(
        BadInput,
        match=r"3_Broken.py: on the CPU, get_inputs\(\) failed: "
        "ValueError: no inputs today",
    ):
        import_kernelbench(problem(tmp_path, "3_Broken.py", broken), tmp_path / "b", "cpu")
    assert not (tmp_path / "b").exists()
    no_build = ELEMENTWISE.format(batch=4, dim=8).replace(
        "super().__init__()", "super().__init__(); self.w = bogus"
    )
    with pytest.raises(
        BadInput,
        match="on the CPU, its Model does not build: NameError: name 'bogus' is not defined",
    ):
        import_kernelbench(problem(tmp_path, "4_NoBuild.py", no_build), tmp_path / "n", "cpu")
    gpu_only = ELEMENTWISE.format(batch=4, dim=8).replace(
        "return torch.relu(x)", "torch.cuda.synchronize()\n        return torch.relu(x)"
    )
    with pytest.raises(
        BadInput,
        match=r"on the CPU, its forward failed: .*CUDA.*"
        r"\(it needs a GPU: import it with --runner cuda\)",
    ):
        import_kernelbench(problem(tmp_path, "5_GpuOnly.py", gpu_only), tmp_path / "g", "cpu")
    lacking = "import eat_no_such_package\n" + ELEMENTWISE.format(batch=4, dim=8)
    with pytest.raises(  # KernelBench's Mamba2 problems import einops
        BadInput, match="on the CPU, it imports eat_no_such_package, which eat's Python lacks"
    ):
        import_kernelbench(problem(tmp_path, "6_Lacking.py", lacking), tmp_path / "l", "cpu")


@pytest.mark.slow
def test_a_300_mb_input_evaluates_on_the_cpu_fitted_and_as_published(tmp_path):
    """75 million floats in, as many out: a set of 600 MB, over the sandbox's 256 MB file cap
    for candidates (the maker of sets runs no candidate: its cap is the cache's)."""
    src = problem(tmp_path, "19_Big.py", ELEMENTWISE.format(batch=1, dim=75_000_000))
    cfg = None
    for sizes in ("fit", "published"):
        target = load_target(import_kernelbench(src, tmp_path / sizes, "cpu", sizes))
        cfg = target.evaluation.model_copy(
            update={"seeds": 1, "warmup": 1, "min_repeats": 3, "max_repeats": 3, "pool_mb": 64}
        )
        ev = runner_for(target).evaluate(target, target.baseline_source(), config=cfg)
        assert ev.status == "ok", (sizes, ev.message)
        assert ev.speedup > 0  # timed against itself (how close to 1x: bench/suite.py)
    assert target.workloads == [{"batch_size": 1, "dim": 75_000_000}]


@pytest.mark.slow
def test_the_suite_sweep_imports_and_judges_every_problem_of_a_checkout(tmp_path):
    import json
    import subprocess
    import sys
    from pathlib import Path

    level = tmp_path / "kb" / "level1"
    level.mkdir(parents=True)
    (level / "1_Relu.py").write_text(ELEMENTWISE.format(batch=64, dim=4096))
    (level / "2_Broken.py").write_text(
        ELEMENTWISE.format(batch=4, dim=8).replace(
            "return [torch.rand(batch_size, dim)]", "raise ValueError('no inputs today')"
        )
    )
    suite = Path(__file__).resolve().parents[1] / "bench" / "suite.py"
    done = subprocess.run(
        [sys.executable, str(suite), "kernelbench", str(tmp_path / "kb"), "--level", "1", "--json"],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 1, done.stderr  # not every problem is ok
    report = json.loads(done.stdout)
    assert (report["ok"], report["total"]) == (1, 2)
    relu, broken = report["problems"]
    assert (relu["problem"], relu["status"], relu["import"]) == ("1_Relu", "ok", "ok")
    assert relu["speedup"] > 0  # the reference against itself (how close is the bench's job)
    assert broken["import"] == "failed" and "no inputs today" in broken["message"]


HINGE = """import torch
import torch.nn as nn

class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, predictions, targets):
        return torch.mean(torch.clamp(1 - predictions * targets, min=0))

batch_size = 8192
input_shape = (8192,)
kernel_size = (3, 5)

def get_inputs():
    return [torch.rand(batch_size, *input_shape), torch.randint(0, 2, (batch_size,)).float()]

def get_init_inputs():
    return []
"""


@pytest.mark.slow
def test_tuple_elements_are_sizes_and_sizes_that_must_match_are_halved_together(tmp_path):
    """`input_shape = (8192,)`: its element is a parameter (input_shape_0). The forward
    broadcasts batch x dim against batch, so neither can be halved alone: both are, together."""
    src = problem(tmp_path, "100_Hinge.py", HINGE)
    published = load_target(import_kernelbench(src, tmp_path / "pub", "cpu", "published"))
    assert published.workloads == [
        {"batch_size": 8192, "input_shape_0": 8192, "kernel_size_0": 3, "kernel_size_1": 5}
    ]
    ref, params = reference(tmp_path, "100_Hinge.py", HINGE)
    fit, _ = fitted(ref, params, tmp_path, max_bytes=16 << 20, max_call_s=1e9)
    # 2048 x 2048 floats are 16 MiB, and the targets a little more: 1024, kernel sizes kept
    assert fit == {
        "batch_size": 1024,
        "input_shape_0": 1024,
        "kernel_size_0": 3,
        "kernel_size_1": 5,
    }
    target = load_target(import_kernelbench(src, tmp_path / "fit", "cpu"))
    assert target.workloads[0]["batch_size"] == target.workloads[0]["input_shape_0"] < 8192
    assert verdict_ok(target)


def verdict_ok(target) -> bool:
    cfg = target.evaluation.model_copy(
        update={"seeds": 1, "warmup": 1, "min_repeats": 3, "max_repeats": 3}
    )
    ev = runner_for(target).evaluate(target, target.baseline_source(), config=cfg)
    return ev.status == "ok"


WIDE_MLP = """import torch
import torch.nn as nn

class Model(nn.Module):
    def __init__(self, input_size, hidden_layer_sizes, output_size):
        super().__init__()
        layers, current = [], input_size
        for hidden in hidden_layer_sizes:
            layers += [nn.Linear(current, hidden), nn.ReLU()]
            current = hidden
        self.network = nn.Sequential(*layers, nn.Linear(current, output_size))

    def forward(self, x):
        return self.network(x)

batch_size = 16
input_size = 2048
hidden_layer_sizes = [4096, 4096]
output_size = 1024

def get_inputs():
    return [torch.rand(batch_size, input_size)]

def get_init_inputs():
    return [input_size, hidden_layer_sizes, output_size]
"""


def test_list_elements_are_sizes_too(tmp_path):
    """`hidden_layer_sizes = [4096, 4096]` (KernelBench level 3's wide MLP, scaled down here):
    its elements are parameters, so fitting can shrink the weights they size; the model still
    gets a list. Before, the list was no parameter and the published weights stayed."""
    ref, published = reference(tmp_path, "2_WideMLP.py", WIDE_MLP)
    assert published == {
        "batch_size": 16,
        "input_size": 2048,
        "hidden_layer_sizes_0": 4096,
        "hidden_layer_sizes_1": 4096,
        "output_size": 1024,
    }
    # The weights: (2048 + 4096 + 1024) x 4096 floats, 112 MiB; within 16 MiB the hidden sizes
    # (the largest) are halved first
    fit, _ = fitted(ref, published, tmp_path, max_bytes=16 << 20, max_call_s=1e9)
    assert fit["hidden_layer_sizes_0"] < 4096 and fit["hidden_layer_sizes_1"] < 4096
    target = load_target(
        import_kernelbench(problem(tmp_path, "2_WideMLP.py", WIDE_MLP), tmp_path / "fit", "cpu")
    )
    assert verdict_ok(target)


NO_META = """import torch
import torch.nn as nn

class Model(nn.Module):
    def __init__(self, img_size=64):
        super().__init__()
        # A value read from a tensor as the model is built (Swin's drop-path rates): the meta
        # device cannot build it.
        self.rate = torch.linspace(0, 0.1, 4)[1].item()
        self.img_size = img_size
        self.proj = nn.Conv2d(3, 8, 4, stride=4)

    def forward(self, x):
        assert x.shape[-1] == self.img_size, "input image size does not match the model"
        return self.proj(x) * (1 - self.rate)

batch_size = 64
image_size = 64

def get_inputs():
    return [torch.rand(batch_size, 3, image_size, image_size)]

def get_init_inputs():
    return []
"""


def test_a_model_the_meta_device_cannot_build_keeps_the_sizes_its_forward_needs(tmp_path):
    """KernelBench level 3's Swin models: the image size is a constant of get_inputs only, the
    model keeps its own default; halving it fails the forward. Without the meta device (the
    model reads a tensor's value as it is built) each halving is checked by a real call."""
    ref, published = reference(tmp_path, "29_NoMeta.py", NO_META)
    fit, _ = fitted(ref, published, tmp_path, max_bytes=16 << 20, max_call_s=0)
    assert fit == {"batch_size": 8, "image_size": 64}  # as small as it goes, the image kept
    # Nothing to halve (the batch under 16, the image needed): kept, and the header says why
    _, note = fitted(ref, published | {"batch_size": 8}, tmp_path, max_call_s=0)
    assert "the published ones, kept: none could be halved" in note
    # Bytes counted on the real device (not 0): 64 x 3 x 64 x 64 floats in (3 MiB), 64 x 8 x
    # 16 x 16 out (0.5 MiB) and the conv's 392 parameters
    _, note = fitted(ref, published, tmp_path, max_call_s=1e9)
    assert "inputs, outputs and parameters 4 MiB" in note and "published ones fit" in note
