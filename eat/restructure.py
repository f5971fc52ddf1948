"""Diagnosis and restructuring: named rules, and how each decision is scored and fed back.

diagnose(plateau) says why progress stopped and names a remedy; decide() applies the rule of
each remedy (RULES); operation_events() records an operation; score() judges a decision later,
only by the candidates of the team it created or changed; arm_values() turns those verdicts
into the preferences the next restarts are chosen by (a bandit over restart options).

Teams are judged by what their strategy is for: local searches (coordinate, refiner) by gain
per evaluation, so a stalled or exhausted one is replaced; global ones (explorer, model) by the
regions they open, so they are never retired for being behind: their candidates are where the
next local searches start.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import field
from typing import Any

from pydantic.dataclasses import dataclass

from eat.events import Op, Restructured, RestructureScored, Scope, TeamSpawned, speedup_text
from eat.plateau import Plateau, climbed, is_local, optima, promising_regions
from eat.state import Candidate, RunState, known_estimate

# Restart options, and how much the rules trust each before this run has scored any: a model
# or a climb in a region nobody climbed, a model of the whole space, combined steps at an
# elite no local search has worked on, a fresh explorer.
PRIORS = {
    "fork model": 0.6,
    "fork coordinate": 0.55,
    "spawn model": 0.5,
    "fork refiner": 0.45,
    "spawn explorer": 0.3,
}
CURIOSITY = 0.5  # weight of the bandit's exploration term against the arms' scores
# How a team forked at a candidate searches from there, as its directive says.
HOW = {
    "refiner": "changing one or two parameters at a time",
    "coordinate": "climbing one parameter at a time, in a region no team has climbed",
    "model": "searching its region, which no team has climbed, with a model of every measurement",
}


@dataclass
class Diagnosis:
    plateau: Plateau
    cause: str
    remedy: str  # a key of RULES


@dataclass
class Operation:
    op: Op
    reason: str
    evidence: list[str]
    team: str | None = None  # the team changed (for spawn/fork: filled when applied)
    params: dict[str, Any] = field(default_factory=dict)
    scope: Scope = "team"


@dataclass
class Limits:
    """What bounds one step's decisions."""

    max_teams: int  # teams active at once
    spawn_cap: int = 10**6  # teams spawned over the run
    presets: frozenset[str] = frozenset({"coordinate", "explorer", "refiner", "model"})
    llm: bool = False  # teams are LLM agents (roles matter)


# -- diagnosis -----------------------------------------------------------------------------


def diagnose(p: Plateau, state: RunState) -> Diagnosis:
    """Why a plateau happened, and the remedy the rules prefer."""
    team = state.teams.get(p.team or "")
    steered = team is not None and team.redirects > 0
    if p.kind == "opened":
        return Diagnosis(p, f"exploration opened a region: {p.message}", "climb")
    if p.kind == "repeating":
        return Diagnosis(
            p,
            f"team {p.team} keeps repeating candidates already evaluated: "
            f"{p.message}" + ("; it was steered before" if steered else ""),
            "retire" if steered else "redirect",
        )
    if p.kind == "failing":
        return Diagnosis(
            p,
            f"team {p.team} keeps producing broken candidates: {p.message}",
            "retire" if steered else "recompose",
        )
    if team is None:
        return Diagnosis(p, f"the whole run stalled: {p.message}", "restart")
    if p.kind == "converged":
        return Diagnosis(
            p,
            f"team {p.team} duplicates another team's search: {p.message}",
            "restart" if is_local(team) else "redirect",
        )
    if is_local(team):
        if p.kind == "stalled" and state.best is not None and state.best.team == team.id:
            # It holds the run's best: its region is the best known, so it keeps climbing
            # (until it has nothing left to try) while combined steps try the elite.
            return Diagnosis(
                p,
                f"team {p.team} leads but single steps no longer help "
                f"({p.message}): try combined steps around its best",
                "polish",
            )
        where = (
            "has searched everything its steps reach from where it stands"
            if p.kind == "exhausted"
            else f"stopped gaining ({p.message})"
        )
        return Diagnosis(p, f"team {p.team} {where}: a local optimum", "restart")
    if p.kind == "exhausted":
        return Diagnosis(p, f"team {p.team} has nothing left to try", "retire")
    # A global team's own best says little: it is judged by the regions it opens. When its
    # picks stop paying, it is kept out of the regions already found.
    return Diagnosis(
        p, f"team {p.team}'s exploration keeps to regions already found ({p.message})", "refocus"
    )


# -- the rules -----------------------------------------------------------------------------


class Plan:
    """One step's operations and what they have changed so far."""

    def __init__(self, state: RunState, limits: Limits, values: dict[str, float]):
        self.state, self.limits, self.values = state, limits, values
        self.ops: list[Operation] = []
        self.touched: set[str | None] = set()  # the teams changed this step
        self.active = len(state.active_teams())
        self.spawned = len(state.teams)
        self.starts = {t.start_from for t in state.active_teams()} - {None}

    def add(self, op: Operation) -> None:
        self.ops.append(op)
        if op.op == "retire":
            self.active -= 1
            self.touched.add(op.team)
        elif op.op in ("spawn", "fork"):
            self.active += 1
            self.spawned += 1
            if op.params.get("start_from"):
                self.starts.add(op.params["start_from"])
        elif op.team:
            self.touched.add(op.team)

    def favoured(self, arms: list[str]) -> str:
        """The restart arm the bandit values most now (of equals, the higher prior)."""
        return max(arms, key=lambda a: (self.values.get(a, 0.0), PRIORS[a]))

    def can_spawn(self) -> bool:
        return self.spawned < self.limits.spawn_cap

    def make_room(self, evidence: list[str], leaving: int) -> bool:
        """Room for one more team once `leaving` teams go: else retire the stalest local
        search (never a global one, the elite's team, one changed this step, or one whose last
        candidate was a gain or that has none yet: a long run's supervisor retired each fork
        before its first turn to make room for the next)."""
        if self.active - leaving < self.limits.max_teams:
            return True
        keep = self.touched | ({self.state.best.team} if self.state.best else set())
        stale = [
            t
            for t in self.state.active_teams()
            if is_local(t) and t.id not in keep and t.since_improvement > 0
        ]
        worst = max(stale, key=lambda t: (t.since_improvement, -t.evals), default=None)
        if worst is None:
            return False
        self.add(
            Operation(
                "retire",
                f"making room: {worst.id}, the stalest local search "
                f"({worst.since_improvement} of its {worst.evals} candidates since its last gain; "
                f"its best {speedup_text(worst.best_estimate)})",
                evidence,
                team=worst.id,
            )
        )
        return True


def restart_options(plan: Plan) -> list[tuple[str, Candidate | None]]:
    """Where the next search may start: (arm, start), the arms of PRIORS this run can use."""
    state, presets = plan.state, plan.limits.presets
    elite = state.best
    options: list[tuple[str, Candidate | None]] = []
    if elite is None:
        return [("spawn explorer", None)] if "explorer" in presets else []
    far = next(promising_regions(state, climbed(state), plan.starts), None)
    if far and "model" in presets:
        options.append(("fork model", far))
    if far and "coordinate" in presets:
        options.append(("fork coordinate", far))
    globals_ = {t.strategy for t in state.active_teams() if not is_local(t)}
    if not globals_ and "model" in presets:
        options.append(("spawn model", None))
    elite_team = state.teams.get(elite.team)
    polished = elite_team is not None and is_local(elite_team)
    if not polished and elite.cid not in plan.starts and "refiner" in presets:
        options.append(("fork refiner", elite))  # a global team's find, never climbed
    if not globals_ and "explorer" in presets:
        options.append(("spawn explorer", None))
    return options


def arm_values(state: RunState) -> dict[str, float]:
    """Each restart arm's worth now: its prior and its scored outcomes in this run (a win is
    a new team that beat the run's best), plus an exploration term (UCB) for arms tried less."""
    total = sum(n for n, _ in state.arm_stats.values())
    out = {}
    for arm, prior in PRIORS.items():
        n, wins = state.arm_stats.get(arm, (0, 0))
        out[arm] = (prior + wins) / (1 + n) + CURIOSITY * math.sqrt(math.log(total + 1) / (n + 1))
    return out


def start_op(
    plan: Plan,
    arm: str,
    cause: str,
    evidence: list[str],
    scope: Scope,
    start: Candidate | None,
    verb: str,
) -> Operation:
    """The operation that starts a team of the restart arm `arm` (from `start`, where it has
    one), saying why and what the arm is worth; a forked climb or model is kept out of the
    regions found."""
    word, preset = arm.split()
    params: dict[str, Any] = {"preset": preset, "arm": arm}
    if arm in ("fork coordinate", "fork model"):  # its own region, not back into found ones
        params["avoid"] = [c.cid for c in optima(plan.state)]
    if start is not None:
        params |= {
            "start_from": start.cid,
            "directive": f"{verb} from {start.cid} ({start.estimate:.2f}x), {HOW[preset]}.",
        }
    return Operation(
        "fork" if word == "fork" else "spawn",  # every arm is one or the other
        cause + f" (chosen: {arm}, worth {plan.values.get(arm, 0):.2f})",
        evidence,
        scope=scope,
        params=params,
    )


def rule_restart(d: Diagnosis, plan: Plan) -> None:
    """A search stopped paying where it stands: start the next one where the scores point
    (a climb from an unclimbed region, a model, combined steps at the elite, an explorer),
    replacing a local team that plateaued."""
    p, team = d.plateau, plan.state.teams.get(d.plateau.team or "")
    replacing = team is not None and is_local(team)
    options = restart_options(plan) if plan.can_spawn() else []
    if not options:
        if team is None:  # the run stalled: send the global searches to new regions
            for t in plan.state.active_teams():
                if not is_local(t) and t.id not in plan.touched:
                    rule_refocus(
                        Diagnosis(
                            Plateau("team", "stalled", t.id, 0, None, 0.0, d.plateau.evidence),
                            d.cause,
                            "refocus",
                        ),
                        plan,
                        restart=False,
                    )
        elif is_local(team) and plan.active > 1:
            rule_retire(d, plan)  # its turns go to the teams still searching
        elif team.redirects == 0:
            rule_redirect(d, plan)
        return
    arm = plan.favoured([a for a, _ in options])
    start = dict(options)[arm]  # restart_options offers each arm once
    if not plan.make_room(p.evidence, 1 if replacing else 0):
        return
    evidence = list(p.evidence) + ([start.cid] if start is not None else [])
    plan.add(start_op(plan, arm, d.cause, evidence, p.scope, start, "Restart"))
    if replacing and team is not None:
        plan.add(Operation("retire", "replaced: " + d.cause, p.evidence, team=team.id))


def rule_climb(d: Diagnosis, plan: Plan) -> None:
    """Exploration opened a region: send a local search there (kept out of the regions found),
    a model or a climb as the restart arms' scores say, making room by retiring the stalest
    local search."""
    start = plan.state.candidates[d.plateau.evidence[0]]
    arms = [a for a in ("fork model", "fork coordinate") if a.split()[1] in plan.limits.presets]
    if not arms or not plan.can_spawn() or start.cid in plan.starts:
        return
    if not plan.make_room(d.plateau.evidence, 0):
        return
    arm = plan.favoured(arms)
    plan.add(start_op(plan, arm, d.cause, d.plateau.evidence, "run", start, "Start"))


def rule_polish(d: Diagnosis, plan: Plan) -> None:
    """The leading local search stalled: fork combined steps around the elite, once; the
    leader goes on."""
    elite = plan.state.best
    if (
        elite is None
        or elite.cid in plan.starts
        or "refiner" not in plan.limits.presets
        or not plan.can_spawn()
        or not plan.make_room(d.plateau.evidence, 0)
    ):
        return
    plan.add(
        Operation(
            "fork",
            d.cause,
            d.plateau.evidence + [elite.cid],
            params={
                "preset": "refiner",
                "start_from": elite.cid,
                "arm": "fork refiner",
                "directive": f"Restart from {elite.cid} ({elite.estimate:.2f}x), changing one or "
                "two parameters at a time.",
            },
        )
    )


def rule_recompose(d: Diagnosis, plan: Plan) -> None:
    """An LLM team keeps failing: give it the members that catch failures (a debugger for
    failed builds and mismatches, a reviewer before each evaluation); an offline team, or
    one that has them, is redirected instead."""
    team = plan.state.teams[d.plateau.team or ""]
    missing = [r for r in ("debugger", "reviewer") if r not in team.roles]
    if not plan.limits.llm or not missing or not team.roles:
        return rule_redirect(d, plan)
    plan.add(
        Operation(
            "recompose",
            d.cause,
            d.plateau.evidence,
            team=team.id,
            params={"roles": team.roles + missing, "added": missing},
        )
    )
    # A recomposed team has been steered: if it keeps failing, it is retired.


def rule_redirect(d: Diagnosis, plan: Plan) -> None:
    """Point a team elsewhere: another strategy, from the elite."""
    p = d.plateau
    team = plan.state.teams[p.team or ""]
    elite = plan.state.best
    strategy = "explorer" if team.strategy != "explorer" else "refiner"
    start = elite.cid if elite else None
    directive = f"Your {team.strategy} search stopped paying off; switch to {strategy} search" + (
        f" around {start}." if start else "."
    )
    if p.kind == "repeating":
        directive = (
            f"Your last attempts repeated {', '.join(p.evidence)}, already evaluated: "
            f"nothing is learned from a repeat. Try a different kind of change "
            f"({strategy} search)" + (f" starting from {start}." if start else ".")
        )
    plan.add(
        Operation(
            "redirect",
            d.cause,
            p.evidence,
            team=team.id,
            params={"strategy": strategy, "start_from": start, "directive": directive},
        )
    )


def rule_retire(d: Diagnosis, plan: Plan) -> None:
    """Retire a team the evidence condemns; the last one is replaced if the cap allows, else
    kept (the no-progress rule ends a run that is stuck)."""
    p = d.plateau
    if plan.active <= 1:
        if not plan.can_spawn():
            return
        plan.add(Operation("retire", d.cause, p.evidence, team=p.team))
        plan.add(
            Operation(
                "spawn", "no team would be left active", p.evidence, params={"preset": "explorer"}
            )
        )
        return
    plan.add(Operation("retire", d.cause, p.evidence, team=p.team))


def rule_refocus(d: Diagnosis, plan: Plan, restart: bool = True) -> None:
    """A global search keeps picking the regions already found: keep it out of them, so its
    picks go where no team has looked; with nothing new to keep out of, restart."""
    team = plan.state.teams[d.plateau.team or ""]
    new = [c.cid for c in optima(plan.state) if c.cid not in team.avoid]
    if not new:
        return rule_restart(d, plan) if restart else None
    plan.add(
        Operation(
            "redirect",
            d.cause,
            d.plateau.evidence + new,
            team=team.id,
            params={
                "strategy": team.strategy,
                "avoid": team.avoid + new,
                "directive": f"Search away from the regions of {', '.join(team.avoid + new)}: "
                "they are found already.",
            },
        )
    )


RULES: dict[str, Callable[[Diagnosis, Plan], None]] = {
    "restart": rule_restart,
    "redirect": rule_redirect,
    "retire": rule_retire,
    "refocus": rule_refocus,
    "climb": rule_climb,
    "polish": rule_polish,
    "recompose": rule_recompose,
}


def decide(diagnoses: list[Diagnosis], state: RunState, limits: Limits) -> list[Operation]:
    """Operations for a step's diagnoses: one rule per diagnosis, at most one decision per
    team, one team left active, no more than `limits` allow."""
    plan = Plan(state, limits, arm_values(state))
    for d in diagnoses:
        if d.plateau.team not in plan.touched:
            RULES[d.remedy](d, plan)
    return plan.ops


# -- recording and scoring -----------------------------------------------------------------


def _new_team_id(state: RunState, preset: str) -> str:
    return f"{preset}-{len(state.teams) + 1}"


def operation_events(
    op: Operation, state: RunState, key: str, seed: int, presets: dict[str, Any]
) -> list[TeamSpawned | Restructured]:
    """The events that record `op` (a spawn or fork also spawns its team)."""
    params = {**op.params, "key": key}
    events: list[TeamSpawned | Restructured] = []
    team = op.team
    if op.op in ("spawn", "fork"):
        preset = presets[params["preset"]]
        team = _new_team_id(state, preset.name)
        events.append(
            TeamSpawned(
                team=team,
                preset=preset.name,
                strategy=preset.strategy,
                directive=params.get("directive", preset.directive),
                share=preset.share,
                start_from=params.get("start_from"),
                avoid=list(params.get("avoid", [])),
                seed=seed,
                roles=[r.name for r in preset.roles],
            )
        )
    events.append(
        Restructured(
            op=op.op,
            team=team,
            reason=op.reason,
            evidence=op.evidence,
            params=params,
            best_before=state.best_speedup,
            scope=op.scope,
        )
    )
    return events


def score(state: RunState, window: int) -> list[RestructureScored]:
    """Verdicts on decisions whose team has had `window` candidates since (or was retired):
    did that team's candidates beat the run's best of the moment? Retires are judged by the
    evidence they rest on, not scored; a rebalance by the teams whose share it raised."""
    verdicts = []
    threshold = state.threshold()
    for p in state.pending:
        teams = [state.teams[t] for t in p.teams if t in state.teams]
        done = [t for t in teams if t.state != "active" or t.evals - p.at.get(t.id, 0) >= window]
        if not teams or len(done) < len(teams):
            continue
        found = max(
            (
                t.best
                for t in teams
                if t.best and t.best.seq > p.seq and t.best.estimate is not None
            ),
            key=known_estimate,
            default=None,
        )
        helped = found is not None and (
            p.best_before is None or known_estimate(found) > p.best_before * (1 + threshold)
        )
        verdicts.append(
            RestructureScored(
                restructure=p.seq,
                helped=helped,
                best_before=p.best_before,
                best_after=state.best_speedup,
                by=found.cid if found is not None and helped else None,
            )
        )
    return verdicts
