"""The evolving-teams loop end to end on the real CPU runner, through functions and the CLI."""

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import serial_run
from fake_runner import FakeRunner

from eat.config import PlateauConfig
from eat.errors import BadInput
from eat.events import describe
from eat.run import resume_run, run_status, start_run
from eat.state import RunState
from eat.workspace import Workspace

ROOT = Path(__file__).resolve().parents[1]


def eat_cmd(*args: str) -> list[str]:
    return [sys.executable, "-m", "eat", *args]


def candidate_events(ws: Path):
    return [e for e in Workspace.open(ws).read_events()[0] if e.type == "candidate_evaluated"]


@pytest.mark.slow
def test_start_status_resume_end_to_end(quick_matmul, tmp_path):
    ws = tmp_path / "ws"
    seen = []
    path, stop = start_run(quick_matmul, ws, max_evals=12, on_event=lambda e, s: seen.append(e))
    assert path == ws and stop.code == "max_evals" and stop.exit_code == 0
    st = run_status(ws)
    assert st["evaluations"] == 12 and not st["running"] and st["best_speedup"] > 2
    assert st["stopped"] == "max_evals" and "12 evaluations of 12" in st["stop_reason"]
    assert st["candidates"] - st["copies"] + st["retimes"] == 12  # copies spend none
    assert {t["state"] for t in st["teams"]} <= {"active", "retired"}
    assert st["tokens"] == {"prompt": 0, "completion": 0, "cached": 0} and st["cost_usd"] == 0
    types = [e.type for e in seen]
    assert types[0] == "run_started" and types[-1] == "run_stopped"
    best = st["best_candidate"]
    assert (ws / "best" / "CANDIDATE").read_text().strip().endswith(best)
    assert json.loads((ws / "best" / "result.json").read_text())["status"] == "ok"
    learning = (ws / "LEARNING.md").read_text()
    assert best in learning and "## Dead ends" in learning
    log = Workspace.open(ws).repo.git.log("--format=%s")
    assert log.count("\n") + 1 >= st["candidates"] and "run started on cpu_matmul" in log

    _, stop = resume_run(ws, max_evals=16)
    assert stop.code == "max_evals"
    cands = candidate_events(ws)
    again = run_status(ws)
    assert again["evaluations"] == 16 and len(cands) == again["candidates"]
    assert [c.candidate for c in cands] == [f"c{i:04d}" for i in range(1, len(cands) + 1)]
    assert len({c.source_hash for c in cands}) == len(cands)
    # The resumed run still knows its best (a re-time may move its estimate, by noise alone).
    ok = {c.candidate for c in cands if c.status == "ok"}
    assert st["best_candidate"] in ok and again["best_candidate"] in ok
    assert again["best_speedup"] > 2

    done = subprocess.run(eat_cmd("status", str(ws), "--json"), capture_output=True, text=True)
    assert done.returncode == 0
    data = json.loads(done.stdout)
    assert {"best_speedup", "evaluations", "teams", "tokens", "cost_usd", "stopped"} <= data.keys()
    assert all({"id", "state"} <= t.keys() for t in data["teams"])
    assert data["evaluations"] == 16 and data["stopped"] == "max_evals"
    # What a kernel engineer reads first: the best's GFLOP/s beside the vendor's, named.
    assert data["vendor"].startswith("numpy") and data["best_gflops"] and data["vendor_gflops"]
    flops = (
        f"{data['best_gflops']:.1f} GFLOP/s, {data['vendor']} {data['vendor_gflops']:.1f} GFLOP/s"
    )
    text = subprocess.run(eat_cmd("status", str(ws)), capture_output=True, text=True).stdout
    assert (
        f"best: {data['best_candidate']}, {data['best_speedup']:.2f}x the baseline; {flops}" in text
    )
    frame = subprocess.run(eat_cmd("watch", str(ws), "--once"), capture_output=True, text=True)
    assert f"({data['best_candidate']} by " in frame.stdout and flops in frame.stdout
    assert flops in (ws / "LEARNING.md").read_text()
    skill = tmp_path / "SKILL.md"
    subprocess.run(eat_cmd("skill", "export", str(ws), "-o", str(skill)), check=True)
    assert flops in skill.read_text()
    html = tmp_path / "report.html"
    subprocess.run(eat_cmd("report", str(ws), "-o", str(html)), check=True)
    assert f"({data['best_candidate']}; {flops})" in html.read_text()


def _program(knobs: dict[str, str]) -> str:
    """As on the real cpu_matmul: with a micro-kernel (MR > 0) the loop order is not built."""
    kernel = knobs.get("MR", "0") != "0"
    return json.dumps({k: v for k, v in knobs.items() if k != "LOOP_ORDER" or not kernel})


def test_a_source_that_builds_an_evaluated_program_gets_its_result_unevaluated(tmp_path):
    """A candidate whose program (the runner's key) the run evaluated already is recorded with
    that program's result and spends no evaluation: the runner times each program once, and the
    budget goes to programs not yet timed."""
    ws = tmp_path / "ws"
    runner = FakeRunner(
        lambda k: serial_run.landscape(json.loads(_program(k))),
        program=_program,
    )
    _, stop = start_run(ROOT / "examples" / "cpu_matmul", ws, runner=runner, max_evals=40, seed=3)
    events = Workspace.open(ws).read_events()[0]
    state = RunState.from_events(events)
    assert stop.code == "max_evals" and state.spent_evals == 40
    assert runner.calls == state.evaluations + state.retimes  # copies never reach the runner
    cands = [e for e in events if e.type == "candidate_evaluated"]
    copies = [e for e in cands if e.same_as]
    assert state.copies == len(copies) > 0 and len(cands) == state.evaluations + state.copies
    by_id = {e.candidate: e for e in cands}
    evaluated = [e.program for e in cands if not e.same_as]
    assert all(evaluated) and len(set(evaluated)) == len(evaluated)  # each program timed once
    for e in copies:
        first = by_id[e.same_as]
        assert first.same_as is None and e.program == first.program
        assert e.source_hash != first.source_hash and (e.status, e.speedup) == (
            first.status,
            first.speedup,
        )
        folder = ws / "teams" / e.team / "candidates" / e.candidate
        assert json.loads((folder / "meta.json").read_text())["same_as"] == first.candidate
        result = json.loads((folder / "result.json").read_text())
        assert result["source_hash"] == e.source_hash
        original = ws / "teams" / first.team / "candidates" / first.candidate / "result.json"
        same = json.loads(original.read_text())
        assert result | {"source_hash": ""} == same | {"source_hash": ""}
        assert e.candidate not in state.leaders
        assert f"the same program as {first.candidate}: not evaluated again" in describe(e)
    # The status says how many candidates were copies, beside the evaluations they did not use.
    from typer.testing import CliRunner

    from eat.cli import app

    st = run_status(ws)
    assert st["copies"] == len(copies) and st["evaluations"] == 40
    assert sum(t["evaluations"] for t in st["teams"]) == state.evaluations  # copies apart
    for team in state.teams.values():  # and so does each team's NOTES.md
        notes = (ws / "teams" / team.id / "NOTES.md").read_text()
        assert f"- evaluations: {team.evaluated}, since" in notes
        assert (f"({team.copies} candidates repeated" in notes) == (team.copies > 0)
    shown = CliRunner().invoke(app, ["status", str(ws)]).output
    assert f"evaluations 40/40 ({st['retimes']} re-times), {len(copies)} copies of an" in shown


def test_a_program_whose_result_file_is_gone_is_evaluated_again(tmp_path):
    """Every source here builds one program; the first candidate's result.json removed between
    runs, the next source is evaluated rather than copied from a file that is not there."""
    ws = tmp_path / "ws"
    one = lambda: FakeRunner(lambda k: 2.0, program=lambda k: "one")  # noqa: E731
    start_run(ROOT / "examples" / "cpu_matmul", ws, runner=one(), max_evals=1, teams=["explorer"])
    (ws / "teams" / "explorer-1" / "candidates" / "c0001" / "result.json").unlink()
    runner = one()
    _, stop = resume_run(ws, runner=runner, max_evals=2)
    state = RunState.from_events(Workspace.open(ws).read_events()[0])
    assert stop.code == "max_evals" and runner.calls == 1 and state.evaluations == 2
    assert state.candidates["c0002"].same_as is None and state.copies == 0


class TimesOutFirst(FakeRunner):
    """Every source builds one program; its first `misses` evaluations hit the time limit, as
    on a busy machine, and the rest are timed."""

    def __init__(self, misses: int):
        super().__init__(lambda k: 2.0, program=lambda k: "one")
        self.misses = misses

    def evaluate(self, target, source, **kw):
        ev = super().evaluate(target, source, **kw)
        if self.calls <= self.misses:
            return ev.model_copy(update={"status": "timeout", "speedup": None, "workloads": []})
        return ev


@pytest.mark.parametrize("misses", [1, 2])
def test_a_program_that_failed_by_chance_is_evaluated_once_more(tmp_path, misses):
    """A program whose evaluation timed out (which a busy machine can make of any program) is
    evaluated again when a source builds it again, once: the second result stands for it,
    whether timed or failed again, and later sources get it unevaluated."""
    ws = tmp_path / "ws"
    runner = TimesOutFirst(misses)
    cpu_matmul = ROOT / "examples" / "cpu_matmul"
    start_run(cpu_matmul, ws, runner=runner, max_evals=3, teams=["explorer"], supervise=False)
    state = RunState.from_events(Workspace.open(ws).read_events()[0])
    c = state.candidates  # no re-times (unsupervised): the runner's calls are evaluations
    assert runner.calls == 2 and c["c0001"].status == "timeout"
    assert c["c0002"].same_as is None and state.programs == {"one": "c0002"}
    assert c["c0002"].status == ("timeout" if misses == 2 else "ok")
    assert c["c0003"].same_as == "c0002" and c["c0003"].status == c["c0002"].status


class LuckyFirstTimings(FakeRunner):
    """A source's first timing is lucky (x1.3), its re-times honest: re-times lower elites."""

    def __init__(self, score):
        super().__init__(score)
        self.seen: set[str] = set()

    def evaluate(self, target, source, **kw):
        ev = super().evaluate(target, source, **kw)
        if ev.speedup is not None and ev.source_hash not in self.seen:
            ev.speedup *= 1.3
        self.seen.add(ev.source_hash)
        return ev


def test_a_re_time_is_committed_with_its_teams_notes(tmp_path):
    """After a re-time, each team's NOTES.md names its best as the run's state has it (the
    re-timed candidate's team may have a new one), and the commit says what was re-timed."""
    ws = tmp_path / "ws"
    start_run(
        ROOT / "examples" / "cpu_matmul",
        ws,
        runner=LuckyFirstTimings(serial_run.landscape),
        max_evals=30,
        seed=3,
        opening=0,
        plateau=PlateauConfig(team_window=4, run_window=6, score_after=3),
    )
    events = Workspace.open(ws).read_events()[0]
    retimes = [e for e in events if e.type == "elite_retimed"]
    assert retimes
    state = RunState.from_events(events)
    for team in state.teams.values():
        notes = (ws / "teams" / team.id / "NOTES.md").read_text()
        best = team.best
        line = f"- best: {best.cid} at {best.estimate:.2f}x" if best else "- best: none yet"
        assert line in notes, team.id
    bodies = subprocess.run(
        ["git", "log", "--format=%B"], cwd=ws, capture_output=True, text=True, check=True
    ).stdout
    assert all(describe(e) in bodies for e in retimes)


class NoisyFirst(FakeRunner):
    """The first candidate times 3.0x with a wide spread (IQR half the median), every later one
    2.9x, steadily."""

    def __init__(self):
        super().__init__(lambda k: 3.0 if self.first else 2.9)

    def evaluate(self, target, source, **kw):
        self.first = self.calls == 0  # read before FakeRunner.evaluate counts this call
        self.noise = 0.5 if self.first else 0.01
        return super().evaluate(target, source, **kw)


def test_status_names_each_teams_best_and_says_why_one_stands_above_the_runs(tmp_path):
    from typer.testing import CliRunner

    from eat.cli import app

    ws = tmp_path / "ws"
    start_run(
        ROOT / "examples" / "cpu_matmul",
        ws,
        runner=NoisyFirst(),
        max_evals=4,
        teams=["coordinate"],
        supervise=False,
    )
    st = run_status(ws)
    shown = CliRunner().invoke(app, ["status", str(ws)]).output
    (team,) = st["teams"]
    assert team["best_gain"] == 3.0 and st["best_gain"] == 2.9  # the first's timing is doubted
    assert f"3.00x ({team['best_candidate']})" in shown
    assert f"best: {st['best_candidate']}, 2.90x the baseline" in shown
    assert "so one lucky timing does not lead the run" in " ".join(shown.split())


def test_a_plateau_is_restructured_and_the_restructure_scored(quick_matmul, tmp_path):
    # Scripted speedups (a fake runner): ikj order is the only gain a one-knob climb finds, so
    # the coordinate team stalls at once and the supervisor must act.
    runner = FakeRunner(lambda k: 3.0 if k.get("LOOP_ORDER") == "IKJ" else 1.0)
    seen = []
    _, stop = start_run(
        quick_matmul,
        tmp_path / "ws",
        runner=runner,
        max_evals=30,
        teams=["coordinate"],
        on_event=lambda e, s: seen.append(e),
        plateau=PlateauConfig(team_window=3, run_window=4, score_after=3),
    )
    assert stop.code in ("max_evals", "exhausted")
    types = [e.type for e in seen]
    first_plateau = types.index("plateau_detected")
    assert "restructured" in types[first_plateau:]
    assert "restructure_scored" in types
    assert runner.calls == run_status(tmp_path / "ws")["evaluations"]


def test_bad_inputs_exit_2_and_touch_nothing(tmp_path, quick_matmul):
    keep = tmp_path / "used"
    keep.mkdir()
    (keep / "mine.txt").write_text("precious")
    for args, words in [
        (("start", str(tmp_path / "nope")), "no such target folder"),
        (("start", str(quick_matmul), "--workspace", str(keep)), "not empty"),
        (("start", str(quick_matmul), "--model", "gpt-x", "-w", str(tmp_path / "w2")), "provider"),
        (("resume", str(tmp_path / "nope")), "no such workspace"),
        (("resume", str(keep)), "not an eat workspace"),
        (("status", str(keep)), "not an eat workspace"),
        (("start", str(quick_matmul), "--max-evals", "0", "-w", str(tmp_path / "w3")), "max_evals"),
    ]:
        done = subprocess.run(eat_cmd(*args), capture_output=True, text=True, timeout=120)
        assert done.returncode == 2, (args, done.stderr)
        assert done.stderr.count("\n") == 1 and words in done.stderr, done.stderr
    assert (keep / "mine.txt").read_text() == "precious" and len(list(keep.iterdir())) == 1
    assert not (tmp_path / "w2").exists()


def _damaged_workspace(tmp_path, quick_matmul) -> Path:
    ws = tmp_path / "ws"
    start_run(quick_matmul, ws, max_evals=2)
    return ws


@pytest.mark.slow
def test_a_damaged_log_line_is_named_and_skipped_and_a_bad_config_is_refused(
    tmp_path, quick_matmul
):
    ws = _damaged_workspace(tmp_path, quick_matmul)
    history = ws / "history.jsonl"
    lines = history.read_text().splitlines(keepends=True)
    lines[2] = lines[2][:15] + "\n"
    history.write_text("".join(lines))
    before = history.read_bytes()
    done = subprocess.run(eat_cmd("status", str(ws)), capture_output=True, text=True)
    assert done.returncode == 0 and "tampered: line 3: not an event" in done.stdout, done.stderr
    assert history.read_bytes() == before  # nothing was "repaired" behind the user's back
    (ws / "eat.toml").write_text("max_evals = 'many'\n")
    with pytest.raises(BadInput, match="eat.toml"):
        resume_run(ws)


@pytest.mark.slow
def test_lock_refuses_a_second_process_and_ctrl_c_stops_cleanly(tmp_path, quick_matmul):
    ws = tmp_path / "ws"
    first = subprocess.Popen(
        eat_cmd("start", str(quick_matmul), "-w", str(ws), "--max-evals", "200"),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        deadline = time.monotonic() + 60
        while not (
            ws.exists()
            and (ws / "history.jsonl").exists()
            and Workspace.open(ws).is_locked()
            and candidate_events(ws)
        ):
            assert time.monotonic() < deadline and first.poll() is None, first.stderr.read()
            time.sleep(0.2)
        second = subprocess.run(eat_cmd("resume", str(ws)), capture_output=True, text=True)
        assert second.returncode == 2
        assert "in use by another eat process" in second.stderr
        assert f"pid {first.pid}" in second.stderr
        first.send_signal(signal.SIGINT)
        assert first.wait(timeout=60) == 130
    finally:
        if first.poll() is None:
            first.kill()
    events = Workspace.open(ws).read_events()[0]
    assert events[-1].type == "run_stopped" and events[-1].reason == "interrupted by the user"
    assert not Workspace.open(ws).is_locked()
    assert not [p for p in os.listdir("/proc") if p.isdigit() and _ours(p, ws)]


def _ours(pid: str, ws: Path) -> bool:
    try:
        return str(ws) in Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace")
    except OSError:
        return False


@pytest.mark.slow
def test_time_budget_is_a_total_over_sessions(tmp_path, quick_matmul):
    ws = tmp_path / "ws"
    _, stop = start_run(quick_matmul, ws, max_evals=100, max_time_s=2)
    assert stop.code == "max_time"
    first = run_status(ws)
    assert first["elapsed_s"] >= 2 and first["evaluations"] >= 1
    _, stop = resume_run(ws, max_time_s=first["elapsed_s"] + 3)
    assert stop.code == "max_time"
    second = run_status(ws)
    assert second["evaluations"] > first["evaluations"]
    assert first["elapsed_s"] + 3 <= second["elapsed_s"] < first["elapsed_s"] + 3 + 30
    _, stop = resume_run(ws)  # the budget is spent: nothing more runs
    assert stop.code == "max_time"
    assert run_status(ws)["evaluations"] == second["evaluations"]


def test_run_settings_come_from_a_toml_file_and_flags_override_it(tmp_path, quick_matmul):
    settings = tmp_path / "settings.toml"
    settings.write_text('max_evals = 5\nteams = ["explorer"]\nseed = 7\n')
    ws = tmp_path / "ws"
    done = subprocess.run(
        eat_cmd(
            "start", str(quick_matmul), "-w", str(ws), "--config", str(settings), "--max-evals", "1"
        ),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    config = Workspace.open(ws).config()
    assert (config.max_evals, config.teams, config.seed) == (1, ["explorer"], 7)
    assert [t["id"] for t in run_status(ws)["teams"]] == ["explorer-1"]
