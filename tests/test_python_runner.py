"""The Python runner beyond the conformance kits: destination-passing arguments, nn.Module
entries, the examples, prompts for Python targets, and a GPU target on a machine without one.

Everything runs for real on the CPU: torch's CPU build and MLX's CPU build, in contained
child processes.
"""

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from eat.agents.llm import render
from eat.agents.offline import render as render_knobs
from eat.errors import TargetError
from eat.runners import runner_for
from eat.target import load_target

ROOT = Path(__file__).parent.parent

QUICK = """
[evaluation]
seeds = 2
warmup = 1
min_repeats = 3
max_repeats = 5
budget_s = 0.1
timeout_s = 60
"""


def _target(tmp_path: Path, toml: str, files: dict[str, str]) -> Path:
    (tmp_path / "target.toml").write_text(textwrap.dedent(toml) + QUICK)
    for name, text in files.items():
        (tmp_path / name).write_text(textwrap.dedent(text))
    return tmp_path


DPS_TOML = """
name = "dps_scale"
runner = "cpu"
language = "pytorch"
[entry]
name = "scale"
[reference]
file = "reference.py"
function = "reference"
inputs = "inputs"
[baseline]
file = "baseline.py"
[[workloads]]
n = 1000
[[workloads]]
n = 17
[tolerance]
rtol = 1e-6
"""

DPS_REF = """
import torch

def inputs(seed, n):
    g = torch.Generator().manual_seed(seed)
    return [torch.randn(n, generator=g), torch.empty(n)]

def reference(x, out):
    out.copy_(x * 2)
"""


@pytest.fixture
def dps(tmp_path):
    return load_target(
        _target(
            tmp_path,
            DPS_TOML,
            {"reference.py": DPS_REF, "baseline.py": "def scale(x, out):\n    out.copy_(x + x)\n"},
        )
    )


@pytest.mark.slow
@pytest.mark.parametrize(
    "body, status, words",
    [
        ("torch.mul(x, 2, out=out)", "ok", ""),
        ("out[:-1] = x[:-1] * 2", "incorrect", "never written"),  # the poison shows
        ("return x * 2", "incorrect", "gave output, argument[1]; the reference gives argument[1]"),
        ("out.copy_(x * 2); x.zero_()", "rejected", "argument[0]"),  # scribbles on its input
    ],
)
def test_destination_arguments_are_outputs(dps, body, status, words):
    ev = runner_for(dps).evaluate(dps, f"import torch\n\ndef scale(x, out):\n    {body}\n")
    assert ev.status == status, ev.message
    assert words in ev.message


def test_a_check_of_a_python_candidate_is_not_timed(dps):
    """timed=False (`eat check`): verified, no speedup, no timing process."""
    check = dps.evaluation.model_copy(update={"timed": False})
    runner = runner_for(dps)
    right = "import torch\n\ndef scale(x, out):\n    torch.mul(x, 2, out=out)\n"
    ev = runner.evaluate(dps, right, config=check)
    assert ev.status == "ok" and ev.speedup is None and "time_s" not in ev.durations
    wrong = runner.evaluate(dps, "def scale(x, out):\n    out.copy_(x)\n", config=check)
    assert wrong.status == "incorrect"


MODULE_TOML = """
name = "mlp"
runner = "cpu"
language = "pytorch"
[entry]
name = "ModelNew"
kind = "module"
[reference]
file = "reference.py"
function = "Model"
inputs = "inputs"
init_inputs = "init_inputs"
[baseline]
file = "baseline.py"
[[workloads]]
batch = 8
dim = 64
[tolerance]
rtol = 1e-4
atol = 1e-5
"""

MODULE_REF = """
import torch
from torch import nn

class Model(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.fc = nn.Linear(dim, dim)

    def forward(self, x):
        return torch.relu(self.fc(x))

def inputs(seed, batch, dim):
    return [torch.randn(batch, dim, generator=torch.Generator().manual_seed(seed))]

def init_inputs(batch, dim):
    return [dim]
"""


@pytest.mark.slow
def test_module_entries_are_built_with_the_same_weights(tmp_path):
    baseline = MODULE_REF.replace("class Model(", "class ModelNew(")
    target = load_target(
        _target(tmp_path, MODULE_TOML, {"reference.py": MODULE_REF, "baseline.py": baseline})
    )
    runner = runner_for(target)
    fused = baseline.replace(
        "torch.relu(self.fc(x))", "torch.addmm(self.fc.bias, x, self.fc.weight.t()).clamp_min_(0)"
    )
    assert runner.evaluate(target, fused).status == "ok"
    # Other weights (a different init order) give other outputs: the check is real.
    other = baseline.replace("super().__init__()", "super().__init__()\n        torch.randn(3)")
    ev = runner.evaluate(target, other)
    assert ev.status == "incorrect" and "output" in ev.message


def test_python_target_needs_inputs_and_no_cflags(tmp_path):
    path = _target(
        tmp_path,
        DPS_TOML.replace('inputs = "inputs"\n', ""),
        {"reference.py": DPS_REF, "baseline.py": "def scale(x, out): pass\n"},
    )
    with pytest.raises(TargetError, match="reference.inputs: required"):
        load_target(path)
    (path / "target.toml").write_text(
        DPS_TOML
        + QUICK.replace(
            "[evaluation]", '[knobs.F]\nkind = "cflags"\nvalues = ["-O3"]\n[evaluation]'
        )
    )
    with pytest.raises(TargetError, match="knobs"):
        load_target(path)
    (path / "target.toml").write_text(
        DPS_TOML.replace('language = "pytorch"', 'language = "triton"')
    )
    with pytest.raises(TargetError, match="language: 'triton' is not a language of the cpu"):
        load_target(path)


def test_python_knobs_render_as_assignments_read_by_the_baseline():
    target = load_target(ROOT / "examples" / "mlx_softmax")
    source = render_knobs(target, {"COMPILE": "True", "FUSED": "False"})
    assert source.startswith("COMPILE = True\nFUSED = False\n")
    scope: dict = {}
    exec(compile(source, "candidate.py", "exec"), scope)
    assert scope["COMPILE"] is True and scope["softmax"] is not scope["_softmax"]


@pytest.mark.slow
def test_mlx_example_baseline_and_fused_knob_are_ok():
    target = load_target(ROOT / "examples" / "mlx_softmax")
    runner = runner_for(target)
    # The example's own timing settings make a pool of 30-odd sets; correctness needs few.
    quick = target.evaluation.model_copy(
        update={"warmup": 1, "min_repeats": 3, "max_repeats": 5, "budget_s": 0.05}
    )
    for knobs in ({"COMPILE": "False", "FUSED": "False"}, {"COMPILE": "True", "FUSED": "True"}):
        ev = runner.evaluate(target, render_knobs(target, knobs), config=quick)
        assert ev.status == "ok", ev.message
        assert len(ev.workloads) == 3 and ev.speedup > 0


def test_prompts_describe_python_targets(dps):
    system = render("system.md.j2", target=dps)
    assert "function `scale`" in system and "destination-passing" in system
    context = render(
        "context.md.j2",
        target=dps,
        reference_source=DPS_REF,
        baseline_source="def scale(x, out): ...",
        learning="",
        skill="",
    )
    assert "Entry point: `scale` (function)" in context and "Shapes" not in context


def test_gpu_python_target_without_a_gpu_is_one_line_exit_2(tmp_path):
    path = _target(
        tmp_path,
        DPS_TOML.replace('runner = "cpu"', 'runner = "cuda"'),
        {"reference.py": DPS_REF, "baseline.py": "def scale(x, out): pass\n"},
    )
    done = subprocess.run(
        [sys.executable, "-m", "eat", "eval", str(path), str(path / "baseline.py")],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 2, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: dps_scale needs the cuda runner: ")
    assert "CUDA" in lines[0] and done.stdout == ""


@pytest.mark.slow
def test_processes_are_refused_unless_the_target_allows_them(dps):
    """The seccomp filter stops a candidate's child processes (a fork bomb, or a JIT compiler
    such as cpp_extension's) unless [evaluation] allow_processes says otherwise."""
    source = (
        "import subprocess\n\n"
        "def scale(x, out):\n"
        "    subprocess.run(['true'], check=True)\n"
        "    out.copy_(x * 2)\n"
    )
    runner = runner_for(dps)
    refused = runner.evaluate(dps, source)
    assert refused.status == "crash" and "PermissionError" in refused.message
    allowed = runner.evaluate(
        dps, source, config=dps.evaluation.model_copy(update={"allow_processes": True})
    )
    assert allowed.status == "ok", allowed.message


def test_every_language_has_a_source_file_name():
    from eat.target import LANGUAGES
    from eat.workspace import source_name

    names = {lang: source_name(lang) for langs in LANGUAGES.values() for lang in langs}
    assert names["pytorch"] == names["triton"] == names["mlx"] == "candidate.py"
    assert names["c"] == "candidate.c" and names["cuda"] == "candidate.cu"


@pytest.mark.slow
def test_an_llm_team_writes_python_candidates(dps, tmp_path, llm_server):
    """A scripted model (a real HTTP server on 127.0.0.1) sees a Python prompt and its fenced
    Python file is evaluated by the Python runner and kept as candidate.py."""
    import json

    from llm_server import Reply

    from eat.run import run_status, start_run

    plan = {"ideas": [{"idea": "multiply into out", "expected_gain": 1.2}]}
    fast = "import torch\n\ndef scale(x, out):\n    torch.mul(x, 2, out=out)\n"

    def answer(req):
        if "# Plan the next ideas" in json.dumps(req["messages"]):
            return Reply(json.dumps(plan))
        return Reply(f"Multiply straight into out.\n\n```python\n{fast}```\n")

    llm_server.default = answer
    ws, stop = start_run(
        dps.root,
        tmp_path / "ws",
        model="openai/eat-test-model",
        api_base=llm_server.base_url,
        teams=["coordinate"],
        max_evals=1,
        repairs=0,
        llm_backoff_s=0,
        llm_timeout_s=10,
        sleep=lambda s: None,
    )
    assert stop.code == "max_evals"
    assert run_status(ws)["best_candidate"] == "c0001"
    kept = next((ws / "teams").glob("*/candidates/c0001/candidate.py"))
    assert kept.read_text() == fast
    coder = [
        r for r in llm_server.requests if "# Plan the next ideas" not in json.dumps(r.messages)
    ][0]
    prompt = json.dumps(coder.messages)
    assert "function `scale`" in prompt and "```python" in prompt
