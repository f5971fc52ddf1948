"""Teams: presets from teams/*.yaml, and which team plays next (`pick_team`); a turn's work is
turn.py's."""

from __future__ import annotations

from collections.abc import Collection
from pathlib import Path
from typing import Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError

import eat.teams
from eat.config import Runtime
from eat.context import RunContext
from eat.errors import BadInput
from eat.events import Strategy
from eat.plateau import is_local
from eat.state import Team

TEAMS_DIR = Path(eat.teams.__file__).parent


class Role(BaseModel):
    """A member of a team: a prompt plus an agent kind."""

    model_config = ConfigDict(extra="forbid")

    name: Literal["planner", "coder", "debugger", "profiler", "reviewer"]
    agent: Literal["auto", "offline", "llm"] = Field(
        "auto", description="Agent kind; 'auto' follows the run's --model."
    )
    model: str | None = Field(None, description="Model for this role (llm agents only).")


class TeamSpec(BaseModel):
    """A team preset (teams/<name>.yaml)."""

    model_config = ConfigDict(extra="forbid")

    name: str = Field(description="Preset name; team ids are '<name>-<n>'.")
    description: str = Field(description="One line for people.")
    strategy: Strategy = Field(description="How the offline agent searches.")
    directive: str = Field(description="What the team is told to do.")
    roles: list[Role] = Field(min_length=1)
    share: float = Field(1.0, gt=0, description="Relative budget share.")
    runtime: Runtime | None = Field(
        None,
        description="How its agent works (`--agent` overrides "
        "it): prompt, tools, command, claude-code, codex, aider, "
        "mini-swe-agent; None: offline or prompt as --model says.",
    )


def load_presets(folder: Path = TEAMS_DIR) -> dict[str, TeamSpec]:
    """Every preset in `folder`, by name; a malformed file is a BadInput naming it."""
    presets = {}
    for file in sorted(folder.glob("*.yaml")):
        try:
            spec = TeamSpec.model_validate(yaml.safe_load(file.read_text()))
        except (yaml.YAMLError, ValidationError) as e:
            raise BadInput(f"{file}: {' '.join(str(e).split())[:300]}") from None
        presets[spec.name] = spec
    if not presets:
        raise BadInput(f"{folder}: no team presets (*.yaml)")
    return presets


def pick_team(ctx: RunContext, busy: Collection[str] = ()) -> Team | None:
    """The active, non-exhausted team furthest below its budget share (of equals, the one
    spawned first: the start's teams in their configured order), among those without a
    turn in flight (`busy`); under supervision, the share is scaled by the team's pace (how
    often its candidates land near the run's best), a local search whose last candidate
    improved its best near the run's best plays on (a climb is worth most while it climbs),
    on a turn that does not count against the others' share, and so does any team whose last
    candidate became the run's best; and before all of it, the explorer plays the run's
    opening."""
    teams = [t for t in ctx.state.active_teams() if not t.exhausted and t.id not in busy]
    if ctx.config.supervise and ctx.state.evaluations < ctx.opening:
        wide = [t for t in teams if t.strategy == "explorer"]
        if wide:  # climbs from the baseline alone spent 3x the evaluations to reach the top
            return min(wide, key=lambda t: t.turns)  # of equals, the first spawned
    last = ctx.state.last
    hot = ctx.state.teams.get(last.team) if last else None
    if ctx.config.supervise and hot in teams and hot.best is last:
        if (is_local(hot) and hot.climbing) or ctx.state.best is last:
            return hot
    if ctx.config.supervise:
        return min(teams, key=lambda t: t.due, default=None)  # RunState.teams: in spawn order
    return min(teams, key=lambda t: t.turns, default=None)
