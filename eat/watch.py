"""`eat watch`: a live view of a run, redrawn when its event log changes.

`RunView` folds history.jsonl into a RunState as the log grows, reading only the bytes appended
since its last read: a long run's log is not parsed again per change, a line still being
written waits for its newline, and a line eat did not write is skipped and named. `frame` turns
the view into one rich renderable. `watch` redraws it whenever watchdog reports a write to
history.jsonl, or to the workspace's lock file (closed when the run's process ends, even by
kill -9: a run that dies without `run_stopped` is shown as no longer running). Nothing polls
the files.
"""

from __future__ import annotations

import os
import threading
from collections import deque
from collections.abc import Callable
from contextlib import contextmanager
from pathlib import Path

from rich.console import Console, Group, RenderableType
from rich.live import Live
from rich.table import Table
from rich.text import Text

from eat.events import Event, describe, gflops_text, speedup_text
from eat.state import Candidate, RunState
from eat.status import sealed_target
from eat.steer import watch_writes
from eat.workspace import LogReader, Paths, Workspace, read_key, tampered

BLOCKS = "▁▂▃▄▅▆▇█"
SPARK_WIDTH = 60
RECENT = 4  # candidates shown per team, newest first
DECISIONS = 6  # plateaus and restructures shown, newest last
STOP_CHECK_S = 0.2  # how soon a set `stop` is noticed while no file changes


def sparkline(values: list[float | None], width: int = SPARK_WIDTH) -> str:
    """One block per value, scaled from the lowest to the highest; a blank where there is no
    value yet. Longer series keep the last value of each of `width` buckets."""
    n = len(values)
    if n > width:
        values = [values[(i + 1) * n // width - 1] for i in range(width)]
    known = [v for v in values if v is not None]
    if not known:
        return " " * len(values)
    lo, span = min(known), max(known) - min(known)
    top = len(BLOCKS) - 1
    return "".join(
        " " if v is None else BLOCKS[round((v - lo) / span * top) if span else top] for v in values
    )


class RunView:
    """What a frame shows, folded from history.jsonl; `read` takes in what was appended."""

    def __init__(self, ws: Workspace):
        self.ws = ws
        self.config = ws.config()
        target = sealed_target(ws)
        grader = target.grader if target else None
        self.label = f"{grader.label} " if grader else ""  # a kernel's is its speedup
        self.vendor = target.vendor_name if target else None
        self._reset()

    def _reset(self) -> None:
        self.state = RunState(self.config.windows())
        self.offset = 0  # bytes of the log folded so far
        self.log = LogReader(read_key(self.ws.paths))  # the log's rules; what was bad
        self.curve: list[float | None] = []  # the run's best after each evaluation
        self.recent: dict[str, deque[Candidate]] = {}  # each team's latest candidates
        self.decisions: deque[Event] = deque(maxlen=DECISIONS)
        self.session: Event | None = None  # the latest run_started, run_resumed or run_stopped

    def read(self) -> list[Event]:
        """Fold the complete lines appended since the last read (the log's rules: `LogReader`);
        returns their events."""
        path = self.ws.paths.history
        with open(path, "rb") as f:
            if os.fstat(f.fileno()).st_size < self.offset:
                self._reset()  # the log was replaced: what was folded no longer holds
            f.seek(self.offset)
            data = f.read()
        if self.log.key is None:  # an older log gets its key when a run resumes it
            self.log.key = read_key(self.ws.paths)
        new = []
        # Only what ends in a newline is a whole event: the writer may be mid-line (torn tail).
        for raw in data[: data.rfind(b"\n") + 1].split(b"\n")[:-1]:
            self.offset += len(raw) + 1
            if (e := self.log.take(raw)) is not None:
                self._apply(e)
                new.append(e)
        return new

    def _apply(self, e: Event) -> None:
        self.state.apply(e)
        match e.type:
            case "candidate_evaluated":
                self.curve.append(self.state.best_speedup)
                self.recent.setdefault(e.team, deque(maxlen=RECENT)).appendleft(
                    self.state.candidates[e.candidate]
                )
            case "elite_retimed":  # an evaluation too, and it may lower the best
                self.curve.append(self.state.best_speedup)
            case "plateau_detected" | "restructured":
                self.decisions.append(e)
            case "run_started" | "run_resumed" | "run_stopped":
                self.session = e


def run_line(view: RunView, running: bool) -> str:
    """Whether the run goes on, or why it stopped."""
    s = view.session
    if s is not None and s.type == "run_stopped":
        return f"stopped: {s.code + ': ' if s.code else ''}{s.reason}"
    if running:
        return "running"
    if s is None:
        return "not started"
    return "not running: it ended without run_stopped (killed?); `eat resume` continues it"


def _candidate(c: Candidate) -> str:
    return f"{c.cid} {speedup_text(c.estimate)}" if c.status == "ok" else f"{c.cid} {c.status}"


def frame(view: RunView, running: bool) -> RenderableType:
    """One picture of the run: state, tampering, best and its curve, budgets, teams, latest
    decisions."""
    st, best = view.state, view.state.best
    use = st.usage
    minutes, seconds = divmod(int(st.elapsed_s), 60)
    lines: list[RenderableType] = [
        Text(
            f"{st.target or '?'}  {run_line(view, running)}  ({minutes}m{seconds:02d}s)",
            style="bold",
        )
    ]
    if bad := tampered(view.log.bad):
        lines.append(Text(f"tampered: {bad}", style="bold red"))
    if best:
        flops = gflops_text(best.gflops, best.vendor_gflops, view.vendor)
        lines.append(
            Text(
                f"best {view.label}{speedup_text(best.estimate)} ({best.cid} by {best.team})"
                + (f", {flops}" if flops else "")
                + f"  {sparkline(view.curve)}"
            )
        )
    else:
        lines.append(Text("best -"))
    lines.append(
        Text(
            f"evaluations {st.spent_evals}/{view.config.max_evals}: {st.evaluations} "
            f"candidates, {st.retimes} re-times; "
            + (f"{st.copies} copies of an evaluated program; " if st.copies else "")
            + f"{st.failed_attempts} failed attempts; "
            f"{st.plateaus} plateaus, {st.restructures} restructures"
        )
    )
    unpriced = f" ({use.unpriced_calls} unpriced)" if use.unpriced_calls else ""
    lines.append(
        Text(
            f"LLM {use.calls} calls, {use.prompt + use.completion} tokens "
            f"({use.cached} cached), ${use.cost_usd:.4f}{unpriced}"
        )
    )
    teams = Table(box=None, pad_edge=False)
    for col in ("team", "strategy", "state", "evals", "best", "recent"):
        teams.add_column(col)
    for t in st.teams.values():
        state = t.state + (", exhausted" if t.exhausted and t.state == "active" else "")
        recent = ", ".join(_candidate(c) for c in view.recent.get(t.id, ()))
        teams.add_row(
            t.id, t.strategy, state, str(t.evals), speedup_text(t.best_estimate), recent or "-"
        )
    lines.append(teams)
    if view.decisions:
        lines.append(Text("latest plateaus and restructures:"))
        lines += [Text(f"  #{e.seq} {describe(e)}") for e in view.decisions]
    return Group(*lines)


def _observe(paths: Paths, wake: threading.Event):
    """A watchdog observer that sets `wake` when the log or the lock file is written (our
    own reads of the lock, in is_locked, do not wake us: watch_writes leaves reads out)."""
    from watchdog.observers import Observer

    wanted = {paths.history, paths.lock}
    observer = Observer()
    observer.daemon = True
    # Not recursive: the candidates' folders and .git would flood the observer.
    for folder in (paths.root, paths.state):
        if folder.is_dir():
            watch_writes(observer, folder, lambda path: wake.set() if path in wanted else None)
    observer.start()
    return observer


@contextmanager
def _screen(console: Console):
    """Show frames: redrawn in place on a terminal, printed one after another elsewhere."""
    if console.is_terminal:
        with Live(console=console, auto_refresh=False) as live:
            yield lambda r: live.update(r, refresh=True)
    else:
        yield lambda r: console.print(r, "")


def watch(
    workspace: Path,
    console: Console,
    stop: threading.Event | None = None,
    *,
    once: bool = False,
    on_frame: Callable[[RunView, RenderableType], None] | None = None,
) -> int:
    """Show the run in `workspace` on `console` until Ctrl-C (returns 130) or `stop` is set
    (returns 0); `once`: print one frame and return 0. `on_frame` gets each frame just shown,
    with the view it shows.
    Raises BadInput when the folder is not a workspace."""
    ws = Workspace.open(workspace)
    view = RunView(ws)
    if once:
        view.read()
        console.print(frame(view, ws.is_locked()))
        return 0
    stop = stop or threading.Event()
    wake = threading.Event()
    observer = _observe(ws.paths, wake)
    try:
        with _screen(console) as show:
            while not stop.is_set():
                wake.clear()  # before reading: a write during the read wakes us again
                view.read()
                shown = frame(view, ws.is_locked())
                show(shown)
                if on_frame:
                    on_frame(view, shown)
                while not wake.wait(STOP_CHECK_S):
                    if stop.is_set():
                        break
        return 0
    except KeyboardInterrupt:
        return 130
    finally:
        observer.stop()
        observer.join(timeout=5)
