"""FlashInfer-Bench: a Definition JSON and its workloads (JSONL, one workload or trace a line).

The Definition names axes (const with a value, or var), inputs and outputs (shape as axis names,
or null for a scalar; dtype) and a reference: Python source whose `run(*inputs)` returns the
outputs. Solutions are called in destination-passing style, `run(*inputs, *outputs)`, writing
the preallocated outputs; so is the target's entry `run`. A workload's var-axis values are its
parameters; inputs a workload fixes (scalars, safetensors tensors) are looked up by the
parameter `workload`, an index into the imported table, and the rest are random per seed.
"""

from __future__ import annotations

import ast
import importlib.util
import json
from collections.abc import Callable
from pathlib import Path

from eat.errors import BadInput, read_file
from eat.formats.common import (
    check_runner,
    on_cpu,
    parse_python,
    require_free,
    safe_name,
    top_level_names,
    write_target,
)

# dtype -> (bytes per element, safetensors' name for it).
DTYPES = {
    "float32": (4, "F32"),
    "float16": (2, "F16"),
    "bfloat16": (2, "BF16"),
    "float8_e4m3": (1, "F8_E4M3"),
    "float8_e5m2": (1, "F8_E5M2"),
    "int64": (8, "I64"),
    "int32": (4, "I32"),
    "int16": (2, "I16"),
    "int8": (1, "I8"),
    "bool": (1, "BOOL"),
}
# FlashInfer-Bench's default check.
TOLERANCE = {"rtol": 1e-2, "atol": 1e-2}

_WRITE = '''

# ---- Added by `eat import flashinfer` ----
import torch as _eat_torch

_eat_definition_run = run  # the definition's reference: run(*inputs) returns the outputs
_EAT_N_INPUTS = {n_inputs}
_EAT_OUTPUT_NAMES = {outputs!r}


def _eat_write(results, outputs):
    """Copy what the definition's run returned into the output arguments."""
    if isinstance(results, dict):
        results = [results[name] for name in _EAT_OUTPUT_NAMES]
    elif not isinstance(results, (tuple, list)):
        results = [results]
    if len(results) != len(outputs):
        raise ValueError(f"run returned {{len(results)}} outputs, the definition has "
                         f"{{len(outputs)}}")
    for dst, value in zip(outputs, results):
        dst.copy_(_eat_torch.as_tensor(value))
'''

_BASELINE_RUN = '''

def run(*args):
    """Destination-passing style: the inputs, then the outputs, which this fills."""
    _eat_write(_eat_definition_run(*args[:_EAT_N_INPUTS]), args[_EAT_N_INPUTS:])
'''

_REFERENCE = '''

import functools as _eat_functools
from pathlib import Path as _EatPath

# name -> (shape: ints and var-axis names, or None for a scalar; dtype).
_EAT_INPUTS = {inputs}
_EAT_OUTPUTS = {outputs}
# Inputs that a workload fixes, by its parameter `workload`: a value, or a tensor in a file.
_EAT_FIXED = {fixed}
_EAT_DTYPES = {{"float32": _eat_torch.float32, "float16": _eat_torch.float16,
               "bfloat16": _eat_torch.bfloat16, "float8_e4m3": _eat_torch.float8_e4m3fn,
               "float8_e5m2": _eat_torch.float8_e5m2, "int64": _eat_torch.int64,
               "int32": _eat_torch.int32, "int16": _eat_torch.int16, "int8": _eat_torch.int8,
               "bool": _eat_torch.bool}}


def _eat_random(shape, dtype, g):
    """FlashInfer-Bench's random inputs: normal floats (within +-2 for fp8), small integers."""
    dt = _EAT_DTYPES[dtype]
    if dt.is_floating_point:
        x = _eat_torch.randn(shape, generator=g)
        return (x.clamp(-2, 2) if dt.itemsize == 1 else x).to(dt)
    if dt == _eat_torch.bool:
        return _eat_torch.randint(0, 2, shape, generator=g).bool()
    low = -128 if dt == _eat_torch.int8 else -1024
    return _eat_torch.randint(low, -low, shape, generator=g, dtype=dt)


@_eat_functools.lru_cache(maxsize=None)
def _eat_stored(file, key):
    from safetensors.torch import load_file
    return load_file(str(_EatPath(__file__).resolve().parent / file))[key]


def eat_inputs(seed, workload=None, **axes):
    """The definition's inputs for one workload, then a zero-filled buffer per output."""
    g = _eat_torch.Generator().manual_seed(seed)
    fixed = _EAT_FIXED[int(workload)] if workload is not None else {{}}
    args = []
    for name, (shape, dtype) in _EAT_INPUTS.items():
        how = fixed.get(name, {{}})
        if "value" in how:
            args.append(how["value"])
        elif "file" in how:
            args.append(_eat_stored(how["file"], how["key"]).clone())
        elif shape is None:
            # Drawn once, not per seed: the harness reuses non-tensor arguments across seeds.
            args.append(_eat_random((), dtype, _eat_torch.Generator().manual_seed(0)).item())
        else:
            args.append(_eat_random([axes.get(d, d) for d in shape], dtype, g))
    for shape, dtype in _EAT_OUTPUTS.values():
        args.append(_eat_torch.zeros([axes.get(d, d) for d in shape or []],
                                     dtype=_EAT_DTYPES[dtype]))
    return args


def eat_reference(*args):
    """The definition's run on the inputs, its results written into the output arguments."""
    _eat_write(_eat_definition_run(*args[:_EAT_N_INPUTS]), args[_EAT_N_INPUTS:])
'''

_HEADER = """Imported by `eat import flashinfer` from {src}.
A candidate is a FlashInfer-Bench solution in destination-passing style: a Python file defining
run({args}), which writes the outputs ({outs}) and returns nothing.
Workload parameters are the definition's var axes (and `workload`, the index of the inputs a
workload fixes); add workloads with other axis values to try other sizes."""


def _load_json(path: Path) -> object:
    try:
        return json.loads(read_file(path))
    except json.JSONDecodeError as e:
        raise BadInput(f"{path}: not valid JSON: {e}") from None


def _tensors(d: dict, key: str, axes: dict, path: Path) -> dict[str, tuple[list | None, str]]:
    specs = d.get(key)
    if not isinstance(specs, dict) or not specs:
        raise BadInput(f"{path}: {key}: missing or empty")
    out = {}
    for name, spec in specs.items():
        if not isinstance(spec, dict) or "dtype" not in spec:
            raise BadInput(f"{path}: {key}.{name}: not a {{shape, dtype}} mapping")
        shape, dtype = spec.get("shape"), spec["dtype"]
        if dtype not in DTYPES:
            raise BadInput(
                f"{path}: {key}.{name}.dtype: {dtype!r} is not supported "
                f"(one of {', '.join(DTYPES)})"
            )
        if shape is not None and (
            not isinstance(shape, list)
            or any(not isinstance(a, str) or a not in axes for a in shape)
        ):
            raise BadInput(f"{path}: {key}.{name}.shape: not a list of the definition's axes")
        # const axes become their values here; var axes stay names, bound per workload
        out[name] = (
            None if shape is None else [axes[a] if axes[a] is not None else a for a in shape],
            dtype,
        )
    return out


def _definition(path: Path) -> tuple[dict, dict, dict, dict, str]:
    """(definition, axes: name -> const value or None, inputs, outputs, reference source)."""
    d = _load_json(path)
    if not isinstance(d, dict):
        raise BadInput(f"{path}: not a FlashInfer-Bench definition (a JSON object)")
    for key in ("name", "reference"):
        if not isinstance(d.get(key), str) or not d[key].strip():
            raise BadInput(f"{path}: {key}: missing or not a string")
    if not isinstance(d.get("axes"), dict) or not d["axes"]:
        raise BadInput(f"{path}: axes: missing or empty")
    axes = {}
    for name, ax in d["axes"].items():
        kind = ax.get("type") if isinstance(ax, dict) else None
        if kind == "const" and isinstance(ax.get("value"), int) and ax["value"] >= 0:
            axes[name] = ax["value"]
        elif kind == "var":
            axes[name] = None
        else:
            raise BadInput(f"{path}: axes.{name}: want {{type: const, value: N}} or {{type: var}}")
    if "workload" in axes:
        raise BadInput(f"{path}: axes.workload: a name the importer needs for its own parameter")
    inputs = _tensors(d, "inputs", axes, path)
    outputs = _tensors(d, "outputs", axes, path)
    tree = parse_python(d["reference"], path)
    names = top_level_names(tree)
    if not isinstance(names.get("run"), ast.FunctionDef):
        raise BadInput(f"{path}: reference: defines no top-level function run")
    require_free(names, ("eat_inputs", "eat_reference"), path)
    return d, axes, inputs, outputs, d["reference"]


def _literal(value: dict | list) -> str:
    """A dict or list as Python source, one entry a line."""
    if isinstance(value, dict):
        return "{\n" + "".join(f"    {k!r}: {v!r},\n" for k, v in value.items()) + "}"
    return "[\n" + "".join(f"    {v!r},\n" for v in value) + "]"


def _has_safetensors() -> bool:
    return importlib.util.find_spec("safetensors") is not None


def _safetensors_header(file: Path, where: str) -> dict:
    """The header of a safetensors file: tensor name -> {dtype, shape, data_offsets}."""
    try:
        with open(file, "rb") as f:
            size = int.from_bytes(f.read(8), "little")
            header = json.loads(f.read(size)) if size < 1 << 27 else None
    except (OSError, ValueError) as e:
        raise BadInput(f"{where}: cannot read {file}: {e}") from None
    if not isinstance(header, dict):
        raise BadInput(f"{where}: {file} is not a safetensors file")
    return header


def _workloads(
    path: Path,
    definition: str,
    axes: dict,
    inputs: dict,
    has_safetensors: Callable[[], bool],
) -> tuple[list[dict], list[dict], dict[str, Path]]:
    """(workloads, fixed inputs by index, data files to copy: target path -> file)."""
    var = [a for a, v in axes.items() if v is None]
    workloads: list[dict] = []
    fixed: list[dict] = []
    data: dict[str, Path] = {}
    lines = read_file(path).splitlines()
    for n, line in enumerate(lines, 1):
        if not line.strip():
            continue
        where = f"{path}: line {n}"
        try:
            entry = json.loads(line)
        except json.JSONDecodeError as e:
            raise BadInput(f"{where}: not valid JSON: {e}") from None
        if not isinstance(entry, dict):
            raise BadInput(f"{where}: not a workload object")
        if entry.get("definition", definition) != definition:
            raise BadInput(f"{where}: a workload of {entry['definition']!r}, not {definition!r}")
        w = entry.get("workload", entry)  # a trace line wraps the workload; a bare one is it
        if (
            not isinstance(w, dict)
            or not isinstance(w.get("axes", {}), dict)
            or not isinstance(w.get("inputs", {}), dict)
        ):
            raise BadInput(f"{where}: want a workload with axes and inputs mappings")
        params = {}
        for a, value in w.get("axes", {}).items():
            if (
                a not in axes
                or not isinstance(value, int)
                or isinstance(value, bool)
                or value < 0
                or axes[a] not in (None, value)
            ):
                raise BadInput(
                    f"{where}: axes.{a}: not a var axis of {definition} with a "
                    "non-negative integer value"
                )
            if axes[a] is None:
                params[a] = value
        missing = [a for a in var if a not in params]
        if missing:
            raise BadInput(f"{where}: axes: no value for {', '.join(missing)}")
        fix = {}
        for name, spec in w.get("inputs", {}).items():
            kind = spec.get("type") if isinstance(spec, dict) else None
            if name not in inputs:
                raise BadInput(f"{where}: inputs.{name}: not an input of {definition}")
            if kind == "scalar":
                if inputs[name][0] is not None or not isinstance(
                    spec.get("value"), (int, float, bool)
                ):
                    raise BadInput(
                        f"{where}: inputs.{name}: a scalar needs a number value "
                        "and an input of shape null"
                    )
                fix[name] = {"value": spec["value"]}
            elif kind == "safetensors":
                fix[name] = _stored(
                    spec, name, inputs[name], axes | params, path, where, data, has_safetensors
                )
            elif kind != "random":
                raise BadInput(f"{where}: inputs.{name}.type: want random, scalar or safetensors")
        if fix:
            if fix not in fixed:
                fixed.append(fix)
            params["workload"] = fixed.index(fix)
        if params not in workloads:
            workloads.append(params)
    if not workloads:
        raise BadInput(f"{path}: no workloads")
    return workloads, fixed, data


def _stored(
    spec: dict,
    name: str,
    tensor: tuple,
    sizes: dict,
    jsonl: Path,
    where: str,
    data: dict[str, Path],
    has_safetensors: Callable[[], bool],
) -> dict:
    """Find and check a safetensors input; returns its entry in the fixed-inputs table."""
    if not has_safetensors():
        raise BadInput(
            f"{where}: inputs.{name} is stored in safetensors: install the "
            "safetensors package to import it"
        )
    rel, key = spec.get("path"), spec.get("tensor_key")
    if not isinstance(rel, str) or not rel or not isinstance(key, str) or not key:
        raise BadInput(f"{where}: inputs.{name}: a safetensors input needs path and tensor_key")
    # Paths are relative to the trace set's root: the workloads file's folder or one above it.
    found = next(
        (
            base / rel
            for base in [jsonl.parent, *jsonl.resolve().parent.parents]
            if (base / rel).is_file()
        ),
        None,
    )
    if found is None:
        raise BadInput(
            f"{where}: inputs.{name}: {rel} not found in the workloads file's "
            "folder or any folder above it"
        )
    header = _safetensors_header(found, where).get(key)
    shape, dtype = tensor
    want = [sizes.get(d, d) for d in shape or []]
    if (
        not isinstance(header, dict)
        or header.get("dtype") != DTYPES[dtype][1]
        or header.get("shape") != want
    ):
        raise BadInput(f"{where}: inputs.{name}: {found} has no tensor {key!r} of {dtype}{want}")
    dest = next((d for d, f in data.items() if f.resolve() == found.resolve()), None)
    if dest is None:
        dest = f"data/{len(data)}_{found.name}"
        data[dest] = found
    return {"file": dest, "key": key}


def _bytes(inputs: dict, outputs: dict) -> dict:
    """The `bytes` formula: each tensor read or written once, the least a call moves."""
    terms = [
        f"{DTYPES[dtype][0]}" + "".join(f"*{d}" for d in shape)
        for shape, dtype in [*inputs.values(), *outputs.values()]
        if shape is not None
    ]
    return {"bytes": " + ".join(terms)} if terms else {}


def import_flashinfer(
    src: Path,
    workloads: Path | None = None,
    out: Path | None = None,
    runner: str = "cuda",
    *,
    has_safetensors: Callable[[], bool] = _has_safetensors,
) -> Path:
    """Write a target folder for the definition `src` and its workloads JSONL; `has_safetensors`
    says whether the package that loads stored inputs is installed."""
    check_runner(runner)
    src = Path(src)
    d, axes, inputs, outputs, source = _definition(src)
    if workloads is not None:
        params, fixed, data = _workloads(Path(workloads), d["name"], axes, inputs, has_safetensors)
    elif any(v is None for v in axes.values()):
        var = ", ".join(a for a, v in axes.items() if v is None)
        raise BadInput(f"{src}: axes {var} are var: give a workloads JSONL with their values")
    else:
        params, fixed, data = [{}], [], {}

    if runner == "cpu":
        source = on_cpu(source)
    write = source.rstrip() + "\n" + _WRITE.format(n_inputs=len(inputs), outputs=tuple(outputs))
    reference = write + _REFERENCE.format(
        inputs=_literal(inputs), outputs=_literal(outputs), fixed=_literal(fixed)
    )
    baseline = write + _BASELINE_RUN
    name = safe_name(d["name"])
    description = str(d.get("description") or "").strip()
    args = ", ".join([*inputs, *outputs])
    target = {
        "name": name,
        "description": (description + "\n\n" if description else "")
        + f"FlashInfer-Bench definition {d['name']}"
        + (f" ({d['op_type']})" if isinstance(d.get("op_type"), str) else "")
        + f": write run({args}) in destination-passing style, filling "
        f"{', '.join(outputs)} as the reference's run returns them.",
        "runner": runner,
        "language": "pytorch",
        **_bytes(inputs, outputs),
        "entry": {"name": "run", "kind": "function"},
        "reference": {"file": "reference.py", "function": "eat_reference", "inputs": "eat_inputs"},
        "baseline": {"file": "baseline.py"},
        "workloads": params,
        "tolerance": TOLERANCE,
    }
    header = _HEADER.format(src=src, args=args, outs=", ".join(outputs))
    return write_target(
        out or Path.cwd() / name,
        src,
        header,
        target,
        {"reference.py": reference, "baseline.py": baseline},
        data,
    )
