"""Teams: presets from teams/*.yaml, and a team's turn: plan, implement, evaluate, reflect."""

from __future__ import annotations

import json
from collections.abc import Collection
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError

import eat.teams
from eat import learning
from eat.config import Runtime
from eat.context import RunContext
from eat.errors import BadInput
from eat.agents.base import Proposal
from eat.agents.llm import AttemptError
from eat.llm import redact
from eat.events import AttemptFailed, CandidateEvaluated, PlanUpdated, TeamExhausted
from eat.runners.base import Evaluation, source_hash
from eat.plateau import is_local
from eat.state import RunState, Team
from eat.steer import directive_of
from eat.merge import merge_write
from eat.workspace import source_name

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
    runtime: Runtime | None = Field(None, description="How its agent works (`--agent` overrides "
                                    "it): prompt, tools, command, claude-code, codex, aider, "
                                    "mini-swe-agent; None: offline or prompt as --model says.")


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
    """The active, non-exhausted team furthest below its budget share, among those without a
    turn in flight (`busy`); under supervision, a local search whose last candidate improved
    its best plays on (a climb is worth most while it climbs), on a turn that does not count
    against the others' share."""
    teams = [t for t in ctx.state.active_teams() if not t.exhausted and t.id not in busy]
    last = ctx.state.recent[-1] if ctx.state.recent else None
    hot = ctx.state.teams.get(last.team) if last else None
    if ctx.config.supervise and hot in teams and is_local(hot) and hot.best is last:
        return hot
    return min(teams, key=lambda t: (t.turns, t.id), default=None)


@dataclass
class Turn:
    """One team's turn as it runs, on any thread. With one turn at a time it sees the live
    state; with several, a snapshot taken on the main thread when it was dispatched (`seen`:
    the log's seq then), to which only its own events are applied as they are recorded."""

    team: str
    state: RunState
    seen: int | None = None
    held: int = 1                     # evaluations reserved for it: one, plus one per repair
    claims: set[str] = field(default_factory=set)   # source hashes it holds in flight

    def record(self, ctx: RunContext, event):
        event = ctx.record(event)    # on the main thread, into the log and the live state
        if self.state is not ctx.state:
            self.state.apply(event)
        return event


def begin_turn(ctx: RunContext, team: Team, concurrent: bool) -> Turn:
    """On the main thread: reserve the turn's evaluation and give it what it sees."""
    ctx.reserved += 1
    if not concurrent:
        return Turn(team.id, ctx.state)
    return Turn(team.id, snapshot(ctx), seen=ctx.state.seq)


def end_turn(ctx: RunContext, turn: Turn) -> None:
    """On the main thread: give back what the turn reserved and did not use."""
    ctx.reserved -= turn.held
    for digest in turn.claims:
        ctx.claims.pop(digest, None)


def snapshot(ctx: RunContext) -> RunState:
    """A copy of the live state for a turn that runs beside others; sources other turns are
    evaluating count as known (an empty candidate id), so an agent proposes something else."""
    state = ctx.state.snapshot()
    state.hashes.update(dict.fromkeys(ctx.claims, ""))
    return state


def step(turn: Turn, agent, ctx: RunContext) -> CandidateEvaluated | AttemptFailed | None:
    """One turn of a team: its candidate's event, or the failed attempt's; None when its agent
    has nothing left to try (the team is exhausted). A failed candidate gets up to
    `config.repairs` repairs from an agent that can repair, each evaluated in the same turn.
    Runs on a worker thread or the main one; every write goes through `ctx` to the main one.
    An agent that works over several steps (`work`) submits its candidates itself."""
    if hasattr(agent, "work"):
        from eat.desk import work_turn
        return work_turn(turn, agent, ctx)
    # plan + implement: the agent picks an idea and writes the source
    try:
        proposal = _propose(turn, ctx, lambda: agent.propose(turn.state.teams[turn.team],
                                                             turn.state))
    except AttemptError as e:
        if e.plan:
            turn.record(ctx, PlanUpdated(team=turn.team, ideas=[p.model_dump() for p in e.plan]))
        return turn.record(ctx, AttemptFailed(team=turn.team, kind=e.kind, reason=str(e),
                                              repeats=e.repeats, seen_seq=turn.seen))
    if proposal is None:
        turn.record(ctx, TeamExhausted(team=turn.team))
        return None
    if proposal.plan:
        turn.record(ctx, PlanUpdated(team=turn.team,
                                     ideas=[p.model_dump() for p in proposal.plan]))
    event, ev = _evaluate(turn, proposal, ctx)
    for _ in range(ctx.config.repairs):
        if event.status == "ok" or not ctx.on_main(lambda: _reserve(ctx, turn)):
            break
        failed = turn.state.candidates[event.candidate]
        try:
            proposal = _propose(turn, ctx, lambda: agent.repair(
                turn.state.teams[turn.team], turn.state, failed, ev.compile_log + ev.stderr))
        except AttemptError as e:
            turn.record(ctx, AttemptFailed(team=turn.team, kind=e.kind, reason=str(e),
                                           repeats=e.repeats, seen_seq=turn.seen))
            break
        if proposal is None:
            break
        event, ev = _evaluate(turn, proposal, ctx)
    return event


_CLAIM_TRIES = 3


def _propose(turn: Turn, ctx: RunContext, ask) -> Proposal | None:
    """The agent's proposal, its source claimed for this turn: a source another turn is
    evaluating, or one recorded since the snapshot, is asked for again from a fresh snapshot
    (never the case with one turn at a time, which sees the live state)."""
    for _ in range(_CLAIM_TRIES):
        proposal = ask()
        if proposal is None or ctx.on_main(lambda: _claim(ctx, turn, proposal.source)):
            return proposal
        turn.state = ctx.on_main(lambda: snapshot(ctx))
    raise AttemptError("duplicate", "other turns were evaluating the sources it proposed")


def _claim(ctx: RunContext, turn: Turn, source: str) -> bool:
    digest = source_hash(source)
    if digest in ctx.claims or digest in ctx.state.hashes:
        return False
    ctx.claims[digest] = turn.team
    turn.claims.add(digest)
    return True


def _reserve(ctx: RunContext, turn: Turn) -> bool:
    """On the main thread: one more evaluation for a repair, if the budget has it."""
    if ctx.state.spent_evals + ctx.reserved >= ctx.config.max_evals:
        return False
    ctx.reserved += 1
    turn.held += 1
    return True


def _evaluate(turn: Turn, proposal: Proposal, ctx: RunContext):
    """evaluate (here) + reflect (on the main thread): run the candidate, then keep it."""
    ev = ctx.runner.evaluate(ctx.target, proposal.source, config=ctx.eval_config)
    event = ctx.on_main(lambda: _keep(turn, proposal, ev, ctx))
    if turn.state is not ctx.state:
        turn.state.apply(event)
    return event, ev


def _keep(turn: Turn, proposal: Proposal, ev: Evaluation, ctx: RunContext):
    """On the main thread: the candidate gets the next id, its files, its event, best/, notes
    and a commit, in that order (crash recovery relies on it)."""
    team = ctx.state.teams[turn.team]
    cid = ctx.state.next_candidate_id()
    meta = {"team": team.id, "idea": proposal.idea, "knobs": proposal.knobs,
            "parent": proposal.parent, "plan_item": proposal.plan_item}
    ctx.ws.write_candidate(team.id, cid, {source_name(ctx.target.language): proposal.source,
                                          "meta.json": json.dumps(meta, indent=2)},
                           ev.model_dump(mode="json"))
    event = evaluated_event(cid, meta, ev)
    event.seen_seq = turn.seen
    ctx._record(event)
    ctx.reserved -= 1
    turn.held -= 1
    digest = source_hash(proposal.source)
    ctx.claims.pop(digest, None)
    turn.claims.discard(digest)
    new_best = ctx.state.best is not None and ctx.state.best.cid == cid
    if new_best:
        ctx.ws.set_best(team.id, cid)
    write_notes(team, ctx)
    commit_step(ctx, f"{cid} {team.id}: {ev.status} "
                + (f"{ev.speedup:.2f}x" if ev.speedup else ev.message[:80])
                + (" (new best)" if new_best else "") + f" [{proposal.idea[:100]}]",
                [team.id], cid)
    return event


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
    """The team's NOTES.md (eat's block: directive, strategy, best, recent attempts; people
    write outside it) and team.yaml (a directive a person saved there and the loop has not yet
    taken is kept)."""
    paths = ctx.ws.paths
    recent = ctx.state.recent_of(team.id, 10)
    best = team.best
    lines = [f"- preset: {team.preset}", f"- strategy: {team.strategy}",
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
    own = paths.agent_notes(team.id)
    if own.is_file():  # an agent with a worktree keeps its own notebook there
        lines += ["", "## The agent's notes (its worktree's NOTES.md)", "",
                  redact(own.read_text())[:4000].strip()]
    spec = {"id": team.id, "preset": team.preset, "strategy": team.strategy,
            "directive": team.directive, "share": team.share, "state": team.state,
            "start_from": team.start_from}
    notes, block = paths.team_notes(team.id), "\n".join(lines)
    if ctx.written.get(notes) != block:
        empty = (f"# Team {team.id}\n\nNotes for this team: write yours outside the markers "
                 "(eat rewrites only the part between them); the team's agents are told what "
                 f"you add.\n\n{learning.BEGIN}\n{learning.END}\n")
        merge_write(notes, lambda text: learning.splice(text, block, empty),
                    people=learning.outside)
        ctx.written[notes] = block
    spec_path = paths.team_spec(team.id)
    if ctx.written.get(spec_path) != spec:
        last = ctx.written.get(spec_path)

        def make(text: str | None) -> str:
            mine = dict(spec)
            theirs = directive_of(text) if text else None
            if last and theirs and theirs not in (" ".join(last["directive"].split()),
                                                  " ".join(team.directive.split())):
                mine["directive"] = theirs  # a person's edit the loop has yet to take
            # JSON scalars are YAML scalars: a readable team.yaml without the emitter's cost.
            return "".join(f"{k}: {json.dumps(v)}\n" for k, v in mine.items())

        merge_write(spec_path, make)
        ctx.written[spec_path] = spec
