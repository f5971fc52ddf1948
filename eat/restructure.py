"""Diagnosis and restructuring: named rule-based decisions, and how each is scored later.

diagnose(plateau) says why progress stopped; decide(diagnoses) turns that into operations
(spawn, retire, fork, redirect, recompose, rebalance); operation_events() turns an operation
into the events that record it; score() judges an operation once enough evaluations followed.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from eat.events import Event, RestructureScored, Restructured, TeamSpawned
from eat.plateau import Plateau
from eat.state import RunState, Team

OPS = ("spawn", "retire", "fork", "redirect", "recompose", "rebalance")


@dataclass
class Diagnosis:
    plateau: Plateau
    cause: str
    remedy: str                # one of OPS, or "none"


@dataclass
class Operation:
    op: str
    reason: str
    evidence: list[str]
    team: str | None = None    # the team changed (for spawn/fork: filled when applied)
    params: dict[str, Any] = field(default_factory=dict)
    scope: str = "team"


def diagnose(p: Plateau, state: RunState) -> Diagnosis:
    """Why a plateau happened, and the remedy the rules prefer."""
    team = state.teams.get(p.team or "")
    if p.kind == "failing":
        again = team is not None and team.redirects > 0
        return Diagnosis(p, f"team {p.team} keeps producing broken candidates: {p.message}",
                         "retire" if again else "redirect")
    if p.kind == "exhausted":
        return Diagnosis(p, f"team {p.team} has searched everything its strategy reaches",
                         "retire")
    if p.kind == "converged":
        return Diagnosis(p, f"team {p.team} duplicates another team's search: {p.message}",
                         "redirect")
    if p.scope == "team" and team:
        behind = state.best_speedup and team.best_estimate and \
            team.best_estimate * (1 + state.threshold()) < state.best_speedup
        if behind or team.best_estimate is None:
            return Diagnosis(p, f"team {p.team} is stuck below the run's best "
                             f"({p.message}); its region looks like a local optimum", "fork")
        return Diagnosis(p, f"team {p.team} leads but single steps no longer help "
                         f"({p.message})", "redirect")
    return Diagnosis(p, f"the whole run stalled: {p.message}", "fork")


def _new_team_id(state: RunState, preset: str) -> str:
    return f"{preset}-{len(state.teams) + 1}"


def _weakest(state: RunState, exclude: set[str], young: int) -> Team | None:
    """The active team with the weakest best, among those that had `young` turns to show one."""
    teams = [t for t in state.active_teams() if t.id not in exclude]
    return min(teams, key=lambda t: (t.evals < young, t.best_estimate or 0.0), default=None)


def _forked_already(state: RunState, cid: str) -> bool:
    return any(t.start_from == cid and t.strategy == "refiner" for t in state.active_teams())


def decide(diagnoses: list[Diagnosis], state: RunState, max_teams: int,
           young: int = 4) -> list[Operation]:
    """Operations for a step's diagnoses, at most one decision per team; one team stays active.

    A fork restarts a refiner team around the elite; when one already searches there, a new
    explorer is spawned instead. A team-level fork or spawn replaces the stalled team; a
    run-level fork also doubles the budget share of the team that found the elite. Making room
    retires the weakest team that has had `young` turns, before any newer one.
    """
    ops: list[Operation] = []
    touched: set[str] = set()
    active = len(state.active_teams())
    elite = state.best
    for d in diagnoses:
        p = d.plateau
        if p.team in touched:
            continue
        remedy = d.remedy
        if remedy == "fork" and (elite is None or _forked_already(state, elite.cid)):
            remedy = "spawn"
        if remedy == "redirect" and p.team:
            team = state.teams[p.team]
            strategy = "explorer" if team.strategy != "explorer" else "refiner"
            ops.append(Operation("redirect", d.cause, p.evidence, team=p.team, params={
                "strategy": strategy, "start_from": elite.cid if elite else None,
                "directive": f"Your {team.strategy} search stopped paying off; switch to "
                             f"{strategy} search" + (f" around {elite.cid}." if elite else ".")}))
            touched.add(p.team)
            continue
        if remedy in ("spawn", "fork"):
            # A team-level replacement retires the stalled team below, freeing its place.
            if active >= max_teams + (p.team is not None):
                worst = _weakest(state, touched | {p.team} | ({elite.team} if elite else set()),
                                 young)
                if worst is None:
                    continue
                ops.append(Operation("retire", f"making room for a new team: {worst.id} has "
                                     "the weakest best", p.evidence, team=worst.id))
                touched.add(worst.id)
                active -= 1
            if remedy == "fork":
                ops.append(Operation("fork", d.cause, p.evidence, scope=p.scope, params={
                    "preset": "refiner", "start_from": elite.cid,
                    "directive": f"Restart around {elite.cid} ({elite.estimate:.2f}x), "
                                 "changing one or two parameters at a time."}))
            else:
                ops.append(Operation("spawn", d.cause, p.evidence, scope=p.scope,
                                     params={"preset": "explorer"}))
            active += 1
            if p.team is None and remedy == "fork":
                shares = {t.id: (2.0 if t.id == elite.team else 1.0)
                          for t in state.active_teams() if t.id not in touched}
                ops.append(Operation("rebalance", f"{elite.team} found the elite {elite.cid}: "
                                     "give it twice the budget share", [elite.cid],
                                     scope="run", params={"shares": shares}))
                continue
        if p.team and remedy in ("spawn", "fork", "retire"):
            ops.append(Operation("retire", ("replaced: " if remedy != "retire" else "") +
                                 d.cause, p.evidence, team=p.team))
            touched.add(p.team)
            active -= 1
            if active < 1:
                ops.append(Operation("spawn", "no team would be left active", p.evidence,
                                     params={"preset": "explorer"}))
                active += 1
    return ops


def operation_events(op: Operation, state: RunState, key: str, seed: int,
                     presets: dict[str, Any]) -> list[Event]:
    """The events that record `op` (a spawn or fork also spawns its team)."""
    params = {**op.params, "key": key}
    events: list[Event] = []
    team = op.team
    if op.op in ("spawn", "fork"):
        preset = presets[params["preset"]]
        team = _new_team_id(state, preset.name)
        events.append(TeamSpawned(team=team, preset=preset.name, strategy=preset.strategy,
                                  directive=params.get("directive", preset.directive),
                                  share=preset.share, start_from=params.get("start_from"),
                                  seed=seed))
    events.append(Restructured(op=op.op, team=team, reason=op.reason, evidence=op.evidence,
                               params=params, best_before=state.best_speedup, scope=op.scope))
    return events


def score(state: RunState, after: int) -> list[RestructureScored]:
    """Verdicts on restructures followed by `after` evaluations: did they beat the old best?"""
    verdicts = []
    threshold = state.threshold()
    for p in state.pending:
        if state.evaluations - p.at < after:
            continue
        team = state.teams.get(p.team or "")
        if p.op in ("spawn", "fork", "redirect", "recompose") and team and team.best:
            found = team.best if team.best.seq > p.seq else None
        else:  # retire and rebalance act on the whole run
            found = state.best if state.best and state.best.seq > p.seq else None
        gain = found.estimate if found else None
        helped = gain is not None and (p.best_before is None or
                                       gain > p.best_before * (1 + threshold))
        verdicts.append(RestructureScored(restructure=p.seq, helped=helped,
                                          best_before=p.best_before,
                                          best_after=state.best_speedup,
                                          by=found.cid if helped and found else None))
    return verdicts
