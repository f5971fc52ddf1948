"""What the importers share: parsing their sources, CPU device names, sizes fitted to the CPU,
writing the target folder."""

from __future__ import annotations

import ast
import io
import json
import os
import re
import shutil
import sys
import tempfile
import tokenize
from pathlib import Path

import tomli_w

from eat.errors import BadInput, TargetError
from eat.target import LANGUAGES, TARGET_FILE, load_target

# The runners that take PyTorch candidates: cuda, rocm and cpu.
RUNNERS = tuple(r for r, languages in LANGUAGES.items() if "pytorch" in languages)


def check_runner(runner: str) -> None:
    if runner not in RUNNERS:
        raise BadInput(f"--runner {runner!r}: imported targets run on one of {', '.join(RUNNERS)}")


SIZES = ("published", "fit")
# What a fitted CPU problem may take: its inputs, outputs and parameters, and one reference call
# on one core (a run calls it once per input set, and times it beside the candidate).
FIT_BYTES, FIT_CALL_S = 64 << 20, 0.1


def check_sizes(sizes: str | None, runner: str) -> str:
    """The sizes an import keeps: `sizes` checked, by default "fit" on the CPU and
    "published" elsewhere."""
    sizes = sizes or ("fit" if runner == "cpu" else "published")
    if sizes not in SIZES:
        raise BadInput(f"--sizes {sizes!r}: one of {', '.join(SIZES)}")
    if sizes == "fit" and runner != "cpu":
        raise BadInput("--sizes fit: sizes are fitted to the CPU only (--runner cpu)")
    return sizes


def fitted(
    reference: str,
    params: dict,
    origin: Path,
    max_bytes: int = FIT_BYTES,
    max_call_s: float = FIT_CALL_S,
) -> tuple[dict, str]:
    """The workload at which the problem fits the CPU (eat.formats.fit, in a child with torch),
    and the lines target.toml's header says of it; BadInput when the problem itself fails."""
    from eat.runners import sandbox
    from eat.runners.base import eat_pythonpath

    with sandbox.scratch("fit") as tmp:
        (Path(tmp) / "reference.py").write_text(reference)
        job = {
            "reference": str(Path(tmp) / "reference.py"),
            "params": params,
            "max_bytes": max_bytes,
            "max_call_s": max_call_s,
        }
        done = sandbox.run(
            [sys.executable, "-m", "eat.formats.fit"],
            cwd=Path(tmp),
            env=sandbox.clean_env(Path(tmp), {"PYTHONPATH": eat_pythonpath()}),
            limits=sandbox.Limits(wall_s=600, cpu_s=600, max_output_chars=20_000),
            stdin=json.dumps(job),
        )
    tag = "EAT-FIT "
    answer = next(
        (json.loads(line[len(tag) :]) for line in done.stdout.splitlines() if line.startswith(tag)),
        None,
    )
    if answer is None or "error" in answer:
        why = (
            answer["error"]
            if answer
            else (
                done.stderr.strip().splitlines() or [f"the sizing child died ({done.returncode})"]
            )[-1]
        )
        raise BadInput(f"{origin}: on the CPU, {why[:400]}")
    new = answer["params"]
    changed = [f"{k} = {params[k]} -> {new[k]}" for k in params if new[k] != params[k]]
    mb, ms = answer["bytes"] / 2**20, answer["call_s"] * 1e3
    over = answer["bytes"] > max_bytes or answer["call_s"] > max_call_s
    kept = (
        "the published ones, kept: none could be halved (under 16, or the model needs it as it is)"
        if over
        else "the published ones fit"
    )
    note = (
        f"\nSizes fitted to one CPU core (--sizes fit: inputs, outputs and parameters "
        f"{mb:.0f} MiB, a reference call {ms:.0f} ms): "
        + ("; ".join(changed) if changed else kept)
        + ".\n`eat import ... --sizes published` keeps the published sizes."
    )
    return new, note


def parse_python(source: str, path: Path) -> ast.Module:
    try:
        return ast.parse(source, filename=str(path))
    except SyntaxError as e:
        raise BadInput(f"{path}: line {e.lineno}: not valid Python: {e.msg}") from None


def top_level_names(tree: ast.Module) -> dict[str, ast.AST]:
    """Names a module binds at its top level (functions, classes, assignments, imports)."""
    names: dict[str, ast.AST] = {}
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names[node.name] = node
        elif isinstance(node, (ast.Assign, ast.AnnAssign)):
            for target in node.targets if isinstance(node, ast.Assign) else [node.target]:
                for n in ast.walk(target):
                    if isinstance(n, ast.Name):
                        names[n.id] = node
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            for alias in node.names:
                names[(alias.asname or alias.name).split(".")[0]] = node
    return names


def require_free(names: dict, wanted: tuple[str, ...], path: Path) -> None:
    """Refuse a source that already binds a name the importer adds next to its code."""
    taken = [n for n in wanted if n in names]
    if taken:
        raise BadInput(f"{path}: defines {', '.join(taken)}, a name the importer needs to add")


def safe_name(text: str) -> str:
    """A target name (and default folder name) from a file or problem name."""
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", text).strip("._-") or "target"


def on_cpu(source: str) -> str:
    """`source` with its CUDA device names made the CPU's.

    Benchmark problems hard-code the GPU (`device="cuda"`, `.cuda()`); under `--runner cpu`
    they run with torch's CPU build, so the string "cuda" (or "cuda:N") becomes "cpu" and
    `.cuda()` becomes `.cpu()`. Other uses (`torch.cuda.synchronize()`) are left as written.
    """
    toks = list(tokenize.generate_tokens(io.StringIO(source).readline))
    edits = []
    for i, t in enumerate(toks):
        if t.type == tokenize.STRING:
            try:
                value = ast.literal_eval(t.string)
            except (ValueError, SyntaxError):
                continue
            if isinstance(value, str) and re.fullmatch(r"cuda(:\d+)?", value):
                edits.append((t.start, t.end, '"cpu"'))
        elif (
            t.type == tokenize.NAME
            and t.string == "cuda"
            and 0 < i < len(toks) - 2
            and toks[i - 1].string == "."
            and toks[i + 1].string == "("
            and toks[i + 2].string == ")"
        ):
            edits.append((t.start, t.end, "cpu"))
    lines = source.splitlines(keepends=True)
    for (row, c0), (_, c1), text in reversed(edits):  # right to left keeps columns valid
        line = lines[row - 1]
        lines[row - 1] = line[:c0] + text + line[c1:]
    return "".join(lines)


def write_target(
    out: Path,
    origin: Path,
    header: str,
    target: dict,
    files: dict[str, str],
    copies: dict[str, Path] | None = None,
) -> Path:
    """Write a target folder at `out`: target.toml (`header` comment, then `target`), `files`
    (relative path -> text) and `copies` (relative path -> file to copy).

    Refuses an existing `out` unless it is an empty folder, without touching it. The folder is
    built in a temporary sibling, checked with load_target, then renamed into place, so `out`
    is either complete or absent.
    """
    out = Path(out)
    if out.is_symlink() or out.exists() and (not out.is_dir() or any(out.iterdir())):
        raise BadInput(f"{out}: already exists and is not an empty folder; choose another --out")
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}.", dir=out.parent))
    try:
        toml = "".join(f"# {line}".rstrip() + "\n" for line in header.strip().splitlines())
        (tmp / TARGET_FILE).write_text(toml + "\n" + tomli_w.dumps(target, multiline_strings=True))
        for rel, text in files.items():
            (tmp / rel).parent.mkdir(parents=True, exist_ok=True)
            (tmp / rel).write_text(text)
        for rel, src in (copies or {}).items():
            (tmp / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(src, tmp / rel)
        try:
            load_target(tmp)
        except TargetError as e:
            raise BadInput(
                f"{origin}: the imported target does not load: {str(e).replace(str(tmp), str(out))}"
            ) from None
        tmp.chmod(0o755)  # mkdtemp's folder is private; a target folder is not
        try:
            os.rename(tmp, out)  # replaces an empty folder, fails on one filled meanwhile
        except OSError as e:
            raise BadInput(f"{out}: cannot create: {e.strerror}") from None
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)
    return out
