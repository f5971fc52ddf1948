"""Runner conformance: every runner must judge the same candidate behaviours the same way.

A kit is a folder under kits/ holding a small target (target.toml with its [evaluation] table,
reference, baseline) and one candidate source per behaviour, named `<behaviour><suffix>`. To
cover a new runner, add its kit folder and one `Kit(...)` entry to KITS; nothing else changes.
A kit whose runner cannot run on this machine is skipped with the runner's own reason
(`runner.unavailable()`), never passed.

Each candidate is evaluated once per session (the evaluation is slow, the checks are not); the
tests below then assert different facts about that one evaluation.
"""

from __future__ import annotations

import os
import re
import statistics
import time
from collections.abc import Callable, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import fake_gpu
import pytest

from eat.runners import runner_for
from eat.runners.base import STATUSES, Evaluation, Runner
from eat.runners.sandbox import landlock_abi
from eat.target import Target, geomean, load_target

KITS_DIR = Path(__file__).parent / "kits"

# What every runner must say about each behaviour. A kit may narrow or widen an entry
# (Kit(..., expect=EXPECT | {...})) but not drop one.
EXPECT: dict[str, frozenset[str]] = {
    "baseline": frozenset({"ok"}),  # the baseline itself: speedup ~1
    "faster": frozenset({"ok"}),  # correct and clearly faster
    "wrong": frozenset({"incorrect"}),  # plausible but wrong numbers
    "syntax_error": frozenset({"compile_error"}),
    "segfault": frozenset({"crash"}),
    "infinite_loop": frozenset({"timeout"}),
    "writes_input": frozenset({"rejected"}),  # right output, but scribbles on a const input
    "one_shape": frozenset({"incorrect"}),  # right for one workload only
    "constant": frozenset({"incorrect"}),  # writes every element, with a constant
    "detached_thread": frozenset({"incorrect", "rejected"}),  # work escapes the call
    "stale_cache": frozenset({"incorrect"}),  # replays the first answer for a size
    "fork_bomb": frozenset({"crash", "timeout"}),
    "huge_alloc": frozenset({"crash", "timeout"}),
    "background_spinner": frozenset({"rejected"}),  # right, but leaves a thread burning CPU
    "slower": frozenset({"ok"}),  # correct, just slow: timed, never rejected
    "memo_by_address": frozenset({"incorrect", "rejected"}),  # replays results per buffer address
    # Replays results keyed on two input values and the shape: right on any input it computed,
    # so it may be ok, but timed calls get inputs it has not seen, so it gains nothing.
    "memo_by_content": frozenset({"ok", "incorrect", "rejected"}),
    # Right, and writes a scratch file in its own folder (it may); tries to write outside it.
    "writes_outside": frozenset({"ok"}),
}
SLOW = frozenset({"infinite_loop", "fork_bomb"})  # each waits out the kit's timeout_s


@dataclass(frozen=True)
class Kit:
    """A runner's conformance kit: where its sources are and what it must say about them."""

    name: str  # folder under kits/, and the first part of every test id
    suffix: str  # candidate file extension, e.g. ".c", ".cu"
    expect: Mapping[str, frozenset[str]] = field(default_factory=lambda: dict(EXPECT))
    slow: frozenset[str] = SLOW
    baseline_band: tuple[float, float] = (0.7, 1.4)  # the baseline against itself, with noise
    faster_than: float = 1.5  # faster<suffix> must beat the baseline by at least this
    # behaviour -> regex that must match the evaluation's message (or, for compile errors, the
    # message or compile log): the reason given has to be the right one, in this kit's words.
    messages: Mapping[str, str] = field(default_factory=dict)
    # behaviour -> why this kit's runner does not yet do what EXPECT asks (a known bug, with
    # where it is). Its status checks run as xfail until the runner is fixed; then delete the
    # entry. Not a way to lower an expectation.
    known_gaps: Mapping[str, str] = field(default_factory=dict)
    # Makes what the kit's runner needs on this machine (e.g. a fake device runtime) and returns
    # environment variables, set around this kit's evaluations only.
    env: Callable[[], Mapping[str, str]] | None = None
    # Another kit whose candidates run unchanged on this kit's runner (its target.toml points
    # at that kit's reference and baseline).
    borrows: str | None = None

    @property
    def path(self) -> Path:
        return KITS_DIR / self.name

    @property
    def sources(self) -> Path:
        """Where its candidates are: its own folder, or the kit it borrows them from."""
        return KITS_DIR / (self.borrows or self.name)

    def source(self, behaviour: str) -> str:
        return (self.sources / f"{behaviour}{self.suffix}").read_text()


# How a kit's messages name things: the C-like kits name arguments by their signature (A, C),
# the Python ones by where they sit in the call (argument[0]) or as the returned output.
C_MESSAGES = {
    "syntax_error": r"error\b.*accumulator",  # the compiler names the undeclared identifier
    "segfault": r"SIGSEGV",
    "infinite_loop": r"\blimit\b",
    "writes_input": r"\bA\b",  # the input it modified
    "wrong": r"\bC\b",  # the output that is wrong
    "one_shape": r"\bC\b",
    "constant": r"\bC\b",
    "stale_cache": r"\bC\b",
    "memo_by_address": r"\bC\b",
}
PY_MESSAGES = C_MESSAGES | {
    "syntax_error": r"line 4",  # the line of the missing colon
    "writes_input": r"argument\[0\]",  # A
    "wrong": r"\boutput\b",
    "one_shape": r"\boutput\b",
    "constant": r"\boutput\b",
    "stale_cache": r"\boutput\b",
    "memo_by_address": r"\boutput\b",
}

KITS: list[Kit] = [
    Kit("cpu", ".c", messages=C_MESSAGES),
    # Python candidates: the same matmul, returning C instead of writing it.
    # Each of a candidate's two harness children imports torch (about 2 s here), so the
    # behaviours that are timed or wait out a limit are slow on this kit; the mlx kit judges
    # them through the same Python harness in the quick set.
    Kit(
        "torch_cpu",
        ".py",
        messages=PY_MESSAGES,
        slow=SLOW
        | {
            "slower",
            "memo_by_content",
            "writes_outside",
            "background_spinner",
            "huge_alloc",
            "detached_thread",
        },
    ),
    Kit("mlx", ".py", messages=PY_MESSAGES | {"syntax_error": r"line 1"}),
    # The same PyTorch candidates on a CUDA (or ROCm) GPU; skipped, with the reason, without one.
    Kit("torch_cuda", ".py", borrows="torch_cpu", messages=PY_MESSAGES),
    # CUDA C++ on a real NVIDIA GPU; skipped, with the runner's reason, on machines without one.
    Kit(
        "cuda",
        ".cu",
        messages=C_MESSAGES
        | {
            "segfault": r"illegal (memory access|address)",  # the runtime's own words
        },
    ),
    # The GPU runner's pipeline on the FAKE runtime of tests/fake_gpu (host memory, plain C++
    # candidates built by g++): runs everywhere, proves the harness, says nothing about GPUs.
    Kit("cuda_fake", ".cu", env=fake_gpu.runtime_env, messages=C_MESSAGES),
]


def _cases(select=lambda kit, behaviour: True, judges_status: bool = False) -> list:
    """(kit, behaviour) params; `judges_status`: the test checks what the runner decided."""
    out = []
    for kit in KITS:
        for b in kit.expect:
            if not select(kit, b):
                continue
            # One worker runs every test of a candidate: `judge` evaluates it once per worker.
            marks = [pytest.mark.xdist_group(f"{kit.name}-{b}")]
            if b in kit.slow:
                marks.append(pytest.mark.slow)
            if judges_status and b in kit.known_gaps:
                marks.append(pytest.mark.xfail(reason=kit.known_gaps[b], strict=False))
            out.append(pytest.param(kit, b, id=f"{kit.name}-{b}", marks=marks))
    return out


# -- evaluating a kit's candidate, once per session -------------------------------------------


@dataclass
class Judged:
    """One candidate's evaluation and what the test process saw around it."""

    target: Target
    runner: Runner
    ev: Evaluation
    wall_s: float
    leftovers: dict[int, str]  # live processes from this evaluation after it returned
    workdir: Path  # the evaluation's folder; the candidate's own is a folder inside it


def _proc_table() -> dict[int, tuple[int, str]]:
    """pid -> (parent pid, state letter) of every process visible in /proc."""
    table = {}
    for d in Path("/proc").iterdir():
        if not d.name.isdigit():
            continue
        try:
            stat = (d / "stat").read_text()
        except OSError:
            continue
        state, ppid = stat[stat.rindex(")") + 2 :].split()[:2]
        table[int(d.name)] = (int(ppid), state)
    return table


def _descendants(table: dict[int, tuple[int, str]], root: int) -> set[int]:
    children: dict[int, list[int]] = {}
    for pid, (ppid, _) in table.items():
        children.setdefault(ppid, []).append(pid)
    out, todo = set(), [root]
    while todo:
        for child in children.get(todo.pop(), []):
            if child not in out:
                out.add(child)
                todo.append(child)
    return out


def _cmdline(pid: int) -> str:
    try:
        return (
            Path(f"/proc/{pid}/cmdline")
            .read_bytes()
            .replace(b"\0", b" ")
            .decode("utf-8", "replace")
            .strip()
        )
    except OSError:
        return "?"


def _tied_to(pid: int, workdir: str) -> bool:
    """Whether a process runs in, or was started with an environment naming, `workdir`."""
    try:
        if os.readlink(f"/proc/{pid}/cwd").startswith(workdir):
            return True
    except OSError:
        pass
    for what in ("cmdline", "environ"):
        try:
            if workdir.encode() in Path(f"/proc/{pid}/{what}").read_bytes():
                return True
        except OSError:
            pass
    return False


def _live_processes(workdir: str, before: set[int]) -> dict[int, str]:
    """Live (not zombie) processes that are new descendants of this one or tied to workdir."""
    table = _proc_table()
    live = {pid for pid, (_, state) in table.items() if state not in "ZX"}
    new_kids = _descendants(table, os.getpid()) - before
    return {
        pid: _cmdline(pid)
        for pid in live
        if pid != os.getpid() and (pid in new_kids or _tied_to(pid, workdir))
    }


def _leftovers(workdir: str, before: set[int], grace_s: float = 5.0) -> dict[int, str]:
    """What is still alive from an evaluation, after giving killed processes time to go."""
    deadline = time.monotonic() + grace_s
    while True:
        left = _live_processes(workdir, before)
        if not left or time.monotonic() > deadline:
            return left
        time.sleep(0.1)


@pytest.fixture(scope="session")
def judge(eat_cache_dir, tmp_path_factory):
    """judge(kit, behaviour) -> Judged; evaluates each candidate once, skips absent hardware."""
    done: dict[tuple[str, str], Judged | Exception | pytest.skip.Exception] = {}

    def run(kit: Kit, behaviour: str) -> Judged:
        key = (kit.name, behaviour)
        if key not in done:
            try:
                done[key] = _evaluate(kit, behaviour, tmp_path_factory)
            except (Exception, pytest.skip.Exception) as e:  # the same for every test of it
                done[key] = e
        if isinstance(done[key], BaseException):
            raise done[key]
        return done[key]

    return run


@contextmanager
def _kit_env(kit: Kit):
    """The environment the kit's runner needs (a fake GPU's runtime), for as long as it runs."""
    with pytest.MonkeyPatch.context() as mp:
        for name, value in (kit.env() if kit.env else {}).items():
            mp.setenv(name, value)
        yield


def _evaluate(kit: Kit, behaviour: str, tmp_path_factory) -> Judged:
    with _kit_env(kit):
        target = load_target(kit.path)
        runner = runner_for(target)
        reason = runner.unavailable(target)
        if reason:
            pytest.skip(f"kit {kit.name!r}: runner {runner.name!r} unavailable here: {reason}")
        source = kit.source(behaviour)
        workdir = tmp_path_factory.mktemp(f"{kit.name}-{behaviour}")
        before = _descendants(_proc_table(), os.getpid())
        t0 = time.monotonic()
        ev = runner.evaluate(target, source, config=target.evaluation, workdir=workdir)
        wall = time.monotonic() - t0
    return Judged(
        target=target,
        runner=runner,
        ev=ev,
        wall_s=wall,
        leftovers=_leftovers(str(workdir), before),
        workdir=workdir,
    )


def _describe(ev: Evaluation) -> str:
    return (
        f"status={ev.status!r} speedup={ev.speedup} message={ev.message!r} "
        f"stderr={ev.stderr[-500:]!r}"
    )


# -- the tests -----------------------------------------------------------------------------------


@pytest.mark.parametrize("kit", KITS, ids=lambda k: k.name)
def test_kit_is_complete(kit: Kit):
    """Every expected behaviour has a source, every source an expectation, the target loads."""
    target = load_target(kit.path)
    sources = {p.name.removesuffix(kit.suffix) for p in kit.sources.glob(f"*{kit.suffix}")}
    sources.discard(Path(target.reference.file).stem)  # Python kits: reference.py is no candidate
    assert set(kit.expect) == sources
    assert set(EXPECT) <= set(kit.expect), "a kit may not drop a behaviour every runner is held to"
    assert all(kit.expect[b] and kit.expect[b] <= set(STATUSES) for b in kit.expect)
    assert kit.source("baseline") == target.baseline_source()
    assert set(kit.messages) <= set(kit.expect) and set(kit.known_gaps) <= set(kit.expect)
    assert len({tuple(sorted(w.items())) for w in target.workloads}) >= 2, (
        "one_shape needs several workloads"
    )


@pytest.mark.parametrize("kit, behaviour", _cases(judges_status=True))
def test_status(judge, kit: Kit, behaviour: str):
    """The runner gives the status this behaviour deserves, and a one-line reason for it."""
    j = judge(kit, behaviour)
    ev = j.ev
    assert ev.status in kit.expect[behaviour], _describe(ev)
    assert ev.runner == j.runner.name and ev.target == j.target.name
    assert ev.message.strip() and "\n" not in ev.message.strip(), _describe(ev)
    if ev.status != "ok":
        assert ev.speedup is None and not ev.workloads, "a failed candidate gets no speedup"


@pytest.mark.parametrize(
    "kit, behaviour", _cases(lambda kit, b: b in kit.messages, judges_status=True)
)
def test_message_gives_the_reason(judge, kit: Kit, behaviour: str):
    """The message names the actual problem (the compiler's error, the signal, the argument)."""
    ev = judge(kit, behaviour).ev
    text = ev.message
    if ev.status == "compile_error":
        assert "error" in (ev.message + ev.compile_log).lower(), _describe(ev)
        text += "\n" + ev.compile_log
    assert re.search(kit.messages[behaviour], text), (
        f"/{kit.messages[behaviour]}/ not in {text[-2000:]!r}"
    )


@pytest.mark.parametrize(
    "kit, behaviour",
    _cases(
        lambda kit, b: b in ("baseline", "faster", "slower", "memo_by_content"), judges_status=True
    ),
)
def test_speedup(judge, kit: Kit, behaviour: str):
    """The baseline is timed level with itself; clearly faster or slower ones are measured so;
    a memo of earlier answers gains nothing (a replay would be many times the baseline)."""
    j = judge(kit, behaviour)
    ev = j.ev
    if behaviour == "memo_by_content" and ev.status != "ok":
        return  # caught outright: nothing was timed
    assert ev.status == "ok", _describe(ev)
    assert len(ev.workloads) == len(j.target.workloads)
    cfg = j.target.evaluation
    for w in ev.workloads:
        assert w.baseline is not None and w.speedup is not None and w.speedup > 0
        assert cfg.min_repeats <= w.candidate.n <= cfg.max_repeats
        assert w.gflops and w.gflops > 0  # the kit's target declares flops
    assert ev.speedup == pytest.approx(geomean([w.speedup for w in ev.workloads]))
    low, high = kit.baseline_band
    holds = {
        "baseline": lambda x: low < x < high,
        "faster": lambda x: x > kit.faster_than,
        "memo_by_content": lambda x: x < high,  # it computes as the baseline does, on every call
        "slower": lambda x: x < low,  # four times the baseline's work
    }[behaviour]
    # One evaluation can land in a burst of load on a shared machine (0.5x for the baseline and
    # 1.41x for a memo were seen beside other work); a bias of the runner would show in every
    # one: the median of up to three.
    speedups = [ev.speedup]
    while not holds(statistics.median(speedups)) and len(speedups) < 3:
        with _kit_env(kit):
            again = j.runner.evaluate(j.target, kit.source(behaviour), config=cfg)
        assert again.status == "ok", _describe(again)
        speedups.append(again.speedup)
    assert holds(statistics.median(speedups)), speedups


@pytest.mark.skipif(
    landlock_abi() < 1,
    reason="this kernel has no Landlock: candidates "
    "can write wherever the user can (docs/ARCHITECTURE.md, threat model)",
)
@pytest.mark.parametrize("kit, behaviour", _cases(lambda kit, b: b == "writes_outside"))
def test_writes_stay_in_its_folder(judge, kit: Kit, behaviour: str):
    """A candidate changes no file outside its own folder: not the evaluation's folder, and so
    not the cache, the workspace or the user's files (its status says its own folder was open)."""
    j = judge(kit, behaviour)
    assert j.ev.status == "ok", _describe(j.ev)
    assert not (j.workdir / "escaped").exists(), (j.workdir / "escaped").read_text()


def test_writes_outside_land_with_confine_writes_off(tmp_path):
    """`[evaluation] confine_writes = false` reaches the harness: the same candidate's write
    lands (so the test above can fail)."""
    kit = next(k for k in KITS if k.name == "cpu")
    target = load_target(kit.path)
    cfg = target.evaluation.model_copy(update={"confine_writes": False})
    ev = runner_for(target).evaluate(
        target, kit.source("writes_outside"), config=cfg, workdir=tmp_path
    )
    assert ev.status == "ok", _describe(ev)
    assert (tmp_path / "escaped").read_text().startswith("written by a candidate")


@pytest.mark.parametrize("kit, behaviour", _cases())
def test_returns_within_limits(judge, kit: Kit, behaviour: str):
    """Every evaluation ends near its configured limits; a hang costs one timeout_s, no more."""
    j = judge(kit, behaviour)
    cfg = j.target.evaluation
    slack = 15.0  # compiling, starting the contained processes, loading the reference
    if "timeout" in kit.expect[behaviour]:
        limit = cfg.timeout_s + slack  # the hang is cut at timeout_s and ends the evaluation
    else:
        limit = 2 * cfg.timeout_s + slack  # at most a verify process and a timing process
    assert j.wall_s < limit, f"took {j.wall_s:.1f} s (limit {limit:g} s): {_describe(j.ev)}"


@pytest.mark.parametrize("kit, behaviour", _cases())
def test_leaves_no_processes(judge, kit: Kit, behaviour: str):
    """Nothing the evaluation started outlives it (fork_bomb is the one that tries)."""
    j = judge(kit, behaviour)
    assert j.leftovers == {}, f"still running after evaluate returned: {j.leftovers}"
