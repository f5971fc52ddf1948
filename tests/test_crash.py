"""kill -9 at random moments, then resume: nothing finished is lost, repeated or made worse."""

import _thread
import os
import random
import signal
import subprocess
import sys
import threading
import time

import pytest
from conftest import EXAMPLES
from fake_runner import FakeRunner

from eat.events import describe
from eat.run import start_run
from eat.state import RunState, assured
from eat.workspace import Workspace

TOTAL = 14


def _start(quick_matmul, ws, workers: int):
    if (ws / "history.jsonl").exists():
        args = ["resume", str(ws), "--max-evals", str(TOTAL)]
    else:  # killed before the workspace existed: nothing to resume yet
        args = ["start", str(quick_matmul), "-w", str(ws), "--max-evals", str(TOTAL)]
    args += ["--workers", str(workers)]
    tmp = ws.parent / "tmp"  # the runs' temporary folder, to see what the kills leave there
    tmp.mkdir(exist_ok=True)
    return subprocess.Popen(
        [sys.executable, "-m", "eat", *args],
        env=os.environ | {"TMPDIR": str(tmp)},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )


def _children(pid: int) -> list[int]:
    found = []
    for entry in os.listdir("/proc"):
        try:
            stat = open(f"/proc/{entry}/stat").read()
        except (OSError, ValueError):
            continue
        if entry.isdigit() and int(stat.rsplit(")", 1)[1].split()[1]) == pid:
            found.append(int(entry))
    return found


def _alive(pid: int) -> bool:
    try:
        state = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


def _evaluations(ws) -> int:
    try:
        return (ws / "history.jsonl").read_text().count('"candidate_evaluated"')
    except OSError:
        return 0


def _progress(ws, proc, timeout: float = 120.0) -> None:
    """Wait until the run evaluates one more candidate (or ends)."""
    start, deadline = _evaluations(ws), time.monotonic() + timeout
    while _evaluations(ws) <= start and proc.poll() is None:
        assert time.monotonic() < deadline, "the run made no progress"
        time.sleep(0.05)


@pytest.mark.slow
@pytest.mark.parametrize("seed, workers", [(1, 1), (3, 4)])
def test_kill_9_at_random_moments_then_resume(quick_matmul, tmp_path, seed, workers):
    """With 4 workers, turns in flight at the kill are dropped (they wrote nothing) and redone
    or not on resume; what was recorded stays as it was."""
    ws = tmp_path / "ws"
    rng = random.Random(seed)
    snapshots = []
    proc = _start(quick_matmul, ws, workers)
    for _ in range(4):
        # A random moment after the run has made progress since the last kill: how long a
        # start-up takes (imports, the doctor's peaks) depends on the machine's load.
        _progress(ws, proc)
        time.sleep(rng.uniform(0.0, 2.0))
        children = _children(proc.pid)
        if proc.poll() is None:
            os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
        deadline = time.monotonic() + 5
        while [c for c in children if _alive(c)] and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not [c for c in children if _alive(c)], "checks outlived the killed run"
        if (ws / "history.jsonl").exists():
            events, _ = Workspace.open(ws).read_events()  # parses, torn tail tolerated
            snapshots.append(events)
        proc = _start(quick_matmul, ws, workers)
    _, err = proc.communicate(timeout=600)
    assert proc.returncode == 0, err

    final, size = Workspace.open(ws).read_events()
    assert size == (ws / "history.jsonl").stat().st_size  # no torn tail left behind
    evaluated = [e for e in final if e.type == "candidate_evaluated"]
    retimes = [e for e in final if e.type == "elite_retimed"]
    # Re-times spend the budget; a copy of an evaluated program's result does not.
    assert len([e for e in evaluated if not e.same_as]) + len(retimes) == TOTAL
    assert [e.candidate for e in evaluated] == [f"c{i:04d}" for i in range(1, len(evaluated) + 1)]
    assert len({e.source_hash for e in evaluated}) == len(evaluated)  # none repeated
    by_id = {e.candidate: e for e in evaluated}
    for snap in snapshots:  # none lost
        for e in snap:
            if e.type == "candidate_evaluated":
                assert by_id[e.candidate] == e
    state = RunState.from_events(final)
    doubt = state.cfg.doubt
    for snap in snapshots:  # best never worse, by the run's own ranking (the median less spreads)
        before = RunState.from_events(snap).best
        if before is not None:
            assert assured(state.best, doubt) >= assured(state.candidates[before.cid], doubt)
    assert (ws / "best" / "CANDIDATE").read_text().strip().endswith(state.best.cid)
    assert not Workspace.open(ws).is_locked()
    # The killed runs' candidate folders were swept by the resumes, the last run's by itself.
    assert not list((tmp_path / "tmp").glob("eat-*"))
    rows = [
        line for line in (ws / "EVOLUTION.md").read_text().splitlines() if line.startswith("- `")
    ]
    assert len(rows) == len([e for e in final if describe(e)])  # rebuilt, then appended
    types = [e.type for e in final]
    assert types.count("run_started") == 1 and types[-1] == "run_stopped"
    assert types.count("run_resumed") >= 2  # the kills did land mid-run
    assert len([s for s in snapshots if any(e.type == "candidate_evaluated" for e in s)]) >= 2


class _InterruptsMidEvaluation(FakeRunner):
    """Its third evaluation sends Ctrl-C to the main thread, and returns only once the run has
    recorded its stop: a turn that finishes after its run has stopped."""

    def __init__(self):
        super().__init__(lambda knobs: 2.0)
        self.stopped = threading.Event()
        self.lock, self.sent = threading.Lock(), False

    def evaluate(self, target, source, **kw):
        # Once: with two workers a second turn's evaluation could also see two calls made (the
        # first is still waiting here), and a second Ctrl-C raises wherever the main thread is.
        with self.lock:
            send = self.calls == 2 and not self.sent
            self.sent = self.sent or send
        if send:
            _thread.interrupt_main()
            self.stopped.wait(30)
        return super().evaluate(target, source, **kw)


@pytest.mark.parametrize("workers", [1, 2])
def test_a_turn_that_ends_after_ctrl_c_writes_nothing_after_the_stop(tmp_path, workers):
    runner = _InterruptsMidEvaluation()

    def seen(event, state):
        if event.type == "run_stopped":
            runner.stopped.set()

    _, stop = start_run(
        EXAMPLES / "cpu_matmul",
        tmp_path / "ws",
        runner=runner,
        on_event=seen,
        max_evals=20,
        workers=workers,
    )
    for t in threading.enumerate():  # the late turn: let it try to write
        if t.name.startswith("eat-turn-"):
            t.join(30)
    events = Workspace.open(tmp_path / "ws").read_events()[0]
    # With two workers the other turn may already be evaluating when Ctrl-C lands: it finishes.
    assert stop.code == "interrupted" and 3 <= runner.calls <= 2 + workers
    assert events[-1].type == "run_stopped", [e.type for e in events[-4:]]
