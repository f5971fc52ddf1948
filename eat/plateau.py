"""Plateau detection: named, noise-aware decisions over a RunState.

An improvement counts only when it beats the reference by more than the elite's measured
spread (RunState.threshold); counters live in RunState, so detection is O(teams).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from eat.config import PlateauConfig
from eat.events import PlateauDetected
from eat.state import Candidate, RunState, Team


@dataclass
class Plateau:
    scope: str                 # "run" | "team"
    kind: str                  # stalled | failing | exhausted | converged | repeating
    team: str | None
    window: int
    best: float | None
    threshold: float
    evidence: list[str] = field(default_factory=list)
    message: str = ""

    def event(self) -> PlateauDetected:
        return PlateauDetected(scope=self.scope, team=self.team, kind=self.kind,
                               window=self.window, best=self.best, threshold=self.threshold,
                               evidence=self.evidence, message=self.message)


def _due(state: RunState, key: tuple, counter: int, window: int) -> bool:
    """Reached `window`, and not already declared in this stretch unless `window` more went
    by (RunState clears a declaration when its counter resets)."""
    last = state.flagged.get(key)
    return counter >= window and (last is None or counter >= last + window)


def team_failing(state: RunState, team: Team, cfg: PlateauConfig) -> Plateau | None:
    """Repeated failures: the team's last `fail_window` candidates all failed."""
    if not _due(state, ("team", team.id, "failing"), team.failures, cfg.fail_window):
        return None
    bad = state.recent_of(team.id, team.failures)
    statuses = sorted({c.status for c in bad})
    return Plateau("team", "failing", team.id, team.failures, team.best_estimate,
                   state.threshold(), [c.cid for c in bad],
                   f"{team.failures} candidates in a row failed ({', '.join(statuses)})")


def team_repeating(state: RunState, team: Team, cfg: PlateauConfig) -> Plateau | None:
    """The team's last `repeat_window` attempts repeated candidates already evaluated."""
    if not _due(state, ("team", team.id, "repeating"), team.repeats, cfg.repeat_window):
        return None
    return Plateau("team", "repeating", team.id, team.repeats, team.best_estimate,
                   state.threshold(), list(team.repeated),
                   f"{team.repeats} attempts in a row repeated known candidates "
                   f"({', '.join(team.repeated)})")


def team_stalled(state: RunState, team: Team, cfg: PlateauConfig) -> Plateau | None:
    """No gain above the noise threshold in the team's last `team_window` evaluations."""
    if not _due(state, ("team", team.id, "stalled"), team.since_improvement, cfg.team_window):
        return None
    tried = state.recent_of(team.id, team.since_improvement)
    best = f"{team.best_estimate:.2f}x" if team.best_estimate else "none"
    return Plateau("team", "stalled", team.id, team.since_improvement, team.best_estimate,
                   state.threshold(), ([team.best.cid] if team.best else []) +
                   [c.cid for c in tried[:6]],
                   f"{team.since_improvement} candidates without beating its best ({best}) "
                   f"by more than {state.threshold():.1%}")


def team_exhausted(state: RunState, team: Team) -> Plateau | None:
    """Low diversity: the team's strategy has nothing left to try that nobody tried."""
    if not team.exhausted or ("team", team.id, "exhausted") in state.flagged:
        return None
    return Plateau("team", "exhausted", team.id, team.evals, team.best_estimate,
                   state.threshold(), [team.best.cid] if team.best else [],
                   f"strategy {team.strategy} has no untried candidate left")


def teams_converged(state: RunState) -> list[Plateau]:
    """Low diversity: two active teams whose bests are the same configuration."""
    seen: dict[str, Team] = {}
    found = []
    for team in state.active_teams():
        if not team.best or not _due(state, ("team", team.id, "converged"),
                                     team.since_improvement, 2):
            continue
        key = repr(sorted(team.best.knobs.items())) or team.best.source_hash
        if key in seen:
            other = seen[key]
            found.append(Plateau("team", "converged", team.id, team.since_improvement,
                                 team.best_estimate, state.threshold(),
                                 [team.best.cid, other.best.cid],
                                 f"its best is the same configuration as team {other.id}'s"))
        else:
            seen[key] = team
    return found


def run_stalled(state: RunState, cfg: PlateauConfig) -> Plateau | None:
    """No gain above the noise threshold anywhere in the run's last `run_window` evaluations."""
    if state.best is None or not _due(state, ("run", None, "stalled"), state.since_improvement,
                                       cfg.run_window):
        return None
    tried = state.recent_of(None, state.since_improvement)
    return Plateau("run", "stalled", None, state.since_improvement, state.best_speedup,
                   state.threshold(), [state.best.cid] + [c.cid for c in tried[:6]],
                   f"{state.since_improvement} candidates without beating "
                   f"{state.best_speedup:.2f}x ({state.best.cid}) by more than "
                   f"{state.threshold():.1%}")


def detect_plateaus(state: RunState, cfg: PlateauConfig) -> list[Plateau]:
    """Every plateau in the run now, team-level first."""
    found: list[Plateau] = []
    for team in state.active_teams():
        p = team_repeating(state, team, cfg) or team_failing(state, team, cfg) or \
            team_exhausted(state, team) or team_stalled(state, team, cfg)
        if p:
            found.append(p)
    flagged = {p.team for p in found}
    found += [p for p in teams_converged(state) if p.team not in flagged]
    if run := run_stalled(state, cfg):
        found.append(run)
    return found


def elite_to_retime(state: RunState, plateaus: list[Plateau]) -> Candidate | None:
    """The elite a stall verdict rests on, if it has not been re-timed yet."""
    if state.best is None or state.best.cid in state.retimed:
        return None
    if any(p.kind == "stalled" for p in plateaus):
        return state.best
    return None
