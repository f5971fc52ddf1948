"""Teams: presets from teams/*.yaml, and a team's turn: plan, implement, evaluate, reflect."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError

import eat.teams
from eat import learning
from eat.context import RunContext
from eat.errors import BadInput
from eat.agents.base import Proposal
from eat.agents.llm import AttemptError
from eat.events import AttemptFailed, CandidateEvaluated, PlanUpdated, TeamExhausted
from eat.runners.base import Evaluation
from eat.plateau import is_local
from eat.state import Team
from eat.workspace import source_name, write_atomic

TEAMS_DIR = Path(eat.teams.__file__).parent


class Role(BaseModel):
    """A member of a team: a prompt plus an agent kind."""

    model_config = ConfigDict(extra="forbid")

    name: Literal["planner", "coder", "debugger", "profiler", "reviewer"]
    agent: Literal["auto", "offline", "llm"] = Field(
        "auto", description="Agent kind; 'auto' follows the run's --model.")
    model: str | None = Field(None, description="Model for this role (llm agents only).")


class TeamSpec(BaseModel):
    """A team preset (teams/<name>.yaml)."""

    model_config = ConfigDict(extra="forbid")

    name: str = Field(description="Preset name; team ids are '<name>-<n>'.")
    description: str = Field(description="One line for people.")
    strategy: Literal["coordinate", "explorer", "refiner", "model"] = Field(
        description="How the offline agent searches.")
    directive: str = Field(description="What the team is told to do.")
    roles: list[Role] = Field(min_length=1)
    share: float = Field(1.0, gt=0, description="Relative budget share.")


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


def pick_team(ctx: RunContext) -> Team | None:
    """The active, non-exhausted team furthest below its budget share; under supervision, a
    local search whose last candidate improved its best plays on (a climb is worth most
    while it climbs), on a turn that does not count against the others' share."""
    teams = [t for t in ctx.state.active_teams() if not t.exhausted]
    last = ctx.state.recent[-1] if ctx.state.recent else None
    hot = ctx.state.teams.get(last.team) if last else None
    if ctx.config.supervise and hot in teams and is_local(hot) and hot.best is last:
        return hot
    return min(teams, key=lambda t: (t.turns, t.id), default=None)


def step(team: Team, ctx: RunContext) -> CandidateEvaluated | AttemptFailed | None:
    """One turn of a team: its candidate's event, or the failed attempt's; None when its agent
    has nothing left to try (the team is exhausted). A failed candidate gets up to
    `config.repairs` repairs from an agent that can repair, each evaluated in the same turn."""
    agent = ctx.agent_for(team)
    # plan + implement: the agent picks an idea and writes the source
    try:
        proposal = agent.propose(team, ctx.state)
    except AttemptError as e:
        if e.plan:
            ctx.record(PlanUpdated(team=team.id, ideas=[p.model_dump() for p in e.plan]))
        return ctx.record(AttemptFailed(team=team.id, kind=e.kind, reason=str(e),
                                        repeats=e.repeats))
    if proposal is None:
        ctx.record(TeamExhausted(team=team.id))
        return None
    if proposal.plan:
        ctx.record(PlanUpdated(team=team.id, ideas=[p.model_dump() for p in proposal.plan]))
    event, ev = _evaluate(team, proposal, ctx)
    for _ in range(ctx.config.repairs):
        if event.status == "ok" or ctx.state.spent_evals >= ctx.config.max_evals:
            break
        failed = ctx.state.candidates[event.candidate]
        try:
            proposal = agent.repair(team, ctx.state, failed, ev.compile_log + ev.stderr)
        except AttemptError as e:
            ctx.record(AttemptFailed(team=team.id, kind=e.kind, reason=str(e),
                                     repeats=e.repeats))
            break
        if proposal is None:
            break
        event, ev = _evaluate(team, proposal, ctx)
    return event


def _evaluate(team: Team, proposal: Proposal, ctx: RunContext):
    """evaluate + reflect: run the candidate, keep its files and event, update best/ and notes."""
    cid = ctx.state.next_candidate_id()
    ev = ctx.runner.evaluate(ctx.target, proposal.source, config=ctx.eval_config)
    meta = {"team": team.id, "idea": proposal.idea, "knobs": proposal.knobs,
            "parent": proposal.parent, "plan_item": proposal.plan_item}
    ctx.ws.write_candidate(team.id, cid, {source_name(ctx.target.language): proposal.source,
                                          "meta.json": json.dumps(meta, indent=2)},
                           ev.model_dump(mode="json"))
    event = ctx.record(evaluated_event(cid, meta, ev))
    new_best = ctx.state.best is not None and ctx.state.best.cid == cid
    if new_best:
        ctx.ws.set_best(team.id, cid)
    write_notes(team, ctx)
    commit_step(ctx, f"{cid} {team.id}: {ev.status} "
                + (f"{ev.speedup:.2f}x" if ev.speedup else ev.message[:80])
                + (" (new best)" if new_best else "") + f" [{proposal.idea[:100]}]",
                [team.id], cid)
    return event, ev


def commit_step(ctx: RunContext, message: str, teams: list[str],
                cid: str | None = None) -> None:
    """Refresh LEARNING.md and commit what changed: the candidate, best/, the teams' files."""
    p = ctx.ws.paths
    learning.update(p.learning, ctx.state, ctx.target)
    paths = [p.learning, p.best] + [f for t in teams for f in (p.team_notes(t), p.team_spec(t))]
    if cid:
        paths.append(p.candidate(ctx.state.candidates[cid].team, cid))
    ctx.ws.commit(message, paths)


def evaluated_event(cid: str, meta: dict, ev: Evaluation) -> CandidateEvaluated:
    """The log's record of an evaluation (also rebuilt from disk by crash recovery)."""
    noise = None
    if ev.ok and ev.workloads:
        spreads = sorted(w.candidate.iqr_s / w.candidate.median_s for w in ev.workloads)
        noise = spreads[len(spreads) // 2]
    best_w = max(ev.workloads, key=lambda w: w.gflops or 0.0, default=None)
    return CandidateEvaluated(
        candidate=cid, team=meta["team"], idea=meta.get("idea", ""),
        knobs=meta.get("knobs", {}), parent=meta.get("parent"), source_hash=ev.source_hash,
        status=ev.status, speedup=ev.speedup, noise=noise, message=ev.message[:500],
        plan_item=meta.get("plan_item"),
        gflops=best_w.gflops if best_w else None,
        vendor_gflops=best_w.vendor_gflops if best_w else None)


def write_notes(team: Team, ctx: RunContext) -> None:
    """The team's NOTES.md and team.yaml: directive, strategy, best, recent attempts."""
    paths = ctx.ws.paths
    recent = ctx.state.recent_of(team.id, 10)
    best = team.best
    lines = [f"# Team {team.id}", "", f"- preset: {team.preset}", f"- strategy: {team.strategy}",
             f"- state: {team.state}{' (nothing left to try)' if team.exhausted else ''}",
             f"- directive: {team.directive}",
             f"- evaluations: {team.evals}, since last improvement: {team.since_improvement}",
             f"- best: {best.cid} at {best.estimate:.2f}x" if best and best.estimate
             else "- best: none yet", "", "## Recent attempts", ""]
    for c in recent:
        result = f"{c.estimate:.2f}x" if c.estimate else c.status
        lines.append(f"- {c.cid}: {result} ({c.what})")
    if team.plan:
        lines += ["", "## Plan (planner's ideas, best first)", ""]
        for p in team.plan:
            mark = f"[x] {p['tried']}" if p["tried"] else "[ ]"
            lines.append(f"- {mark} {p['idea']} (expected {p['expected_gain']}x)")
    spec = {"id": team.id, "preset": team.preset, "strategy": team.strategy,
            "directive": team.directive, "share": team.share, "state": team.state,
            "start_from": team.start_from}
    # JSON scalars are YAML scalars: a readable team.yaml without the YAML emitter's cost.
    for path, text in [(paths.team_notes(team.id), "\n".join(lines) + "\n"),
                       (paths.team_spec(team.id),
                        "".join(f"{k}: {json.dumps(v)}\n" for k, v in spec.items()))]:
        if ctx.written.get(path) != text:
            write_atomic(path, text, durable=False)
            ctx.written[path] = text
