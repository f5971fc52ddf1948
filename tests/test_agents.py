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
from fake_runner import FakeRunner

from eat.procs import alive
from eat.run import run_status, start_run
from eat.workspace import Workspace

SECRET = "sk-eat-agent-secret-7731"
FAST = "// eat:cflags -O3 -march=native\n#define LOOP_ORDER IKJ\n"


def events(ws, kind):
    return [e for e in Workspace.open(ws).read_events()[0] if e.type == kind]


def script(tmp_path, name, text) -> Path:
    path = tmp_path / name
    path.write_text(text)
    path.chmod(path.stat().st_mode | stat.S_IEXEC)
    return path


def run_script(target, ws: Path, agent: Path, **config):
    """A run of one coordinate team whose agent is the shell script `agent`."""
    return start_run(
        target,
        ws,
        agent="command",
        agent_command=f"sh {agent}",
        teams=["coordinate"],
        workers=1,
        **config,
    )


def secret_nowhere(ws: Path) -> None:
    """The key is in no file of the workspace (worktrees included) nor any commit message."""
    for f in ws.rglob("*"):
        if f.is_file() and ".git" not in f.parts:
            assert SECRET not in f.read_text(errors="replace"), f
    log = subprocess.run(
        ["git", "-C", str(ws), "log", "--all", "--format=%B"], capture_output=True, text=True
    ).stdout
    assert SECRET not in log


@pytest.mark.slow
def test_a_shell_script_agent_checks_and_submits_a_faster_kernel(
    quick_matmul, tmp_path, monkeypatch
):
    monkeypatch.setenv("OPENAI_API_KEY", SECRET)
    agent = script(
        tmp_path,
        "agent.sh",
        f"""set -e
test -n "$EAT_WORKSPACE" && test -n "$EAT_TEAM" && test -f "$EAT_TASK"
printf '%s' "$OPENAI_API_KEY" | sha256sum | cut -c1-16 > key.seen
eat check --json > check.json
{{ printf '{FAST}'; cat baseline.c; }} > candidate.c
echo "tried ikj at -O3 with $OPENAI_API_KEY" >> NOTES.md
eat submit -m "ikj loop order at -O3 (key $OPENAI_API_KEY)" --json > submit.json
""",
    )
    ws = tmp_path / "ws"
    _, stop = run_script(quick_matmul, ws, agent, max_evals=1)
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


@pytest.mark.slow
def test_a_submit_of_a_program_already_evaluated_is_answered_with_its_result(
    quick_matmul, tmp_path
):
    """An agent that submits the same program again (a comment added) is told which candidate
    it repeats, with that candidate's result, and the run spends no evaluation on it."""
    agent = script(
        tmp_path,
        "agent.sh",
        f"""set -e
{{ printf '{FAST}'; cat baseline.c; }} > candidate.c
eat submit -m "ikj at -O3" --json > one.json
{{ printf '{FAST}/* the same, said again */\\n'; cat baseline.c; }} > candidate.c
eat submit -m "ikj at -O3, again" --json > two.json
{{ printf '// eat:cflags -O2\\n#define LOOP_ORDER IKJ\\n'; cat baseline.c; }} > candidate.c
eat submit -m "ikj at -O2" --json > three.json
""",
    )
    ws = tmp_path / "ws"
    _, stop = run_script(quick_matmul, ws, agent, max_evals=2)
    wt = ws / "worktrees" / "coordinate-1"
    one, two, three = (json.loads((wt / f"{n}.json").read_text()) for n in ("one", "two", "three"))
    assert (one["candidate"], two["candidate"], three["candidate"]) == ("c0001", "c0002", "c0003")
    assert two["same_program_as"] == "c0001" and "same_program_as" not in three
    assert two["status"] == "ok" and two["speedup"] == one["speedup"]
    assert stop.code == "max_evals"
    st = run_status(ws)
    assert (st["evaluations"], st["candidates"], st["copies"]) == (2, 3, 1)


def test_an_agent_that_loops_on_check_is_stopped_and_the_run_goes_on(quick_matmul, tmp_path):
    agent = script(tmp_path, "loop.sh", "while true; do eat check > /dev/null; done\n")
    runner = FakeRunner(lambda k: 2.0)
    ws = tmp_path / "ws"
    _, stop = start_run(
        quick_matmul,
        ws,
        runner=runner,
        agent="command",
        agent_command=f"sh {agent}",
        teams=["coordinate"],
        max_evals=3,
        agent_steps=2,
        no_progress=2,
        workers=1,
    )
    assert stop.code == "no_progress"
    failed = events(ws, "attempt_failed")
    assert [f.kind for f in failed] == ["no_candidate"] * 2
    assert all("step limit" in f.reason for f in failed)
    assert len(events(ws, "candidate_checked")) == 4 and runner.calls == 4


def test_an_agent_that_submits_nothing_is_stopped_at_its_wall_clock_limit(quick_matmul, tmp_path):
    agent = script(tmp_path, "idle.sh", "sleep 300 & echo $! > idle.pid; sleep 300\n")
    ws = tmp_path / "ws"
    t0 = time.monotonic()
    _, stop = start_run(
        quick_matmul,
        ws,
        runner=FakeRunner(lambda k: 2.0),
        agent="command",
        agent_command=f"sh {agent}",
        teams=["coordinate"],
        max_evals=2,
        agent_wall_s=1.0,
        no_progress=1,
        workers=1,
    )
    assert stop.code == "no_progress" and time.monotonic() - t0 < 30
    (failed,) = events(ws, "attempt_failed")
    assert "wall-clock limit" in failed.reason
    pid = int((ws / "worktrees" / "coordinate-1" / "idle.pid").read_text())
    assert not alive(pid)  # its background child went with it
    assert "wall-clock limit" in (ws / "teams" / "coordinate-1" / "agent.log").read_text()


FAKE_CLI = '''#!{python}
"""A stand-in for the {name} CLI: writes down how it was called (in its own folder, which its
fence lets it write), tries a write its fence refuses, edits, submits, reports."""
import json, os, subprocess, sys
log = os.environ["FAKE_CLI_LOG"]
try:
    open(os.environ["FAKE_OUTSIDE"], "w").close()
    outside = "written"
except PermissionError:
    outside = "refused"
with open(log, "a") as f:
    f.write(json.dumps({{"argv": sys.argv, "cwd": os.getcwd(), "outside": outside,
                        "env": {{k: os.environ.get(k) for k in
                                ("EAT_WORKSPACE", "EAT_TEAM", "EAT_TASK", "EAT_MAX_COST_USD")}},
                        "key": os.environ.get("ANTHROPIC_API_KEY") == {secret!r}}}) + "\\n")
base = open("baseline.c").read()
open("candidate.c", "w").write({fast!r} + base)
done = subprocess.run(["eat", "submit", "-m", "ikj order", "--json"], capture_output=True,
                      text=True)
reply = json.loads(done.stdout)
{report}
'''
CLAUDE_REPORT = """print(json.dumps({"type": "result", "subtype": "success", "is_error": False,
                  "num_turns": 3, "result": reply["status"], "total_cost_usd": 0.0125,
                  "usage": {"input_tokens": 120, "cache_read_input_tokens": 880,
                            "cache_creation_input_tokens": 0, "output_tokens": 240}}))"""
CODEX_REPORT = """\
for event in [{"type": "thread.started", "thread_id": "t1"}, {"type": "turn.started"},
              {"type": "item.completed", "item": {"type": "agent_message",
                                                 "text": reply["status"]}},
              {"type": "turn.completed", "usage": {"input_tokens": 1000,
                                                   "cached_input_tokens": 600,
                                                   "output_tokens": 300}}]:
    print(json.dumps(event))"""


@pytest.mark.parametrize(
    "name, model, report",
    [("claude", "anthropic/claude-sonnet-4-5", CLAUDE_REPORT), ("codex", "offline", CODEX_REPORT)],
)
def test_fake_claude_and_codex_on_path_show_the_cli_protocol(
    quick_matmul, tmp_path, monkeypatch, name, model, report
):
    bindir = tmp_path / "bin"
    bindir.mkdir()
    script(
        bindir,
        name,
        FAKE_CLI.format(python=sys.executable, name=name, fast=FAST, secret=SECRET, report=report),
    )
    monkeypatch.setenv("PATH", f"{bindir}{os.pathsep}{os.environ['PATH']}")
    home = tmp_path / f"{name}-home"  # the CLI's own folder, as its preset declares it
    monkeypatch.setenv({"claude": "CLAUDE_CONFIG_DIR", "codex": "CODEX_HOME"}[name], str(home))
    monkeypatch.setenv("FAKE_CLI_LOG", str(home / "calls.jsonl"))
    monkeypatch.setenv("FAKE_OUTSIDE", str(tmp_path / "outside"))
    monkeypatch.setenv("ANTHROPIC_API_KEY", SECRET)
    ws = tmp_path / "ws"
    runtime = {"claude": "claude-code", "codex": "codex"}[name]
    _, stop = start_run(
        quick_matmul,
        ws,
        runner=FakeRunner(lambda k: 3.0 if k.get("LOOP_ORDER") == "IKJ" else 1.0),
        agent=runtime,
        model=model,
        teams=["coordinate"],
        max_evals=1,
        agent_steps=7,
        workers=1,
        max_cost_usd=0.5,
    )
    assert stop.code == "max_evals"
    (call,) = [json.loads(line) for line in (home / "calls.jsonl").read_text().splitlines()]
    argv = call["argv"][1:]
    wt = ws / "worktrees" / "coordinate-1"
    assert call["cwd"] == str(wt) and call["key"]
    assert call["outside"] == "refused" and not (tmp_path / "outside").exists()
    assert call["env"] == {
        "EAT_WORKSPACE": str(ws),
        "EAT_TEAM": "coordinate-1",
        "EAT_TASK": str(wt / "TASK.md"),
        "EAT_MAX_COST_USD": "0.5000",
    }
    prompt = argv[argv.index("-p") + 1] if name == "claude" else argv[-1]
    assert "eat submit" in prompt and "void matmul(" in prompt
    st = run_status(ws)
    assert st["best_candidate"] == "c0001" and st["best_speedup"] == 3.0
    if name == "claude":
        assert argv[argv.index("--output-format") + 1] == "json"
        assert argv[argv.index("--max-turns") + 1] == "7"
        assert argv[argv.index("--model") + 1] == "claude-sonnet-4-5"
        # eat counts the spend when the turn ends: the CLI holds the turn to what is left.
        assert argv[argv.index("--max-budget-usd") + 1] == "0.5000"
        assert st["tokens"] == {"prompt": 1000, "completion": 240, "cached": 880}
        assert st["cost_usd"] == 0.0125
    else:
        assert argv[:2] == ["exec", "--json"] and "--full-auto" in argv
        assert "--model" not in argv
        assert st["tokens"] == {"prompt": 1000, "completion": 300, "cached": 600}
        assert st["cost_usd"] == 0 and st["llm_unpriced_calls"] == 1
    assert st["teams"][0]["tokens"] > 0
    secret_nowhere(ws)


FAKE_AIDER = '''#!{python}
"""A stand-in for aider: edits the file it was given, keeps its cache in ~/.aider (its fence
lets it), tries a write the fence refuses, reports its tokens, and does not submit."""
import json, os, sys
home = os.path.expanduser("~/.aider")
try:
    open(os.environ["FAKE_OUTSIDE"], "w").close()
    outside = "written"
except PermissionError:
    outside = "refused"
with open(os.path.join(home, "calls.jsonl"), "a") as f:
    f.write(json.dumps({{"argv": sys.argv, "outside": outside}}) + "\\n")
base = open("baseline.c").read()
open("candidate.c", "w").write({fast!r} + base)
print("Tokens: 2.1k sent, 310 received. Cost: $0.01 message, $0.01 session.")
'''


def test_fake_aider_edits_in_its_fence_and_eat_submits_its_file(
    quick_matmul, tmp_path, monkeypatch
):
    bindir, home = tmp_path / "bin", tmp_path / "home"
    bindir.mkdir()
    script(bindir, "aider", FAKE_AIDER.format(python=sys.executable, fast=FAST))
    monkeypatch.setenv("PATH", f"{bindir}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setenv("HOME", str(home))  # ~/.aider, as the preset declares it, made by eat
    monkeypatch.setenv("FAKE_OUTSIDE", str(tmp_path / "outside"))
    ws = tmp_path / "ws"
    _, stop = start_run(
        quick_matmul,
        ws,
        runner=FakeRunner(lambda k: 3.0 if k.get("LOOP_ORDER") == "IKJ" else 1.0),
        agent="aider",
        model="openai/gpt-5",
        teams=["coordinate"],
        max_evals=1,
        workers=1,
    )
    assert stop.code == "max_evals"
    (call,) = [json.loads(x) for x in (home / ".aider" / "calls.jsonl").read_text().splitlines()]
    assert call["outside"] == "refused" and not (tmp_path / "outside").exists()
    assert call["argv"][-2:] == ["--model", "gpt-5"] and "candidate.c" in call["argv"]
    st = run_status(ws)
    assert st["best_speedup"] == 3.0 and st["tokens"]["prompt"] == 2100
    (c,) = events(ws, "candidate_evaluated")
    assert c.idea == "aider's edit at the end of its turn"


def _pids(path: Path) -> list[int]:
    return [int(x) for x in path.read_text().split()] if path.exists() else []


@pytest.mark.slow
def test_kill_9_of_eat_leaves_no_agent_process(quick_matmul, tmp_path):
    pids = tmp_path / "ws" / "worktrees" / "coordinate-1" / "pids"  # where the agent may write
    # A shell, a background child and a daemon that leaves the process group (setsid).
    agent = script(
        tmp_path,
        "agent.sh",
        f"""sleep 300 & echo $! >> {pids}
setsid sleep 301 & echo $! >> {pids}
echo $$ >> {pids}
sleep 302
""",
    )
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "eat",
            "start",
            str(quick_matmul),
            "-w",
            str(tmp_path / "ws"),
            "--agent-command",
            f"sh {agent}",
            "--max-evals",
            "2",
            "--workers",
            "1",
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    deadline = time.monotonic() + 120
    while len(_pids(pids)) < 3:
        assert proc.poll() is None, proc.stderr.read()
        assert time.monotonic() < deadline
        time.sleep(0.1)
    assert all(alive(p) for p in _pids(pids))
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    deadline = time.monotonic() + 5
    while any(alive(p) for p in _pids(pids)) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not [p for p in _pids(pids) if alive(p)]


def test_stop_ends_a_working_agent_within_5_s(quick_matmul, tmp_path):
    """What a retire (or the run's stop) does to a team's agent mid-turn: `stop` ends it and
    everything it started; the turn ends without a candidate."""
    from eat.agents.external import CommandAgent
    from eat.supervisor import stop_agent

    pids = tmp_path / "ws" / "worktrees" / "coordinate-1" / "pids"  # where the agent may write
    agent_sh = script(
        tmp_path, "agent.sh", f"sleep 300 & echo $! >> {pids}; echo $$ >> {pids}; sleep 300\n"
    )
    ws = tmp_path / "ws"
    made, threads = {}, []

    def make_agent(team, ctx):
        made[team.id] = CommandAgent("command", ctx, command=f"sh {agent_sh}")
        ctx.agents[team.id] = made[team.id]
        threads.append(threading.Thread(target=retire_soon, args=(ctx, team.id), daemon=True))
        threads[-1].start()
        return made[team.id]

    took = []

    def retire_soon(ctx, team_id):
        while len(_pids(pids)) < 2:
            time.sleep(0.05)
        t0 = time.monotonic()
        stop_agent(ctx, team_id, "the team was retired")
        while any(alive(p) for p in _pids(pids)):
            time.sleep(0.02)
        took.append(time.monotonic() - t0)

    _, stop = start_run(
        quick_matmul,
        ws,
        runner=FakeRunner(lambda k: 2.0),
        agent="command",
        agent_command="true",
        teams=["coordinate"],
        max_evals=2,
        no_progress=1,
        workers=1,
        make_agent=make_agent,
    )
    assert stop.code == "no_progress"
    for t in threads:
        t.join(10)  # the run may end before the retiring thread has seen the agent gone
    assert took and took[0] < 5
    (failed,) = events(ws, "attempt_failed")
    assert "retired" in failed.reason


def _tool_step(*calls):
    from llm_server import Reply

    return Reply("", tool_calls=list(calls), prompt_tokens=400, completion_tokens=60)


@pytest.mark.slow
def test_the_tools_runtime_edits_checks_and_submits_a_faster_kernel(
    quick_matmul, tmp_path, llm_server
):
    base = (quick_matmul / "baseline.c").read_text()
    llm_server.push(
        _tool_step(("read_file", {"path": "TASK.md"}), ("list_files", {})),
        _tool_step(("write_file", {"path": "candidate.c", "content": base})),
        _tool_step(
            ("edit_file", {"path": "candidate.c", "old": base[:40], "new": FAST + base[:40]})
        ),
        _tool_step(("check", {}), ("profile", {})),
        _tool_step(
            ("write_file", {"path": "baseline.c", "content": "x"}),
            ("write_notes", {"text": "ikj at -O3 vectorizes the inner loop"}),
        ),
        _tool_step(("submit", {"message": "ikj loop order at -O3"})),
        "Submitted my best version.",
    )  # not asked: the run's one evaluation is spent
    ws = tmp_path / "ws"
    _, stop = start_run(
        quick_matmul,
        ws,
        agent="tools",
        model="openai/eat-test-model",
        api_base=llm_server.base_url,
        teams=["coordinate"],
        max_evals=1,
        workers=1,
        llm_backoff_s=0,
        llm_timeout_s=20,
    )
    assert stop.code == "max_evals"
    st = run_status(ws)
    assert st["best_candidate"] == "c0001" and st["best_speedup"] > 2
    assert st["llm_calls"] == 6 and st["tokens"]["prompt"] == 6 * 400
    assert llm_server.pending == 1
    # What each tool answered went back to the model.
    msgs = llm_server.requests[-1].messages
    tool_results = [m["content"] for m in msgs if m["role"] == "tool"]
    assert "Task: make `matmul` faster" in tool_results[0]
    assert "candidate.c" in tool_results[1] and "TASK.md" in tool_results[1]
    assert json.loads(tool_results[4])["status"] == "ok"  # check
    assert "vectorized" in json.loads(tool_results[5])["profile"]  # profile
    assert "only the candidate file" in tool_results[6]  # baseline refused
    (c,) = events(ws, "candidate_evaluated")
    assert c.idea == "ikj loop order at -O3" and c.status == "ok"
    assert llm_server.requests[0].get("tools")[0]["function"]["name"] == "read_file"
    assert "vectorizes" in (ws / "teams" / "coordinate-1" / "NOTES.md").read_text()


@pytest.mark.slow
def test_mini_swe_agent_edits_checks_and_submits_through_bash(quick_matmul, tmp_path, llm_server):
    pytest.importorskip("minisweagent")
    bash = lambda cmd: _tool_step(("bash", {"command": cmd}))  # noqa: E731
    llm_server.push(
        bash("head -5 TASK.md"),
        bash(f"{{ printf '{FAST}'; cat baseline.c; }} > candidate.c && eat check"),
        bash("eat submit -m 'ikj loop order at -O3'"),
        bash("echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT"),
    )
    ws = tmp_path / "ws"
    _, stop = start_run(
        quick_matmul,
        ws,
        agent="mini-swe-agent",
        model="openai/eat-test-model",
        api_base=llm_server.base_url,
        teams=["coordinate"],
        max_evals=1,
        workers=1,
        max_cost_usd=5.0,
    )  # the driver gets --cost-limit 5.0000
    assert stop.code == "max_evals"
    st = run_status(ws)
    assert st["best_candidate"] == "c0001" and st["best_speedup"] > 2
    assert len(events(ws, "candidate_checked")) == 1
    outputs = [m["content"] for m in llm_server.requests[-1].messages if m["role"] == "tool"]
    assert "Task: make `matmul` faster" in outputs[0] and "ok" in outputs[1]
    assert "c0001" in outputs[2]
    # The driver's usage report is counted: one llm_called event for the turn's 4 calls.
    (call,) = events(ws, "llm_called")
    assert call.agent == "coordinate-1/mini-swe-agent" and call.prompt_tokens == 4 * 400
    assert st["tokens"]["prompt"] == 1600


def test_a_turn_may_spend_what_is_left_of_max_cost_shared_by_the_workers():
    from eat.agents.external import turn_budget
    from eat.config import make_config
    from eat.state import RunState

    state = RunState()
    state.usage.cost_usd = 0.25
    assert turn_budget(make_config(target="t"), state) is None  # no --max-cost: no cap
    assert turn_budget(make_config(target="t", max_cost_usd=1.0, workers=3), state) == 0.25
    state.usage.cost_usd = 1.0  # spent: the CLIs read 0 as "no limit", so never 0
    assert 0 < turn_budget(make_config(target="t", max_cost_usd=1.0, workers=1), state) <= 1e-4


def test_a_run_whose_agents_go_unfenced_says_so_before_it_starts(quick_matmul, tmp_path):
    from eat.agents.fence import warning
    from eat.config import make_config
    from eat.runners.sandbox import landlock_abi

    settings = tmp_path / "eat.toml"
    settings.write_text("[agents]\nconfine = false\n")
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "eat",
            "start",
            str(quick_matmul),
            "-w",
            str(tmp_path / "ws"),
            "--agent-command",
            "true",
            "--max-evals",
            "1",
            "--config",
            str(settings),
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert "warning: agents are not fenced: nothing: [agents] confine = false" in done.stderr
    log = (tmp_path / "ws" / "teams" / "coordinate-1" / "agent.log").read_text()
    assert "(not fenced: nothing: [agents] confine = false" in log
    fenced = warning(make_config(target="t", agent="command", agent_command="true"))
    assert (fenced is None) == (landlock_abi() >= 1)  # without Landlock it says that instead
    assert warning(make_config(target="t", agents={"confine": False})) is None  # offline


def test_a_writes_folder_that_cannot_be_made_is_bad_input_before_the_run(tmp_path, quick_matmul):
    from eat.errors import BadInput
    from eat.run import start_run

    (tmp_path / "a-file").write_text("")
    with pytest.raises(BadInput, match=r"\[agents\] writes: .*a-file/sub/: cannot be made"):
        start_run(
            quick_matmul,
            tmp_path / "ws",
            agent="command",
            agent_command="true",
            agents={"writes": [f"{tmp_path}/a-file/sub/"]},
        )
    assert not (tmp_path / "ws").exists()


def test_a_fence_lets_declared_folders_be_written_but_never_one_holding_the_run(
    tmp_path, monkeypatch
):
    from types import SimpleNamespace

    from eat.agents.fence import fence_for
    from eat.config import make_config
    from eat.runners.sandbox import landlock_abi
    from eat.workspace import Paths

    if landlock_abi() < 1:
        pytest.skip("needs Landlock (Linux 5.13+)")
    monkeypatch.setenv("HOME", str(tmp_path))
    (tmp_path / "target" / "private").mkdir(parents=True)
    (tmp_path / "a-file").write_text("")
    config = make_config(
        target=str(tmp_path / "target"),
        # "~/a-file/sub/" cannot be made (a file stands where its folder would): left out
        agents={"writes": ["~", "~/.cache/tool/", "~/absent-file", "~/a-file/sub/"]},
    )
    ctx = SimpleNamespace(config=config, ws=SimpleNamespace(paths=Paths(tmp_path / "ws")))
    fence = fence_for(ctx, "t-1", tmp_path / "tmp", ("~/.claude/",))
    assert fence.writable == [str(tmp_path / p) for p in ("ws/worktrees/t-1", "tmp")] + [
        "/dev",
        str(tmp_path / ".claude"),
        str(tmp_path / ".cache/tool"),
    ]
    assert fence.unreadable == [str(tmp_path / "ws/.eat/sealed"), str(tmp_path / "target/private")]
    assert fence.left_out == ["~/a-file/sub/"]  # CommandAgent.work names them in agent.log
    assert (
        fence_for(
            SimpleNamespace(config=make_config(target="t", agents={"confine": False}), ws=ctx.ws),
            "t-1",
            tmp_path,
        )
        is None
    )
