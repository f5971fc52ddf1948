"""Starting, resuming and reading a run: the plain functions behind `eat start|resume|status`."""

from __future__ import annotations

import json
import shutil
import time
from collections.abc import Callable
from pathlib import Path

from eat import learning, supervisor
from eat.advisor import LLMAdvisor
from eat.agents.external import CommandAgent, check_preset
from eat.agents.fence import check_writes
from eat.agents.llm import LLMAgent
from eat.agents.offline import OfflineAgent
from eat.budget import INTERRUPTED, Stop, llm_budget_spent
from eat.config import RunConfig, make_config
from eat.context import RunContext
from eat.errors import BadInput, EatError, RunnerUnavailable
from eat.events import (
    Event,
    HeldOutGraded,
    LLMCalled,
    RunResumed,
    RunStarted,
    RunStopped,
    TargetChanged,
    TeamSpawned,
)
from eat.learning import write_notes
from eat.llm import LLMClient, LLMSettings, check_model
from eat.runners import runner_for, sandbox
from eat.runners.base import Evaluation, Runner
from eat.seal import Guarded, Seal, differences, digest, files_of, hidden, recorded_digest, snapshot
from eat.skill import Skill
from eat.skill import load as load_skill
from eat.skill import record as skill_record
from eat.state import RunState
from eat.status import run_status  # noqa: F401  (eat.run starts, resumes and reads runs)
from eat.steer import Steering
from eat.target import EvalConfig, Target, load_target
from eat.team import load_presets
from eat.turn import evaluated_event
from eat.workspace import Workspace, write_atomic


def default_workspace(target: Target) -> Path:
    return Path("workspaces") / f"{target.name}-{time.strftime('%Y%m%d-%H%M%S')}"


def _runner_for(target: Target, given: Runner | None, config: RunConfig) -> Runner:
    """The runner given (tests, benchmarks), else the target's: here, or in a Ray actor."""
    runner: Runner
    if given is not None:
        runner = given
    else:
        from eat.cache import max_bytes
        from eat.doctor import load_peaks

        max_bytes()  # a bad $EAT_CACHE_MAX_GB is refused here, before a workspace is made
        peaks = load_peaks(target.runner)
        if config.executor == "ray":
            from eat.executors.local import default_workers
            from eat.executors.ray import RayRunner

            runner = RayRunner(
                target, config.workers or default_workers(), config.ray_address, peaks=peaks
            )
        else:
            runner = runner_for(target, peaks=peaks)
    why = runner.unavailable(target)
    if why:
        if given is None:
            _close(runner)
        raise RunnerUnavailable(f"{target.name} needs the {target.runner} runner: {why}")
    return runner


def _close(runner: Runner) -> None:
    """Let a runner that holds processes (a Ray actor) end them with the run."""
    if hasattr(runner, "close"):
        runner.close()


def _make_agent_factory(
    config: RunConfig, target: Target, presets: dict, skill: Skill | None = None
):
    """(team, ctx) -> its agent: offline knob search (from the skill's configurations, if
    given), or the LLM agent with each role's model (the skill is in its prompts)."""
    models = {m for m in (config.model, config.supervisor_model) if m is not None}
    for model in models - {"offline"}:
        check_model(model, config.api_base)
    runtimes = (
        {config.agent}
        if config.agent
        else {p.runtime for p in presets.values() if p.name in config.start_teams()}
    )
    external = runtimes - {None, "prompt", "tools"}
    for runtime in external:
        check_preset(runtime, config.model)
    if external and config.agents.confine:
        check_writes(config.agents.writes)
    if {"prompt", "tools"} & runtimes and config.model == "offline":
        raise BadInput("the prompt and tools runtimes need --model (a litellm model)")
    if config.model == "offline" and not target.knobs and not config.agent:
        raise BadInput(
            f"{target.root}: declares no knobs, and the offline agents search knobs "
            "(give --model a litellm model to use LLM agents, or --agent)"
        )

    def make(team, ctx: RunContext):
        spec = presets.get(team.preset)
        runtime = config.agent or (spec.runtime if spec else None)
        if runtime == "tools":
            from eat.agents.tools import ToolsAgent

            return ToolsAgent(llm_client(ctx, config.model), ctx.ws.paths)
        if runtime not in (None, "prompt"):
            return CommandAgent(runtime, ctx, command=config.agent_command, model=config.model)
        roles = {r.name: r for r in spec.roles} if spec else {}
        llm_roles = {
            n: r
            for n, r in roles.items()
            if r.agent == "llm"
            or runtime == "prompt"
            or (r.agent == "auto" and config.model != "offline")
        }
        if not llm_roles:
            return OfflineAgent(target, seed=config.seed, skill=skill.data if skill else None)

        def client_for(role: str) -> LLMClient:
            r = roles.get(role)
            return llm_client(ctx, (r.model if r and r.model else None) or config.model)

        return LLMAgent(target, ctx.ws.paths, client_for, frozenset(llm_roles))

    return make


def llm_client(ctx: RunContext, model: str) -> LLMClient:
    """A client for `model` whose every call is logged and counted against --max-cost."""
    c = ctx.config
    settings = LLMSettings(
        model=model,
        api_base=c.api_base,
        timeout_s=c.llm_timeout_s,
        attempts=c.llm_attempts,
        backoff_s=c.llm_backoff_s,
        concurrency=c.llm_concurrency,
        input_cost_per_token=c.input_cost_per_token,
        output_cost_per_token=c.output_cost_per_token,
    )

    def refuse() -> str | None:
        stop = llm_budget_spent(ctx.state, c)
        return str(stop) if stop else None

    return LLMClient(
        settings,
        record=lambda call: ctx.record(LLMCalled(**call.model_dump())),
        refuse=refuse,
        sleep=ctx.sleep,
    )


def _advisor(ctx: RunContext) -> LLMAdvisor | None:
    """The LLM supervisor, when the run names a supervisor model."""
    model = ctx.config.supervisor_model
    if not model:
        return None
    return LLMAdvisor(
        llm_client(ctx, model),
        ctx.target,
        ctx.presets,
        ctx.ws.paths.learning,
        ctx.config.max_teams,
        skill_path=ctx.ws.paths.skill,
    )


def start_run(
    target_path: Path,
    workspace: Path | None = None,
    *,
    on_event: Callable[[Event, RunState], None] | None = None,
    runner: Runner | None = None,
    eval_config: EvalConfig | None = None,
    sleep: Callable[[float], None] = time.sleep,
    make_agent: Callable | None = None,
    skill: Path | None = None,
    **overrides,
) -> tuple[Path, Stop]:
    """Create a workspace for the target and run it; returns (workspace, why it stopped).
    `runner` and `make_agent` ((team, ctx) -> its agent) replace the target's runner and the
    configured agents (tests and benchmarks). `skill`: a SKILL.md of an earlier run on the same
    knob space, copied into the workspace (resume reads the copy) and given to every agent."""
    target = load_target(target_path)
    config = make_config(target=str(Path(target_path).resolve()), **overrides)
    sandbox.sweep()  # what runs killed with kill -9 left in the temporary folder
    loaded = load_skill(skill, target) if skill is not None else None
    presets = load_presets()
    for name in config.start_teams():
        if name not in presets:
            raise BadInput(f"team preset {name!r} not found (have: {', '.join(presets)})")
    make_agent = make_agent or _make_agent_factory(config, target, presets, loaded)
    owned, runner = runner is None, _runner_for(target, runner, config)
    try:
        ws = Workspace.create(workspace or default_workspace(target), config)
        with ws.lock():
            if loaded:
                write_atomic(ws.paths.skill, loaded.text)
            sealed = snapshot(target.root, ws.paths.target_copy, (ws.paths.root,))
            ctx = _context(
                ws,
                config,
                _judged(ws, config),
                presets,
                make_agent,
                runner,
                ws.load(),
                eval_config=eval_config,
                on_event=on_event,
                sleep=sleep,
                sealed=sealed,
            )
            _begin(ctx, skill_record(loaded, skill) if loaded and skill else None)
            return ws.paths.root, _loop(ctx)
    finally:
        if owned:  # a runner the caller gave is the caller's to end
            _close(runner)


def _judged(ws: Workspace, config: RunConfig) -> Target:
    """The Target the run judges with: its sealed snapshot, which candidates may not read."""
    target = load_target(ws.paths.target_copy)
    target.unreadable = hidden(ws.paths.sealed, Path(config.target))
    return target


def _context(
    ws: Workspace,
    config: RunConfig,
    target: Target,
    presets: dict,
    make_agent,
    runner: Runner,
    events: list[Event],
    *,
    eval_config,
    on_event,
    sleep,
    sealed: str,
) -> RunContext:
    """The loop's dependencies, its state folded from `events`, and the LLM supervisor if any;
    the runner refuses to evaluate once the target folder no longer has the digest `sealed`."""
    state = RunState.from_events(events, config.windows())
    ctx = RunContext(
        ws=ws,
        state=state,
        target=target,
        runner=runner,
        config=config,
        presets=presets,
        make_agent=make_agent,
        eval_config=eval_config,
        on_event=on_event,
        elapsed_base=state.elapsed_s,
        sleep=sleep,
        # none where an earlier run's skill already says where to start
        opening=0 if ws.paths.skill.is_file() else config.opening_for(len(target.knobs)),
    )
    seal = Seal(Path(config.target), ws.paths.target_copy, sealed, (ws.paths.root,))
    ctx.runner = Guarded(
        runner,
        seal,
        lambda files: ctx.record(
            TargetChanged(files=files, digest=digest(files_of(seal.original, seal.leave_out)))
        ),
    )
    ctx.advisor = _advisor(ctx)
    return ctx


def _begin(ctx: RunContext, skill: dict | None = None) -> None:
    """Record the run's start and its first teams (also when a crash cut `start` short)."""
    config, target = ctx.config, ctx.target
    if ctx.state.seq == 0:
        assert isinstance(ctx.runner, Guarded)  # _context guards the runner with the seal
        ctx.record(
            RunStarted(
                target=target.name,
                target_path=config.target,
                model=config.model,
                config=config.model_dump(mode="json"),
                skill=skill,
                target_digest=ctx.runner.seal.expected,
            )
        )
    for i, name in enumerate(config.start_teams()):
        p = ctx.presets[name]
        if f"{p.name}-{i + 1}" not in ctx.state.teams:
            ctx.record(
                TeamSpawned(
                    team=f"{p.name}-{i + 1}",
                    preset=p.name,
                    strategy=p.strategy,
                    directive=p.directive,
                    share=p.share,
                    seed=config.seed + i,
                    roles=[r.name for r in p.roles],
                )
            )
    for team in ctx.state.teams.values():
        write_notes(team, ctx)
    learning.update(ctx.ws.paths.learning, ctx.state, target)
    ctx.ws.commit(f"run started on {target.name}: teams {', '.join(ctx.state.teams)}")


def resume_run(
    workspace: Path,
    *,
    on_event: Callable[[Event, RunState], None] | None = None,
    runner: Runner | None = None,
    eval_config: EvalConfig | None = None,
    sleep: Callable[[float], None] = time.sleep,
    accept_target_change: bool = False,
    **budgets,
) -> tuple[Path, Stop]:
    """Continue a stopped or crashed run; budgets given are totals for the whole run. A target
    folder that changed since the run started is refused (BadInput) unless
    `accept_target_change`: then it is the run's target from here on (target_changed)."""
    ws = Workspace.open(workspace)
    sandbox.sweep()  # a crashed run's leftovers in the temporary folder (its candidates' folders)
    with ws.lock():
        config = ws.config()
        changed = {k: v for k, v in budgets.items() if v is not None}
        if changed:
            config = make_config(**(config.model_dump() | changed))
            ws.save_config(config)
        target = load_target(config.target)
        presets = load_presets()
        skill = load_skill(ws.paths.skill, target) if ws.paths.skill.is_file() else None
        make_agent = _make_agent_factory(config, target, presets, skill)
        events = ws.load()
        # Lines eat did not write, told once in the log (a later resume tells only new ones).
        if tampering := ws.untold_tampering(events):
            events.append(ws.append(tampering))
        if events and events[0].type != "run_started":
            raise BadInput(f"{ws.paths.history}: the log does not begin with run_started")
        sealed, change = _reseal(
            ws, config, recorded_digest(events), bool(events), accept_target_change
        )
        owned, runner = runner is None, _runner_for(target, runner, config)
        try:
            ctx = _context(
                ws,
                config,
                _judged(ws, config),
                presets,
                make_agent,
                runner,
                events,
                eval_config=eval_config,
                on_event=on_event,
                sleep=sleep,
                sealed=sealed,
            )
            if change:
                ctx.record(change)
            # EVOLUTION.md anew (a crash may have cut it short); what follows appends to it.
            ws.render_evolution(events)
            recovered = _recover(ctx)
            if ctx.state.evaluations == 0:
                _begin(ctx)  # in case `eat start` died before it had recorded its teams
            ctx.record(RunResumed(recovered=recovered))
            if ctx.state.best:
                ws.set_best(ctx.state.best.team, ctx.state.best.cid)
            ws.commit("run resumed" + (f", recovered {', '.join(recovered)}" if recovered else ""))
            return ws.paths.root, _loop(ctx)
        finally:
            if owned:
                _close(runner)


def _reseal(
    ws: Workspace, config: RunConfig, expected: str | None, started: bool, accept: bool
) -> tuple[str, TargetChanged | None]:
    """The digest a resumed run holds its target to, with its snapshot in place, and the
    target_changed event to record, if any (a change accepted; a log older than seals)."""
    original, copy, out = Path(config.target), ws.paths.target_copy, (ws.paths.root,)
    now = files_of(original, out)
    kept = files_of(copy) if copy.is_dir() else {}
    if expected is not None and digest(now) == expected:
        if digest(kept) != expected:  # the copy is gone or was written to: made again
            snapshot(original, copy, out)
        return expected, None
    if expected is not None and not accept:
        files = differences(now, kept) if digest(kept) == expected else ["its contents"]
        raise BadInput(
            f"{original}: the target changed since the run started "
            f"({', '.join(files[:5])}); restore it, or resume with "
            "--accept-target-change to go on with it as it is now"
        )
    sealed = snapshot(original, copy, out)
    if not started:
        return sealed, None  # `eat start` died before run_started: _begin records it
    return sealed, TargetChanged(
        files=differences(kept, now) if expected else [], digest=sealed, accepted=True
    )


def _recover(ctx: RunContext) -> list[str]:
    """Log evaluations whose files are complete but whose event a crash lost; drop the rest."""
    recovered = []
    for folder in sorted(ctx.ws.paths.teams.glob("*/candidates/*")):
        cid = folder.name
        if cid in ctx.state.candidates:
            continue
        result, meta = folder / "result.json", folder / "meta.json"
        if result.is_file() and meta.is_file() and cid == ctx.state.next_candidate_id():
            ev = Evaluation.model_validate_json(result.read_text())
            ctx.record(evaluated_event(cid, json.loads(meta.read_text()), ev))
            recovered.append(cid)
        else:
            shutil.rmtree(folder)  # an evaluation the crash cut short: it never finished
    return recovered


def _held_out(ctx: RunContext) -> None:
    """Grade the run's best on the target's held-out split, which no agent was graded on."""
    grader, best = ctx.target.grader, ctx.state.best
    if not (grader and grader.held_out and best):
        return
    source = ctx.ws.paths.source(best.team, best.cid, ctx.target.language).read_text()
    try:
        ev = ctx.runner.evaluate(ctx.target, source, config=ctx.eval_config, split=grader.held_out)  # type: ignore[call-arg]  # a program runner's own keyword
    except EatError as e:  # the target's grader failed on its own split: said, not fatal
        ctx.record(
            HeldOutGraded(candidate=best.cid, split=grader.held_out, status=e.code, message=str(e))
        )
        return
    ctx.record(
        HeldOutGraded(
            candidate=best.cid,
            split=grader.held_out,
            status=ev.status,
            score=ev.score.median if ev.score else None,
            baseline_score=ev.baseline_score.median if ev.baseline_score else None,
            gain=ev.speedup,
            message=ev.message[:300],
        )
    )


def _loop(ctx: RunContext) -> Stop:
    steering = ctx.steering = Steering(ctx.ws.paths)
    try:
        try:
            steering.take(ctx, everything=True)  # edits and messages left while no run went
            steering.start()
            stop = supervisor.run(ctx)
        except KeyboardInterrupt:
            stop = Stop(INTERRUPTED, "interrupted by the user")
        finally:
            steering.stop()
        if stop.code != INTERRUPTED:
            _held_out(ctx)
        ctx.record(RunStopped(reason=stop.message, code=stop.code))
        if ctx.state.best:  # best/ anew from the log: what is there now is never trusted
            ctx.ws.set_best(ctx.state.best.team, ctx.state.best.cid)
        learning.update(ctx.ws.paths.learning, ctx.state, ctx.target)
        ctx.ws.commit(f"run stopped: {stop}")
        ctx.ws.pack()
    finally:
        ctx.ws.flush()
    return stop
