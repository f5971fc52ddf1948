"""A team's worktree: where an agent that edits files works, and what eat puts there.

The worktree (branch `team/<id>` of the workspace's repository, under `worktrees/<id>/`)
holds the candidate file the agent edits, read-only copies of the target's reference and
baseline, the agent's NOTES.md and TASK.md (what to do, how to check and submit, the team's
standing); LEARNING.md links to the run's (SKILL.md too, when the run has a skill), and
`others/` holds the other teams' best candidates. It is made at the team's first turn, from the
candidate the team starts from (a fork's chosen candidate), and kept after the team is retired:
its branch records its attempts.
"""

from __future__ import annotations

import os
import shutil
import stat
from pathlib import Path

from eat.agents.base import start_candidate
from eat.agents.llm import render
from eat.context import RunContext
from eat.state import RunState, Team
from eat.workspace import source_name, write_atomic


def prepare(ctx: RunContext, team: Team, state: RunState) -> str | None:
    """Make or refresh the team's worktree for a turn; returns the candidate id its file
    started from when it was made now (None: the baseline, or an existing worktree)."""
    paths, target = ctx.ws.paths, ctx.target
    name = source_name(target.language)
    start = start_candidate(team, state)
    parent = None
    if not paths.worktree(team.id).joinpath(".git").exists():
        source = target.baseline_source()
        if start is not None:
            parent = start.cid
            source = (paths.candidate(start.team, start.cid) / name).read_text()
        ctx.ws.add_worktree(
            team.id,
            {name: source, "NOTES.md": f"# Notes of {team.id}\n"},
            f"{team.id} starts from {parent or 'the baseline'}",
        )
    folder = paths.worktree(team.id)
    shown = [target.judge_file] if target.judge_file else []
    for src in (target.path(rel) for rel in [*shown, target.baseline.file, *target.baseline.files]):
        _read_only_copy(src, paths.reference_copy(team.id, src.name))
    for shared in (paths.learning, paths.skill):
        link = folder / shared.name
        if shared.exists() and not link.is_symlink():
            link.unlink(missing_ok=True)
            link.symlink_to(os.path.relpath(shared, folder))
    _others(ctx, team, state)
    write_atomic(paths.task_file(team.id), task_text(ctx, team, state, start), durable=False)
    return parent


def _read_only_copy(src, dst) -> None:
    if dst.exists():
        dst.chmod(stat.S_IWUSR | stat.S_IRUSR)
    shutil.copyfile(src, dst)
    dst.chmod(stat.S_IRUSR | stat.S_IRGRP | stat.S_IROTH)


def _others(ctx: RunContext, team: Team, state: RunState) -> None:
    """The other teams' best candidates, as files named after their team and id."""
    paths, name = ctx.ws.paths, source_name(ctx.target.language)
    folder = paths.others(team.id)
    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir()
    for other in state.teams.values():
        best = other.best
        if other.id == team.id or best is None:
            continue
        ext = name.rsplit(".", 1)[1]
        shutil.copyfile(
            paths.candidate(other.id, best.cid) / name,
            folder / f"{other.id}-{best.cid}-{best.estimate:.2f}x.{ext}",
        )


def task_text(ctx: RunContext, team: Team, state: RunState, start) -> str:
    """TASK.md: the target, the rules, how to check and submit, the team's standing."""
    target, cfg = ctx.target, ctx.config
    x = lambda c: f"{c.cid} at {c.estimate:.2f}x" if c and c.estimate else "none yet"  # noqa
    recent = [
        f"{c.cid}: {f'{c.estimate:.2f}x' if c.estimate else c.status} — {c.what}"
        for c in state.recent_of(team.id, 8)
    ]
    return render(
        "task.md.j2",
        target=target,
        team=team,
        candidate=source_name(target.language),
        reference=Path(target.judge_file).name if target.judge_file else None,
        baseline=target.path(target.baseline.file).name,
        start=x(start) if start else "the baseline",
        best=x(team.best),
        run_best=x(state.best),
        recent=recent,
        skill=ctx.ws.paths.skill.is_file(),
        limits={"submits": cfg.agent_submits, "steps": cfg.agent_steps, "wall_s": cfg.agent_wall_s},
    )
