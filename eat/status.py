"""What `eat status` reports, kept apart from eat.run: reading a run needs neither LangGraph nor
the runners, and a status called while a run goes on answers in a fraction of a second."""

from __future__ import annotations

from pathlib import Path

from eat.errors import EatError
from eat.events import HeldOutGraded
from eat.state import RunState
from eat.target import Target, load_target
from eat.workspace import Workspace, tampered


def run_status(workspace: Path) -> dict:
    """What `eat status --json` prints: read-only, safe while the run goes on."""
    ws = Workspace.open(workspace)
    config = ws.config()
    log = ws.read_log()
    events = log.events
    state = RunState.from_events(events, config.windows())
    best = state.best
    last = next(
        (e for e in reversed(events) if e.type in ("run_stopped", "run_resumed", "run_started")),
        None,
    )
    stopped = last if last and last.type == "run_stopped" else None
    started = events[0] if events and events[0].type == "run_started" else None
    target = sealed_target(ws)
    grader = target.grader if target else None
    held = next((e for e in reversed(events) if isinstance(e, HeldOutGraded)), None)
    return {
        "workspace": str(ws.paths.root),
        "target": state.target,
        "running": ws.is_locked(),
        "tampered": tampered(log.bad),  # the log's first bad line, or None
        "stopped": (stopped.code or stopped.reason) if stopped else None,
        "stop_reason": stopped.reason if stopped else None,
        "evaluations": state.spent_evals,
        "candidates": len(state.candidates),
        "copies": state.copies,  # candidates not evaluated: their program was
        "retimes": state.retimes,
        "max_evals": config.max_evals,
        "failed_attempts": state.failed_attempts,
        "elapsed_s": round(state.elapsed_s, 1),
        "skill": started.skill if started else None,
        "metric": grader.metric if grader else "speedup",
        "goal": grader.goal if grader else "max",
        # the headline, whatever the target: a kernel's speedup, a program's gain
        "best_gain": best.estimate if best else None,
        "best_speedup": best.estimate if best and not grader else None,
        "best_score": best.score if best and grader else None,
        "best_candidate": best.cid if best else None,
        "best_gflops": best.gflops if best else None,
        "vendor_gflops": best.vendor_gflops if best else None,
        "vendor": target.vendor_name if target else None,
        "teams": [
            {
                "id": t.id,
                "preset": t.preset,
                "strategy": t.strategy,
                "state": t.state,
                "evaluations": t.evaluated,
                "best_gain": t.best_estimate,
                "best_candidate": t.best.cid if t.best else None,
                "best_speedup": t.best_estimate if not grader else None,
                "share": t.share,
                "near_top": t.hits,
                "pace": round(t.pace, 3),
                "tokens": t.usage.prompt + t.usage.completion,
                "cost_usd": round(t.usage.cost_usd, 6),
            }
            for t in state.teams.values()
        ],
        "plateaus": state.plateaus,
        "restructures": state.restructures,
        "tokens": {
            "prompt": state.usage.prompt,
            "completion": state.usage.completion,
            "cached": state.usage.cached,
        },
        "cost_usd": round(state.usage.cost_usd, 6),
        "llm_calls": state.usage.calls,
        "max_llm_calls": config.llm_call_cap(),
        "llm_failed_calls": state.usage.failed_calls,
        "llm_unpriced_calls": state.usage.unpriced_calls,
    } | (
        {
            "held_out": {"candidate": held.candidate, "split": held.split, "status": held.status}
            | (
                {"score": held.score, "baseline_score": held.baseline_score, "gain": held.gain}
                if held.status == "ok"
                else {"message": held.message}
            )
        }
        if held
        else {}
    )


def sealed_target(ws: Workspace) -> Target | None:
    """The run's target as sealed at its start (None: none readable)."""
    try:
        return load_target(ws.paths.target_copy)
    except (EatError, OSError):  # a status never fails on the snapshot: it reads the log
        return None
