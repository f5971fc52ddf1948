"""KernelBench problems: a file with `class Model(nn.Module)`, `get_inputs()`, `get_init_inputs()`.

A solution defines `class ModelNew` with Model's constructor and forward, so the target's entry
is `ModelNew` of kind "module". The problem's sizes are module constants (`batch_size = 16`):
each int or float constant is a workload parameter, the imported workload holds their values,
and `inputs()` / `init_inputs()` re-run the module's top-level assignments with a workload's
values in place, so shapes derived from them follow.
"""

from __future__ import annotations

import ast
from pathlib import Path

from eat.errors import BadInput, read_file
from eat.formats.common import (
    check_runner,
    check_sizes,
    fitted,
    on_cpu,
    parse_python,
    require_free,
    safe_name,
    top_level_names,
    write_target,
)
from eat.target import eval_expr

# KernelBench's own check: torch.allclose(atol=1e-2, rtol=1e-2).
TOLERANCE = {"rtol": 1e-2, "atol": 1e-2}

_ADDED = """

# ---- Added by `eat import kernelbench` ----
# A workload sets any of the int/float constants in _EAT_PARAMS by name (a tuple or list of
# numbers, `shape = (4, 8)`, by its elements: shape_0, shape_1). The module's top-level
# assignments are re-run with those values in place, so sizes derived from them follow, and
# get_inputs / get_init_inputs run against the result (this module's globals stay as written).
import types as _eat_types

import torch as _eat_torch

_EAT_PARAMS = {params!r}
_EAT_ASSIGNMENTS = [
{assignments}]


def _eat_sized(fn, params):
    unknown = sorted(set(params) - set(_EAT_PARAMS))
    if unknown:
        raise TypeError(f"unknown workload parameter(s) {{', '.join(unknown)}}; this problem's "
                        f"are {{', '.join(_EAT_PARAMS) or 'none'}}")
    scope = dict(globals(), **params)
    for statement in _EAT_ASSIGNMENTS:
        exec(statement, scope)
        scope.update(params)
    return _eat_types.FunctionType(fn.__code__, scope, fn.__name__, fn.__defaults__,
                                   fn.__closure__)()


def inputs(seed, **params):
    \"\"\"The forward arguments for one workload: get_inputs() with torch seeded by `seed`.\"\"\"
    _eat_torch.manual_seed(seed)
    return list(_eat_sized(get_inputs, params))


def init_inputs(**params):
    \"\"\"The constructor arguments for one workload: get_init_inputs().\"\"\"
    return list(_eat_sized(get_init_inputs, params))
"""

_HEADER = """Imported by `eat import kernelbench` from {src}.
A candidate is a Python file defining class ModelNew(nn.Module) like Model; it is built as
Model is (torch.manual_seed(0), ModelNew(*init_inputs)) and called with the inputs.
Workload parameters are the problem's int/float constants (a tuple's or list's elements as
name_0, name_1, ...); add workloads to try other sizes."""


def _constant(node: ast.expr):
    """The value of an int or float literal, or of arithmetic on literals (`2048 * 2`); bools
    and everything else: None."""
    if isinstance(node, (ast.BinOp, ast.UnaryOp)):
        try:
            value = eval_expr(ast.unparse(node), {})
        except (ValueError, ArithmeticError):
            return None
    else:
        try:
            value = ast.literal_eval(node)
        except (ValueError, SyntaxError, TypeError):
            return None
    return value if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def _elements(node: ast.stmt, names: dict) -> list | None:
    """The numbers of `name = (n0, n1, ...)` or `name = [n0, n1, ...]`, int/float constants
    bound to one name whose element names (name_0, ...) the module does not use; else None."""
    if not (
        isinstance(node, ast.Assign)
        and len(node.targets) == 1
        and isinstance(node.targets[0], ast.Name)
        and isinstance(node.value, (ast.Tuple, ast.List))
    ):
        return None
    items = [_constant(e) for e in node.value.elts]
    name = node.targets[0].id
    if not items or None in items or any(f"{name}_{i}" in names for i in range(len(items))):
        return None
    return items


def import_kernelbench(
    src: Path, out: Path | None = None, runner: str = "cuda", sizes: str | None = None
) -> Path:
    """Write a target folder for the KernelBench problem file `src`; returns the folder.
    `sizes`: "published" keeps the problem's sizes, "fit" (the CPU's default) scales them to
    what one core holds and runs in well under a second (eat.formats.fit)."""
    check_runner(runner)
    sizes = check_sizes(sizes, runner)
    src = Path(src)
    source = read_file(src)
    tree = parse_python(source, src)
    if runner == "cpu":  # before the assignments are taken: they are re-run as written
        source = on_cpu(source)
        tree = ast.parse(source)
    names = top_level_names(tree)
    missing = [n for n in ("Model", "get_inputs", "get_init_inputs") if n not in names]
    if missing:
        raise BadInput(f"{src}: not a KernelBench problem: no {', '.join(missing)} at top level")
    if not isinstance(names["Model"], ast.ClassDef):
        raise BadInput(f"{src}: Model is not a class")
    require_free(names, ("ModelNew", "inputs", "init_inputs"), src)

    params: dict[str, int | float] = {}
    elements: dict[str, list[str]] = {}  # a tuple's (or list's) name -> its elements' parameters
    assignments = []
    for node in tree.body:
        if isinstance(node, (ast.Assign, ast.AnnAssign, ast.AugAssign)):
            statement = ast.get_source_segment(source, node)
            assert statement is not None  # the node was parsed from `source`
            value = _constant(node.value) if isinstance(node, ast.Assign) else None
            items = _elements(node, names)
            for bound in node.targets if isinstance(node, ast.Assign) else [node.target]:
                for n in ast.walk(bound):
                    if isinstance(n, ast.Name):
                        for k in elements.pop(n.id, []):
                            params.pop(k, None)  # a tuple's elements, the tuple rebound
                        if value is not None and n is bound:
                            params[n.id] = value
                        else:  # bound to something computed: not a plain size (any more)
                            params.pop(n.id, None)
            # `shape = (32768,)`, `sizes = [32768, 32768]`: each element a parameter, the tuple
            # or list made of them (items: the node binds one name to one)
            if items and isinstance(node, ast.Assign) and isinstance(node.targets[0], ast.Name):
                name = node.targets[0].id
                elements[name] = [f"{name}_{i}" for i in range(len(items))]
                params |= dict(zip(elements[name], items))
                assignments += [f"{name}_{i} = {v!r}" for i, v in enumerate(items)]
                made = ", ".join(elements[name])
                made = f"[{made}]" if isinstance(node.value, ast.List) else f"({made},)"
                statement = f"{name} = {made}"
            assignments.append(statement)

    source = source.rstrip() + "\n"
    reference = source + _ADDED.format(
        params=tuple(params), assignments="".join(f"    {a!r},\n" for a in assignments)
    )
    header = _HEADER.format(src=src.name)
    if sizes == "fit":
        params, note = fitted(reference, params, src)
        header += note
    baseline = (
        source + "\n\n# The baseline is the problem's own Model (added by eat import).\n"
        "ModelNew = Model\n"
    )
    name = safe_name(src.stem)
    doc = ast.get_docstring(names["Model"]) or ""
    target = {
        "name": name,
        "description": (doc.strip() + "\n\n" if doc.strip() else "")
        + f"KernelBench problem {src.name}: write class ModelNew(nn.Module), a faster Model with "
        "the same constructor arguments, parameters and forward.",
        "runner": runner,
        "language": "pytorch",
        "entry": {"name": "ModelNew", "kind": "module"},
        "reference": {
            "file": "reference.py",
            "function": "Model",
            "inputs": "inputs",
            "init_inputs": "init_inputs",
        },
        "baseline": {"file": "baseline.py"},
        "workloads": [params],
        "tolerance": TOLERANCE,
        # KernelBench solutions build CUDA with torch.utils.cpp_extension.load_inline, which
        # runs a compiler in child processes: the seccomp filter would refuse it.
        "evaluation": {"allow_processes": True},
    }
    return write_target(
        out or Path.cwd() / name,
        src,
        header,
        target,
        {"reference.py": reference, "baseline.py": baseline},
    )
