"""RunConfig: what a run was asked to do, frozen in the workspace's eat.toml."""

from __future__ import annotations

import tomllib
from pathlib import Path
from typing import Literal

import tomli_w
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from eat.errors import BadInput

LLM_CALLS_PER_EVAL, ATTEMPTS_PER_EVAL, SPAWNED_PER_TEAM, CHECKS_PER_EVAL = 10, 3, 3, 5
# Agent runtimes: `prompt` (one reply per turn), `tools` (eat's tool-calling loop), and the
# external agents run in the team's worktree (`command` and its presets).
Runtime = Literal["prompt", "tools", "command", "claude-code", "codex", "aider", "mini-swe-agent"]
EXTERNAL = ("command", "claude-code", "codex", "aider", "mini-swe-agent")  # run as processes


class AgentsConfig(BaseModel):
    """How external agents (`command` and the coding-agent CLIs) are held (`[agents]`)."""

    model_config = ConfigDict(extra="forbid")

    confine: bool = Field(
        True,
        description="Fence every external agent's processes with "
        "Landlock: they change files only in their team's worktree, their "
        "turn's temporary folder and their CLI's declared folders, and cannot "
        "read the run's sealed files or the target's private/. False lets "
        "agents write and read wherever the user can (eat says so loudly).",
    )
    writes: list[str] = Field(
        [],
        description="More folders (or files) every agent may change, "
        "e.g. a cache its tools need; `~` is the user's home, and an "
        "entry ending in '/' is made if missing (a run refuses one that "
        "cannot be made). One that holds the "
        "workspace or the target (such as `~` itself) is left out.",
    )


class PlateauConfig(BaseModel):
    """When the supervisor calls a plateau."""

    model_config = ConfigDict(extra="forbid")

    team_window: int | None = Field(
        None,
        ge=2,
        description="Candidates of one team without "
        "an improvement before that team has plateaued; None: "
        "max(6, max_evals / 10).",
    )
    run_window: int | None = Field(
        None,
        ge=2,
        description="Candidates of the whole run without "
        "an improvement before the run has plateaued; None: max(8, "
        "max_evals / 8).",
    )
    fail_window: int = Field(
        5, ge=2, description="Consecutive failed candidates of a team that count as a failing team."
    )
    repeat_window: int = Field(
        2,
        ge=1,
        description="Attempts of a team in a row that repeat "
        "known candidates before the supervisor steers it (and, once "
        "steered, retires it).",
    )
    min_gain: float = Field(
        0.02, ge=0, description="Smallest relative gain that counts, whatever the measured noise."
    )
    doubt: float = Field(
        1.0,
        ge=0,
        description="How far a candidate's measured spread lowers its rank: the run's best is "
        "the candidate with the highest median speedup less `doubt` times its spread (shrinking "
        "as re-times add measurements), so one lucky timing of a noisy kernel does not lead a "
        "steady one; 0: the median alone.",
    )
    score_after: int | None = Field(
        None,
        ge=1,
        description="Candidates of the team a "
        "restructure created or changed before the decision is "
        "scored; None: max(4, max_evals / 12).",
    )

    def resolved(self, max_evals: int) -> PlateauConfig:
        """These settings with the windows left to the budget filled in: a short run gets
        short windows, so it still has room for several decisions."""
        return self.model_copy(
            update={
                "team_window": self.team_window or max(6, max_evals // 10),
                "run_window": self.run_window or max(8, max_evals // 8),
                "score_after": self.score_after or max(4, max_evals // 12),
            }
        )


class RunConfig(BaseModel):
    """A run's configuration (eat.toml); budgets are totals over every session of the run."""

    model_config = ConfigDict(extra="forbid")

    target: str = Field(description="Path of the target folder.")
    model: str = Field(
        "offline",
        description="Agent model: 'offline' or a litellm model string "
        "(a team preset's role may name its own).",
    )
    supervisor_model: str | None = Field(
        None,
        description="litellm model for the supervisor's "
        "diagnoses; None: the rule-based supervisor.",
    )
    api_base: str | None = Field(
        None,
        description="OpenAI-compatible server for every model "
        "(vLLM, SGLang, Ollama), e.g. http://127.0.0.1:8000/v1.",
    )
    llm_timeout_s: float = Field(300.0, gt=0, description="Per LLM call attempt.")
    llm_attempts: int = Field(
        5,
        ge=1,
        description="Tries per LLM call for rate limits, 5xx and "
        "timeouts, before the team pauses for an outage.",
    )
    llm_backoff_s: float = Field(2.0, ge=0, description="First wait between tries; doubles.")
    llm_concurrency: int = Field(
        4,
        ge=1,
        description="LLM calls to one model in flight at "
        "once, across all teams; a rate-limit answer holds them all.",
    )
    input_cost_per_token: float | None = Field(
        None, ge=0, description="USD per prompt token, for models litellm has no price for."
    )
    output_cost_per_token: float | None = Field(
        None, ge=0, description="USD per completion token, likewise."
    )
    repairs: int = Field(
        2,
        ge=0,
        description="Repair attempts a failed LLM candidate gets, fed "
        "with its compiler message or mismatch, before its idea is dropped.",
    )
    max_evals: int = Field(
        60,
        ge=1,
        description="Evaluations in the whole run: candidates and re-times of the elite alike.",
    )
    max_time_s: float | None = Field(
        None, gt=0, description="Wall-clock seconds in the whole run, summed over sessions."
    )
    max_cost_usd: float | None = Field(None, ge=0, description="LLM spend cap in USD.")
    max_llm_calls: int | None = Field(
        None,
        ge=0,
        description="LLM calls in the whole run, "
        "failed tries and the supervisor's included; None: "
        f"{LLM_CALLS_PER_EVAL} per evaluation of max_evals.",
    )
    max_attempts: int | None = Field(
        None,
        ge=1,
        description="Team turns in the whole run, "
        "whether they gave a candidate or not (a duplicate, a "
        "malformed reply); None: "
        f"{ATTEMPTS_PER_EVAL} per evaluation of max_evals.",
    )
    no_progress: int = Field(
        12,
        ge=1,
        le=1000,
        description="Attempts in a row without a new "
        "evaluation after which the run stops (stop code no_progress).",
    )
    max_spawned: int | None = Field(
        None,
        ge=1,
        description="Teams spawned over the whole run, "
        "the starting ones included; None: "
        f"{SPAWNED_PER_TEAM} times max_teams.",
    )
    seed: int = Field(0, description="Seed of every random choice the offline agents make.")
    teams: list[str] | None = Field(
        None,
        min_length=1,
        description="Team presets spawned at the start, in the order their first turns go; "
        "None: where the offline agent searches knobs, a model team, an explorer and a "
        "coordinate climb (the model's first picks are random, the explorer's first the far "
        "corner of the space; bench/search_efficiency.py), and where agents write code, a "
        "coordinate climb and an explorer.",
    )
    opening: int | None = Field(
        None,
        ge=0,
        description="Candidates a supervised run takes first from its explorer, before the "
        "other teams play: a spread of the knob space for the climbs to be judged against (on "
        "cpu_matmul's recorded landscape it reached the best region in a median 10 evaluations "
        "instead of 36; bench/search_efficiency.py). None: twice the target's knobs where the "
        "offline agent searches them and no model team starts (its picks cover the space as "
        "they go), none where agents write code; 0: none.",
    )
    max_teams: int = Field(4, ge=1, description="Most teams active at once.")
    workers: int | None = Field(
        None,
        ge=1,
        description="Teams' turns (proposal, LLM calls, "
        "build, verification) running at once, one per team; timing "
        "still takes one slot per device. None: one fewer than the "
        "machine's cores, at least 1.",
    )
    executor: Literal["local", "ray"] = Field(
        "local",
        description="Where builds, "
        "verification and timing run: this process's "
        "children, or a Ray actor (pip install "
        "'eat[ray]'), on this machine or a cluster.",
    )
    ray_address: str | None = Field(
        None,
        description="A running Ray cluster to use with "
        "executor 'ray'; None: a local Ray instance on loopback, "
        "started and ended with the run.",
    )
    agent: Runtime | None = Field(
        None,
        description="Agent runtime of every team: prompt, "
        "tools, command, claude-code, codex, aider, mini-swe-agent; "
        "None: each preset's `runtime`, else offline or prompt as "
        "--model says.",
    )
    agent_command: str | None = Field(
        None,
        description="Shell command the `command` runtime "
        "runs in a team's worktree, with EAT_WORKSPACE, EAT_TEAM "
        "and EAT_TASK set; it submits with `eat submit`.",
    )
    agent_wall_s: float = Field(
        900.0,
        gt=0,
        description="Wall-clock seconds an agent may work in one turn; then it is stopped.",
    )
    agent_steps: int = Field(
        30,
        ge=1,
        description="Steps an agent may take in one turn: model "
        "calls of the tools loop (and an external CLI's turns, where it "
        "takes a limit), and its checks and submits; then it is stopped.",
    )
    agent_submits: int = Field(
        3,
        ge=1,
        description="Candidates an agent may submit in one turn "
        "(each one an evaluation of max_evals).",
    )
    max_checks: int | None = Field(
        None,
        ge=0,
        description="`eat check` calls in the whole run; "
        f"None: {CHECKS_PER_EVAL} per evaluation of max_evals.",
    )
    agents: AgentsConfig = AgentsConfig()
    supervise: bool = Field(
        True,
        description="Detect plateaus and restructure the teams; "
        "False keeps the starting teams as they are (a baseline to compare "
        "the supervisor against).",
    )
    plateau: PlateauConfig = PlateauConfig()

    def start_teams(self) -> list[str]:
        if self.teams:
            return self.teams
        return (
            ["model", "explorer", "coordinate"] if self.knob_search else ["coordinate", "explorer"]
        )

    @property
    def knob_search(self) -> bool:
        """Whether every team is the offline agent, searching the target's knobs."""
        return self.model == "offline" and self.agent is None

    def opening_for(self, knobs: int) -> int:
        """The opening's length for a target with `knobs` knobs."""
        if self.opening is not None:
            return self.opening
        return 2 * knobs if self.knob_search and "model" not in self.start_teams() else 0

    def windows(self) -> PlateauConfig:
        """The plateau settings this run uses (windows scaled to max_evals)."""
        return self.plateau.resolved(self.max_evals)

    # Defaults derived from other budgets, so that no setting leaves spend unbounded.
    def llm_call_cap(self) -> int:
        return (
            self.max_llm_calls
            if self.max_llm_calls is not None
            else LLM_CALLS_PER_EVAL * self.max_evals
        )

    def attempt_cap(self) -> int:
        return self.max_attempts or ATTEMPTS_PER_EVAL * self.max_evals

    def spawn_cap(self) -> int:
        return self.max_spawned or SPAWNED_PER_TEAM * self.max_teams

    def check_cap(self) -> int:
        return self.max_checks if self.max_checks is not None else CHECKS_PER_EVAL * self.max_evals

    @model_validator(mode="after")
    def _command_given(self) -> RunConfig:
        if self.agent == "command" and not self.agent_command:
            raise ValueError("the command runtime needs --agent-command")
        return self


# The options `eat start` and `eat resume` take as flags: a bad value names the flag the user
# typed beside the field (tests/test_cli.py holds the list to the CLI's options).
FLAGGED = (
    *("model", "seed", "max_evals", "max_time_s", "max_cost_usd", "api_base"),
    *("supervisor_model", "max_llm_calls", "workers", "executor", "ray_address", "agent"),
    "agent_command",
)


def flag(field: str) -> str:
    """The CLI flag of an option in FLAGGED: its name less a unit, dashed (--max-time)."""
    return "--" + field.removesuffix("_s").removesuffix("_usd").replace("_", "-")


def _first_error(e: ValidationError, flags: bool = False) -> str:
    err = e.errors()[0]
    where = ".".join(map(str, err["loc"]))
    if flags and where in FLAGGED:
        where += f" ({flag(where)})"
    return f"{where}: {err['msg']}"


def make_config(**fields) -> RunConfig:
    """A RunConfig from options; raises BadInput naming the bad option (and its flag)."""
    try:
        return RunConfig.model_validate(fields)
    except ValidationError as e:
        raise BadInput(f"option {_first_error(e, flags=True)}") from None


def settings_file(path: Path | None) -> dict:
    """Run settings from a TOML file (default ./eat.toml, if there is one), minus `target`."""
    if path is None:
        path = Path("eat.toml")
        if not path.is_file():
            return {}
    if not path.is_file():
        raise BadInput(f"{path}: file not found")
    try:
        data = tomllib.loads(path.read_text())
    except tomllib.TOMLDecodeError as e:
        raise BadInput(f"{path}: not valid TOML: {e}") from None
    data.pop("target", None)
    try:
        RunConfig.model_validate(data | {"target": "-"})
    except ValidationError as e:
        raise BadInput(f"{path}: {_first_error(e)}") from None
    return data


def load_config(path: Path) -> RunConfig:
    """Read eat.toml; raises BadInput naming the file and the field."""
    if not path.is_file():
        raise BadInput(f"{path}: file not found")
    try:
        return RunConfig.model_validate(tomllib.loads(path.read_text()))
    except tomllib.TOMLDecodeError as e:
        raise BadInput(f"{path}: not valid TOML: {e}") from None
    except ValidationError as e:
        raise BadInput(f"{path}: {_first_error(e)}") from None


def dump_config(config: RunConfig) -> str:
    return tomli_w.dumps(config.model_dump(exclude_none=True))
