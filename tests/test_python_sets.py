"""The Python runner's input sets: made once per target by a reference child, kept on disk
under a key of the target's content, read by the harness from their files; timed calls get
sets verification never used.

Real child processes throughout; MLX targets where the framework does not matter (its import
takes milliseconds, torch's seconds).
"""

from __future__ import annotations

import textwrap
from pathlib import Path

import numpy as np
import pytest

from eat.runners import inputs, runner_for, sets
from eat.target import load_target

TOML = """
name = "nest"
runner = "mlx"
language = "mlx"
[entry]
name = "combine"
[reference]
file = "reference.py"
function = "reference"
inputs = "inputs"
[baseline]
file = "baseline.py"
[[workloads]]
n = 300000
[[workloads]]
n = 1000
[tolerance]
rtol = 1e-6
[evaluation]
seeds = 2
warmup = 1
min_repeats = 5
max_repeats = 8
budget_s = 0.5
timeout_s = 60
"""

# Not only plain float32 arrays: a dict holding a number and a tuple with a float16 array.
REFERENCE = """
import mlx.core as mx
import numpy as np

def inputs(seed, n):
    rng = np.random.default_rng(seed)
    x = mx.array(rng.standard_normal(n).astype(np.float32))
    y = mx.array(rng.standard_normal(n).astype(np.float32)).astype(mx.float16)
    return [x, {"scale": 3, "pair": (y, 0.5)}]

def reference(x, opts):
    y, w = opts["pair"]
    return x * opts["scale"] + y.astype(mx.float32) * w
"""

# Each call costs a fixed 5 ms on top of the work, so a replay's gain is plain to see.
BASELINE = """
import time
import mlx.core as mx

def combine(x, opts):
    time.sleep(0.005)
    y, w = opts["pair"]
    return x * opts["scale"] + y.astype(mx.float32) * w
"""

MEMO = """
import time
import numpy as np
import mlx.core as mx

_memo = {}

def combine(x, opts):
    a = np.asarray(x)
    key = (float(a[0]), float(a[-1]), a.shape)
    if key not in _memo:
        time.sleep(0.005)
        y, w = opts["pair"]
        _memo[key] = x * opts["scale"] + y.astype(mx.float32) * w
    return _memo[key]
"""


def _own_target(folder: Path, monkeypatch, files: dict[str, str]) -> Path:
    """A target in `folder` with a cache of its own (beside it)."""
    monkeypatch.setenv("EAT_CACHE_DIR", str(folder.parent / "cache"))
    sets.forget()
    folder.mkdir(exist_ok=True)
    for name, text in files.items():
        (folder / name).write_text(textwrap.dedent(text))
    return folder


@pytest.fixture
def target(tmp_path, monkeypatch):
    """The nest target in a folder of its own, with a cache of its own."""
    return _own_target(
        tmp_path / "nest",
        monkeypatch,
        {"target.toml": TOML, "reference.py": REFERENCE, "baseline.py": BASELINE},
    )


@pytest.fixture
def children(monkeypatch) -> list[list[str]]:
    """The command of every contained process started from here on."""
    started = []
    real_run = sets.sandbox.run
    monkeypatch.setattr(
        sets.sandbox, "run", lambda cmd, **kw: started.append(cmd) or real_run(cmd, **kw)
    )
    return started


def _preparers(started: list[list[str]]) -> int:
    return sum(cmd[-2:] == ["eat.runners.py_harness", "prepare"] for cmd in started)


def _set_folders(folder: Path) -> list[Path]:
    return sorted((folder.parent / "cache" / "inputs").iterdir())


def _check(target):
    """The evaluation config of `eat check`: verify only (what the set tests need)."""
    return target.evaluation.model_copy(update={"timed": False})


def test_a_later_evaluation_makes_no_sets(target, children):
    """The first evaluation starts one reference child; a later process (the per-process
    memory cleared) finds the manifest and starts none, and no set file is written again."""
    t = load_target(target)
    runner = runner_for(t)
    assert runner.evaluate(t, BASELINE).status == "ok"
    assert _preparers(children) == 1
    (folder,) = _set_folders(target)
    made = {p.name: p.stat().st_mtime_ns for p in folder.iterdir()}
    # Verification seeds, then warmup + max_repeats timed seeds per workload, none shared.
    assert {n for n in made if n.startswith("w1-")} == {"w1-s0.set", "w1-s1.set"} | {
        f"w1-s{inputs.TIMED_SEED0 + j}.set" for j in range(1 + 8)
    }
    sets.forget()
    ev = runner_for(load_target(target)).evaluate(t, BASELINE)
    assert ev.status == "ok" and ev.speedup
    assert _preparers(children) == 1
    assert {p.name: p.stat().st_mtime_ns for p in folder.iterdir()} == made


def test_a_changed_reference_or_workload_list_gets_new_sets(target, children):
    runner = runner_for(load_target(target))
    assert runner.evaluate(load_target(target), BASELINE, config=_check(load_target(target))).ok
    ref = target / "reference.py"
    ref.write_text(ref.read_text().replace('"scale": 3', '"scale": 4'))
    t = load_target(target)
    # The baseline reads the scale from its arguments: right on the new sets too, so they
    # were made from the new reference; one that keeps the old scale is now wrong.
    assert runner.evaluate(t, BASELINE, config=_check(t)).ok
    stale = BASELINE.replace('opts["scale"]', "3")
    assert runner.evaluate(t, stale, config=_check(t)).status == "incorrect"
    toml = target / "target.toml"
    toml.write_text(toml.read_text().replace("n = 1000\n", "n = 1000\n[[workloads]]\nn = 17\n"))
    t = load_target(target)
    assert runner.evaluate(t, BASELINE, config=_check(t)).ok
    assert _preparers(children) == 3
    assert len(_set_folders(target)) == 3


def test_values_in_nested_arguments_are_checked(target):
    """The number and the float16 array inside the dict reach the candidate as they reached
    the reference: a candidate that drops the tuple's weight is wrong."""
    t = load_target(target)
    wrong = BASELINE.replace("* w", "")
    ev = runner_for(t).evaluate(t, wrong, config=_check(t))
    assert ev.status == "incorrect" and "output" in ev.message


def test_timed_calls_get_sets_a_memo_has_not_seen(target):
    """A memo keyed on input content is level with the baseline when every timed call has a
    set of its own; squeeze the pool to one set (pool_mb) and it replays its way ahead."""
    t = load_target(target)
    runner = runner_for(t)
    fresh = runner.evaluate(t, MEMO)
    repeating = runner.evaluate(t, MEMO, config=t.evaluation.model_copy(update={"pool_mb": 1}))
    assert fresh.status == repeating.status == "ok", (fresh.message, repeating.message)
    big = 0  # n = 300000: 3 MB a set, so pool_mb = 1 holds one
    assert fresh.workloads[big].speedup < 2, fresh.workloads[big].speedup
    assert repeating.workloads[big].speedup > 4, repeating.workloads[big].speedup


TORCH_TOML = """
name = "bf16"
runner = "cpu"
language = "pytorch"
[entry]
name = "add"
[reference]
file = "reference.py"
function = "reference"
inputs = "inputs"
[baseline]
file = "baseline.py"
[[workloads]]
n = 64
[tolerance]
rtol = 1e-2
[evaluation]
seeds = 2
timeout_s = 60
"""

# numpy has no bfloat16: the set file keeps its bits, the harness views them as bfloat16 again.
TORCH_REFERENCE = """
import torch

def inputs(seed, n):
    g = torch.Generator().manual_seed(seed)
    return [(torch.randn(n, generator=g).bfloat16(), 2), torch.empty(n, dtype=torch.bfloat16)]

def reference(pair, out):
    x, k = pair
    torch.mul(x, k, out=out)
"""


@pytest.mark.slow  # three processes that import torch
def test_bfloat16_inputs_and_outputs_of_torch(tmp_path, monkeypatch):
    right = "def add(pair, out):\n    out.copy_(pair[0] * pair[1])\n"
    folder = _own_target(
        tmp_path / "bf16",
        monkeypatch,
        {"target.toml": TORCH_TOML, "reference.py": TORCH_REFERENCE, "baseline.py": right},
    )
    t = load_target(folder)
    runner = runner_for(t)
    assert runner.evaluate(t, right, config=_check(t)).status == "ok"
    wrong = runner.evaluate(t, right.replace("pair[1]", "3"), config=_check(t))
    assert wrong.status == "incorrect" and "argument[1]" in wrong.message


def test_checks_made_on_the_device_never_pass_what_the_host_refuses():
    """TorchBackend.close and .same decide the common case where the arrays are (no copy to
    the host): whatever they pass, verify.compare and numpy's equality pass too, down to
    one-ulp margins, NaN, infinities, half precision and mismatched types."""
    torch = pytest.importorskip("torch")
    from eat.runners.py_backends import TorchBackend
    from eat.runners.verify import compare

    be = TorchBackend("cpu")
    rng = np.random.default_rng(0)
    rtol, atol = 1e-4, 1e-6
    ref = rng.standard_normal(4096).astype(np.float32)
    bound = np.abs(ref) * rtol + (atol + rtol * np.abs(ref).mean())
    near = [ref + bound * f for f in (0.0, 0.5, 0.999, 1.001, 2.0, -0.999, -1.001)]
    odd = ref.copy()
    odd[7] = np.nan
    wild = ref.copy()
    wild[3] = np.inf
    cases = [(o.astype(np.float32), ref) for o in near] + [
        (odd, ref),
        (odd, odd),
        (wild, wild),
        (ref.astype(np.float64), ref),
    ]
    passed = 0
    for out, want in cases:
        here = be.close(torch.from_numpy(out), torch.from_numpy(want), rtol, atol)
        if here:
            passed += 1
            assert compare(out, want, rtol, atol) is None
    assert passed >= 3  # the in-tolerance ones do pass here
    half = torch.from_numpy(ref).half()
    assert be.close(half, torch.from_numpy(be.numpy(half)), rtol, atol)

    a = torch.from_numpy(odd)
    assert be.same(a, a.clone()) and np.array_equal(be.numpy(a), odd, equal_nan=True)
    b = a.clone()
    b[0] += 1
    assert not be.same(b, a) and not be.same(a, a.double())


def test_a_set_keeps_the_shape_of_a_0_d_output(tmp_path):
    """A loss returns a 0-d tensor: its set holds it as 0-d, not as an array of one element
    (KernelBench's MSELoss judged against itself was `incorrect`: float32[] wanted float32[1])."""
    path = tmp_path / "w0-s0.set"
    inputs._write_set(
        path,
        {
            "inputs": {"x": np.ones((2, 3), np.float32)},
            "expected": {"out": np.asarray(np.float32(0.5))},
        },
    )
    got = inputs.SetFiles(str(tmp_path), [[path.name, inputs.fingerprint(path)]])[0]
    assert got["expected"]["out"].shape == () and got["inputs"]["x"].shape == (2, 3)
