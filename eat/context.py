"""RunContext: the dependencies of a running loop, passed in, and the one way to record a fact."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, TypeVar

from eat.agents.base import Agent
from eat.config import RunConfig
from eat.events import Event
from eat.runners.base import Runner
from eat.state import RunState
from eat.target import EvalConfig, Target
from eat.workspace import Workspace

E = TypeVar("E", bound=Event)


@dataclass
class RunContext:
    """Everything the supervisor and the teams use; tests build one with their own parts."""

    ws: Workspace
    state: RunState
    target: Target
    runner: Runner
    config: RunConfig
    presets: dict[str, Any]
    make_agent: Callable[[Any, RunContext], Agent]  # (team, this context) -> its agent
    eval_config: EvalConfig | None = None
    on_event: Callable[[Event, RunState], None] | None = None  # the display, if any
    elapsed_base: float = 0.0  # run time of earlier sessions
    started: float = field(default_factory=time.monotonic)
    agents: dict[str, Agent] = field(default_factory=dict)
    sleep: Callable[[float], None] = time.sleep
    advisor: Any = None  # LLMAdvisor when a supervisor model is set
    outages: int = 0  # consecutive pauses, for the backoff
    written: dict = field(default_factory=dict)  # derived file -> text last written
    halt: Any = None  # a Stop a turn found (no team left, unusable model)
    executor: Any = None  # LocalExecutor while turns run on worker threads
    turns: dict[str, Any] = field(default_factory=dict)  # team -> its turn.Turn in flight
    steering: Any = None  # eat.steer.Steering while the run watches for edits
    opening: int = 0  # candidates the run takes first from its explorer (RunConfig.opening)

    @property
    def reserved(self) -> int:
        """Evaluations promised to the turns in flight."""
        return sum(t.held for t in self.turns.values())

    @property
    def claims(self) -> dict[str, str]:
        """Sources the turns in flight are evaluating: source hash -> team."""
        return {digest: t.team for t in self.turns.values() for digest in t.claims}

    def pause(self) -> None:
        """Wait out an LLM outage: 30 s, doubling with each consecutive one, at most 10 min."""
        self.outages += 1
        self.sleep(min(600.0, 30.0 * 2 ** (self.outages - 1)))

    def elapsed(self) -> float:
        return self.elapsed_base + time.monotonic() - self.started

    def on_main(self, fn: Callable[[], Any]) -> Any:
        """Run `fn` where the workspace is written: the main thread (a turn on a worker
        thread waits for it)."""
        return self.executor.on_main(fn) if self.executor else fn()

    def record(self, event: E) -> E:
        """Append to the log (durably), fold into the state, tell the display; from a turn on
        a worker thread, the main thread does it (the log has one writer)."""
        return self.on_main(lambda: self._record(event))

    def _record(self, event: E) -> E:
        if getattr(event, "type", "") == "candidate_evaluated":
            self.outages = 0
        event.elapsed_s = self.elapsed()
        self.ws.append(event)
        self.state.apply(event)
        if self.on_event is not None:
            self.on_event(event, self.state)
        return event

    def agent_for(self, team) -> Agent:
        if team.id not in self.agents:
            self.agents[team.id] = self.make_agent(team, self)
        return self.agents[team.id]
