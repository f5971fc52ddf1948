"""The Agent protocol: given a team and what the run knows, propose the next candidate."""

from __future__ import annotations

from typing import Any, Protocol

from pydantic import BaseModel, Field

from eat.state import RunState, Team


class Proposal(BaseModel):
    """A candidate to evaluate, with what the agent meant by it."""

    source: str = Field(description="The whole candidate source file.")
    idea: str = Field(description="One line: what this candidate tries.")
    knobs: dict[str, Any] = Field({}, description="Knob values, where the agent set knobs.")
    parent: str | None = Field(None, description="Candidate id this one changes.")


class Agent(Protocol):
    """Proposes candidates for one team."""

    def propose(self, team: Team, state: RunState) -> Proposal | None:
        """The next untried candidate for `team`, or None when it has nothing left to try."""
