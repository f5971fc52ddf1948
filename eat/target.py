"""The target contract: a folder with target.toml naming what to optimize and how to judge it.

`load_target(path)` is the only way in; any missing or malformed file or field raises
TargetError naming the file and the field.
"""

from __future__ import annotations

import ast
import math
import operator
import re
import tomllib
from collections.abc import Callable
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from eat.errors import TargetError
from eat.runners.cabi import C_TYPES

TARGET_FILE = "target.toml"


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


# The languages each runner takes. Native ones (a C prototype, buffers laid out by `shapes`) are
# built into a shared library; the others are Python modules run by the Python harness.
LANGUAGES: dict[str, tuple[str, ...]] = {
    "cpu": ("c", "pytorch"),
    "cuda": ("cuda", "pytorch", "triton"),
    "rocm": ("hip", "pytorch", "triton"),
    "mlx": ("mlx",),
    # a program graded as a whole: the candidate file's language names only its prompts' fence
    "program": ("python", "text"),
}
NATIVE = ("c", "cuda", "hip")
KNOB_MARK = "# eat:knob"
FILE_MARK = "# eat:file"
TRAIN = "train"  # the split agents' candidates are graded on


class Entry(_Strict):
    """The function (or, for `kind = "module"`, the class) a candidate must define."""

    name: str = Field(description="Symbol the harness looks up in the candidate.")
    signature: str | None = Field(
        None,
        description="Native languages: its C prototype; `const T *` is an input, `T *` an "
        "output. Python languages: not used (the reference's inputs() gives the arguments).",
    )
    kind: Literal["function", "module"] = Field(
        "function",
        description="Python languages: 'module' means an nn.Module class built from "
        "the reference's init_inputs() under a fixed seed, then called (KernelBench's ModelNew).",
    )


class PyFunction(_Strict):
    """A Python function in a file of the target folder."""

    file: str = Field(description="Path relative to the target folder.")
    function: str = Field(description="Name of the function in that file.")


class Vendor(PyFunction):
    """The library a user would otherwise call, timed by the same harness for comparison."""

    name: str = Field(description="How reports name it, e.g. 'numpy (OpenBLAS)'.")


class Reference(PyFunction):
    """The trusted implementation outputs are checked against.

    For Python languages `function` is called like the candidate's entry (for `kind = "module"`
    it names the reference class) and its return value, plus any argument it writes into, is
    what the candidate must reproduce.
    """

    inputs: str | None = Field(
        None,
        description="Function in the same file. Native languages (optional): "
        "inputs(rng, **params) -> dict of arrays, by default every input uniform in [-1, 1). "
        "Python languages (required): inputs(seed, **params) -> list of call arguments.",
    )
    init_inputs: str | None = Field(
        None,
        description='Python `kind = "module"` entries: init_inputs(**params) -> list of '
        "constructor arguments.",
    )


class Baseline(_Strict):
    """The solution speedups (a program's gains) are measured against."""

    file: str = Field(description="Source file, relative to the target folder.")
    files: list[str] = Field(
        [],
        description="Program targets: more files of the program that agents may edit; a "
        "candidate is then all of them as one text, each after a line `# eat:file NAME`.",
    )


class Tolerance(_Strict):
    """An output passes where |out - ref| <= atol + rtol * (|ref| + mean|ref|).

    The mean|ref| term keeps the test relative (an all-zero output never passes) without failing
    entries whose true value is near zero from accumulation-order differences.
    """

    rtol: float = Field(gt=0, description="Relative tolerance.")
    atol: float = Field(0.0, ge=0, description="Absolute tolerance, rarely needed.")


class Knob(_Strict):
    """A parameter of the baseline that offline agents may set."""

    values: list[str | int | float] = Field(min_length=1, description="Allowed values.")
    kind: Literal["define", "cflags", "assign"] = Field(
        "define",
        description="'define' becomes `#define NAME value` (Python targets: "
        "`NAME = value`, the value as Python source); 'cflags' sets compiler flags; 'assign' "
        "rewrites the value of the baseline's line `NAME = value  # eat:knob [...]`.",
    )
    help: str = Field("", description="What the knob changes, for people and prompts.")

    @field_validator("help")
    @classmethod
    def _one_line(cls, text: str) -> str:
        # A TOML multi-line string breaks lines where its author wrapped them: the prompts,
        # SKILL.md and the report quote it inline.
        return " ".join(text.split())


class Build(_Strict):
    """How sources are compiled."""

    compiler: str | None = Field(
        None,
        description="Compiler; by default cc (cpu), nvcc (cuda) or hipcc (rocm). A "
        "relative path with a '/' (a wrapper shipped with the target) is the target folder's.",
    )
    cflags: str = Field("-O2", description="Flags when the candidate names none.")
    arch: str | None = Field(
        None,
        description="GPU architecture for nvcc/hipcc (sm_90a, gfx942); by default the "
        "installed GPU's.",
    )

    def compiler_for(self, runner: str) -> str:
        return self.compiler or {"cuda": "nvcc", "rocm": "hipcc"}.get(runner, "cc")


class Grader(_Strict):
    """How a program target's candidates are scored: a Python function or a command, one metric.

    The grader runs in the candidate's contained process (no network, writes only in the
    candidate's folder). Files beneath the target's private/ can be read only while the grader's
    module is imported, before the candidate's code can run."""

    file: str | None = Field(
        None,
        description="A Python file in the target folder defining `function`: "
        "function(folder, split, seed) -> {metric: value, ...}; an AssertionError it raises "
        "means the candidate's output is wrong (status incorrect).",
    )
    function: str = Field("grade", description="The grading function's name in `file`.")
    command: list[str] | None = Field(
        None,
        description="Instead of `file`: a command, run in the target folder with the "
        "candidate's folder, the split and the seed appended, that prints one JSON object "
        "of metrics on its last line (a non-zero exit: the candidate failed).",
    )
    metric: str = Field(description="The key of the grader's result that is optimized.")
    goal: Literal["max", "min"] = Field("max", description="Whether a higher or lower is better.")
    held_out: str | None = Field(
        None,
        description="A split graded only at the end of a run (and by `eat eval --split`), "
        "never for agents; its data belongs in the target's private/.",
    )
    min_seeds: int = Field(3, ge=1, description="Seeds each grade is repeated on at least.")
    max_seeds: int = Field(10, ge=1, description="Seeds each grade is repeated on at most.")
    target_rse: float = Field(
        0.02,
        gt=0,
        description="Stop adding seeds once the median's relative standard error "
        "(0.93 IQR / |median| / sqrt(n)) is under this.",
    )
    paired: bool = Field(
        False,
        description="Grade the baseline beside every candidate, seed by seed in the same "
        "process (a metric that moves with the machine's load, like a throughput); otherwise "
        "the baseline's grades are kept for the session.",
    )

    @property
    def splits(self) -> list[str]:
        """The splits a candidate can be graded on: the agents' (train), then the held-out."""
        return [TRAIN, *([self.held_out] if self.held_out else [])]

    @property
    def label(self) -> str:
        """What the headline figure is called: the metric's gain."""
        return f"{self.metric} gain"

    @model_validator(mode="after")
    def _one_grader(self) -> Grader:
        if (self.file is None) == (self.command is None):
            raise ValueError("grader: name either file (a Python grader) or command")
        if self.min_seeds > self.max_seeds:
            raise ValueError("grader.min_seeds: larger than max_seeds")
        return self


class EvalConfig(_Strict):
    """How hard the harness looks at a candidate; tests shrink it, targets may tune it."""

    seeds: int = Field(3, ge=1, description="Random input sets per workload (verify and timing).")
    warmup: int = Field(2, ge=0, description="Untimed calls per implementation and workload.")
    min_repeats: int = Field(
        30,
        ge=3,
        description="Timed calls of the candidate at least (a "
        "baseline or vendor stops after 10 once its median's relative "
        "standard error is below target_rse).",
    )
    max_repeats: int = Field(100, ge=3, description="Timed calls at most.")
    target_rse: float = Field(
        0.01,
        gt=0,
        description="Stop timing a workload once the relative "
        "standard error of every implementation's median is below this "
        "(and min_repeats are in).",
    )
    budget_s: float = Field(
        0.25,
        gt=0,
        description="Stop timing a workload after this much "
        "time once min_repeats are in (a noisy machine never reaches "
        "target_rse).",
    )
    race_rounds: int = Field(
        10,
        ge=0,
        description="After this many rounds, a workload on "
        "which the candidate is over twice as slow as the best candidate "
        "the runner has timed is timed no further: it has lost, and the "
        "min_repeats rounds are for candidates that compete. 0: never.",
    )
    pool_mb: int = Field(
        512,
        ge=1,
        description="Disk and memory for one workload's timed input "
        "sets: every timed call gets inputs the candidate has not seen, up to "
        "as many sets as fit here; beyond, calls cycle through them.",
    )
    timed: bool = Field(
        True,
        description="False: build and verify only (`eat check`); the "
        "evaluation is ok without a speedup.",
    )
    flush_cache: bool = Field(
        False,
        description="Write a buffer larger than the last-level cache before every timed call.",
    )
    timeout_s: float = Field(60.0, gt=0, description="Wall-clock limit per contained process.")
    cpu_s: int = Field(120, ge=1, description="CPU-time limit per contained process.")
    memory_mb: int = Field(8192, ge=256, description="Address-space limit per process.")
    compile_timeout_s: float = Field(60.0, gt=0, description="Wall-clock limit for compiling.")
    allow_processes: bool = Field(
        False,
        description="Python candidates may start processes: torch.compile and "
        "torch.utils.cpp_extension build with them (Triton targets always may). Otherwise a "
        "seccomp filter forbids it; allowed, a fork bomb is held only by RLIMIT_NPROC, which "
        "root ignores: run eat in a container then.",
    )
    confine_writes: bool = Field(
        True,
        description="Candidates (and processes they start) may change files only in "
        "their evaluation's own folder, which is their HOME and TMPDIR, and open no TCP "
        "connection: Linux's Landlock, where the kernel has it. False lets them write wherever "
        "the user running eat can, for a runtime that needs to write elsewhere.",
    )

    @model_validator(mode="after")
    def _repeats_ordered(self) -> EvalConfig:
        if self.min_repeats > self.max_repeats:
            raise ValueError("min_repeats: larger than max_repeats")
        return self


class Arg(BaseModel):
    """One parameter of the entry point, parsed from its signature."""

    name: str
    ctype: str
    pointer: bool
    const: bool

    @property
    def role(self) -> Literal["input", "output", "scalar"]:
        if not self.pointer:
            return "scalar"
        return "input" if self.const else "output"


_PARAM = re.compile(
    r"^(const\s+)?([A-Za-z_][A-Za-z0-9_]*)\s*"
    r"(\*\s*(?:restrict\s+|__restrict__\s+)?)?"
    r"([A-Za-z_][A-Za-z0-9_]*)$"
)


def parse_signature(signature: str, entry: str) -> list[Arg]:
    """Parse `void name(const float *A, int n, ...)` into Args; raises ValueError."""
    m = re.fullmatch(r"\s*void\s+([A-Za-z_]\w*)\s*\((.*)\)\s*;?\s*", signature, re.S)
    if not m:
        raise ValueError("expected `void NAME(params)`")
    if m.group(1) != entry:
        raise ValueError(f"names {m.group(1)!r}, but entry.name is {entry!r}")
    args = []
    for raw in filter(None, (p.strip() for p in m.group(2).split(","))):
        pm = _PARAM.match(" ".join(raw.split()))
        if not pm or pm.group(2) not in C_TYPES:
            raise ValueError(f"cannot read parameter {raw!r} (types: {', '.join(C_TYPES)})")
        args.append(
            Arg(
                name=pm.group(4),
                ctype=pm.group(2),
                pointer=bool(pm.group(3)),
                const=bool(pm.group(1)),
            )
        )
    return args


_OPS: dict[type[ast.AST], Callable[..., float]] = {
    ast.Add: operator.add,
    ast.Sub: operator.sub,
    ast.Mult: operator.mul,
    ast.Div: operator.truediv,
    ast.FloorDiv: operator.floordiv,
    ast.Mod: operator.mod,
    ast.Pow: operator.pow,
    ast.USub: operator.neg,
}


def eval_expr(expr: str | int, params: dict[str, int | float]) -> float:
    """Evaluate an arithmetic formula over workload parameters (no calls, no attributes)."""
    if isinstance(expr, (int, float)):
        return expr

    def walk(node: ast.AST) -> float:
        if isinstance(node, ast.Expression):
            return walk(node.body)
        if isinstance(node, ast.Constant) and isinstance(node.value, (int, float)):
            return node.value
        if isinstance(node, ast.Name):
            if node.id not in params:
                raise ValueError(f"unknown name {node.id!r} in {expr!r}")
            return params[node.id]
        if isinstance(node, ast.BinOp) and type(node.op) in _OPS:
            return _OPS[type(node.op)](walk(node.left), walk(node.right))
        if isinstance(node, ast.UnaryOp) and type(node.op) in _OPS:
            return _OPS[type(node.op)](walk(node.operand))
        raise ValueError(f"unsupported syntax in {expr!r}")

    try:
        return walk(ast.parse(expr, mode="eval"))
    except SyntaxError as e:
        raise ValueError(f"cannot parse {expr!r}") from e


class Target(_Strict):
    """A target folder's target.toml; `root` is the folder it was loaded from."""

    name: str = Field(description="Short identifier.")
    description: str = Field("", description="One paragraph for people and prompts.")
    runner: Literal["cpu", "cuda", "rocm", "mlx", "program"] = Field(
        description="Hardware runner; 'program': a program its grader scores."
    )
    language: str = Field(description="Candidate language, e.g. 'c'.")
    entry: Entry | None = Field(None, description="Kernel targets: what a candidate defines.")
    reference: Reference | None = Field(
        None, description="Kernel targets: what outputs are checked against."
    )
    baseline: Baseline
    grader: Grader | None = Field(None, description="Program targets: how candidates are scored.")
    vendor: Vendor | None = None
    shapes: dict[str, list[str | int]] = Field(
        {},
        description="Native languages: shape of every pointer argument, as formulas over "
        "workload parameters.",
    )
    workloads: list[dict[str, int | float]] = Field(
        [], description="Kernel targets: parameter sets; every one is verified and timed."
    )
    tolerance: Tolerance | None = None
    flops: str | None = Field(None, description="Floating-point operations per call (formula).")
    bytes: str | None = Field(None, description="Bytes moved per call (formula), for GB/s.")
    build: Build = Build()
    knobs: dict[str, Knob] = {}
    evaluation: EvalConfig = EvalConfig()
    root: Path = Field(Path("."), exclude=True)
    unreadable: list[str] = Field(
        [],
        exclude=True,
        description="Folders no candidate may "
        "read: a run's sealed folder and the target's private/ "
        "(set by the run, not by target.toml).",
    )

    @property
    def program(self) -> bool:
        """Scored as a whole by its grader (else a kernel, checked against its reference)."""
        return self.grader is not None

    @property
    def vendor_name(self) -> str | None:
        """How reports name the library it is compared with (None: it names none)."""
        return self.vendor.name if self.vendor else None

    @property
    def metric_name(self) -> str:
        """What a candidate's headline figure is called: the grader's metric gain, or speedup."""
        return self.grader.label if self.grader else "speedup"

    @property
    def native(self) -> bool:
        """Built into a shared library from a C prototype (else a Python module)."""
        return self.language in NATIVE

    @property
    def fence(self) -> str:
        """The code-fence tag for its sources in prompts and replies."""
        return self.language if self.native or self.program else "python"

    @property
    def args(self) -> list[Arg]:
        if not self.native or self.entry is None:
            return []
        return parse_signature(self.entry.signature or "", self.entry.name)

    @property
    def judge_file(self) -> str | None:
        """The file that judges candidates, which agents read: the reference, or the grader."""
        if self.reference:
            return self.reference.file
        return self.grader.file if self.grader else None

    @property
    def kernel(self) -> tuple[Entry, Reference, Tolerance]:
        """A kernel target's entry, reference and tolerance (validated present)."""
        assert self.entry and self.reference and self.tolerance, "not a kernel target"
        return self.entry, self.reference, self.tolerance

    def path(self, rel: str) -> Path:
        return self.root / rel

    @property
    def files(self) -> list[str]:
        """The names of a candidate's files (the baseline's, in its folder's order)."""
        return [Path(f).name for f in [self.baseline.file, *self.baseline.files]]

    def baseline_source(self) -> str:
        """The baseline as a candidate's source: its file, or its files bundled."""
        if not self.baseline.files:
            return self.path(self.baseline.file).read_text()
        rels = [self.baseline.file, *self.baseline.files]
        return bundle({Path(r).name: self.path(r).read_text() for r in rels})

    def unbundle(self, source: str) -> dict[str, str]:
        """A candidate's files by name; ValueError if a bundle lacks one or names another."""
        if not self.baseline.files:
            return {self.files[0]: source}
        got = unbundle(source)
        if missing := [f for f in self.files if f not in got]:
            raise ValueError(f"the candidate lacks {', '.join(missing)} (`{FILE_MARK} NAME`)")
        if extra := [f for f in got if f not in self.files]:
            raise ValueError(f"{', '.join(extra)}: not a file of this program")
        return got

    def metric(self, kind: Literal["flops", "bytes"], params: dict) -> float | None:
        formula = getattr(self, kind)
        return None if formula is None else float(eval_expr(formula, params))

    @model_validator(mode="after")
    def _compiler_in_folder(self) -> Target:
        compiler = self.build.compiler
        if compiler and "/" in compiler and not Path(compiler).is_absolute():
            self.build.compiler = str((self.root / compiler).resolve())
        return self

    @model_validator(mode="after")
    def _consistent(self) -> Target:
        if self.language not in LANGUAGES[self.runner]:
            raise ValueError(
                f"language: {self.language!r} is not a language of the "
                f"{self.runner} runner (one of: {', '.join(LANGUAGES[self.runner])})"
            )
        if (self.runner == "program") != (self.grader is not None):
            raise ValueError(
                "grader: a program target (runner = 'program') needs one; a kernel has none"
            )
        if self.baseline.files and not self.program:
            raise ValueError("baseline.files: only a program target has more than one file")
        if len(set(self.files)) < len(self.files):
            raise ValueError("baseline.files: two of the files have one name")
        if self.program:
            if any(k.kind != "assign" for k in self.knobs.values()):
                raise ValueError("knobs: a program target's knobs are marked `# eat:knob` lines")
            return self
        for name in ("entry", "reference", "tolerance"):
            if getattr(self, name) is None:
                raise ValueError(f"{name}: field required")
        if not self.workloads:
            raise ValueError("workloads: at least one is required")
        if any(k.kind == "assign" for k in self.knobs.values()):
            raise ValueError("knobs: marked `# eat:knob` lines are a program target's")
        if self.native:
            self._native_consistent()
        elif not self.kernel[1].inputs:
            raise ValueError(
                "reference.inputs: required for Python targets "
                "(inputs(seed, **params) -> list of call arguments)"
            )
        elif self.kernel[0].kind == "module" and not self.kernel[1].init_inputs:
            raise ValueError("reference.init_inputs: required when entry.kind is 'module'")
        elif any(k.kind != "define" for k in self.knobs.values()):
            raise ValueError("knobs: a Python target's knobs are `NAME = value` lines (define)")
        for w in self.workloads:
            for kind in ("flops", "bytes"):
                if getattr(self, kind):
                    try:
                        self.metric(kind, w)
                    except ValueError as e:
                        raise ValueError(f"{kind}: {e}") from None
        return self

    def _native_consistent(self) -> None:
        if not self.kernel[0].signature:
            raise ValueError(f"entry.signature: required for {self.language} targets")
        try:
            args = self.args
        except ValueError as e:
            raise ValueError(f"entry.signature: {e}") from None
        for a in args:
            if a.pointer and a.name not in self.shapes:
                raise ValueError(f"shapes: no shape for pointer argument {a.name!r}")
        scalars = {a.name for a in args if not a.pointer}
        for i, w in enumerate(self.workloads):
            missing = scalars - set(w)
            if missing:
                raise ValueError(f"workloads.{i}: missing {', '.join(sorted(missing))}")
            for name, dims in self.shapes.items():
                for d in dims:
                    try:
                        eval_expr(d, w)
                    except ValueError as e:
                        raise ValueError(f"shapes.{name}: {e}") from None
        if not any(a.role == "output" for a in args):
            raise ValueError("entry.signature: no output (a non-const pointer) to check")


def load_target(path: str | Path) -> Target:
    """Load and validate a target folder (or its target.toml); raises TargetError."""
    path = Path(path)
    root = path.parent if path.name == TARGET_FILE else path
    file = root / TARGET_FILE
    if not root.is_dir():
        raise TargetError(root, None, "no such target folder")
    if not file.is_file():
        raise TargetError(file, None, "file not found")
    try:
        data = tomllib.loads(file.read_text())
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as e:
        raise TargetError(file, None, f"not valid TOML: {e}") from None
    try:
        target = Target.model_validate(data | {"root": root})
    except ValidationError as e:
        err = e.errors()[0]
        loc = ".".join(str(x) for x in err["loc"]) or None
        msg = err["msg"].removeprefix("Value error, ")
        if loc is None and ": " in msg:
            loc, msg = msg.split(": ", 1)
        raise TargetError(file, loc, msg) from None
    files = [("baseline.file", target.baseline.file)]
    files += [("baseline.files", f) for f in target.baseline.files]
    files += [("reference.file", target.reference.file)] if target.reference else []
    files += [("vendor.file", target.vendor.file)] if target.vendor else []
    files += [("grader.file", target.grader.file)] if target.grader and target.grader.file else []
    for field, rel in files:
        if not target.path(rel).is_file():
            raise TargetError(file, field, f"{rel} not found in {root}")
    if target.program:
        try:
            target.knobs = marked_knobs(target.baseline_source()) | target.knobs
        except ValueError as e:
            raise TargetError(target.path(target.baseline.file), "knobs", str(e)) from None
    return target


_MARKED = re.compile(r"^\s*([A-Za-z_]\w*)\s*=\s*(.+?)\s*# eat:knob\b(.*)$")


def marked_knobs(source: str) -> dict[str, Knob]:
    """The knobs a program's source marks: `NAME = value  # eat:knob [v1, v2, ...]`, the
    current value first (the baseline's configuration); ValueError for a mark it cannot read."""
    knobs: dict[str, Knob] = {}
    for n, line in enumerate(source.splitlines(), 1):
        if KNOB_MARK not in line:
            continue
        m = _MARKED.match(line)
        if not m:
            raise ValueError(f"line {n}: a `# eat:knob` mark belongs on a `NAME = value` line")
        name, current, rest = m.groups()
        try:
            values = ast.literal_eval(rest.strip()) if rest.strip() else []
            here = ast.literal_eval(current)
        except (ValueError, SyntaxError):
            raise ValueError(
                f"line {n}: {name}'s value and its list `[v1, v2, ...]` must be literals"
            ) from None
        if not isinstance(values, list) or len(values) < 1:
            raise ValueError(f"line {n}: {name}: `# eat:knob` needs a list of values, e.g. [1, 2]")
        values = [here, *(v for v in values if v != here)]
        try:
            knobs[name] = Knob(kind="assign", values=values)
        except ValidationError:
            raise ValueError(f"line {n}: {name}: values must be numbers or strings") from None
    return knobs


def assign_knobs(source: str, knobs: dict) -> str:
    """`source` with each marked line of a knob in `knobs` set to its value (the mark kept)."""

    def one(line: str) -> str:
        m = _MARKED.match(line)
        if not m or m.group(1) not in knobs:
            return line
        head = line[: m.start(2)]
        return f"{head}{knobs[m.group(1)]!r}  {KNOB_MARK}{m.group(3)}"

    return "\n".join(one(line) for line in source.splitlines()) + "\n"


def bundle(files: dict[str, str]) -> str:
    """Several files as one source: each after a line `# eat:file NAME`."""
    return "".join(f"{FILE_MARK} {name}\n{text.rstrip(chr(10))}\n" for name, text in files.items())


def unbundle(source: str) -> dict[str, str]:
    """The files of a bundle by name (text before the first mark is dropped)."""
    files: dict[str, list[str]] = {}
    current: list[str] | None = None
    for line in source.splitlines():
        if line.startswith(FILE_MARK + " "):
            current = files.setdefault(line[len(FILE_MARK) + 1 :].strip(), [])
        elif current is not None:
            current.append(line)
    return {name: "\n".join(lines) + "\n" for name, lines in files.items()}


def geomean(values: list[float]) -> float:
    return math.exp(sum(math.log(v) for v in values) / len(values))
