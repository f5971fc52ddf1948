"""The supervisor: a LangGraph graph run one step at a time, checkpointed in the workspace.

    observe -> (stop?) -> detect plateau -> [diagnose -> restructure] -> dispatch

Each node (a method of `Supervisor`) reads and writes the RunContext (the workspace files are
the truth); the graph state holds only the step's small decisions, so a step cut short by a
crash re-runs from the node that did not finish. Restructure operations carry a key, so a
re-run never applies twice.
"""

from __future__ import annotations

import re
import sqlite3
from functools import partial
from typing import TYPE_CHECKING, Any

from langgraph.checkpoint.serde.jsonplus import JsonPlusSerializer
from langgraph.checkpoint.sqlite import SqliteSaver
from langgraph.graph import END, START, StateGraph
from pydantic import BaseModel

from eat.advisor import to_operations
from eat.agents.base import Worker
from eat.budget import Stop, why_stop
from eat.context import RunContext
from eat.events import AttemptFailed, EliteRetimed, Restructured, SupervisorAdvised, describe
from eat.executors.local import Cancelled, LocalExecutor, ctrl_c_at_waits, default_workers
from eat.learning import commit_step, write_notes
from eat.llm import BudgetSpent, LLMError
from eat.plateau import Plateau, closing, detect_plateaus, elite_to_retime
from eat.restructure import Diagnosis, Limits, Operation, decide, diagnose, operation_events, score
from eat.seal import TargetChangedError
from eat.state import Candidate
from eat.team import pick_team
from eat.turn import Turn

if TYPE_CHECKING:  # langgraph's config type (langchain-core comes with langgraph)
    from langchain_core.runnables import RunnableConfig

PRUNE_EVERY = 50  # steps between clearing the checkpoint history
# Non-retryable LLM errors that no later call will escape: stop the run and say why.
_FATAL = re.compile(
    r"AuthenticationError|PermissionDenied|NotFoundError|PaymentRequired|"
    r"LiteLLMUnknownProvider"
)


class Step(BaseModel):
    """One supervisor step's decisions: the graph's state, checkpointed after each node."""

    step: int = 0
    at_seq: int = 0
    stop: Stop | None = None  # the step ended the run
    plateaus: list[Plateau] = []
    diagnoses: list[Diagnosis] = []
    advised: list[Operation] | None = None  # the LLM supervisor's, when it gave valid ones
    dispatched: str | None = None


# What a checkpoint may hold besides plain values: the step's decisions, nothing else.
CHECKPOINTED = [(c.__module__, c.__name__) for c in (Stop, Plateau, Diagnosis, Operation)]


def should_stop(ctx: RunContext) -> Stop | None:
    """Why the run stops now: what a turn found (no team left, an unusable model), else the
    budgets and the no-progress rule."""
    return ctx.halt or why_stop(ctx.state, ctx.config, ctx.elapsed())


def limits(ctx: RunContext) -> Limits:
    """What bounds the rules' decisions in this run: team counts, and the presets that can run
    on this target (knob searches need knobs)."""
    offline = ctx.config.knob_search

    def usable(preset) -> bool:
        if all(r.agent == "offline" for r in preset.roles):  # knob search, kept to offline runs
            return bool(ctx.target.knobs) and offline
        return bool(ctx.target.knobs) or not offline

    return Limits(
        ctx.config.max_teams,
        ctx.config.spawn_cap(),
        frozenset(n for n, p in ctx.presets.items() if usable(p)),
        llm=not offline,
    )


def retime(ctx: RunContext, elite: Candidate) -> EliteRetimed | None:
    """Evaluate the elite's source again: its estimate becomes the median of measurements
    (None: the target changed, and the run halts)."""
    source = ctx.ws.paths.source(elite.team, elite.cid, ctx.target.language)
    try:
        ev = ctx.runner.evaluate(ctx.target, source.read_text(), config=ctx.eval_config)
    except TargetChangedError as e:
        ctx.halt = Stop(e.code, str(e))
        return None
    before = ctx.state.best
    score = ev.score.median if ev.score else None
    event = ctx.record(
        EliteRetimed(candidate=elite.cid, speedup=ev.speedup, status=ev.status, score=score)
    )
    best = ctx.state.best
    if best is not None and (before is None or best.cid != before.cid):  # the lead passed
        ctx.ws.set_best(best.team, best.cid)
    team = ctx.state.teams.get(elite.team)
    if team is not None:  # its NOTES.md shows the new figure, and the team's best it may move
        write_notes(team, ctx)
    commit_step(ctx, describe(event), [elite.team] if team else [])
    return event


def start_turns(ctx: RunContext, pool: LocalExecutor) -> None:
    """Give each free worker a turn of the team furthest below its share (one turn per team),
    while the evaluation budget has room for every turn's candidate."""
    while pool.free() > 0 and ctx.state.spent_evals + ctx.reserved < ctx.config.max_evals:
        team = pick_team(ctx, busy=pool.busy)
        if team is None:
            return
        turn = Turn.begin(ctx, team, concurrent=pool.workers > 1)
        agent = ctx.agent_for(team)
        pool.start(team.id, partial(turn.play, agent))


def handle_turn_error(ctx: RunContext, team_id: str, error: BaseException) -> None:
    """A turn that raised: a spent LLM budget ends it (observe stops the run); an unusable
    model, or a target that changed, halts the run; an LLM outage is logged and pauses the
    teams; anything else is a bug and is raised here, on the main thread."""
    if isinstance(error, BudgetSpent):
        return
    if isinstance(error, TargetChangedError):  # recorded when found; nothing may be judged now
        ctx.halt = Stop(error.code, str(error))
        return
    if not isinstance(error, LLMError):
        raise error
    if not error.retryable and _FATAL.search(str(error)):
        ctx.halt = Stop("llm_unusable", str(error))  # a key or model problem
        return
    ctx.record(
        AttemptFailed(
            team=team_id, kind="outage" if error.retryable else "llm_error", reason=str(error)
        )
    )
    if error.retryable:
        ctx.pause()  # an outage pauses the teams; the run goes on afterwards


def stop_agent(ctx: RunContext, team_id: str, why: str) -> None:
    """End the team's agent process now, where it has one (an external agent mid-turn): what
    it submitted is kept, its branch too."""
    agent = ctx.agents.get(team_id)
    if isinstance(agent, Worker):
        agent.stop(why)


def finish_turns(ctx: RunContext, pool: LocalExecutor) -> None:
    """The run stops: stop the agents at work, let the turns in flight end and keep what they
    found (their evaluations were reserved within the budget); their errors no longer
    matter."""
    for team_id in list(pool.busy):
        stop_agent(ctx, team_id, "the run stopped")
    for team_id, _, error in pool.drain():
        ctx.turns[team_id].release()
        if error is not None and not isinstance(
            error, (BudgetSpent, LLMError, Cancelled, TargetChangedError)
        ):
            raise error


class Supervisor:
    """The graph's nodes over one run, one method each: they read and write `ctx` (the
    workspace files are the truth) and return the step's small decisions; `pool` runs the
    teams' turns."""

    def __init__(self, ctx: RunContext, pool: LocalExecutor):
        self.ctx, self.pool = ctx, pool

    def graph(self) -> StateGraph:
        """observe -> (stop?) -> detect -> [diagnose -> restructure] -> dispatch."""
        g = StateGraph(Step)
        for name in ("observe", "detect", "diagnose", "restructure", "dispatch"):
            g.add_node(name, self.pool.interruptible(getattr(self, name)))
        g.add_edge(START, "observe")
        g.add_conditional_edges("observe", lambda s: END if s.stop else "detect")
        g.add_conditional_edges("detect", lambda s: "diagnose" if s.plateaus else "dispatch")
        g.add_edge("diagnose", "restructure")
        g.add_edge("restructure", "dispatch")
        g.add_edge("dispatch", END)
        return g

    def observe(self, s: Step) -> dict[str, Any]:
        """Take people's edits, score decisions whose candidates are in, say whether to stop."""
        ctx = self.ctx
        if ctx.steering is not None:
            ctx.steering.take(ctx)  # people's edits the dispatch wait did not already take
        window = ctx.state.cfg.score_after
        assert window is not None  # the run's windows are resolved (RunConfig.windows)
        verdicts = score(ctx.state, window)
        for v in verdicts:
            ctx.record(v)
        if verdicts:
            commit_step(
                ctx,
                "; ".join(
                    f"restructure #{v.restructure} {'helped' if v.helped else 'did not help'}"
                    for v in verdicts
                ),
                [],
            )
        return {"stop": should_stop(ctx), "at_seq": ctx.state.seq}

    def detect(self, s: Step) -> dict[str, Any]:
        """Plateaus, after re-timing the leader a stall verdict (or the run's close) rests on."""
        ctx = self.ctx
        if not ctx.config.supervise:
            return {"plateaus": [], "at_seq": ctx.state.seq}
        plateaus = detect_plateaus(ctx.state, ctx.state.cfg)
        left = ctx.config.max_evals - ctx.state.spent_evals - ctx.reserved
        elite = elite_to_retime(ctx.state, plateaus, closing(left, ctx.config.max_evals))
        if elite and left > 0:
            # a re-time is an evaluation (and turns in flight hold theirs)
            retime(ctx, elite)
            plateaus = detect_plateaus(ctx.state, ctx.state.cfg)
        for p in plateaus:
            ctx.record(p.event())
        return {"plateaus": plateaus, "at_seq": ctx.state.seq}

    def diagnose(self, s: Step) -> dict[str, Any]:
        """Each plateau's diagnosis by the rules, and the LLM supervisor's operations where
        one is set and answers validly."""
        ctx = self.ctx
        plateaus = s.plateaus
        out: dict[str, Any] = {
            "diagnoses": [diagnose(p, ctx.state) for p in plateaus],
            "advised": None,
        }
        if ctx.advisor is not None:
            try:
                decision = ctx.advisor.decide(plateaus, ctx.state)
            except (LLMError, BudgetSpent):
                decision = None  # no model now: the rules decide this time
            ctx.record(
                SupervisorAdvised(
                    model=ctx.advisor.client.settings.model,
                    accepted=decision is not None,
                    diagnosis=decision.diagnosis if decision else "",
                    lessons=decision.lessons if decision else [],
                )
            )
            if decision is not None:
                out["advised"] = to_operations(decision, ctx.state)
        return out

    def restructure(self, s: Step) -> dict[str, Any]:
        """Apply the step's operations (the advisor's, else the rules'), each once: a key per
        operation lets a step replayed after a crash skip what it applied."""
        ctx = self.ctx
        ops = s.advised if s.advised is not None else decide(s.diagnoses, ctx.state, limits(ctx))
        messages, teams = [], []
        for i, op in enumerate(ops):
            key = f"{s.at_seq}:{i}"
            if key in ctx.state.applied_keys:
                continue  # applied before a crash cut this step short
            events = operation_events(
                op, ctx.state, key, ctx.config.seed + ctx.state.seq, ctx.presets
            )
            for event in events:
                ctx.record(event)
                if isinstance(event, Restructured) and event.op == "retire" and event.team:
                    stop_agent(ctx, event.team, "the team was retired")
            team_id = events[-1].team
            if team_id in ctx.state.teams:
                write_notes(ctx.state.teams[team_id], ctx)
                teams.append(team_id)
            messages.append(f"{op.op} {team_id or ''}: {op.reason}")
        if messages:
            commit_step(ctx, "restructure: " + "; ".join(messages), teams)
        return {}

    def dispatch(self, s: Step) -> dict[str, Any]:
        """Start turns on the free workers, then take the next turn that ends; what ends the
        run is left for the next step's observe to say."""
        ctx, pool = self.ctx, self.pool
        if should_stop(ctx):  # a step replayed after a crash may find the budget spent
            return {}
        while True:
            start_turns(ctx, pool)
            if not pool.busy:
                ctx.halt = Stop("exhausted", "no team has anything left to try")
                return {}
            team_id, event, error = pool.next_done()
            ctx.turns[team_id].release()
            if error is not None:
                handle_turn_error(ctx, team_id, error)
                return {}
            if event is None:
                write_notes(ctx.state.teams[team_id], ctx)  # exhausted: detection retires it
                continue
            return {"dispatched": getattr(event, "candidate", None)}


def open_checkpoint(ctx: RunContext) -> tuple[sqlite3.Connection, SqliteSaver]:
    """The supervisor's checkpoint in the workspace (its connection, and langgraph's saver)."""
    ctx.ws.paths.state.mkdir(exist_ok=True)
    conn = sqlite3.connect(ctx.ws.paths.checkpoint, check_same_thread=False)
    # WAL without a sync per commit: a killed process loses nothing (the OS holds the log);
    # only a power cut could lose the last checkpoints, and a step is replayed from the files.
    conn.execute("PRAGMA journal_mode=WAL")
    conn.execute("PRAGMA synchronous=NORMAL")
    return conn, SqliteSaver(conn, serde=JsonPlusSerializer(allowed_msgpack_modules=CHECKPOINTED))


def new_step(n: int) -> dict[str, Any]:
    """The graph's input for step `n`: nothing decided yet (every field, so none is carried
    over from the step before)."""
    return Step(step=n).model_dump()


def run(ctx: RunContext) -> Stop:
    """Step the supervisor until a budget or the search runs out; returns why it stopped."""
    conn, saver = open_checkpoint(ctx)
    pool = LocalExecutor(ctx.config.workers or default_workers())
    ctx.executor = pool
    if ctx.steering is not None:  # an edit wakes the main thread even while turns run
        ctx.steering.wake = lambda: pool.post(lambda: ctx.steering.take(ctx))
    try:
        with ctrl_c_at_waits(pool):
            return steps(ctx, pool, saver)
    finally:
        for team_id in list(pool.busy):  # after Ctrl-C or an error: no agent works on
            stop_agent(ctx, team_id, "the run stopped")
        # After Ctrl-C or an error: turns still in flight write nothing more. The closed pool
        # stays the context's executor, so a turn that ends later is refused, not let write
        # from its own thread after the run's stop.
        pool.close()
        # Ctrl-C can land while LangGraph's own thread writes the step's checkpoint: close
        # between its writes (one after this fails with an error; closing under one crashed
        # the process in sqlite3).
        with saver.lock:
            conn.close()


def steps(ctx: RunContext, pool: LocalExecutor, saver: SqliteSaver) -> Stop:
    """Run the graph one step at a time (the step a crash cut short first), then let the
    turns in flight end; returns why the run stopped."""
    graph = Supervisor(ctx, pool).graph().compile(checkpointer=saver)
    cfg: RunnableConfig = {"configurable": {"thread_id": "supervisor"}}
    snap = graph.get_state(cfg)
    n = snap.values.get("step", 0) if snap.values else 0
    out = graph.invoke(None, cfg, durability="sync") if snap.next else {}
    while not out.get("stop"):
        n += 1
        out = graph.invoke(new_step(n), cfg, durability="sync")
        if n % PRUNE_EVERY == 0 and not out.get("stop"):
            # Between steps the checkpoint holds nothing a resume needs: keep it small.
            saver.delete_thread(cfg["configurable"]["thread_id"])
    finish_turns(ctx, pool)
    return out["stop"]
