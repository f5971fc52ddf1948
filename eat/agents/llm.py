"""The LLM agent: a coder that writes candidates and a debugger that repairs failed ones.

Prompts are template files (teams/prompts/*.j2). Each prompt is laid out stable part first —
role, target, reference, baseline, LEARNING.md — and the changing part last (the starting
candidate, its evaluation, the team's recent attempts), so provider prompt caches hit; models
that take explicit cache markers get one at the end of the stable part.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path

import jinja2
from pydantic import BaseModel, Field, ValidationError

import eat.teams
from eat.agents.base import PlanItem, Proposal, start_candidate
from eat.agents.parse import correction_message, parse_reply
from eat.errors import EatError
from eat.events import clip
from eat.llm import LLMClient
from eat.runners.base import Evaluation, source_hash
from eat.state import Candidate, RunState, Team
from eat.steer import prompt_lines
from eat.target import Target
from eat.workspace import Paths

PROMPTS = Path(eat.teams.__file__).parent / "prompts"
_ENV = jinja2.Environment(
    loader=jinja2.FileSystemLoader(PROMPTS),
    undefined=jinja2.StrictUndefined,
    keep_trailing_newline=True,
    autoescape=False,
)


PLAN_SIZE = 5


class _Plan(BaseModel):
    ideas: list[PlanItem] = Field(min_length=1, max_length=PLAN_SIZE)


class _Review(BaseModel):
    approve: bool
    problems: list[str] = Field([], max_length=8)


def json_object(text: str) -> str:
    """The JSON object in a reply, fenced or not."""
    m = re.search(r"```(?:json)?\s*(\{.*\})\s*```", text, re.S)
    if m:
        return m.group(1)
    start, end = text.find("{"), text.rfind("}")
    return text[start : end + 1] if start >= 0 and end > start else text


class AttemptError(EatError):
    """A turn that produced no candidate: `kind` is 'malformed' or 'duplicate'."""

    code = "attempt_failed"

    def __init__(self, kind: str, reason: str, repeats: str | None = None):
        super().__init__(reason)
        self.kind, self.repeats = kind, repeats
        self.plan: list[PlanItem] | None = None


def render(name: str, **values) -> str:
    return _ENV.get_template(name).render(**values)


def skill_text(path: Path | None) -> str:
    """The run's SKILL.md for a prompt, without its front matter ('' when the run has none);
    not checked again: `eat start` and `eat resume` did."""
    from eat.skill import body

    return body(path.read_text()) if path is not None and path.is_file() else ""


def _idea(reply: str) -> str:
    """The reply's first line of prose: what the model says it tries."""
    for line in reply.splitlines():
        text = line.strip().strip("#*").strip()
        if text and not text.startswith(("```", "~~~", "<<<<<<<")):
            return text[:200]
    return "(no description)"


def _known(state: RunState, cid: str) -> str:
    """A candidate as a repeating team is told about it: id, result, what it tried."""
    c = state.candidates[cid]
    result = f"{c.estimate:.2f}x" if c.estimate is not None else c.status
    return f"{cid} by {c.team} ({result}: {clip(c.what, 120)})"


def _takes_cache_markers(model: str) -> bool:
    return model.startswith(("anthropic/", "bedrock/", "vertex_ai/")) or "claude" in model


class LLMAgent:
    """Coder and debugger of one team; `client_for(role)` gives the LLMClient of a role."""

    def __init__(
        self,
        target: Target,
        paths: Paths,
        client_for: Callable[[str], LLMClient],
        roles: frozenset[str] = frozenset({"coder"}),
    ):
        self.target, self.paths, self.client_for = target, paths, client_for
        self.roles = roles

    # -- prompts -----------------------------------------------------------------------------

    def _stable(self) -> tuple[str, str]:
        t = self.target
        learning = self.paths.learning.read_text() if self.paths.learning.exists() else ""
        system = render("system.md.j2", target=t)
        context = render(
            "context.md.j2",
            target=t,
            learning=learning,
            skill=skill_text(self.paths.skill),
            reference_source=t.path(t.judge_file).read_text() if t.judge_file else "",
            baseline_source=t.baseline_source(),
        )
        return system, context

    def _messages(self, role: str, changing: str) -> list[dict]:
        system, context = self._stable()
        client = self.client_for(role)
        if _takes_cache_markers(client.settings.model):
            stable = {"type": "text", "text": context, "cache_control": {"type": "ephemeral"}}
            return [
                {"role": "system", "content": system},
                {"role": "user", "content": [stable, {"type": "text", "text": changing}]},
            ]
        return [
            {"role": "system", "content": system},
            {"role": "user", "content": context + "\n\n" + changing},
        ]

    def source_of(self, c: Candidate) -> str:
        return self.paths.source(c.team, c.cid, self.target.language).read_text()

    def plays(self, team: Team, role: str) -> bool:
        """Whether the team has this role now (its roles, changed by a recompose, else its
        preset's)."""
        return role in (team.roles or self.roles)

    def _profile(self, c: Candidate) -> list[str]:
        """The profiler's view of a candidate: per workload, its time against the baseline and
        the vendor, throughput and fraction of the device's peak; then what the compiler (or
        the GPU profiler, where it runs) says of its loops."""
        from eat.agents.profile import profile

        path = self.paths.result(c.team, c.cid)
        if not path.is_file():
            return []
        ev = Evaluation.model_validate_json(path.read_text())
        return [w.summary() for w in ev.workloads] + profile(
            self.target, self.source_of(c)
        ).splitlines()

    # -- turns -------------------------------------------------------------------------------

    def propose(self, team: Team, state: RunState) -> Proposal:
        parent = start_candidate(team, state)
        source = self.source_of(parent) if parent else self.target.baseline_source()
        recent = [
            f"{c.cid}: {f'{c.estimate:.2f}x' if c.estimate else c.status} — {c.what}"
            for c in state.recent_of(team.id, 6)
        ]
        plan, new_plan = team.plan, None
        if self.plays(team, "planner") and all(p["tried"] for p in plan):
            new_plan = self._plan(team, recent)
            plan = [p.model_dump() | {"tried": None} for p in new_plan or []]
        item = next((i for i, p in enumerate(plan) if not p["tried"]), None)
        repeated = [_known(state, cid) for cid in team.repeated] if team.repeats else []
        profile = self._profile(parent) if parent and self.plays(team, "profiler") else []
        changing = render(
            "coder.md.j2",
            team=team,
            role="coder",
            recent=recent,
            repeated=repeated,
            profile=profile,
            steering=prompt_lines(state, team.id),
            language=self.target.fence,
            idea=plan[item]["idea"] if item is not None else None,
            parent=parent
            and {"cid": parent.cid, "source": source, "summary": f"{parent.estimate:.2f}x"},
        )
        try:
            proposal = self._ask(
                team, state, "coder", changing, source, parent.cid if parent else None
            )
            if self.plays(team, "reviewer"):
                proposal = self._review(team, state, proposal)
        except AttemptError as e:
            e.plan = new_plan  # a fresh plan outlives the coder's failed attempt
            raise
        proposal.plan, proposal.plan_item = new_plan, item
        return proposal

    def _review(self, team: Team, state: RunState, proposal: Proposal) -> Proposal:
        """The reviewer reads the candidate before it spends an evaluation; problems it names
        get the coder one revision (an unusable review, or revision, keeps the candidate)."""
        messages = self._messages(
            "reviewer",
            render(
                "reviewer.md.j2",
                team=team,
                parent=proposal.parent,
                idea=proposal.idea,
                language=self.target.fence,
                source=proposal.source,
            ),
        )
        reply = self.client_for("reviewer").chat(
            messages, agent=f"{team.id}/reviewer", team=team.id
        )
        try:
            review = _Review.model_validate_json(json_object(reply))
        except ValidationError:
            return proposal
        if review.approve or not review.problems:
            return proposal
        changing = render(
            "revise.md.j2",
            team=team,
            idea=proposal.idea,
            source=proposal.source,
            problems=review.problems,
            language=self.target.fence,
        )
        try:
            revised = self._ask(team, state, "coder", changing, proposal.source, proposal.parent)
        except AttemptError:
            return proposal
        revised.idea = f"{proposal.idea} (revised after review: {review.problems[0][:80]})"
        return revised

    def _plan(self, team: Team, recent: list[str]) -> list[PlanItem] | None:
        """The planner's next ideas (None: two unusable replies; the coder then chooses)."""
        done = [f"{p['idea']} -> {p['tried']}" for p in team.plan if p["tried"]][-10:]
        best = (
            f"{team.best.cid} at {team.best.estimate:.2f}x"
            if team.best and team.best_estimate
            else None
        )
        messages = self._messages(
            "planner",
            render("planner.md.j2", team=team, best=best, recent=recent, done=done, size=PLAN_SIZE),
        )
        client = self.client_for("planner")
        for _ in range(2):
            reply = client.chat(messages, agent=f"{team.id}/planner", team=team.id)
            try:
                return _Plan.model_validate_json(json_object(reply)).ideas
            except ValidationError as e:
                messages += [
                    {"role": "assistant", "content": reply},
                    {
                        "role": "user",
                        "content": "That is not the JSON object asked "
                        f"for ({e.errors()[0]['msg']}). Answer again with only "
                        '{"ideas": [{"idea": "...", "expected_gain": 1.2}]}.',
                    },
                ]
        return None

    def repair(self, team: Team, state: RunState, failed: Candidate, log: str) -> Proposal | None:
        """The debugger's fix of a failed candidate; None when the team has no debugger."""
        if not self.plays(team, "debugger"):
            return None
        changing = render(
            "debugger.md.j2",
            team=team,
            role="debugger",
            language=self.target.fence,
            failed={
                "cid": failed.cid,
                "idea": failed.idea,
                "status": failed.status,
                "message": failed.message,
                "log": log[-3000:],
                "source": self.source_of(failed),
            },
        )
        proposal = self._ask(team, state, "debugger", changing, self.source_of(failed), failed.cid)
        proposal.idea = f"repair of {failed.cid}: {proposal.idea}"
        return proposal

    def _ask(
        self,
        team: Team,
        state: RunState,
        role: str,
        changing: str,
        original: str,
        parent: str | None,
    ) -> Proposal:
        client = self.client_for(role)
        entry = self.target.entry.name if self.target.entry else None
        messages = self._messages(role, changing)
        reply = client.chat(messages, agent=f"{team.id}/{role}", team=team.id)
        parsed = parse_reply(reply, original, entry)
        if parsed.error:  # one short correction round, then the attempt counts as failed
            messages += [
                {"role": "assistant", "content": reply},
                {"role": "user", "content": correction_message(parsed, entry)},
            ]
            reply = client.chat(messages, agent=f"{team.id}/{role}", team=team.id)
            parsed = parse_reply(reply, original, entry)
            if parsed.error:
                raise AttemptError("malformed", parsed.error)
        assert parsed.source is not None  # parse_reply gives the source where it found no error
        known = state.hashes.get(source_hash(parsed.source))
        if known:
            raise AttemptError("duplicate", f"the reply repeats {_known(state, known)}", known)
        return Proposal(source=parsed.source, idea=_idea(reply), parent=parent)
