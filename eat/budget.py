"""Why a run stops: every budget and the no-progress rule, decided in one place.

Budgets are totals over every session of a run. Each has a default, so no configuration lets
LLM calls or attempts grow without evaluations: a model that repeats itself ends the run with
`no_progress` after a bounded number of attempts, whatever else is set.
"""

from __future__ import annotations

from pydantic.dataclasses import dataclass

from eat.config import RunConfig
from eat.state import RunState

# Stop codes whose run failed (exit 1); the others ended as asked (exit 0), or by Ctrl-C (130).
FAILED = frozenset({"no_progress", "llm_unusable", "target_changed"})
INTERRUPTED = "interrupted"


@dataclass(frozen=True)
class Stop:
    """Why a run stopped: a stable code (`max_evals`, `no_progress`, ...) and one line for
    people."""

    code: str
    message: str

    @property
    def exit_code(self) -> int:
        return 130 if self.code == INTERRUPTED else 1 if self.code in FAILED else 0

    def __str__(self) -> str:
        return f"{self.code}: {self.message}"


def llm_budget_spent(state: RunState, config: RunConfig) -> Stop | None:
    """Why no LLM call may start now (the cost cap or the call cap), or None."""
    if config.max_cost_usd is not None and state.usage.cost_usd >= config.max_cost_usd:
        return Stop(
            "max_cost", f"LLM spend reached ${state.usage.cost_usd:.4f} of ${config.max_cost_usd:g}"
        )
    cap = config.llm_call_cap()
    if state.usage.calls >= cap:
        return Stop("max_llm_calls", f"{state.usage.calls} LLM calls of {cap} allowed")
    return None


def no_progress(state: RunState, config: RunConfig) -> Stop | None:
    """The run made `config.no_progress` attempts in a row without a new evaluation."""
    if state.attempts_since_eval < config.no_progress:
        return None
    repeated = sorted(state.repeated_since_eval.items(), key=lambda kv: -kv[1])
    named = ", ".join(f"{cid} ({_what(state, cid)}) {n}x" for cid, n in repeated[:4])
    return Stop(
        "no_progress",
        f"{state.attempts_since_eval} attempts in a row without a new "
        "evaluation" + (f"; the teams repeated {named}" if named else ""),
    )


def _what(state: RunState, cid: str) -> str:
    c = state.candidates.get(cid)
    if c is None:
        return "?"
    return f"{c.estimate:.2f}x" if c.estimate is not None else c.status


def why_stop(state: RunState, config: RunConfig, elapsed_s: float) -> Stop | None:
    """Why the run must stop now, or None; the loop asks nothing else."""
    if state.spent_evals >= config.max_evals:
        free = f"; {state.copies} copies of an evaluated program, which spent none"
        return Stop(
            "max_evals",
            f"{state.spent_evals} evaluations of {config.max_evals} ({state.evaluations} "
            f"candidates, {state.retimes} re-times{free if state.copies else ''})",
        )
    if config.max_time_s is not None and elapsed_s >= config.max_time_s:
        return Stop("max_time", f"{elapsed_s:.0f} s of {config.max_time_s:g} s")
    if stop := llm_budget_spent(state, config):
        return stop
    if state.checks >= config.check_cap():
        return Stop("max_checks", f"{state.checks} checks of {config.check_cap()} allowed")
    attempts, cap = len(state.candidates) + state.failed_attempts, config.attempt_cap()
    if attempts >= cap:
        return Stop(
            "max_attempts",
            f"{attempts} attempts of {cap} allowed ({state.failed_attempts} gave no candidate)",
        )
    return no_progress(state, config)
