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
from eat.state import Candidate, RunState, Team

OPS = ("spawn", "retire", "fork", "redirect", "recompose", "rebalance")


@dataclass
class Diagnosis:
    plateau: Plateau
    cause: str
    remedy: str                # one of OPS
    around: str | None = None  # candidate a redirect or fork should search around


@dataclass
class Operation:
    op: str
    reason: str
    evidence: list[str]
    team: str | None = None    # the team changed (for spawn/fork: filled when applied)
    params: dict[str, Any] = field(default_factory=dict)
    scope: str = "team"


def distance(a: Candidate, b: Candidate) -> int:
    """How many knobs two candidates differ in (sources without knobs: 0 if equal, else 2)."""
    if not a.knobs and not b.knobs:
        return 0 if a.source_hash == b.source_hash else 2
    return sum(a.knobs.get(k) != b.knobs.get(k) for k in a.knobs.keys() | b.knobs.keys())


def _far(c: Candidate, elite: Candidate) -> bool:
    """In another region: differs from the elite in at least half its knobs (and two)."""
    return distance(c, elite) >= max(2, (len(elite.knobs) + 1) // 2)


def diagnose(p: Plateau, state: RunState) -> Diagnosis:
    """Why a plateau happened, and the remedy the rules prefer."""
    team = state.teams.get(p.team or "")
    if p.kind == "repeating":
        again = team is not None and team.redirects > 0
        return Diagnosis(p, f"team {p.team} keeps repeating candidates already evaluated: "
                         f"{p.message}" + ("; it was steered before" if again else ""),
                         "retire" if again else "redirect")
    if p.kind == "failing":
        again = team is not None and team.redirects > 0
        return Diagnosis(p, f"team {p.team} keeps producing broken candidates: {p.message}",
                         "retire" if again else "redirect")
    if p.kind == "exhausted":
        return Diagnosis(p, f"team {p.team} has searched everything its strategy reaches from "
                         "where it stands: a local optimum", "fork")
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
                         f"({p.message}): try combined steps around its best", "redirect",
                         around=team.best.cid if team.best else None)
    return Diagnosis(p, f"the whole run stalled: {p.message}", "fork")


def _new_team_id(state: RunState, preset: str) -> str:
    return f"{preset}-{len(state.teams) + 1}"


def _weakest(state: RunState, exclude: set[str], young: int) -> Team | None:
    """The active team with the weakest best, among those that had `young` turns to show one."""
    teams = [t for t in state.active_teams() if t.id not in exclude]
    return min(teams, key=lambda t: (t.evals < young, t.best_estimate or 0.0), default=None)


def _fork_source(state: RunState, forked: set[str]) -> tuple[Candidate, str] | None:
    """Where to start a new team, and its preset: a refiner around the elite (combined steps
    out of a one-step optimum), else a coordinate climb from the best candidate in another
    region (a second start for hill climbing); never from where an active team started."""
    taken = forked | {t.start_from for t in state.active_teams()}
    elite = state.best
    if elite is None:
        return None
    if elite.cid not in taken:
        return elite, "refiner"
    pool = {c.cid: c for c in state.leaders + [t.best for t in state.teams.values() if t.best]
            + list(state.recent)}
    others = [c for c in pool.values() if c.estimate is not None and c.cid not in taken
              and _far(c, elite)]
    best = max(others, key=lambda c: c.estimate, default=None)
    return (best, "coordinate") if best else None


def decide(diagnoses: list[Diagnosis], state: RunState, max_teams: int,
           young: int = 4, spawn_cap: int = 10**6) -> list[Operation]:
    """Operations for a step's diagnoses, at most one decision per team; one team stays active.

    A fork starts a refiner around the elite, or, when one already started there, a coordinate
    climb from the best candidate of another region; with neither, a new explorer is spawned.
    A team-level fork or spawn replaces the stalled team; a run-level fork from the elite also
    doubles the budget share of the team that found it. Making room retires the weakest team
    that has had `young` turns, before any newer one.
    """
    ops: list[Operation] = []
    touched: set[str] = set()
    forked: set[str] = set()
    active = len(state.active_teams())
    room = spawn_cap - len(state.teams)   # teams that may still be spawned in this run
    elite = state.best
    for d in diagnoses:
        p = d.plateau
        if p.team in touched:
            continue
        remedy, source, preset = d.remedy, None, "explorer"
        if remedy in ("fork", "spawn") and room < 1:
            if p.team is None:
                continue
            remedy = "redirect" if state.teams[p.team].redirects == 0 else "retire"
        if remedy == "fork":
            found = _fork_source(state, forked)
            remedy = "fork" if found else "spawn"
            source, preset = found or (None, "explorer")
        if remedy == "redirect" and p.team:
            team = state.teams[p.team]
            if d.around:
                strategy, start = "refiner", d.around
            else:
                strategy = "explorer" if team.strategy != "explorer" else "refiner"
                start = elite.cid if elite else None
            directive = (f"Your {team.strategy} search stopped paying off; switch to "
                         f"{strategy} search" + (f" around {start}." if start else "."))
            if p.kind == "repeating":
                directive = (f"Your last attempts repeated {', '.join(p.evidence)}, already "
                             "evaluated: nothing is learned from a repeat. Try a different kind "
                             f"of change ({strategy} search)" +
                             (f" starting from {start}." if start else "."))
            ops.append(Operation("redirect", d.cause, p.evidence, team=p.team, params={
                "strategy": strategy, "start_from": start, "directive": directive}))
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
                forked.add(source.cid)
                how = ("changing one or two parameters at a time" if preset == "refiner"
                       else "climbing one parameter at a time: another region than the elite's")
                ops.append(Operation("fork", d.cause, p.evidence + [source.cid], scope=p.scope,
                                     params={"preset": preset, "start_from": source.cid,
                                             "directive": f"Restart from {source.cid} "
                                             f"({source.estimate:.2f}x), {how}."}))
            else:
                ops.append(Operation("spawn", d.cause, p.evidence, scope=p.scope,
                                     params={"preset": "explorer"}))
            active += 1
            room -= 1
            if p.team is None and remedy == "fork" and source is elite:
                shares = {t.id: (2.0 if t.id == elite.team else 1.0)
                          for t in state.active_teams() if t.id not in touched}
                if any(state.teams[t].share != v for t, v in shares.items()):
                    ops.append(Operation("rebalance", f"{elite.team} found the elite "
                                         f"{elite.cid}: give it twice the budget share",
                                         [elite.cid], scope="run", params={"shares": shares}))
                continue
        if p.team and remedy in ("spawn", "fork", "retire"):
            if active <= 1 and remedy == "retire" and room < 1:
                continue  # the last team stays; the no-progress rule ends a run that is stuck
            ops.append(Operation("retire", ("replaced: " if remedy != "retire" else "") +
                                 d.cause, p.evidence, team=p.team))
            touched.add(p.team)
            active -= 1
            if active < 1:
                ops.append(Operation("spawn", "no team would be left active", p.evidence,
                                     params={"preset": "explorer"}))
                active += 1
                room -= 1
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
