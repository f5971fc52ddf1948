"""A team's turn as it runs, on a worker thread or the main one: what it sees, what it holds
(evaluations reserved, sources claimed), and its steps (plan, implement, evaluate, reflect).

Every write of a turn (an event, a candidate's files, a commit) runs on the main thread, the
log's one writer: the methods that write hop there themselves (`RunContext.on_main`). What the
run holds for its turns in flight (`RunContext.reserved`, `RunContext.claims`) is read off the
turns themselves, so it is kept in one place.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field

from eat.agents.base import Proposal, Worker
from eat.agents.llm import AttemptError
from eat.context import RunContext
from eat.events import AttemptFailed, CandidateEvaluated, PlanUpdated, TeamExhausted, clip
from eat.learning import commit_step, write_notes
from eat.runners.base import Evaluation, source_hash
from eat.state import RunState, Team
from eat.workspace import source_name

CLAIM_TRIES = 3  # proposals asked for again when other turns hold the sources proposed


@dataclass
class Turn:
    """One team's turn. With one turn at a time it sees the live state; with several, a
    snapshot taken on the main thread when it began (`seen`: the log's seq then), to which
    only its own events are applied as they are recorded."""

    team: str
    ctx: RunContext
    state: RunState
    seen: int | None = None
    held: int = 1  # evaluations reserved for it: one, plus one per repair
    claims: set[str] = field(default_factory=set)  # source hashes it holds in flight

    @classmethod
    def begin(cls, ctx: RunContext, team: Team, concurrent: bool) -> Turn:
        """On the main thread: the team's turn, holding one evaluation, in flight."""
        turn = (
            cls(team.id, ctx, snapshot(ctx), seen=ctx.state.seq)
            if concurrent
            else cls(team.id, ctx, ctx.state)
        )
        ctx.turns[team.id] = turn
        return turn

    def release(self) -> None:
        """On the main thread: the turn ends; what it held and did not use is given back."""
        self.ctx.turns.pop(self.team, None)

    def record(self, event):
        """Log `event` (on the main thread) and fold it into what this turn sees."""
        event = self.ctx.record(event)
        if self.state is not self.ctx.state:
            self.state.apply(event)
        return event

    def claim(self, source: str) -> bool:
        """Hold `source` for this turn, unless the run knows it or another turn holds it."""
        digest = source_hash(source)

        def take() -> bool:
            if digest in self.ctx.claims or digest in self.ctx.state.hashes:
                return False
            self.claims.add(digest)
            return True

        return self.ctx.on_main(take)

    def reserve(self) -> bool:
        """One more evaluation for this turn (a repair, a submit), if the budget has it."""
        ctx = self.ctx

        def take() -> bool:
            if ctx.state.spent_evals + ctx.reserved >= ctx.config.max_evals:
                return False
            self.held += 1
            return True

        return ctx.on_main(take)

    def refresh(self) -> None:
        """See the run as it is now (a new snapshot; the live state needs none)."""
        if self.state is not self.ctx.state:
            self.state = self.ctx.on_main(lambda: snapshot(self.ctx))

    def evaluate(self, proposal: Proposal) -> tuple[CandidateEvaluated, Evaluation]:
        """Evaluate the proposal's source here, then keep it as the team's next candidate; a
        source that builds a program the run evaluated already gets that program's result."""
        ctx = self.ctx
        program = ctx.runner.program(ctx.target, proposal.source)
        same = ctx.on_main(lambda: ctx.state.stands_for(program)) if program else None
        ev = self._result_of(same, proposal.source) if same else None
        if ev is None:
            same = None
            ev = ctx.runner.evaluate(ctx.target, proposal.source, config=ctx.eval_config)
        event = ctx.on_main(lambda: self.keep(proposal, ev, program, same))
        if self.state is not ctx.state:
            self.state.apply(event)
        return event, ev

    def _result_of(self, cid: str, source: str) -> Evaluation | None:
        """Candidate `cid`'s evaluation as `source`'s (None where its file is gone or
        damaged: the source is evaluated)."""
        c = self.ctx.on_main(lambda: self.ctx.state.candidates[cid])
        try:
            ev = Evaluation.model_validate_json(self.ctx.ws.paths.result(c.team, cid).read_text())
        except (OSError, ValueError):
            return None
        return ev.model_copy(update={"source_hash": source_hash(source)})

    def keep(
        self,
        proposal: Proposal,
        ev: Evaluation,
        program: str | None = None,
        same_as: str | None = None,
    ) -> CandidateEvaluated:
        """On the main thread: the candidate gets the next id, its files, its event, best/,
        notes and a commit, in that order (crash recovery relies on it); the evaluation (none
        for a copy of `same_as`, whose result `ev` is) and the source it held are spent."""
        ctx = self.ctx
        team = ctx.state.teams[self.team]
        cid = ctx.state.next_candidate_id()
        meta = {
            "team": team.id,
            "idea": proposal.idea,
            "knobs": proposal.knobs,
            "parent": proposal.parent,
            "plan_item": proposal.plan_item,
            "program": program,
            "same_as": same_as,
        }
        files = {source_name(ctx.target.language): proposal.source}
        files["meta.json"] = json.dumps(meta, indent=2)
        ctx.ws.write_candidate(team.id, cid, files, ev.model_dump(mode="json"))
        event = evaluated_event(cid, meta, ev)
        event.seen_seq = self.seen
        ctx.record(event)
        self.held -= same_as is None
        self.claims.discard(source_hash(proposal.source))
        new_best = ctx.state.best is not None and ctx.state.best.cid == cid
        if new_best:
            ctx.ws.set_best(team.id, cid)
        write_notes(team, ctx)
        commit_step(
            ctx,
            f"{cid} {team.id}: {ev.status} "
            + (f"{ev.speedup:.2f}x" if ev.speedup else ev.message[:80])
            + (" (new best)" if new_best else "")
            + (f" (the same program as {same_as}: not evaluated again)" if same_as else "")
            + f" [{clip(proposal.idea, 100)}]",
            [team.id],
            cid,
        )
        return event

    def play(self, agent) -> CandidateEvaluated | AttemptFailed | None:
        """The turn's work: its candidate's event, or the failed attempt's; None when its
        agent has nothing left to try (the team is exhausted). An agent that works over
        several steps (`work`) submits its candidates itself, at its desk."""
        if isinstance(agent, Worker):
            from eat.desk import work_turn

            return work_turn(self, agent)
        return self._propose_and_repair(agent)

    def _propose_and_repair(self, agent) -> CandidateEvaluated | AttemptFailed | None:
        """plan + implement + evaluate one proposal; a failed candidate gets up to
        `config.repairs` repairs from an agent that can repair, each evaluated in this turn."""
        team = lambda: self.state.teams[self.team]  # noqa: E731 (a new snapshot, a new team)
        try:
            proposal = self._proposal(lambda: agent.propose(team(), self.state))
        except AttemptError as e:
            if e.plan:
                self.record(PlanUpdated(team=self.team, ideas=[p.model_dump() for p in e.plan]))
            return self._failed(e)
        if proposal is None:
            self.record(TeamExhausted(team=self.team))
            return None
        if proposal.plan:
            self.record(PlanUpdated(team=self.team, ideas=[p.model_dump() for p in proposal.plan]))
        event, ev = self.evaluate(proposal)
        for _ in range(self.ctx.config.repairs):
            if event.status == "ok" or not self.reserve():
                break
            failed = self.state.candidates[event.candidate]
            try:
                proposal = self._proposal(
                    lambda failed=failed, log=ev.compile_log + ev.stderr: agent.repair(
                        team(), self.state, failed, log
                    )
                )
            except AttemptError as e:
                self._failed(e)
                break
            if proposal is None:
                break
            event, ev = self.evaluate(proposal)
        return event

    def _proposal(self, ask) -> Proposal | None:
        """The agent's proposal, its source claimed: a source another turn is evaluating, or
        one recorded since the snapshot, is asked for again from a fresh snapshot (never the
        case with one turn at a time, which sees the live state)."""
        for _ in range(CLAIM_TRIES):
            proposal = ask()
            if proposal is None or self.claim(proposal.source):
                return proposal
            self.refresh()
        raise AttemptError("duplicate", "other turns were evaluating the sources it proposed")

    def _failed(self, e: AttemptError) -> AttemptFailed:
        return self.record(
            AttemptFailed(
                team=self.team, kind=e.kind, reason=str(e), repeats=e.repeats, seen_seq=self.seen
            )
        )


def snapshot(ctx: RunContext) -> RunState:
    """A copy of the live state for a turn that runs beside others; sources other turns are
    evaluating count as known (an empty candidate id), so an agent proposes something else."""
    state = ctx.state.snapshot()
    state.hashes.update(dict.fromkeys(ctx.claims, ""))
    return state


def evaluated_event(cid: str, meta: dict, ev: Evaluation) -> CandidateEvaluated:
    """The log's record of an evaluation (also rebuilt from disk by crash recovery)."""
    noise = None
    if ev.ok and ev.workloads:
        spreads = sorted(w.candidate.iqr_s / w.candidate.median_s for w in ev.workloads)
        noise = spreads[len(spreads) // 2]
    if ev.ok and ev.gain_rse is not None and math.isfinite(ev.gain_rse):
        # A program's: every candidate is graded on the same seeds, so the noise between two is
        # how much its gain moves from seed to seed, not how much the episodes differ.
        noise = ev.gain_rse
    best_w = max(ev.workloads, key=lambda w: w.gflops or 0.0, default=None)
    return CandidateEvaluated(
        candidate=cid,
        team=meta["team"],
        idea=meta.get("idea", ""),
        knobs=meta.get("knobs", {}),
        parent=meta.get("parent"),
        source_hash=ev.source_hash,
        status=ev.status,
        speedup=ev.speedup,
        noise=noise,
        score=ev.score.median if ev.score else None,
        message=ev.message[:500],
        plan_item=meta.get("plan_item"),
        program=meta.get("program"),
        same_as=meta.get("same_as"),
        gflops=best_w.gflops if best_w else None,
        vendor_gflops=best_w.vendor_gflops if best_w else None,
    )
