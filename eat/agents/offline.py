"""The offline agent: searches the target's declared knobs with the team's strategy, no LLM.

Every choice is a pure function of (run seed, team, team's evaluation count, what was tried),
so a resumed run proposes exactly what the uninterrupted one would have.

Given a skill (an earlier run's SKILL.md on the same knob space), the search starts where that
run ended: a team without a working candidate yet (the explorer aside, whose job is to go
elsewhere) proposes the skill's best configuration this run has not evaluated; from there each
strategy goes on as usual. The skill's measurements are not given to the model team's
surrogate as priors: tried on a smooth landscape (tests/test_skill.py's), ten proposals with
them found less than ten without (12-22x against 18-38x over seeds 0-3), as the priors, counted
as measured, keep the surrogate out of the skill's region and its bonus sends it elsewhere.
"""

from __future__ import annotations

import math
import random
from typing import Any

from eat.agents import surrogate
from eat.agents.base import Proposal
from eat.knobspace import Fence, region_radius
from eat.runners.base import source_hash
from eat.skill import SkillData
from eat.state import RunState, Team, known_estimate
from eat.target import Target, assign_knobs

STRATEGIES = ("coordinate", "explorer", "refiner", "model")
_TRIES = 200
# A knob value measured this often, each time under this share of the run's best, is settled:
# the explorer covers the others first, a climb moves to it last (bench/search_efficiency.py,
# wins minus losses summed against the best static team / TPE / NGOpt / random: seeds 0-9
# -6 / 55 / 64 / 71 -> 3 / 70 / 75 / 82, seeds 10-19 37 / 38 / 63 / 60 -> 43 / 46 / 60 / 71).
SETTLED_AFTER, SETTLED_BELOW = 2, 0.1


def render(target: Target, knobs: dict[str, Any]) -> str:
    """The baseline with knob values prepended: a `// eat:cflags` line, then `#define`s; for
    Python targets `NAME = value` lines (the value as Python source); a program's marked
    `# eat:knob` lines set in place."""
    if target.program:
        return assign_knobs(target.baseline_source(), knobs)
    head: list[str] = []
    for name, knob in target.knobs.items():
        if name not in knobs:
            continue
        if knob.kind == "cflags":
            head.insert(0, f"// eat:cflags {knobs[name]}")
        elif target.native:
            head.append(f"#define {name} {knobs[name]}")
        else:
            head.append(f"{name} = {knobs[name]}")
    return "\n".join(head) + "\n" + target.baseline_source()


def _known_configs(target: Target, skill: SkillData | None) -> list[tuple[dict, float, str]]:
    """The skill's configurations, best first, as (knobs, speedup, candidate id): each value
    mapped onto the target's own (a YAML '16' and a TOML 16 are one value), every knob set."""
    out = []
    for c in skill.top if skill else []:
        if not c.knobs:
            continue
        knobs = {}
        for name, knob in target.knobs.items():
            value = c.knobs.get(name, knob.values[0])
            knobs[name] = next((v for v in knob.values if str(v) == str(value)), None)
        if None not in knobs.values():
            out.append((knobs, c.speedup, c.candidate))
    return out


def _settled(state: RunState) -> dict[str, set[str]]:
    """Per knob, the values (as text) measured at least SETTLED_AFTER times and under
    SETTLED_BELOW of the run's best every time: more coverage of them is not worth an
    evaluation (cpu_matmul's -O2 and scalar kernels run at 1x where its best is 40x). Failures
    are not counted: a corner that does not build says little about each of its values."""
    best = state.best_speedup
    return state.knob_index.below(SETTLED_AFTER, SETTLED_BELOW * best) if best else {}


def defaults(target: Target) -> dict[str, Any]:
    """The baseline's own configuration: the first value of every knob."""
    return {name: knob.values[0] for name, knob in target.knobs.items()}


def _describe(change: dict[str, Any], center: dict[str, Any]) -> str:
    return ", ".join(f"{k} {center.get(k)} -> {v}" for k, v in change.items())


class OfflineAgent:
    """Knob search for one run; `seed` makes every random choice repeatable."""

    def __init__(self, target: Target, seed: int = 0, skill: SkillData | None = None):
        if not target.knobs:
            raise ValueError(f"target {target.name} declares no knobs for the offline agent")
        self.target = target
        self.seed = seed
        self.known = _known_configs(target, skill)
        self._rendered: dict[tuple, tuple[str, str]] = {}
        self._space = {n: k.values for n, k in target.knobs.items()}
        self._point = surrogate.indexer(self._space)
        # The index row of each of the KnobIndex's candidates so far, and the last of them.
        self._rows: list[tuple[int, ...] | None] = []
        self._last: str | None = None

    def repair(self, team, state, failed, log) -> None:
        return None  # a failed configuration is a measured fact about the knob space

    def propose(self, team: Team, state: RunState) -> Proposal | None:
        if team.strategy not in STRATEGIES:
            raise ValueError(f"offline agent has no strategy {team.strategy!r}")
        if self.known and team.best is None and team.strategy != "explorer":
            p = self._from_skill(team, state)
            if p:
                return p
        return getattr(self, f"_{team.strategy}")(team, state)

    # -- helpers -----------------------------------------------------------------------------

    def _center(self, team: Team, state: RunState) -> tuple[dict[str, Any], str | None]:
        """Where a local strategy searches from: the best of its own best and the candidate it
        was started from or, for a team given no start, the run's best or the baseline's
        configuration (1.0x), whichever is faster."""
        # A team with no start climbs from whatever any team found best: on real spaces the
        # surrogate's and the explorer's finds are far better centres than the baseline's.
        # A forked team keeps to the region it was sent to.
        start = state.candidates.get(team.start_from) if team.start_from else state.best
        options = [c for c in (team.best, start) if c is not None and c.estimate is not None]
        if not options:
            return defaults(self.target), None
        center = max(options, key=known_estimate)
        if not team.start_from and known_estimate(center) < 1.0:
            # The run's first, far picks can all be slower than the baseline (on the bench's
            # needle, 0.8x-0.85x): a climb from them starts below where one from the baseline
            # does.
            return defaults(self.target), None
        return {**defaults(self.target), **center.knobs}, center.cid

    def _fence(
        self, team: Team, state: RunState, near: dict[str, Any] | None = None
    ) -> Fence | None:
        """Where the team may pick (None: anywhere): out of the regions it was told to keep out
        of (other teams' optima) and, given `near`, inside that configuration's region."""
        if near is None and not team.avoid:
            return None
        regions = tuple(state.candidates[c].knobs for c in team.avoid if c in state.candidates)
        return Fence(region_radius(len(self.target.knobs)), near, regions)

    def _offer(
        self,
        knobs: dict[str, Any],
        state: RunState,
        idea: str,
        parent: str | None,
        team: Team | None = None,
    ) -> Proposal | None:
        fence = self._fence(team, state) if team is not None else None
        if fence is not None and not fence.admits(knobs):
            return None
        key = tuple(knobs.items())
        if key not in self._rendered:  # the same configurations come up again and again
            source = render(self.target, knobs)
            self._rendered[key] = (source, source_hash(source))
        source, digest = self._rendered[key]
        if digest in state.hashes:
            return None
        return Proposal(source=source, idea=idea, knobs=knobs, parent=parent)

    def _from_skill(self, team: Team, state: RunState) -> Proposal | None:
        """The skill's best configuration not evaluated in this run yet."""
        for knobs, speedup, cid in self.known:
            p = self._offer(
                knobs,
                state,
                f"the skill's {cid} ({speedup:.2f}x in its run): "
                + ", ".join(f"{k}={v}" for k, v in knobs.items()),
                None,
                team,
            )
            if p:
                return p
        return None

    def _measured(self, state: RunState) -> list[tuple[tuple[int, ...] | None, float | None]]:
        """(index row, estimate) of the baseline's configuration (1.0x) and of every candidate
        with knobs, in the run's order: the state's KnobIndex, whose estimates follow re-times.
        Rows are found for the candidates new since the last pick only (on a long run, a scan
        of every candidate at every pick was much of the pick's growth with the history)."""
        index, rows = state.knob_index, self._rows
        known = len(rows)
        if known > len(index.cids) or (known and index.cids[known - 1] != self._last):
            rows.clear()  # not a later state of the run it has served: find them anew
        rows += [self._point(state.candidates[cid].knobs) for cid in index.cids[len(rows) :]]
        self._last = index.cids[-1] if index.cids else None
        estimates = [None if math.isnan(e) else e for e in index.estimates]
        return [(self._point(defaults(self.target)), 1.0), *zip(rows, estimates)]

    def _rng(self, team: Team, attempt: int) -> random.Random:
        return random.Random(f"{self.seed}:{team.id}:{team.seed}:{team.evals}:{attempt}")

    def _neighbours(self, team: Team, state: RunState) -> Proposal | None:
        """The first untried one-knob change of the centre, knobs taken round-robin, each
        knob's nearest values first (a small step is likelier to help than a leap), changes to
        a settled value (_settled) last."""
        center, parent = self._center(team, state)
        names = list(self.target.knobs)
        first = team.evals % len(names)
        moves = []
        for name in names[first:] + names[:first]:
            values = self.target.knobs[name].values
            at = [str(v) for v in values].index(str(center[name]))
            nearest = sorted(values, key=lambda v: abs(values.index(v) - at))
            moves += [(name, value) for value in nearest if value != center[name]]
        settled = _settled(state)
        moves.sort(key=lambda m: str(m[1]) in settled.get(m[0], ()))  # stable: the rest in order
        for name, value in moves:
            p = self._offer(
                {**center, name: value}, state, _describe({name: value}, center), parent, team
            )
            if p:
                return p
        return None

    # -- strategies --------------------------------------------------------------------------

    def _coordinate(self, team: Team, state: RunState) -> Proposal | None:
        return self._neighbours(team, state)

    def _explorer(self, team: Team, state: RunState) -> Proposal | None:
        """The untried configuration whose knob values were measured least often, farthest from
        everything measured among those (coverage)."""
        measured = [row for row, _ in self._measured(state)]
        fence = self._fence(team, state)
        picks = surrogate.spread(
            self._space, measured, self._rng(team, 0), fence=fence, settled=_settled(state)
        )
        for knobs in picks:
            p = self._offer(
                knobs,
                state,
                "least-measured values, farthest from everything measured: "
                + ", ".join(f"{k}={v}" for k, v in knobs.items()),
                None,
                team,
            )
            if p:
                return p
        return None

    def _refiner(self, team: Team, state: RunState) -> Proposal | None:
        center, parent = self._center(team, state)
        names = list(self.target.knobs)
        for attempt in range(_TRIES):
            rng = self._rng(team, attempt)
            picked = rng.sample(names, min(len(names), rng.choice((1, 2))))
            change = {
                n: v for n in picked if (v := rng.choice(self.target.knobs[n].values)) != center[n]
            }
            if not change:
                continue
            p = self._offer({**center, **change}, state, _describe(change, center), parent, team)
            if p:
                return p
        return self._neighbours(team, state)

    def _model(self, team: Team, state: RunState) -> Proposal | None:
        """The untried configuration a surrogate of every candidate so far rates best (with an
        exploration bonus), in the whole space or, for a team given a start, in its region;
        the baseline's configuration is known to give 1.0x."""
        start = state.candidates.get(team.start_from or "")  # a forked model keeps to its region
        fence = self._fence(team, state, start.knobs if start is not None else None)
        observed = self._measured(state)
        for knobs in surrogate.suggest(self._space, observed, self._rng(team, 0), fence=fence):
            p = self._offer(
                knobs,
                state,
                "surrogate's pick: " + ", ".join(f"{k}={v}" for k, v in knobs.items()),
                None,
                team,
            )
            if p:
                return p
        return None
