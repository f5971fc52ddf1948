"""GPU MODE reference-kernels tasks: a folder with task.yml, reference.py and its helpers.

reference.py defines `generate_input(**params, seed)` and `ref_kernel(data)`; a submission
defines `custom_kernel(data)`. The target's entry is `custom_kernel` (kind "function"), called
with one argument, the task's `data`. The task's files are copied unchanged (apart from device
names under `--runner cpu`) and a small eat_reference.py gives the harness `inputs()` and the
reference. Submissions import the task's modules by name (`from task import input_t`) but run
from a temporary folder: eat_reference.py imports them all, so they sit in sys.modules of the
harness process, which loads the reference before any candidate or baseline.
"""

from __future__ import annotations

import ast
from pathlib import Path

import yaml

from eat.errors import BadInput, read_file
from eat.formats.common import (
    check_runner,
    on_cpu,
    parse_python,
    safe_name,
    top_level_names,
    write_target,
)

# Files the importer writes next to the task's own.
_OURS = ("target.toml", "eat_reference.py", "baseline.py")
# GPU MODE's match_reference defaults (torch.allclose's).
DEFAULT_TOLERANCE = {"rtol": 1e-5, "atol": 1e-8}

_REFERENCE = '''"""What eat needs of the GPU MODE task {name}, written by `eat import gpumode`."""

import importlib
import sys
from pathlib import Path

_HERE = str(Path(__file__).resolve().parent)
# Candidates import these by name from a temporary folder: importing them here leaves them in
# sys.modules, where a candidate's `from task import input_t` finds them.
_MODULES = {modules!r}
sys.path.insert(0, _HERE)
try:
    for _name in _MODULES:
        sys.modules.pop(_name, None)  # a same-named module from elsewhere must not answer
    for _name in _MODULES:
        importlib.import_module(_name)
finally:
    sys.path.remove(_HERE)
_task = sys.modules["reference"]

# generate_input's parameters that are not numbers, by the workload parameter `case`.
_CASES = {cases!r}


def inputs(seed, case=None, **params):
    """The call arguments for one workload: the task's `data`, made with `seed`."""
    extra = _CASES[int(case)] if case is not None else {{}}
    return [_task.generate_input(**params, **extra, seed=seed)]


def ref_kernel(data):
    return _task.ref_kernel(data)
'''

_FALLBACK_BASELINE = '''\
"""Baseline of {name}: the task's ref_kernel (the task has no sample submission)."""

from reference import ref_kernel


def custom_kernel(data):
    return ref_kernel(data)
'''

_HEADER = """Imported by `eat import gpumode` from {src}.
A candidate is a GPU MODE submission: a Python file defining custom_kernel(data), where data is
what the task's generate_input returns. Buffers in data that ref_kernel writes into are outputs
too: they are poisoned before each call and compared after it; every other tensor in data must
stay unchanged. The task's modules (task, utils, reference...) are importable by name."""


def _workloads(cases: list, yml: Path, key: str) -> tuple[list[dict], list[dict]]:
    """(workloads, non-numeric parameters by case index) from task.yml's `key` list."""
    workloads, extras = [], []
    for i, case in enumerate(cases):
        if not isinstance(case, dict):
            raise BadInput(f"{yml}: {key}[{i}]: not a mapping of generate_input arguments")
        params = {k: v for k, v in case.items() if k != "seed"}  # the harness gives the seed
        numbers = {
            k: v
            for k, v in params.items()
            if isinstance(v, (int, float)) and not isinstance(v, bool)
        }
        others = {k: v for k, v in params.items() if k not in numbers}
        if others:
            if others not in extras:
                extras.append(others)
            numbers["case"] = extras.index(others)
        if numbers not in workloads:
            workloads.append(numbers)
    return workloads, extras


def _tolerance(tree: ast.Module) -> dict:
    """The loosest rtol/atol literals reference.py passes anywhere (check_implementation)."""
    found: dict[str, list[float]] = {"rtol": [], "atol": []}
    for node in ast.walk(tree):
        if isinstance(node, ast.keyword) and node.arg in found:
            try:
                value = ast.literal_eval(node.value)
            except (ValueError, SyntaxError, TypeError):
                continue
            if isinstance(value, (int, float)) and not isinstance(value, bool) and value >= 0:
                found[node.arg].append(float(value))
    return {k: max(v) if v and max(v) > 0 else DEFAULT_TOLERANCE[k] for k, v in found.items()}


def import_gpumode(src: Path, out: Path | None = None, runner: str = "cuda") -> Path:
    """Write a target folder for the GPU MODE task folder `src` (or its task.yml)."""
    check_runner(runner)
    src = Path(src)
    task_dir = src.parent if src.name == "task.yml" else src
    yml = task_dir / "task.yml"
    if not yml.is_file():
        raise BadInput(f"{task_dir}: no task.yml: not a GPU MODE task folder")
    try:
        spec = yaml.safe_load(read_file(yml))
    except yaml.YAMLError as e:
        raise BadInput(f"{yml}: not valid YAML: {' '.join(str(e).split())}") from None
    if not isinstance(spec, dict):
        raise BadInput(f"{yml}: not a mapping of task settings")
    if spec.get("lang") != "py":
        raise BadInput(
            f"{yml}: lang: {spec.get('lang')!r}: only Python tasks (lang: py) can be imported"
        )

    config = spec.get("config")
    main = config.get("main") if isinstance(config, dict) else None
    copies: dict[str, Path] = {}
    files = spec.get("files")
    if not isinstance(files, list) or not files:
        raise BadInput(f"{yml}: files: missing or not a list of {{name, source}}")
    for i, f in enumerate(files):
        if (
            not isinstance(f, dict)
            or not isinstance(f.get("name"), str)
            or not isinstance(f.get("source"), str)
        ):
            raise BadInput(f"{yml}: files[{i}]: not a {{name, source}} mapping")
        # The submission slot is the candidate's; the task's own evaluator is not needed.
        if f["source"] == "@SUBMISSION@" or f["name"] == main:
            continue
        path = task_dir / f["source"]
        if not path.is_file():
            raise BadInput(f"{yml}: files[{i}]: {f['source']} not found")
        if Path(f["name"]).is_absolute() or ".." in Path(f["name"]).parts:
            raise BadInput(f"{yml}: files[{i}]: name {f['name']!r} leaves the task folder")
        if f["name"] in _OURS:
            raise BadInput(f"{yml}: files[{i}]: {f['name']} is a name the importer needs")
        copies[f["name"]] = path
    if "reference.py" not in copies:
        raise BadInput(f"{yml}: files: no reference.py")

    ref_tree = parse_python(read_file(copies["reference.py"]), copies["reference.py"])
    missing = [n for n in ("generate_input", "ref_kernel") if n not in top_level_names(ref_tree)]
    if missing:
        raise BadInput(f"{copies['reference.py']}: no {', '.join(missing)}")
    key = "benchmarks" if spec.get("benchmarks") else "tests"
    cases = spec.get(key)
    if not isinstance(cases, list) or not cases:
        raise BadInput(f"{yml}: neither benchmarks nor tests lists a case")
    workloads, extras = _workloads(cases, yml, key)

    sources = {}  # every file is copied as text, so --runner cpu can rename devices
    for rel, path in copies.items():
        text = read_file(path)
        if rel.endswith(".py"):
            parse_python(text, path)
            if runner == "cpu":
                text = on_cpu(text)
        sources[rel] = text
    modules = tuple(rel[:-3] for rel in sources if rel.endswith(".py") and "/" not in rel)

    name = safe_name(task_dir.resolve().name)
    sample = task_dir / "submission.py"
    baseline = _FALLBACK_BASELINE.format(name=name)
    if sample.is_file():
        text = read_file(sample)
        if "custom_kernel" in top_level_names(parse_python(text, sample)):
            baseline = on_cpu(text) if runner == "cpu" else text
    description = str(spec.get("description") or "").strip()
    target = {
        "name": name,
        "description": (description + "\n\n" if description else "")
        + f"GPU MODE task {name}: write custom_kernel(data), faster than ref_kernel and "
        "matching it.",
        "runner": runner,
        "language": "pytorch",
        "entry": {"name": "custom_kernel", "kind": "function"},
        "reference": {"file": "eat_reference.py", "function": "ref_kernel", "inputs": "inputs"},
        "baseline": {"file": "baseline.py"},
        "workloads": workloads,
        "tolerance": _tolerance(ref_tree),
    }
    files = sources | {
        "eat_reference.py": _REFERENCE.format(name=name, modules=modules, cases=extras),
        "baseline.py": baseline,
    }
    return write_target(out or Path.cwd() / name, yml, _HEADER.format(src=task_dir), target, files)
