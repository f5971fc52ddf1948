"""examples/cuda_triton_softmax without a GPU: every knob value's kernels run in Triton's own
interpreter (TRITON_INTERPRET=1, numpy on the CPU) and must match the reference.

This checks the kernels' indexing, masking and reductions, not their speed; the runner itself
needs a CUDA GPU (scripts/gpu_check.sh). The interpreter is set up before triton is imported,
so each check runs in a child process.
"""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from eat.agents.offline import defaults, render
from eat.target import load_target

EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "cuda_triton_softmax"

CHILD = r"""
import importlib.util, json, sys
import torch

def load(path, name):
    spec = importlib.util.spec_from_file_location(name, path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod

ref = load(sys.argv[1], "reference")
results = []
for source in json.loads(sys.stdin.read()):
    scope = {}
    exec(compile(source, "candidate.py", "exec"), scope)
    worst = 0.0
    # Rows shorter and longer than every CHUNK, and one whose length is no power of two.
    for rows, cols in [(3, 300), (2, 2500), (4, 17)]:
        for seed in (0, 1):
            (x,) = ref.inputs(seed, rows, cols)
            want = ref.reference(x)
            got = scope["softmax"](x.clone())
            worst = max(worst, ((got - want).abs() / (want.abs() + want.abs().mean())).max().item())
    results.append(worst)
print(json.dumps(results))
"""


def _configurations(target) -> list[dict]:
    """The baseline, each knob value alone, and the combinations a tuned run would pick."""
    base = defaults(target)
    out = [base]
    for name, knob in target.knobs.items():
        out += [base | {name: v} for v in knob.values[1:]]
    out.append(base | {"ONLINE": "True", "CHUNK": 2048, "NUM_WARPS": 8})
    out.append(base | {"SINGLE": "True", "NUM_WARPS": 16})
    return out


@pytest.mark.slow
def test_every_knob_value_is_correct_in_the_triton_interpreter(tmp_path):
    pytest.importorskip(
        "triton", reason="triton is not installed (the test extra has it on Linux x86_64)"
    )
    target = load_target(EXAMPLE)
    configs = _configurations(target)
    done = subprocess.run(
        [sys.executable, "-c", CHILD, str(target.path(target.reference.file))],
        input=json.dumps([render(target, c) for c in configs]),
        capture_output=True,
        text=True,
        timeout=600,
        cwd=tmp_path,
        env=os.environ | {"TRITON_INTERPRET": "1"},
    )
    assert done.returncode == 0, done.stderr[-3000:]
    errors = json.loads(done.stdout.strip().splitlines()[-1])
    assert len(errors) == len(configs)
    for config, err in zip(configs, errors):
        assert err <= target.tolerance.rtol, (config, err)
