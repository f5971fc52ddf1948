"""External agents: any command, and the coding-agent CLIs built on it, run in a team's worktree.

A turn starts the agent as a contained subprocess (`eat.agents.contain`: its own session and
process group, a parent-death signal, every descendant killed when it ends) in the team's
worktree, with `EAT_WORKSPACE`, `EAT_TEAM` and `EAT_TASK` set and eat's `eat` first on PATH.
While it runs, the turn answers its `eat check` / `eat submit` requests (`Desk.serve`) and stops
it at the turn's limits (wall clock, steps, submits), when the run stops, or when the team is
retired (`stop`). Its output goes to a file outside the workspace; afterwards the tokens and
cost it reports are read back (`Preset.usage`) and logged as an llm_called event, and its
output, secrets masked, is appended to the team's agent.log.

The environment reaches the agent whole (it needs its provider's key); nothing of it is written
to the workspace or the logs.
"""

from __future__ import annotations

import ctypes
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from pydantic import BaseModel

from eat.agents.fence import fence_for, holds
from eat.errors import BadInput
from eat.events import LLMCalled
from eat.executors.local import default_workers
from eat.llm import redact
from eat.runners import sandbox
from eat.runners.base import eat_pythonpath
from eat.state import RunState, Team
from eat.workspace import source_name

PROMPT = (
    "You are a coding agent on a team that makes a kernel faster. Your working folder is "
    "a git worktree; TASK.md there says what to do, how to check (`eat check`) and how to "
    "submit (`eat submit -m MESSAGE`). Work in steps: edit {candidate}, check it, submit "
    "improvements, keep NOTES.md. The task:\n\n{task}"
)


class Usage(BaseModel):
    """What an agent reported it used in one turn."""

    model: str = ""
    calls: int = 1
    prompt_tokens: int = 0
    completion_tokens: int = 0
    cached_tokens: int = 0
    cost_usd: float | None = None


@dataclass
class Job:
    """What a preset builds its command line from."""

    prompt: str  # the instruction, with TASK.md's text
    candidate: str  # the candidate file's name in the worktree
    model: str | None  # the team's model as the CLI names it (provider prefix dropped)
    api_base: str | None
    steps: int
    command: str | None  # --agent-command
    budget_usd: float | None = None  # the most this turn may spend (None: no --max-cost)


@dataclass(frozen=True)
class Preset:
    """An external runtime: its command line, where it reports usage, what it needs."""

    name: str
    argv: Callable[[Job], list[str]]
    usage: Callable[[str], Usage | None]
    needs: str  # what to install, for people
    program: str | None = None  # the executable that must be on PATH
    submit_on_exit: bool = False  # submits the edited file itself when the agent cannot
    # What its CLI writes besides the worktree (its fence lets it): `~` is the user's home, an
    # entry ending in '/' a folder made if missing; and the variables that name the CLI's own
    # folder, with their default (the user's value wins; that folder is writable either way).
    writes: tuple[str, ...] = ()
    homes: tuple[tuple[str, str], ...] = ()


# -- reading usage back --------------------------------------------------------------------------

_EAT_USAGE = re.compile(r"^EAT-USAGE (\{.*\})\s*$", re.M)


def eat_usage(out: str) -> Usage | None:
    """`EAT-USAGE {json}` lines (any command may print them; the mini-swe-agent driver does),
    summed."""
    found = [Usage.model_validate_json(m) for m in _EAT_USAGE.findall(out)]
    if not found:
        return None
    total = Usage(model=found[-1].model, calls=0, cost_usd=None)
    for u in found:
        total.calls += u.calls
        total.prompt_tokens += u.prompt_tokens
        total.completion_tokens += u.completion_tokens
        total.cached_tokens += u.cached_tokens
        if u.cost_usd is not None:
            total.cost_usd = (total.cost_usd or 0.0) + u.cost_usd
    return total


def _json_lines(out: str) -> list[dict]:
    found = []
    for line in out.splitlines():
        line = line.strip()
        if line.startswith("{"):
            try:
                found.append(json.loads(line))
            except ValueError:
                pass
    return found


def claude_usage(out: str) -> Usage | None:
    """Claude Code's `--output-format json` result: usage, total_cost_usd, num_turns."""
    results = [d for d in _json_lines(out) if d.get("type") == "result"]
    if not results:
        return None
    r, u = results[-1], results[-1].get("usage") or {}
    cached = u.get("cache_read_input_tokens", 0) or 0
    prompt = (
        (u.get("input_tokens", 0) or 0) + cached + (u.get("cache_creation_input_tokens", 0) or 0)
    )
    model = ",".join((r.get("modelUsage") or {}).keys())
    return Usage(
        model=model,
        calls=max(1, r.get("num_turns") or 1),
        prompt_tokens=prompt,
        completion_tokens=u.get("output_tokens", 0) or 0,
        cached_tokens=cached,
        cost_usd=r.get("total_cost_usd"),
    )


def codex_usage(out: str) -> Usage | None:
    """Codex's `exec --json` events: the usage of every turn.completed, summed (no cost)."""
    turns = [d.get("usage") or {} for d in _json_lines(out) if d.get("type") == "turn.completed"]
    if not turns:
        return None
    return Usage(
        calls=len(turns),
        prompt_tokens=sum(u.get("input_tokens", 0) for u in turns),
        cached_tokens=sum(u.get("cached_input_tokens", 0) for u in turns),
        completion_tokens=sum(u.get("output_tokens", 0) for u in turns),
    )


_AIDER = re.compile(
    r"Tokens: ([\d.]+)(k?) sent(?:, ([\d.]+)(k?) cache \w+)*, ([\d.]+)(k?) "
    r"received\.(?: Cost: \$([\d.]+) message, \$([\d.]+) session\.)?"
)


def aider_usage(out: str) -> Usage | None:
    """Aider's `Tokens: 2.1k sent, 310 received. Cost: $0.01 message, $0.02 session.` lines."""
    found = _AIDER.findall(out)
    if not found:
        return None
    n = lambda v, k: int(float(v) * (1000 if k else 1))  # noqa: E731
    cost = found[-1][7]
    return Usage(
        calls=len(found),
        prompt_tokens=sum(n(f[0], f[1]) for f in found),
        completion_tokens=sum(n(f[4], f[5]) for f in found),
        cost_usd=float(cost) if cost else None,
    )


def _command(job: Job) -> list[str]:
    return ["sh", "-c", job.command or "false"]


def _claude(job: Job) -> list[str]:
    return (
        [
            "claude",
            "-p",
            job.prompt,
            "--output-format",
            "json",
            "--max-turns",
            str(job.steps),
            "--permission-mode",
            "acceptEdits",
            "--allowedTools",
            "Bash,Read,Edit,Write,Glob,Grep",
        ]
        + (["--model", job.model] if job.model else [])
        + (["--max-budget-usd", f"{job.budget_usd:.4f}"] if job.budget_usd is not None else [])
    )


def _codex(job: Job) -> list[str]:
    # --full-auto: edits and commands inside the worktree (where the request folder is too)
    return (
        ["codex", "exec", "--json", "--full-auto", "--skip-git-repo-check"]
        + (["--model", job.model] if job.model else [])
        + [job.prompt]
    )


def _aider(job: Job) -> list[str]:
    return [
        "aider",
        "--message",
        job.prompt,
        "--yes-always",
        "--no-auto-commits",
        "--no-stream",
        "--no-pretty",
        "--no-check-update",
        "--analytics-disable",
        "--auto-test",
        "--test-cmd",
        "eat check",
        job.candidate,
        "NOTES.md",
    ] + (["--model", job.model] if job.model else [])


def _mini(job: Job) -> list[str]:
    return (
        [
            sys.executable,
            "-m",
            "eat.agents.mini",
            "--model",
            job.model or "",
            "--steps",
            str(job.steps),
        ]
        + (["--api-base", job.api_base] if job.api_base else [])
        + (["--cost-limit", f"{job.budget_usd:.4f}"] if job.budget_usd is not None else [])
    )


PRESETS = {
    p.name: p
    for p in [
        Preset(
            "command", _command, eat_usage, "nothing: any executable, given with --agent-command"
        ),
        # Claude Code keeps ~/.claude.json beside ~/.claude, rewritten through temporary files in
        # the home folder; with CLAUDE_CONFIG_DIR it keeps everything in that one folder.
        Preset(
            "claude-code",
            _claude,
            claude_usage,
            "npm install -g @anthropic-ai/claude-code, and ANTHROPIC_API_KEY",
            program="claude",
            homes=(("CLAUDE_CONFIG_DIR", "~/.claude"),),
        ),
        Preset(
            "codex",
            _codex,
            codex_usage,
            "npm install -g @openai/codex, and OPENAI_API_KEY",
            program="codex",
            homes=(("CODEX_HOME", "~/.codex"),),
        ),
        # aider keeps its history files in the repository (the worktree) and caches in ~/.aider.
        Preset(
            "aider",
            _aider,
            aider_usage,
            "pip install aider-chat, and the model's key",
            program="aider",
            submit_on_exit=True,
            writes=("~/.aider/",),
        ),
        # Its driver keeps mini-swe-agent's config folder in the worktree (eat.agents.mini).
        Preset(
            "mini-swe-agent",
            _mini,
            eat_usage,
            "pip install 'eat[mini]' (mini-swe-agent) and --model",
        ),
    ]
}


def check_preset(name: str, model: str | None) -> None:
    """BadInput when this machine cannot run the runtime (its CLI or package is missing)."""
    preset = PRESETS[name]
    if preset.program and shutil.which(preset.program) is None:
        raise BadInput(f"the {name} runtime needs `{preset.program}` on PATH ({preset.needs})")
    if name == "mini-swe-agent":
        import importlib.util

        if importlib.util.find_spec("minisweagent") is None:
            raise BadInput(f"the {name} runtime needs {preset.needs}")
        if not model or model == "offline":
            raise BadInput(f"the {name} runtime needs --model (a litellm model)")


def cli_model(model: str | None, preset: str) -> str | None:
    """The model as a CLI names it: litellm's `provider/` prefix dropped, except for
    mini-swe-agent, which speaks litellm."""
    if not model or model == "offline":
        return None
    return model if preset == "mini-swe-agent" else model.split("/", 1)[-1]


def turn_budget(config, state: RunState) -> float | None:
    """What one turn may spend: --max-cost's remainder shared by the turns that may run at
    once. eat counts an agent's spend when its turn ends, so the agent's own CLI must hold it
    to this (claude-code: --max-budget-usd; mini-swe-agent: its cost limit)."""
    if config.max_cost_usd is None:
        return None
    left = config.max_cost_usd - state.usage.cost_usd
    # Never 0: to the CLIs 0 means no limit; a run with nothing left stops before the turn.
    return max(left / (config.workers or default_workers()), 1e-4)


_LIBC = ctypes.CDLL(None, use_errno=True)
_PR_SET_PDEATHSIG = 1


def _contained() -> Callable[[], None]:
    parent = os.getpid()

    def apply() -> None:
        # The container hears SIGTERM when eat dies (even by kill -9) and ends the agent.
        _LIBC.prctl(_PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0)
        if os.getppid() != parent:
            os._exit(1)

    return apply


class CommandAgent:  # a base.Worker
    """A team's external agent (`runtime`: command or a preset of it)."""

    def __init__(
        self,
        preset: str,
        ctx,
        command: str | None = None,
        model: str | None = None,
        poll_s: float = 0.05,
    ):
        self.preset, self.ctx, self.command = PRESETS[preset], ctx, command
        self.model, self.poll_s = model, poll_s
        self._proc: subprocess.Popen | None = None
        self._stopped: str | None = None
        self._lock = threading.Lock()

    def stop(self, why: str = "stopped by eat") -> None:
        """End the agent's process (and everything it started) now, from any thread."""
        with self._lock:
            self._stopped = why
            proc = self._proc
        if proc is not None and proc.poll() is None:
            _end(proc)

    def work(self, team: Team, state: RunState, desk) -> str:
        ctx, paths = self.ctx, self.ctx.ws.paths
        folder = paths.worktree(team.id)
        candidate = source_name(ctx.target.language)
        task = paths.task_file(team.id)
        start_text = paths.work_source(team.id, ctx.target.language).read_text()
        job = Job(
            prompt=PROMPT.format(candidate=candidate, task=task.read_text()),
            candidate=candidate,
            model=cli_model(self.model, self.preset.name),
            api_base=ctx.config.api_base,
            steps=ctx.config.agent_steps,
            command=self.command,
            budget_usd=turn_budget(ctx.config, state),
        )
        bindir = os.path.dirname(sys.executable)  # where this eat's `eat` is installed
        with self._lock:
            self._stopped = None
        # The turn's own temporary folder: the one outside its worktree that it may write.
        with sandbox.scratch(f"agent-{team.id}") as tmp_name, tempfile.TemporaryFile() as out:
            tmp = Path(tmp_name)
            env = os.environ | {
                "EAT_WORKSPACE": str(paths.root),
                "EAT_TEAM": team.id,
                "EAT_TASK": str(task),
                "PYTHONPATH": eat_pythonpath(),
                "PATH": bindir + os.pathsep + os.environ.get("PATH", ""),
                "EAT_AGENT_STEPS": str(ctx.config.agent_steps),
                "TMPDIR": str(tmp),
                "TMP": str(tmp),
                "TEMP": str(tmp),
            }
            homes = {k: os.environ.get(k) or os.path.expanduser(v) for k, v in self.preset.homes}
            env |= homes
            if job.budget_usd is not None:  # for --agent-command scripts; presets pass it as a flag
                env["EAT_MAX_COST_USD"] = f"{job.budget_usd:.4f}"
            fence = fence_for(
                ctx, team.id, tmp, self.preset.writes + tuple(f"{h}/" for h in homes.values())
            )
            fenced = ["--fence", json.dumps(fence.to_json())] if fence else []
            with self._lock:
                if self._stopped:
                    return self._stopped
                self._proc = subprocess.Popen(
                    [sys.executable, "-m", "eat.agents.contain", *fenced, *self.preset.argv(job)],
                    cwd=folder,
                    env=env,
                    stdin=subprocess.DEVNULL,
                    stdout=out,
                    stderr=subprocess.STDOUT,
                    start_new_session=True,
                    preexec_fn=_contained(),
                )
            proc = self._proc
            why = None
            try:
                while proc.poll() is None:
                    desk.serve(
                        paths.requests(team.id), paths.work_source(team.id, ctx.target.language)
                    )
                    why = self._stopped or desk.why_end()
                    if why:
                        if not self._stopped and not desk.hard:
                            self._wrap_up(
                                proc,
                                desk,
                                paths.requests(team.id),
                                paths.work_source(team.id, ctx.target.language),
                            )
                        _end(proc)
                        break
                    time.sleep(self.poll_s)
            finally:
                _end(proc)
                with self._lock:
                    self._proc = None
            out.seek(0)
            text = out.read().decode("utf-8", "replace")
        # A stop that ended the agent between two polls still says why it ended.
        why = why or self._stopped or f"the agent exited with code {proc.returncode}"
        said = why if fence else f"{why} (not fenced: {holds(ctx.config.agents.confine)})"
        if fence and fence.left_out:
            said += f" (left out of its fence, could not be made: {', '.join(fence.left_out)})"
        self._report(team, text, said)
        source = paths.work_source(team.id, ctx.target.language).read_text()
        if (
            self.preset.submit_on_exit
            and desk.last is None
            and source != start_text
            and not self._stopped
        ):
            desk.submit(source, f"{self.preset.name}'s edit at the end of its turn")
        return why

    def _wrap_up(self, proc, desk, folder, source, grace_s: float = 5.0) -> None:
        """Its submits or the run's budget are spent: give it a moment to finish (and report
        its usage) on its own, answering what it asks with refusals."""
        deadline = time.monotonic() + grace_s
        while proc.poll() is None and time.monotonic() < deadline and not self._stopped:
            desk.serve(folder, source)
            time.sleep(self.poll_s)

    def _report(self, team: Team, output: str, why: str) -> None:
        """Log the agent's output (secrets masked) and the usage it reported."""
        ctx = self.ctx
        usage = self.preset.usage(output) or eat_usage(output)
        if usage is not None:
            ctx.record(
                LLMCalled(
                    agent=f"{team.id}/{self.preset.name}",
                    team=team.id,
                    model=usage.model or self.model or self.preset.name,
                    prompt_tokens=usage.prompt_tokens,
                    completion_tokens=usage.completion_tokens,
                    cached_tokens=usage.cached_tokens,
                    cost_usd=usage.cost_usd,
                )
            )
        log = ctx.ws.paths.agent_log(team.id)
        log.parent.mkdir(parents=True, exist_ok=True)
        with open(log, "a") as f:
            f.write(f"\n=== {time.strftime('%Y-%m-%d %H:%M:%S')} {self.preset.name}: {why}\n")
            f.write(redact(output[-100_000:]))


def _end(proc: subprocess.Popen, grace_s: float = 3.0) -> None:
    """Ask the container to end the agent; kill its group if it does not go in time."""
    if proc.poll() is None:
        try:
            proc.send_signal(signal.SIGTERM)
            proc.wait(grace_s)
        except subprocess.TimeoutExpired:
            pass
        except ProcessLookupError:
            pass
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    proc.wait()
