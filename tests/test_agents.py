"""Agents that work in their team's worktree: `command` scripts, fake claude/codex CLIs, limits,
containment (retire, stop, kill -9 of eat), and the request protocol of `eat submit`."""

import hashlib
import json
import os
import signal
import stat
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from eat.procs import alive
from eat.run import run_status, start_run
from eat.workspace import Workspace
from fake_runner import FakeRunner

SECRET = "sk-eat-agent-secret-7731"
FAST = "// eat:cflags -O3 -march=native\n#define LOOP_ORDER IKJ\n"


def events(ws, kind):
    return [e for e in Workspace.open(ws).read_events()[0] if e.type == kind]


def script(tmp_path, name, text) -> Path:
    path = tmp_path / name
    path.write_text(text)
    path.chmod(path.stat().st_mode | stat.S_IEXEC)
    return path


def secret_nowhere(ws: Path) -> None:
    """The key is in no file of the workspace (worktrees included) nor any commit message."""
    for f in ws.rglob("*"):
        if f.is_file() and ".git" not in f.parts:
            assert SECRET not in f.read_text(errors="replace"), f
    log = subprocess.run(["git", "-C", str(ws), "log", "--all", "--format=%B"],
                         capture_output=True, text=True).stdout
    assert SECRET not in log


@pytest.mark.slow
def test_a_shell_script_agent_checks_and_submits_a_faster_kernel(quick_matmul, tmp_path,
                                                                  monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", SECRET)
    agent = script(tmp_path, "agent.sh", f"""set -e
test -n "$EAT_WORKSPACE" && test -n "$EAT_TEAM" && test -f "$EAT_TASK"
printf '%s' "$OPENAI_API_KEY" | sha256sum | cut -c1-16 > key.seen
eat check --json > check.json
{{ printf '{FAST}'; cat baseline.c; }} > candidate.c
echo "tried ikj at -O3 with $OPENAI_API_KEY" >> NOTES.md
eat submit -m "ikj loop order at -O3 (key $OPENAI_API_KEY)" --json > submit.json
""")
    ws = tmp_path / "ws"
    _, stop = start_run(quick_matmul, ws, agent="command", agent_command=f"sh {agent}",
                        teams=["coordinate"], max_evals=1, workers=1)
    assert stop.code == "max_evals"
    st = run_status(ws)
    assert st["best_candidate"] == "c0001" and st["best_speedup"] > 2
    wt = ws / "worktrees" / "coordinate-1"
    reply = json.loads((wt / "submit.json").read_text())
    assert reply["status"] == "ok" and reply["candidate"] == "c0001" and reply["new_best"]
    assert len(reply["workloads"]) == 3 and "ms" in reply["workloads"][0]
    assert json.loads((wt / "check.json").read_text())["status"] == "ok"
    assert len(events(ws, "candidate_checked")) == 1
    # The key reached the agent, and nothing eat wrote holds it.
    assert (wt / "key.seen").read_text().strip() == hashlib.sha256(SECRET.encode()).hexdigest()[:16]
    (c,) = events(ws, "candidate_evaluated")
    assert "ikj loop order" in c.idea and SECRET not in c.idea
    # Its branch records the attempt; the run's repository does not carry the worktree.
    repo = Workspace.open(ws).repo
    branch_log = repo.git.log("team/coordinate-1", "--format=%s")
    assert "c0001: ok" in branch_log and "(new best)" in branch_log
    assert "candidate.c" in repo.git.ls_tree("--name-only", "team/coordinate-1")
    assert "worktrees" not in repo.git.ls_files()
    assert (wt / "baseline.c").stat().st_mode & stat.S_IWUSR == 0
    assert os.path.realpath(wt / "LEARNING.md") == str((ws / "LEARNING.md").resolve())
    # The agent's own notes reach the team's NOTES.md, its key masked.
    team_notes = (ws / "teams" / "coordinate-1" / "NOTES.md").read_text()
    assert "tried ikj at -O3 with ***" in team_notes
    secret_nowhere(ws)


def test_an_agent_that_loops_on_check_is_stopped_and_the_run_goes_on(quick_matmul, tmp_path):
    agent = script(tmp_path, "loop.sh", "while true; do eat check > /dev/null; done\n")
    runner = FakeRunner(lambda k: 2.0)
    ws = tmp_path / "ws"
    _, stop = start_run(quick_matmul, ws, runner=runner, agent="command",
                        agent_command=f"sh {agent}", teams=["coordinate"], max_evals=3,
                        agent_steps=2, no_progress=2, workers=1)
    assert stop.code == "no_progress"
    failed = events(ws, "attempt_failed")
    assert [f.kind for f in failed] == ["no_candidate"] * 2
    assert all("step limit" in f.reason for f in failed)
    assert len(events(ws, "candidate_checked")) == 4 and runner.calls == 4


def test_an_agent_that_submits_nothing_is_stopped_at_its_wall_clock_limit(quick_matmul,
                                                                          tmp_path):
    agent = script(tmp_path, "idle.sh", "sleep 300 & echo $! > idle.pid; sleep 300\n")
    ws = tmp_path / "ws"
    t0 = time.monotonic()
    _, stop = start_run(quick_matmul, ws, runner=FakeRunner(lambda k: 2.0), agent="command",
                        agent_command=f"sh {agent}", teams=["coordinate"], max_evals=2,
                        agent_wall_s=1.0, no_progress=1, workers=1)
    assert stop.code == "no_progress" and time.monotonic() - t0 < 30
    (failed,) = events(ws, "attempt_failed")
    assert "wall-clock limit" in failed.reason
    pid = int((ws / "worktrees" / "coordinate-1" / "idle.pid").read_text())
    assert not alive(pid)  # its background child went with it
    assert "wall-clock limit" in (ws / "teams" / "coordinate-1" / "agent.log").read_text()
