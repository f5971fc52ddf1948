"""The agent protocols: Agent proposes a team's next candidate from what the run knows; Worker
works a whole turn in the team's worktree and submits itself."""

from __future__ import annotations

from typing import Any, Protocol, runtime_checkable

from pydantic import BaseModel, Field

from eat.state import Candidate, RunState, Team, known_estimate


class PlanItem(BaseModel):
    """One idea of a team's plan."""

    idea: str = Field(min_length=1, description="What to change and why.")
    expected_gain: float = Field(gt=0, description="Expected speedup over the team's best.")


class Proposal(BaseModel):
    """A candidate to evaluate, with what the agent meant by it."""

    source: str = Field(description="The whole candidate source file.")
    idea: str = Field(description="One line: what this candidate tries.")
    knobs: dict[str, Any] = Field({}, description="Knob values, where the agent set knobs.")
    parent: str | None = Field(None, description="Candidate id this one changes.")
    plan: list[PlanItem] | None = Field(None, description="A new plan made for this turn.")
    plan_item: int | None = Field(None, description="Index of the plan's idea it implements.")


class Agent(Protocol):
    """Proposes candidates for one team."""

    def propose(self, team: Team, state: RunState) -> Proposal | None:
        """The next untried candidate for `team`, or None when it has nothing left to try."""

    def repair(self, team: Team, state: RunState, failed: Candidate, log: str) -> Proposal | None:
        """A fix of `failed` (its log: compiler message or mismatch), or None when this agent
        does not repair."""


@runtime_checkable
class Worker(Protocol):
    """An agent that works over several steps in its team's worktree (the tools loop, an
    external CLI) and submits its candidates itself through the desk; Turn.play hands it the
    turn instead of asking it to propose."""

    def work(self, team: Team, state: RunState, desk) -> str:
        """Work one turn through `desk` (check, submit, profile); why the turn ended."""

    def stop(self, why: str) -> None:
        """End the work now, from any thread (retire, stop, eat ending)."""


def start_candidate(team: Team, state: RunState) -> Candidate | None:
    """Where a team works from: its own best or the candidate it was started from (a fork's
    lineage); with neither, the run's best, except for an explorer, which starts from the
    baseline so that it goes elsewhere (None)."""
    options = [
        c
        for c in (team.best, state.candidates.get(team.start_from or ""))
        if c is not None and c.estimate is not None
    ]
    if not options and team.strategy != "explorer" and state.best is not None:
        options = [state.best]
    return max(options, key=known_estimate, default=None)
