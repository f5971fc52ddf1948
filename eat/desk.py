"""A team's desk: check and submit for agents that work over several steps in their worktree.

An agent that edits files (eat's tools loop in this process, or an external CLI in the team's
worktree) asks for three things: `check` (build, verify, a few timed rounds), `submit` (a full
evaluation, kept as the team's candidate, committed on the team's branch) and `profile`.
In-process agents call the `Desk`; external ones run `eat submit` / `eat check` / `eat profile`,
which leave a request file in the worktree's `.requests/` and wait for the reply file the
team's turn writes (`Desk.serve`): the running eat process stays the one writer of the log.
Everything counts: submits are evaluations of `max_evals` and of the turn's `agent_submits`,
checks count against `max_checks`, and every request is a step of the turn's `agent_steps`.
"""

from __future__ import annotations

import json
import os
import time
import uuid
from pathlib import Path
from typing import TYPE_CHECKING, Any

from eat.agents.base import Proposal, start_candidate
from eat.budget import why_stop
from eat.errors import BadInput
from eat.events import AttemptFailed, CandidateChecked, CandidateEvaluated
from eat.llm import redact
from eat.runners.base import Evaluation, source_hash
from eat.workspace import Paths, write_atomic

if TYPE_CHECKING:  # a turn.Turn calls its desk; the desk only calls the turn's methods
    from eat.turn import Turn

KINDS = ("submit", "check", "profile")


def reply_of(ev: Evaluation, **extra) -> dict:
    """What an agent is told about an evaluation: status, speedup, per-workload lines (times,
    throughput, fraction of peak) or a program's grades, and, when it failed, why (with the
    compiler's or harness's words)."""
    out: dict[str, Any] = {
        "status": ev.status,
        "speedup": ev.speedup,
        "message": ev.message,
        "workloads": [w.summary() for w in ev.workloads],
        "peak_fraction": [w.peak_fraction for w in ev.workloads],
    }
    if ev.metric:  # a program's: its metric graded, against the baseline's on the same seeds
        out |= {
            "metric": ev.metric,
            "gain": ev.speedup,
            "score": ev.score.model_dump() if ev.score else None,
            "baseline_score": ev.baseline_score.model_dump() if ev.baseline_score else None,
        }
    if not ev.ok:
        out["log"] = (ev.compile_log + ev.stderr)[-3000:]
        out["detail"] = ev.detail
    return out | extra


class Desk:
    """The check/submit service of one team's turn; any thread (writes go through `ctx`)."""

    def __init__(self, turn: Turn, parent: str | None = None):
        self.turn, self.ctx, self.parent = turn, turn.ctx, parent
        self.cfg = turn.ctx.config
        self.steps = self.submitted = 0
        self.last: CandidateEvaluated | None = None  # the turn's latest
        self.started = time.monotonic()
        self.hard = False

    # -- limits ------------------------------------------------------------------------------

    def why_end(self) -> str | None:
        """Why the agent must stop now: its turn's limits, or the run stopping; else None.
        `hard` says whether it must stop at once (steps, wall clock) or may wrap up (its
        submits or the run's budget are spent: what it asks now is refused)."""
        self.hard = True
        if self.steps >= self.cfg.agent_steps:
            return f"step limit ({self.cfg.agent_steps} checks and submits a turn)"
        if time.monotonic() - self.started >= self.cfg.agent_wall_s:
            return f"wall-clock limit ({self.cfg.agent_wall_s:g} s a turn)"
        self.hard = False
        if self.submitted >= self.cfg.agent_submits:
            return f"submit limit ({self.cfg.agent_submits} a turn)"
        ctx = self.ctx
        stop = ctx.on_main(lambda: ctx.halt or why_stop(ctx.state, ctx.config, ctx.elapsed()))
        return f"the run is stopping ({stop})" if stop else None

    def _refused(self) -> dict | None:
        why = self.why_end()
        if why:
            return {"status": "refused", "message": f"refused: {why}"}
        self.steps += 1
        return None

    # -- what an agent asks for ----------------------------------------------------------------

    def submit(self, source: str, message: str = "") -> dict:
        """Evaluate `source` as the team's next candidate and keep it."""
        if refused := self._refused():
            return refused
        ctx, turn = self.ctx, self.turn
        if not turn.claim(source):
            known = ctx.on_main(lambda: ctx.state.hashes.get(source_hash(source)))
            return {
                "status": "duplicate",
                "message": "this source was evaluated already"
                + (f" as {known}" if known else " (or is being evaluated)"),
                "candidate": known or None,
            }
        if turn.held == 0 and not turn.reserve():
            return {"status": "refused", "message": "refused: the run's evaluations are spent"}
        idea = redact(" ".join(message.split()))[:200] or "submitted by the agent"
        event, ev = turn.evaluate(Proposal(source=source, idea=idea, parent=self.parent))
        self.submitted += 1
        self.last, self.parent = event, event.candidate
        best = ctx.on_main(lambda: ctx.state.best)
        new_best = best is not None and best.cid == event.candidate
        self._commit(event, new_best)
        return reply_of(
            ev,
            candidate=event.candidate,
            **({"same_program_as": event.same_as} if event.same_as else {}),
            new_best=new_best,
            run_best=best.estimate if best else None,
            submits_left=self.cfg.agent_submits - self.submitted,
        )

    def check(self, source: str) -> dict:
        """Build and verify `source`, without timing it (no speedup: `submit` times)."""
        if refused := self._refused():
            return refused
        ctx = self.ctx
        cfg = (ctx.eval_config or ctx.target.evaluation).model_copy(update={"timed": False})
        ev = ctx.runner.evaluate(ctx.target, source, config=cfg)
        self.turn.record(
            CandidateChecked(
                team=self.turn.team,
                source_hash=ev.source_hash,
                status=ev.status,
                speedup=ev.speedup,
                message=ev.message[:300],
            )
        )
        return reply_of(ev)

    def profile(self, source: str) -> dict:
        """The profile of `source`: its evaluation's per-workload lines where it was
        submitted, and what the compiler says of its loops (or the GPU profiler, where
        it runs)."""
        if refused := self._refused():
            return refused
        from eat.agents.profile import profile

        ctx = self.ctx
        known = ctx.on_main(lambda: ctx.state.hashes.get(source_hash(source)))
        ev = None
        if known:
            c = ctx.on_main(lambda: ctx.state.candidates[known])
            path = ctx.ws.paths.result(c.team, c.cid)
            ev = Evaluation.model_validate_json(path.read_text()) if path.is_file() else None
        return {
            "status": "ok",
            "candidate": known or None,
            "workloads": [w.summary() for w in ev.workloads] if ev else [],
            "profile": profile(ctx.target, source),
        } | ({"score": ev.score.model_dump()} if ev and ev.score else {})  # a program's grades

    def _commit(self, event, new_best: bool) -> None:
        """The candidate and the agent's notes, on the team's branch."""
        paths, team = self.ctx.ws.paths, self.turn.team
        if not paths.worktree(team).joinpath(".git").exists():
            return  # an in-process agent without a worktree (tests)
        notes = paths.agent_notes(team)
        if notes.is_file() and (text := notes.read_text()) != redact(text):
            write_atomic(notes, redact(text))  # eat commits it: no key goes into git
        what = f"{event.speedup:.2f}x" if event.speedup else event.message[:80]
        self.ctx.ws.commit_worktree(
            team,
            f"{event.candidate}: {event.status} {what}"
            + (" (new best)" if new_best else "")
            + f" [{event.idea}]",
            [paths.work_source(team, self.ctx.target.language).name, paths.agent_notes(team).name],
        )

    # -- requests from `eat submit` / `eat check` -----------------------------------------------

    def serve(self, folder: Path, source_file: Path) -> int:
        """Answer the requests waiting in `folder` (oldest first); how many were answered."""
        if not folder.is_dir():
            return 0
        done = 0
        for req in sorted(folder.glob("*.request.json"), key=lambda p: p.stat().st_mtime_ns):
            try:
                ask = json.loads(req.read_text())
                kind, source = ask["kind"], ask.get("source")
            except (OSError, ValueError, KeyError):
                continue  # still being written (writes are atomic: a stray file), or junk
            if source is None and source_file.is_file():
                source = source_file.read_text()
            if kind not in KINDS or source is None:
                answer = {"status": "refused", "message": f"bad request {kind!r}"}
            elif kind == "submit":
                answer = self.submit(source, ask.get("message", ""))
            else:
                answer = getattr(self, kind)(source)
            write_atomic(
                req.with_name(req.name.replace(".request.", ".reply.")),
                json.dumps(answer, indent=2),
                durable=False,
            )
            req.unlink(missing_ok=True)
            done += 1
        return done


def work_turn(turn: Turn, agent):
    """A turn of an agent that works in the team's worktree: it checks and submits as it goes
    (each submit is kept at once); the turn's event is its last candidate's, or an
    attempt_failed (no_candidate) when it submitted nothing."""
    team = turn.state.teams[turn.team]
    from eat.worktree import prepare

    parent = prepare(turn.ctx, team, turn.state)
    start = start_candidate(team, turn.state)
    desk = Desk(turn, parent=parent or (start.cid if start else None))
    why = agent.work(team, turn.state, desk) or "the agent stopped"
    if desk.last is not None:
        return desk.last
    return turn.record(
        AttemptFailed(
            team=turn.team,
            kind="no_candidate",
            reason=f"no candidate submitted: {why}"[:500],
            seen_seq=turn.seen,
        )
    )


# -- the client side: `eat submit`, `eat check`, `eat profile` ---------------------------------


def agent_env() -> tuple[Paths, str, Path]:
    """The workspace, team and task file an agent was given; BadInput when run elsewhere."""
    names = ("EAT_WORKSPACE", "EAT_TEAM", "EAT_TASK")
    missing = [n for n in names if not os.environ.get(n)]
    if missing:
        raise BadInput(
            f"{', '.join(missing)} not set: run this inside a team's worktree, as eat's agents do"
        )
    paths = Paths(Path(os.environ["EAT_WORKSPACE"]))
    return paths, os.environ["EAT_TEAM"], Path(os.environ["EAT_TASK"])


def ask(kind: str, message: str = "", timeout_s: float = 3600.0, poll_s: float = 0.05) -> dict:
    """Hand the worktree's candidate to the running loop and wait for its answer."""
    paths, team, task = agent_env()
    folder = task.parent
    sources = sorted(folder.glob("candidate.*"))
    if not sources:
        raise BadInput(f"{folder}: no candidate file (candidate.<ext>) to {kind}")
    box = paths.requests(team)
    box.mkdir(parents=True, exist_ok=True)
    rid = uuid.uuid4().hex[:12]
    write_atomic(
        box / f"{rid}.request.json",
        json.dumps({"kind": kind, "message": message, "source": sources[0].read_text()}),
        durable=False,
    )
    reply = box / f"{rid}.reply.json"
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if reply.is_file():
            answer = json.loads(reply.read_text())
            reply.unlink(missing_ok=True)
            return answer
        time.sleep(poll_s)
    (box / f"{rid}.request.json").unlink(missing_ok=True)
    raise BadInput(
        f"no answer in {timeout_s:g} s: is an eat run serving {paths.root}, and is "
        f"it team {team}'s turn?"
    )
