"""Input sets too large for the cache are made where they are used: the manifest names their
seeds, and the harness makes them with the reference in its setup, before candidate code loads.

Here the cache's cap is set tiny (EAT_CACHE_MAX_GB), so the kits' small workloads stand for
GPU-sized ones. The GPU case runs on tests/fake_gpu's FAKE runtime (host memory, no GPU): it
proves the harness's path, not anything about a device.
"""

from __future__ import annotations

from pathlib import Path

import fake_gpu
import pytest

from eat.cache import inputs_dir
from eat.formats.kernelbench import import_kernelbench
from eat.runners import sandbox
from eat.runners.cpu import CpuRunner
from eat.runners.gpu import GpuRunner
from eat.runners.python import PythonRunner
from eat.runners.sets import grown, sets_detail
from eat.target import EvalConfig, load_target

KITS = Path(__file__).resolve().parent / "conformance" / "kits"
QUICK = EvalConfig(seeds=2, warmup=1, min_repeats=3, max_repeats=5, budget_s=0.05, timeout_s=30)


@pytest.fixture
def small_cache(tmp_path, monkeypatch):
    """A cache of its own whose cap (200 kB: room for 50 kB of one workload's sets) every kit
    workload exceeds."""
    monkeypatch.setenv("EAT_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("EAT_CACHE_MAX_GB", "0.0002")
    return tmp_path / "cache"


def _set_files() -> list[Path]:
    return list(inputs_dir().rglob("*.set"))


def _made_in_the_harness(ev, workloads: int) -> None:
    pool = QUICK.warmup + QUICK.max_repeats  # as many as the pool holds (pool_mb)
    assert (
        ev.detail["input_sets"]
        == [{"verify": QUICK.seeds, "timed": pool, "made": "harness"}] * workloads
    ), ev.detail
    assert _set_files() == []  # nothing of them was written


def test_the_cpu_harness_makes_sets_too_large_for_the_cache(small_cache):
    kit = load_target(KITS / "cpu")
    runner = CpuRunner()
    ev = runner.evaluate(kit, kit.baseline_source(), config=QUICK)
    assert ev.status == "ok", ev.message
    _made_in_the_harness(ev, len(kit.workloads))
    assert (
        runner.evaluate(kit, (KITS / "cpu" / "wrong.c").read_text(), config=QUICK).status
        == "incorrect"
    )
    # A second look at the same sets (a manifest kept beside them) still writes none.
    assert (
        runner.evaluate(kit, (KITS / "cpu" / "faster.c").read_text(), config=QUICK).status == "ok"
    )
    assert _set_files() == []


def test_a_gpu_sized_set_is_made_on_the_fake_device_not_written(small_cache):
    runtime = str(fake_gpu.build_runtime("cuda"))
    kit = load_target(KITS / "cuda_fake")
    runner = GpuRunner("cuda", runtime=runtime)
    ev = runner.evaluate(kit, (KITS / "cuda_fake" / "baseline.cu").read_text(), config=QUICK)
    assert ev.status == "ok", ev.message
    _made_in_the_harness(ev, len(kit.workloads))
    wrong = runner.evaluate(kit, (KITS / "cuda_fake" / "wrong.cu").read_text(), config=QUICK)
    assert wrong.status == "incorrect"


RELU = """import torch
import torch.nn as nn

class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        return torch.relu(x)

batch_size = 64
dim = 1024

def get_inputs():
    return [torch.randn(batch_size, dim)]

def get_init_inputs():
    return []
"""

# Patches torch at import, after which a reference made lazily would agree with it.
PATCHES_THE_REFERENCE = """import torch
import torch.nn as nn

torch.relu = lambda x: torch.zeros_like(x)

class ModelNew(nn.Module):
    def forward(self, x):
        return torch.relu(x)
"""


def test_python_sets_are_made_before_the_candidate_loads(small_cache, tmp_path):
    pytest.importorskip("torch")
    (tmp_path / "19_Relu.py").write_text(RELU)
    target = load_target(
        import_kernelbench(tmp_path / "19_Relu.py", tmp_path / "relu", "cpu", "published")
    )
    runner = PythonRunner("cpu", "pytorch")
    ev = runner.evaluate(target, target.baseline_source(), config=QUICK)
    assert ev.status == "ok", ev.message
    _made_in_the_harness(ev, 1)
    cheat = runner.evaluate(target, PATCHES_THE_REFERENCE, config=QUICK)
    assert cheat.status == "incorrect", cheat.message


def test_limits_grow_with_what_the_sets_hold_and_cost():
    cfg = EvalConfig(seeds=3, warmup=1, min_repeats=5, max_repeats=9)
    files = {"verify": [["a", "m"]] * 3, "time": [["b", "m"]] * 10, "bytes": 100, "make_s": 0.5}
    made = {"generate": {"verify": [0, 1, 2], "time": [7]}, "bytes": 1000, "make_s": 2.0}
    base = sandbox.Limits(wall_s=60, cpu_s=120, address_space_bytes=8000)
    got = grown(base, {"workloads": [files, made]}, cfg, "verify")
    # files: 3 held + 3 of buffers; made: its 3 sets + 3
    assert got.address_space_bytes == 8000 + 6 * 100 + 6 * 1000
    # making 3 sets and 3 calls at 2 s, 3 calls at 0.5 s, each counted twice over
    assert got.wall_s == 60 + 2 * 0.5 * 3 + 2 * 2.0 * 6 and got.cpu_s == 120 + 27
    timed = grown(
        sandbox.Limits(address_space_bytes=None, data_bytes=8000),
        {"workloads": [made]},
        cfg,
        "time",
    )
    assert timed.address_space_bytes is None and timed.data_bytes == 8000 + 4 * 1000
    assert sets_detail({"workloads": [files]}, cfg) == {}  # every set it wants, from the cache
    assert sets_detail({"workloads": [files, made]}, cfg) == {
        "input_sets": [
            {"verify": 3, "timed": 10, "made": "cache"},
            {"verify": 3, "timed": 1, "made": "harness"},
        ]
    }
