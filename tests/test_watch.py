"""`eat watch`: frames redrawn from file events while a run goes, and one frame with --once."""

import io
import re
import threading
import time

from fake_runner import FakeRunner
from rich.console import Console
from typer.testing import CliRunner

from eat.cli import app
from eat.events import describe
from eat.run import run_status, start_run
from eat.watch import BLOCKS, RunView, sparkline, watch
from eat.workspace import Workspace

SPACING_S = 0.1  # between evaluations: each lands in a frame of its own on a loaded machine


def landscape(knobs: dict[str, str]) -> float:
    """A speedup that rises as the search finds the right loop order, tiles and flags."""
    x = 2.0 if knobs.get("LOOP_ORDER") in ("IKJ", "KIJ") else 1.0
    x *= 1.0 + int(knobs.get("TILE", "0")) / 128
    return x * (1.4 if "march" in knobs.get("CFLAGS", "") else 1.0)


class _Spaced(FakeRunner):
    def evaluate(self, *args, **kwargs):
        time.sleep(SPACING_S)
        return super().evaluate(*args, **kwargs)


def _text(renderable) -> str:
    screen = Console(file=io.StringIO(), width=160)
    screen.print(renderable)
    return screen.file.getvalue()


def _flat(text: str) -> str:
    return " ".join(text.split())


def test_sparkline_scales_blanks_and_buckets():
    assert sparkline([0.0, 1.0, 7.0]) == BLOCKS[0] + BLOCKS[1] + BLOCKS[7]
    assert sparkline([None, None, 2.0, 2.0]) == "  " + BLOCKS[-1] * 2
    assert sparkline([]) == ""
    long = [float(i) for i in range(200)]
    line = sparkline(long, width=50)
    assert len(line) == 50 and line[0] == BLOCKS[0] and line[-1] == BLOCKS[-1]
    assert list(line) == sorted(line, key=BLOCKS.index)


def test_a_torn_tail_waits_for_its_newline(quick_matmul, tmp_path):
    ws_path, _ = start_run(quick_matmul, tmp_path / "ws", runner=FakeRunner(landscape), max_evals=3)
    log = ws_path / "history.jsonl"
    whole = log.read_bytes()
    cut = whole.rstrip(b"\n").rfind(b"\n") + 1 + 10  # ten bytes into the last line
    log.write_bytes(whole[:cut])
    view = RunView(Workspace.open(ws_path))
    first = view.read()
    assert view.offset == cut - 10 and view.session.type != "run_stopped"
    with open(log, "ab") as f:  # the writer finishes the line
        f.write(whole[cut:])
    (last,) = view.read()
    assert last.type == "run_stopped" and view.offset == len(whole)
    assert len(first) + 1 == len(Workspace.open(ws_path).read_events()[0])
    assert view.read() == []


def test_watch_draws_each_evaluation_within_a_second_of_its_event(quick_matmul, tmp_path):
    ws = tmp_path / "ws"
    evals = 12
    run = threading.Thread(
        target=start_run,
        args=(quick_matmul, ws),
        # a climb from the baseline alone: the best rises frame by frame
        kwargs=dict(runner=_Spaced(landscape), max_evals=evals, seed=1, teams=["coordinate"]),
    )
    run.start()
    while not (ws / "history.jsonl").exists():
        time.sleep(0.005)
    frames: list[tuple[float, str]] = []  # when each frame was shown, and its text
    stop, returned = threading.Event(), []
    screen = Console(file=io.StringIO(), width=160)
    started = time.time()
    watcher = threading.Thread(
        target=lambda: returned.append(
            watch(ws, screen, stop, on_frame=lambda v, r: frames.append((time.time(), _text(r))))
        )
    )
    watcher.start()
    run.join(timeout=60)
    deadline = time.time() + 5
    while not (frames and "stopped: max_evals" in frames[-1][1]) and time.time() < deadline:
        time.sleep(0.01)
    stop.set()
    watcher.join(timeout=5)
    assert returned == [0]

    events = Workspace.open(ws).read_events()[0]
    evaluated = [e for e in events if e.type == "candidate_evaluated"]
    counts = [int(re.search(r"(\d+) candidates", text).group(1)) for _, text in frames]
    assert counts == sorted(counts) and counts[-1] == len(evaluated)
    assert len(set(counts)) > len(evaluated) // 2  # it rose frame by frame, not in one jump
    # Each evaluation is shown by a frame drawn after it was logged (how soon: bench/
    # watch_latency.py measures it; a test does not time the machine).
    for k, e in enumerate(evaluated, 1):
        if e.time > started:
            assert any(n >= k and t >= e.time for (t, _), n in zip(frames, counts))

    final = frames[-1][1]
    st = run_status(ws)
    assert f"best {st['best_speedup']:.2f}x ({st['best_candidate']} by " in final
    assert f"stopped: max_evals: {events[-1].reason}" in final
    spark = re.search(r"best .*\) +(\S+)\n", final).group(1)
    assert len(spark) == st["evaluations"] and set(spark) <= set(BLOCKS)
    assert len(set(spark)) > 1  # the best rose during the run
    for t in st["teams"]:
        assert re.search(rf"{t['id']} +{t['strategy']} +{t['state']} +{t['evaluations']} ", final)
    decided = [e for e in events if e.type in ("plateau_detected", "restructured")]
    assert decided  # the supervisor acted, and the frame says why
    for e in decided[-3:]:
        assert _flat(describe(e)) in _flat(final)
    # Not a terminal: the frames were printed one after another, as shown.
    assert screen.file.getvalue().count("LLM 0 calls") == len(frames)


def test_watch_once_prints_a_finished_run(quick_matmul, tmp_path):
    ws, stop = start_run(
        quick_matmul, tmp_path / "ws", runner=FakeRunner(landscape), max_evals=6, seed=2
    )
    done = CliRunner().invoke(app, ["watch", str(ws), "--once"])
    assert done.exit_code == 0, done.output
    st = run_status(ws)
    assert f"best {st['best_speedup']:.2f}x ({st['best_candidate']}" in done.output
    assert f"stopped: {stop.code}: " in done.output and "\x1b[" not in done.output
    for t in st["teams"]:
        assert t["id"] in done.output
    assert f"evaluations {st['evaluations']}/6" in done.output


def test_watch_refuses_a_folder_that_is_not_a_workspace(tmp_path):
    done = CliRunner().invoke(app, ["watch", str(tmp_path), "--once"])
    assert done.exit_code == 2
    assert done.output.strip().startswith("error: ") and len(done.output.strip().splitlines()) == 1
    assert "not an eat workspace" in done.output


def test_a_run_that_dies_without_run_stopped_is_shown_not_running(quick_matmul, tmp_path):
    ws_path, _ = start_run(quick_matmul, tmp_path / "ws", runner=FakeRunner(landscape), max_evals=3)
    log = ws_path / "history.jsonl"
    lines = log.read_text().splitlines(keepends=True)
    log.write_text("".join(lines[:-1]))  # as if killed before it could say why it stopped
    ws = Workspace.open(ws_path)
    held, release = threading.Event(), threading.Event()

    def run():  # a process holding the lock, then dying: the kernel closes the lock file
        with ws.lock():
            held.set()
            release.wait(10)

    frames, stop = [], threading.Event()
    holder = threading.Thread(target=run)
    holder.start()
    held.wait(5)
    watcher = threading.Thread(
        target=watch,
        args=(ws_path, Console(file=io.StringIO()), stop),
        kwargs=dict(on_frame=lambda v, r: frames.append(_text(r))),
    )
    watcher.start()
    deadline = time.time() + 5
    while not frames and time.time() < deadline:
        time.sleep(0.01)
    release.set()
    holder.join(5)
    deadline = time.time() + 30  # a bound on waiting, not on the watcher's speed
    while "not running" not in frames[-1] and time.time() < deadline:
        time.sleep(0.01)
    stop.set()
    watcher.join(5)
    assert "  running  " in frames[0]
    assert "not running: it ended without run_stopped" in frames[-1]


def test_ctrl_c_leaves_with_130(quick_matmul, tmp_path):
    ws, _ = start_run(quick_matmul, tmp_path / "ws", runner=FakeRunner(landscape), max_evals=2)

    def interrupt(view, frame):
        raise KeyboardInterrupt

    assert watch(ws, Console(file=io.StringIO()), on_frame=interrupt) == 130
