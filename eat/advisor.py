"""The LLM supervisor: diagnosis and restructure decisions as validated structured output.

`LLMAdvisor.decide` shows the model the run's state and plateaus and parses its JSON reply
into the restructure operations of eat.restructure. A reply that fails validation (pydantic,
or naming teams, presets or candidates that do not exist) is explained back once; if the
second reply fails too, `decide` returns None and the rule-based decision is used.
"""

from __future__ import annotations

import re
from typing import Annotated, Literal

from pydantic import BaseModel, Field, StringConstraints, ValidationError

from eat.agents.llm import json_object, render, skill_text
from eat.events import speedup_text
from eat.llm import LLMClient
from eat.plateau import Plateau
from eat.restructure import Operation, arm_values
from eat.state import RunState
from eat.steer import prompt_lines

MAX_OPS = 4
_CID = re.compile(r"\bc\d{4,}\b")


class OpChoice(BaseModel):
    """One restructure operation the model chose."""

    op: Literal["spawn", "fork", "retire", "redirect", "rebalance"]
    team: str | None = None
    preset: str | None = None
    start_from: str | None = None
    strategy: Literal["coordinate", "explorer", "refiner", "model"] | None = None
    directive: str | None = None
    shares: dict[str, float] | None = None
    reason: str = Field(min_length=1)
    evidence: list[str] = []


class Decision(BaseModel):
    """The supervisor's reply."""

    diagnosis: str = Field(min_length=1)
    operations: list[OpChoice] = Field(max_length=MAX_OPS)
    lessons: list[Annotated[str, StringConstraints(max_length=300)]] = Field([], max_length=3)


def problems(d: Decision, state: RunState, presets: dict, max_teams: int) -> list[str]:
    """What in a schema-valid decision does not fit this run (empty: it can be applied)."""
    out = []
    active = {t.id for t in state.active_teams()}
    count = len(active)
    for i, o in enumerate(d.operations, 1):
        where = f"operations[{i}] ({o.op})"
        if o.op in ("retire", "redirect") and o.team not in active:
            out.append(f"{where}: team {o.team!r} is not an active team ({', '.join(active)})")
        if o.op in ("spawn", "fork") and o.preset not in presets:
            out.append(f"{where}: preset {o.preset!r} does not exist ({', '.join(presets)})")
        if o.op == "fork" and o.start_from not in state.candidates:
            out.append(f"{where}: start_from {o.start_from!r} is not a candidate")
        if o.op == "redirect" and not o.strategy:
            out.append(f"{where}: needs a strategy")
        if o.op == "rebalance" and not o.shares or o.shares and not set(o.shares) <= active:
            out.append(f"{where}: shares must name active teams")
        unknown = [c for c in o.evidence if c not in state.candidates]
        if unknown:
            out.append(f"{where}: evidence names unknown candidates {unknown}")
        count += {"spawn": 1, "fork": 1, "retire": -1}.get(o.op, 0)
    if count < 1 or count > max_teams:
        out.append(f"the operations leave {count} teams active; allowed: 1 to {max_teams}")
    for lesson in d.lessons:
        if not any(c in state.candidates for c in _CID.findall(lesson)):
            out.append(f"lesson {lesson[:60]!r} cites no existing candidate id")
    return out


def to_operations(d: Decision, state: RunState) -> list[Operation]:
    ops = []
    for o in d.operations:
        params: dict = {}
        if o.op in ("spawn", "fork"):
            params = (
                {"preset": o.preset, "start_from": o.start_from, "directive": o.directive}
                if o.op == "fork"
                else {"preset": o.preset}
            )
            if o.op == "spawn" and o.directive:
                params["directive"] = o.directive
        elif o.op == "redirect":
            params = {
                "strategy": o.strategy,
                "start_from": o.start_from,
                "directive": o.directive or f"switch to {o.strategy} search",
            }
        elif o.op == "rebalance":
            params = {"shares": o.shares}
        ops.append(
            Operation(
                o.op,
                f"supervisor: {o.reason}",
                o.evidence,
                team=o.team,
                params={k: v for k, v in params.items() if v is not None},
                scope="team" if o.team else "run",
            )
        )
    return ops


class LLMAdvisor:
    """Asks a model for the diagnosis and restructure; None means: use the rules."""

    def __init__(
        self,
        client: LLMClient,
        target,
        presets: dict,
        learning_path,
        max_teams: int,
        skill_path=None,
    ):
        self.client, self.target, self.presets = client, target, presets
        self.learning_path, self.max_teams = learning_path, max_teams
        self.skill_path = skill_path  # SKILL.md the run was started with, if it exists

    def decide(self, plateaus: list[Plateau], state: RunState) -> Decision | None:
        messages = [{"role": "user", "content": self._prompt(plateaus, state)}]
        for _ in range(2):  # the reply, and one correction round
            reply = self.client.chat(messages, agent="supervisor")
            try:
                d = Decision.model_validate_json(json_object(reply))
                errors = problems(d, state, self.presets, self.max_teams)
            except ValidationError as e:
                d, errors = (
                    None,
                    [f"{'.'.join(map(str, x['loc']))}: {x['msg']}" for x in e.errors()[:6]],
                )
            if not errors:
                return d
            messages += [
                {"role": "assistant", "content": reply},
                {
                    "role": "user",
                    "content": "Your reply cannot be applied:\n- "
                    + "\n- ".join(errors)
                    + "\nAnswer again with one corrected JSON "
                    "object and nothing else.",
                },
            ]
        return None

    def _prompt(self, plateaus: list[Plateau], state: RunState) -> str:
        x = speedup_text
        teams = [
            {
                "id": t.id,
                "preset": t.preset,
                "strategy": t.strategy,
                "state": t.state,
                "evals": t.evaluated,
                "copies": t.copies,  # candidates that repeated an evaluated program
                "best": x(t.best_estimate),
                "since": t.since_improvement,
                "failures": t.failures,
                "directive": t.directive,
            }
            for t in state.teams.values()
            if t.state == "active"
        ]
        recent = [
            f"{c.cid} ({c.team}): {x(c.estimate) if c.estimate else c.status} — {c.what}"
            for c in state.recent_of(None, 12)
        ]
        learning = self.learning_path.read_text() if self.learning_path.exists() else ""
        values = arm_values(state)
        scores = [
            f"{arm}: scored {state.arm_stats.get(arm, (0, 0))[0]} times, helped "
            f"{state.arm_stats.get(arm, (0, 0))[1]}; worth now {v:.2f}"
            for arm, v in sorted(values.items(), key=lambda kv: -kv[1])
        ]
        return render(
            "supervisor.md.j2",
            target=self.target,
            best=state.best,
            teams=teams,
            scores=scores,
            steering=prompt_lines(state, None),
            threshold=state.threshold(),
            recent=recent,
            plateaus=plateaus,
            presets=self.presets,
            learning=learning,
            max_ops=MAX_OPS,
            skill=skill_text(self.skill_path),
            max_teams=self.max_teams,
        )
