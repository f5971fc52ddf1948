"""What a run writes for people besides the log, on the main thread: a team's NOTES.md and
team.yaml, and after each step LEARNING.md and the commit of what changed."""

from __future__ import annotations

import json

from eat import learning
from eat.context import RunContext
from eat.llm import redact
from eat.merge import merge_write
from eat.state import Team
from eat.steer import directive_of


def commit_step(ctx: RunContext, message: str, teams: list[str], cid: str | None = None) -> None:
    """Refresh LEARNING.md and commit what changed: the candidate, best/, the teams' files."""
    p = ctx.ws.paths
    learning.update(p.learning, ctx.state, ctx.target)
    paths = [p.learning, p.best] + [f for t in teams for f in (p.team_notes(t), p.team_spec(t))]
    if cid:
        paths.append(p.candidate(ctx.state.candidates[cid].team, cid))
    ctx.ws.commit(message, paths)


def write_notes(team: Team, ctx: RunContext) -> None:
    """The team's NOTES.md (eat's block: directive, strategy, best, recent attempts; people
    write outside it) and team.yaml (a directive a person saved there and the loop has not yet
    taken is kept)."""
    paths = ctx.ws.paths
    recent = ctx.state.recent_of(team.id, 10)
    best = team.best
    lines = [
        f"- preset: {team.preset}",
        f"- strategy: {team.strategy}",
        f"- state: {team.state}{' (nothing left to try)' if team.exhausted else ''}",
        f"- directive: {team.directive}",
        f"- evaluations: {team.evals}, since last improvement: {team.since_improvement}",
        f"- near the run's best: {team.hits} of them (pace {team.pace:.2f}; a supervised run "
        "gives teams turns by share and pace)",
        f"- best: {best.cid} at {best.estimate:.2f}x"
        if best and best.estimate
        else "- best: none yet",
        "",
        "## Recent attempts",
        "",
    ]
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
        lines += [
            "",
            "## The agent's notes (its worktree's NOTES.md)",
            "",
            redact(own.read_text())[:4000].strip(),
        ]
    spec = {
        "id": team.id,
        "preset": team.preset,
        "strategy": team.strategy,
        "directive": team.directive,
        "share": team.share,
        "state": team.state,
        "start_from": team.start_from,
    }
    notes, block = paths.team_notes(team.id), "\n".join(lines)
    if ctx.written.get(notes) != block:
        empty = (
            f"# Team {team.id}\n\nNotes for this team: write yours outside the markers "
            "(eat rewrites only the part between them); the team's agents are told what "
            f"you add.\n\n{learning.BEGIN}\n{learning.END}\n"
        )
        merge_write(
            notes, lambda text: learning.splice(text, block, empty), people=learning.outside
        )
        ctx.written[notes] = block
    spec_path = paths.team_spec(team.id)
    if ctx.written.get(spec_path) != spec:
        last = ctx.written.get(spec_path)

        def make(text: str | None) -> str:
            mine = dict(spec)
            theirs = directive_of(text) if text else None
            if (
                last
                and theirs
                and theirs
                not in (" ".join(last["directive"].split()), " ".join(team.directive.split()))
            ):
                mine["directive"] = theirs  # a person's edit the loop has yet to take
            # JSON scalars are YAML scalars: a readable team.yaml without the emitter's cost.
            return "".join(f"{k}: {json.dumps(v)}\n" for k, v in mine.items())

        merge_write(spec_path, make)
        ctx.written[spec_path] = spec
