"""Teams' turns on several workers: one worker reproduces the serial loop's history; several
run at once, evaluate nothing twice, stay within the budget and say what state they saw."""

import json
import threading
from pathlib import Path

import pytest
import serial_run
from fake_runner import FakeRunner

from eat.agents.offline import OfflineAgent
from eat.events import CandidateEvaluated
from eat.executors.local import Cancelled, LocalExecutor, ctrl_c_at_waits
from eat.run import resume_run, run_status, start_run
from eat.state import RunState
from eat.workspace import Workspace

SERIAL = Path(__file__).parent / "data" / "serial_history.jsonl"
TEAMS = ["coordinate", "explorer", "refiner", "model"]


def test_one_worker_reproduces_the_serial_history(tmp_path):
    # data/serial_history.jsonl was written by the loop before turns had workers
    # (`python tests/serial_run.py FILE` at that commit): same events, same order. Rewritten
    # when the model team's surrogate got a width per knob: the first 58 events were the same,
    # and from the model team's first pick on its picks changed. Rewritten again when a global
    # team whose candidate became the run's best started to play on (team.pick_team): the first
    # 6 events were the same, and the 7th is the explorer's second turn in a row. Rewritten
    # when cpu_matmul gained its VEC knob: every candidate's knobs and source carry it, and
    # from the 6th event on the explorer's farthest picks move with the larger space. Rewritten
    # when teams with equal turns began to play in the order they were spawned, not by name: the
    # first 12 events are the same; the 13th is explorer-2's turn, not the fork coordinate-3's.
    # Rewritten when the explorer's sampled pool gained each measured point's antipode: the
    # first 5 events are the same; the 6th, the explorer's first pick, is the exact far corner.
    # Rewritten when a region exploration opened got the restart arm the scores favour (a model
    # of the region before any is scored) instead of a coordinate climb: the first 11 events
    # are the same; the 12th spawns model-3, not coordinate-3. Rewritten when teams took turns by
    # share times pace (Team.due) under supervision: the first 14 events are the same; the 15th
    # is model-3's turn, not coordinate-1's (its candidates were far below the run's best).
    # Rewritten when a stalled elite was re-timed until it had 3 measurements (plateau.RETIMED_TO)
    # instead of once: the first 29 events are the same; the 30th re-times c0003 a second time.
    # Rewritten when a retire that makes room said how stale the team is instead of "gained
    # nothing in its last N candidates" (false for N = 0): two reasons' text, nothing else.
    # Rewritten when a re-time recorded a program's score: its two re-times gained "score": null.
    # Rewritten when a climb with no start began to climb from the run's best, not only its own:
    # the first 7 events are the same; the 8th is coordinate-1's climb from the explorer's c0003.
    # Rewritten when the explorer took the least-measured knob values first: the first 5 events
    # are the same; the 6th is the same far corner under a new idea's text, and the 7th, the
    # explorer's second pick, measures values no candidate had used.
    # Rewritten when a candidate recorded the program it builds and the one it repeats: every
    # candidate_evaluated gained "program": null and "same_as": null, nothing else changed.
    expected = [json.loads(line) for line in SERIAL.read_text().splitlines()]
    got = json.loads(json.dumps(serial_run.run(tmp_path / "ws", workers=1)))
    assert [e["type"] for e in got] == [e["type"] for e in expected]
    assert got == expected


class MeetingRunner(FakeRunner):
    """The first `meet` evaluations wait for each other (a barrier): a loop that ran one turn
    at a time would never get past the first. No timing is involved."""

    def __init__(self, meet: int):
        super().__init__(serial_run.landscape)
        self.barrier = threading.Barrier(meet, timeout=60)
        self.lock, self.waiting = threading.Lock(), meet

    def evaluate(self, target, source, **kw):
        with self.lock:
            meets, self.waiting = self.waiting > 0, self.waiting - 1
        if meets:
            self.barrier.wait()  # BrokenBarrierError (the test fails) if they never meet
        with self.lock:
            return super().evaluate(target, source, **kw)


class OneTurnPerTeam:
    """An offline agent that fails the test's check when its team has two turns at once."""

    overlaps = 0

    def __init__(self, ctx):
        self.inner, self.busy = OfflineAgent(ctx.target, seed=0), threading.Lock()

    def propose(self, team, state):
        if not self.busy.acquire(blocking=False):
            OneTurnPerTeam.overlaps += 1
            return None
        try:
            return self.inner.propose(team, state)
        finally:
            self.busy.release()

    def repair(self, team, state, failed, log):
        return None


def _check_log(ws: Path, max_evals: int) -> list[CandidateEvaluated]:
    events, size = Workspace.open(ws).read_events()
    assert size == (ws / "history.jsonl").stat().st_size  # parses to the end
    evaluated = [e for e in events if e.type == "candidate_evaluated"]
    state = RunState.from_events(events)
    assert state.spent_evals == max_evals  # the budget, exactly
    assert [e.candidate for e in evaluated] == [f"c{i:04d}" for i in range(1, len(evaluated) + 1)]
    assert len({e.source_hash for e in evaluated}) == len(evaluated)  # nothing twice
    for e in evaluated:  # each cites its view
        assert e.seen_seq is not None and e.seen_seq < e.seq
        assert (ws / "teams" / e.team / "candidates" / e.candidate / "result.json").is_file()
    return evaluated


def test_turns_run_at_once_and_nothing_is_evaluated_twice(tmp_path):
    runner = MeetingRunner(meet=4)
    OneTurnPerTeam.overlaps = 0
    ws = tmp_path / "ws"
    _, stop = start_run(
        serial_run.EXAMPLES / "cpu_matmul",
        ws,
        runner=runner,
        max_evals=30,
        workers=4,
        teams=TEAMS,
        make_agent=lambda t, ctx: OneTurnPerTeam(ctx),
    )
    assert stop.code == "max_evals"
    evaluated = _check_log(ws, 30)
    assert runner.calls == 30  # candidates and re-times, nothing more
    assert OneTurnPerTeam.overlaps == 0
    first = [e for e in evaluated if e.seen_seq == evaluated[0].seen_seq]
    assert len(first) == 4 and len({e.team for e in first}) == 4  # began on one state, met
    best = run_status(ws)["best_candidate"]
    assert (ws / "best" / "CANDIDATE").read_text().strip().endswith(best)


def test_resume_with_other_workers_continues_the_same_run(tmp_path):
    ws = tmp_path / "ws"
    start_run(
        serial_run.EXAMPLES / "cpu_matmul",
        ws,
        runner=FakeRunner(serial_run.landscape),
        max_evals=10,
        workers=3,
        teams=TEAMS,
    )
    _, stop = resume_run(ws, runner=FakeRunner(serial_run.landscape), max_evals=20, workers=2)
    assert stop.code == "max_evals"
    _check_log(ws, 20)
    assert Workspace.open(ws).config().workers == 2


def test_the_executor_runs_writes_on_the_main_thread_and_refuses_them_once_closed():
    pool, main = LocalExecutor(2), threading.get_ident()
    seen = []
    pool.start("a", lambda: pool.on_main(lambda: seen.append(threading.get_ident()) or 7))
    pool.start("b", lambda: pool.on_main(lambda: 1 / 0))
    assert pool.free() == 0
    ended = dict((t, (r, type(e).__name__ if e else None)) for t, r, e in pool.drain())
    assert ended == {"a": (7, None), "b": (None, "ZeroDivisionError")} and seen == [main]
    assert pool.on_main(lambda: "here") == "here"  # on the main thread: at once
    gate = threading.Event()
    pool.start("c", lambda: (gate.wait(10), pool.on_main(lambda: "late"))[1])
    pool.close()
    gate.set()
    _, result, error = pool.next_done()
    assert result is None and isinstance(error, Cancelled)


def test_ctrl_c_is_held_until_the_main_thread_waits_or_begins_a_node_and_a_second_one_raises():
    # A KeyboardInterrupt that landed inside LangGraph's own code could leave a thread of its
    # pool unjoined, and `eat start` then never exited after Ctrl-C; one that landed inside
    # queue.Queue.put left the git thread unwoken and the run's last flush waiting forever.
    import os
    import signal
    import time

    pool, gate = LocalExecutor(1), threading.Event()
    before = signal.getsignal(signal.SIGINT)
    ran = []

    with ctrl_c_at_waits(pool):
        os.kill(os.getpid(), signal.SIGINT)
        time.sleep(0.01)  # the handler has run: the code it landed in goes on
        assert pool.interrupted
        pool.start("a", lambda: gate.wait(30))
        with pytest.raises(KeyboardInterrupt):
            pool.next_done()  # where the main thread next waits, it stops
        with pytest.raises(KeyboardInterrupt):
            pool.interruptible(lambda: ran.append(1))()  # and before it begins a node
        assert ran == []
        with pytest.raises(KeyboardInterrupt):
            os.kill(os.getpid(), signal.SIGINT)
            time.sleep(30)  # a second Ctrl-C: at once, wherever it lands
    gate.set()
    assert signal.getsignal(signal.SIGINT) is before
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # how a shell starts a background job
    try:
        with ctrl_c_at_waits(pool):
            assert signal.getsignal(signal.SIGINT) is signal.SIG_IGN  # still ignored
    finally:
        signal.signal(signal.SIGINT, before)


@pytest.mark.slow
def test_two_workers_on_the_cpu_runner(quick_matmul, tmp_path):
    ws = tmp_path / "ws"
    _, stop = start_run(quick_matmul, ws, max_evals=8, workers=2)
    assert stop.code == "max_evals"
    st = run_status(ws)
    assert st["evaluations"] == 8 and st["best_speedup"] > 1
    _check_log(ws, 8)


def test_llm_teams_call_the_model_at_once_and_every_call_is_logged(tmp_path, llm_server):
    # Two LLM teams on two workers: the first coder call of each waits for the other's at the
    # server (a barrier), so the test passes only if both turns are in flight together.
    base = (serial_run.EXAMPLES / "cpu_matmul" / "baseline.c").read_text()
    meet, lock, served = threading.Barrier(2, timeout=60), threading.Lock(), []
    plan = json.dumps({"ideas": [{"idea": "ikj loop order", "expected_gain": 3}]})

    def answer(req):
        if "# Plan the next ideas" in json.dumps(req["messages"]):
            return plan
        with lock:
            served.append(1)
            n = len(served)
        if n <= 2:
            meet.wait()
        order = ["IKJ", "KIJ", "JIK"][n % 3]
        return f"Variant {n}.\n\n```c\n// variant {n}\n#define LOOP_ORDER {order}\n{base}```\n"

    llm_server.default = answer
    ws = tmp_path / "ws"
    _, stop = start_run(
        serial_run.EXAMPLES / "cpu_matmul",
        ws,
        runner=FakeRunner(serial_run.landscape),
        model="openai/eat-test-model",
        api_base=llm_server.base_url,
        teams=["coordinate", "explorer"],
        max_evals=6,
        workers=2,
        repairs=0,
        llm_backoff_s=0,
        llm_timeout_s=20,
        sleep=lambda s: None,
    )
    assert stop.code == "max_evals"
    _check_log(ws, 6)
    events = Workspace.open(ws).read_events()[0]
    calls = [e for e in events if e.type == "llm_called"]
    assert len(calls) == len(llm_server.requests)  # every call logged once, none lost
    assert {c.team for c in calls} == {"coordinate-1", "explorer-2"}
    assert run_status(ws)["llm_calls"] == len(calls)


@pytest.mark.slow
def test_ctrl_c_with_turns_in_flight_stops_at_once_and_resume_goes_on(quick_matmul, tmp_path):
    import signal
    import subprocess
    import sys
    import time

    ws = tmp_path / "ws"
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "eat",
            "start",
            str(quick_matmul),
            "-w",
            str(ws),
            "--workers",
            "3",
            "--max-evals",
            "200",
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        deadline = time.monotonic() + 120
        while (
            not (ws / "history.jsonl").exists()
            or (ws / "history.jsonl").read_text().count('"candidate_evaluated"') < 2
        ):
            assert time.monotonic() < deadline and proc.poll() is None, proc.stderr.read()
            time.sleep(0.1)
        proc.send_signal(signal.SIGINT)
        assert proc.wait(timeout=60) == 130
    finally:
        if proc.poll() is None:
            proc.kill()
    events = Workspace.open(ws).read_events()[0]
    assert events[-1].type == "run_stopped" and events[-1].code == "interrupted"
    done = len([e for e in events if e.type == "candidate_evaluated"])
    _, stop = resume_run(ws, max_evals=done + 3, workers=2)
    assert stop.code == "max_evals"
    _check_log(ws, done + 3)
