"""RunState: what a run knows, folded event by event from history.jsonl.

`apply` costs the same whatever the length of the history, so a supervisor step does too;
only `from_events` (once per resume or `eat status`) reads the whole log.
"""

from __future__ import annotations

import copy
import math
import statistics
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from functools import cached_property
from typing import Any, ClassVar, get_args

from eat.config import PlateauConfig
from eat.events import (
    AttemptFailed,
    CandidateChecked,
    CandidateEvaluated,
    EliteRetimed,
    Event,
    HumanSteered,
    LLMCalled,
    PlanUpdated,
    PlateauDetected,
    PlateauKind,
    Restructured,
    RestructureScored,
    RunStarted,
    SupervisorAdvised,
    TeamExhausted,
    TeamSpawned,
)
from eat.knobspace import KnobIndex
from eat.runners.base import BY_CHANCE

LOCAL = frozenset({"coordinate", "refiner"})


class Said:
    """People's latest steering (the last 24 edits), one object shared by the live state and
    every snapshot of it: a turn in flight sees what a person said after the turn began. Only
    the main thread adds; a reader on a worker thread sees one immutable tuple or the next."""

    def __init__(self) -> None:
        self._events: tuple[HumanSteered, ...] = ()

    def add(self, e: HumanSteered) -> None:
        self._events = (self._events + (e,))[-24:]

    def __iter__(self):
        return iter(self._events)

    def __deepcopy__(self, memo) -> Said:
        return self


# What a team's plateau counters count (a region `opened` is no counter's)
PLATEAU_KINDS = tuple(k for k in get_args(PlateauKind) if k != "opened")
# A team whose candidates never land near the top still plays a twentieth as often as one whose
# candidates always do: a global search may yet open a region the others never reach.
PACE_FLOOR = 0.05
LEADERS = 8  # candidates kept ranked, so a re-timed elite can hand over without a full scan
LESSONS_KEPT, LESSONS_BATCH = 40, 16


@dataclass
class Candidate:
    cid: str
    team: str
    seq: int
    index: int  # 1-based position among the run's candidates
    status: str
    knobs: dict[str, Any]
    source_hash: str
    speedup: float | None
    noise: float | None
    gflops: float | None = None
    vendor_gflops: float | None = None
    score: float | None = None  # a program's metric, as first graded
    measurements: list[float] = field(default_factory=list)
    failed_retime: bool = False
    idea: str = ""
    message: str = ""
    same_as: str | None = None  # the candidate that was evaluated for its program

    @classmethod
    def from_event(cls, e: CandidateEvaluated, index: int) -> Candidate:
        """The candidate an evaluation names, the run's `index`-th."""
        return cls(
            cid=e.candidate,
            team=e.team,
            seq=e.seq,
            index=index,
            status=e.status,
            knobs=e.knobs,
            source_hash=e.source_hash,
            speedup=e.speedup,
            noise=e.noise,
            gflops=e.gflops,
            vendor_gflops=e.vendor_gflops,
            score=e.score,
            idea=e.idea,
            message=e.message,
            same_as=e.same_as,
            measurements=[e.speedup] if e.speedup is not None else [],
        )

    @property
    def what(self) -> str:
        """What it tried, for people and prompts: its knob values, else the agent's idea."""
        return ", ".join(f"{k}={v}" for k, v in self.knobs.items()) or self.idea or self.cid

    @cached_property  # a candidate never changes: a re-time replaces it (RunState._retimed)
    def estimate(self) -> float | None:
        """Median of every measurement; None once a re-time found it failing."""
        if self.status != "ok" or self.failed_retime or not self.measurements:
            return None
        return statistics.median(self.measurements)


def known_estimate(c: Candidate) -> float:
    """The estimate of a candidate known to have one (a leader, one picked for its estimate):
    the key to rank such candidates by."""
    assert c.estimate is not None, f"{c.cid} has no estimate"
    return c.estimate


def spread(c: Candidate) -> float:
    """How far a candidate's estimate may be off, relatively: its measured spread, narrowing
    with each measurement."""
    return (c.noise or 0.0) / math.sqrt(len(c.measurements))


def assured(c: Candidate, doubt: float) -> float:
    """What the run's leaders are ranked by: the estimate less `doubt` spreads (a lower
    confidence bound). Timing spread differs from kernel to kernel; ranked by the median alone,
    the run's best tends to be whichever noisy kernel drew the luckiest timing (the bench's
    recorded cpu_matmul_vec: true best 37.8x at 150 evaluations, 44.4x ranked this way)."""
    return known_estimate(c) * math.exp(-doubt * spread(c))


def hopeful(c: Candidate, doubt: float) -> float:
    """`assured`'s upper twin: the estimate plus `doubt` spreads, how good it may truly be."""
    return known_estimate(c) * math.exp(doubt * spread(c))


@dataclass
class Team:
    id: str
    preset: str
    strategy: str
    directive: str
    share: float = 1.0
    state: str = "active"
    start_from: str | None = None
    avoid: list[str] = field(default_factory=list)  # candidates whose regions it keeps out of
    seed: int = 0
    roles: list[str] = field(default_factory=list)
    evals: int = 0  # its candidates
    copies: int = 0  # of them, those that built a program evaluated before (no evaluation)
    since_improvement: int = 0
    failures: int = 0  # consecutive non-ok candidates
    redirects: int = 0
    exhausted: bool = False  # its agent had nothing left to try (a team_exhausted event)
    offset: float = 0.0  # turns credited at spawn, so a new team does not catch up
    free: int = 0  # turns given for climbing on, not counted against its share (pick_team)
    failed_attempts: int = 0  # turns that produced no candidate (malformed reply, outage)
    hits: int = 0  # candidates within the run's noise of the run's best when they landed
    climbing: bool = False  # its last candidate improved its best and was a hit
    repeats: int = 0  # duplicate attempts since its last evaluation
    repeated: list[str] = field(default_factory=list)  # the candidates they repeated, latest last
    usage: Usage = field(default_factory=lambda: Usage())
    plan: list[dict] = field(default_factory=list)  # {idea, expected_gain, tried: cid|None}
    best_id: str | None = None  # its best candidate
    # The run's candidates by id (RunState.candidates, the same dict): a re-time replaces one
    # entry there, and every team's best follows.
    board: dict[str, Candidate] = field(default_factory=dict, repr=False, compare=False)

    @property
    def best(self) -> Candidate | None:
        return self.board[self.best_id] if self.best_id else None

    @property
    def local(self) -> bool:
        """A search around a point, judged by its gain per evaluation (a model given a start
        searches that region only); the others are global, judged by the regions they open."""
        return self.strategy in LOCAL or (self.strategy == "model" and self.start_from is not None)

    @property
    def spent(self) -> int:
        """Turns that count against its share: evaluations and failed attempts, less free ones."""
        return self.evals + self.failed_attempts - self.free

    @property
    def turns(self) -> float:
        """Budget used, in units of this team's share (who plays next without supervision: the
        lowest)."""
        return self.offset + self.spent / self.share

    @property
    def evaluated(self) -> int:
        """Its candidates that were evaluated (not copies of an evaluated program)."""
        return self.evals - self.copies

    @property
    def pace(self) -> float:
        """How much its results earn it: the share of its candidates that came within the run's
        noise of the run's best (smoothed: a new team starts at 1/2), at least PACE_FLOOR."""
        return max(PACE_FLOOR, (self.hits + 1) / (self.evals + 2))

    @property
    def due(self) -> float:
        """Budget used, in units of its share times its pace (who plays next under supervision:
        the lowest). A team whose candidates keep landing near the top plays more often than
        one whose candidates do not; on the bench's landscapes that beat equal turns (sums of
        wins minus losses against the best static team / TPE / NGOpt / random: -26 / 47 / 35 /
        20 -> -11 / 56 / 46 / 47)."""
        return self.offset + self.spent / (self.share * self.pace)

    @property
    def best_estimate(self) -> float | None:
        return self.best.estimate if self.best else None


@dataclass
class Usage:
    """LLM tokens and spend; cost counts only calls whose price is known."""

    prompt: int = 0
    completion: int = 0
    cached: int = 0
    cost_usd: float = 0.0
    calls: int = 0
    failed_calls: int = 0
    unpriced_calls: int = 0

    def add(self, e: LLMCalled) -> None:
        self.calls += 1
        self.failed_calls += not e.ok
        self.prompt += e.prompt_tokens
        self.completion += e.completion_tokens
        self.cached += e.cached_tokens
        if e.cost_usd is None:
            self.unpriced_calls += e.ok
        else:
            self.cost_usd += e.cost_usd


@dataclass
class Lesson:
    """Something the run learned, with the candidates it rests on: a new best (`new` over
    `old`, their values then; `retimed`: the candidate whose re-time handed the lead over, as
    it was then), or a scored restructure (`scored`, and what it did)."""

    ids: list[str]
    new: Candidate | None = None
    old: Candidate | None = None
    new_x: float | None = None
    old_x: float | None = None
    scored: RestructureScored | None = None
    what: str = ""
    retimed: Candidate | None = None


@dataclass
class Pending:
    """A decision waiting for its verdict: the teams it created or changed, and how many
    candidates each had then."""

    seq: int
    op: str
    teams: list[str]
    best_before: float | None
    at: dict[str, int]


def _better(new: float | None, ref: float | None, threshold: float) -> bool:
    return new is not None and (ref is None or new > ref * (1 + threshold))


class RunState:
    """Teams, candidates, the best, plateau counters and pending scores, from events."""

    _FOLDS: ClassVar[dict[type, Callable[[RunState, Any], None]]] = {}  # filled below the class

    def __init__(self, plateau: PlateauConfig | None = None):
        self.cfg = plateau or PlateauConfig()
        self.target = ""
        self.teams: dict[str, Team] = {}
        self.candidates: dict[str, Candidate] = {}
        self.hashes: dict[str, str] = {}  # source hash -> the candidate that had it
        self.programs: dict[str, str] = {}  # program key -> the candidate evaluated for it
        self.retried: set[str] = set()  # programs evaluated again after a failure by chance
        self.knob_index = KnobIndex()  # the candidates' knobs and estimates, for regions
        self.evaluations = 0  # candidates evaluated
        self.retimes = 0  # re-times of an elite (they spend evaluations too)
        self.failed_attempts = 0  # turns without a candidate, outages aside
        self.checks = 0  # `eat check` answers (build and verify)
        self.attempts_since_eval = 0
        self.repeated_since_eval: dict[str, int] = {}  # candidate -> duplicates of it since
        self.leaders: list[str] = []  # the best candidates' ids, best first
        self.since_improvement = 0
        self.recent: deque[str] = deque(maxlen=64)  # the latest candidates' ids, newest last
        self.opened: set[str] = set()  # candidates whose region was declared worth a climb
        self.pending: list[Pending] = []
        # Lessons, oldest first. Past LESSONS_KEPT the oldest LESSONS_BATCH are counted, with
        # a few of their ids, in one go (so the list changes at its head rarely).
        self.lesson_log: list[Lesson] = []
        self.restructure_ops: dict[int, str] = {}
        self.restructure_arms: dict[int, str] = {}
        self.arm_stats: dict[str, tuple[int, int]] = {}  # restart arm -> (scored, helped)
        self.older_lessons = 0
        self.older_ids: list[str] = []
        self.applied_keys: set[str] = set()
        self.plateaus = 0
        # (scope, team, kind) -> the counter when that plateau was declared; cleared when the
        # counter resets, so each stretch of no progress is declared once per window.
        self.flagged: dict[tuple, int] = {}
        self.restructures = 0
        self.elapsed_s = 0.0
        self.seq = 0
        self.knob_stats: dict[tuple[str, str], list] = {}  # (knob, value) -> [tries, best, cid]
        self.usage = Usage()
        self.supervisor_notes: deque[str] = deque(maxlen=9)
        self.steering = Said()  # people's latest edits
        self.steer_refs: set[str] = set()  # `eat steer` messages already recorded

    @classmethod
    def from_events(cls, events: list[Event], plateau: PlateauConfig | None = None) -> RunState:
        state = cls(plateau)
        for e in events:
            state.apply(e)
        return state

    def snapshot(self) -> RunState:
        """A copy for a turn on another thread, cheap however long the run: the candidates
        themselves are shared (a re-time replaces one in `candidates` rather than changing it,
        see `_retimed`), the large indexes copied shallowly, everything else deeply (the
        teams' `board` is the copy's `candidates`)."""
        candidates = dict(self.candidates)
        memo: dict[int, Any] = {id(c): c for c in candidates.values()}
        memo[id(self.candidates)] = candidates
        memo[id(self.hashes)] = dict(self.hashes)
        memo[id(self.programs)] = dict(self.programs)
        memo[id(self.knob_index)] = self.knob_index.copy()
        return copy.deepcopy(self, memo)

    def _evaluated_program(self, program: str, cid: str) -> None:
        """`cid` evaluated `program`: it stands for the program, unless an earlier evaluation
        does that did not fail by chance (two turns that evaluated one program at once)."""
        standing = self.candidates.get(self.programs.get(program, ""))
        if standing is None:
            self.programs[program] = cid
        elif standing.status in BY_CHANCE:
            self.programs[program] = cid
            self.retried.add(program)

    def stands_for(self, program: str) -> str | None:
        """The candidate whose result a source building `program` gets, unevaluated: None
        where the run has not evaluated it, or where its one evaluation failed as a busy
        machine can make any program fail (BY_CHANCE), so that it is evaluated once more."""
        cid = self.programs.get(program)
        if cid is None or (
            self.candidates[cid].status in BY_CHANCE and program not in self.retried
        ):
            return None
        return cid

    # -- derived -----------------------------------------------------------------------------

    @property
    def best(self) -> Candidate | None:
        return self.candidates[self.leaders[0]] if self.leaders else None

    @property
    def last(self) -> Candidate | None:
        """The latest candidate evaluated."""
        return self.candidates[self.recent[-1]] if self.recent else None

    @property
    def best_speedup(self) -> float | None:
        return self.best.estimate if self.best else None

    @property
    def copies(self) -> int:
        """Candidates that build an evaluated program: its result, no evaluation spent."""
        return len(self.candidates) - self.evaluations

    @property
    def spent_evals(self) -> int:
        """Evaluations spent against the budget: candidates and re-times."""
        return self.evaluations + self.retimes

    def threshold(self) -> float:
        """Smallest relative gain that counts: the elite's measured spread, at least min_gain."""
        noise = self.best.noise if self.best and self.best.noise else 0.0
        return max(self.cfg.min_gain, noise)

    def active_teams(self) -> list[Team]:
        return [t for t in self.teams.values() if t.state == "active"]

    def recent_of(self, team: str | None, n: int) -> list[Candidate]:
        """Up to `n` of the latest candidates (of `team`, or of any), newest first."""
        latest = (self.candidates[cid] for cid in reversed(self.recent))
        return [c for c in latest if team is None or c.team == team][:n]

    def steering_for(self, team: str | None, n: int = 5) -> list[HumanSteered]:
        """People's latest steering that concerns `team` (None: the supervisor, who sees all),
        oldest first: what they said to the whole run and to that team."""
        return [e for e in self.steering if team is None or e.team in (None, team)][-n:]

    def next_candidate_id(self) -> str:
        return f"c{len(self.candidates) + 1:04d}"

    # -- folding -----------------------------------------------------------------------------

    def apply(self, e: Event) -> None:
        """Fold one event in."""
        self.seq = e.seq
        self.elapsed_s = max(self.elapsed_s, e.elapsed_s)
        fold = self._FOLDS.get(type(e))
        if fold is not None:
            fold(self, e)

    def _started(self, e: RunStarted) -> None:
        self.target = e.target

    def _spawned(self, e: TeamSpawned) -> None:
        # Level with the team furthest behind, by the measure pick_team uses under supervision
        # (the same as `turns` at a run's start, the only time teams spawn without it).
        offset = min((t.due for t in self.active_teams()), default=0.0)
        self.teams[e.team] = Team(
            id=e.team,
            preset=e.preset,
            strategy=e.strategy,
            directive=e.directive,
            share=e.share,
            start_from=e.start_from,
            avoid=list(e.avoid),
            seed=e.seed,
            offset=offset,
            roles=list(e.roles),
            board=self.candidates,
        )

    def _plateau(self, e: PlateauDetected) -> None:
        self.plateaus += 1
        self.flagged[(e.scope, e.team, e.kind)] = e.window
        if e.kind == "opened":
            self.opened.update(e.evidence[:1])

    def _called(self, e: LLMCalled) -> None:
        self.usage.add(e)
        if e.team in self.teams:
            self.teams[e.team].usage.add(e)

    def _advised(self, e: SupervisorAdvised) -> None:
        self.supervisor_notes.extend(e.lessons)

    def _planned(self, e: PlanUpdated) -> None:
        if e.team in self.teams:
            self.teams[e.team].plan = [i | {"tried": None} for i in e.ideas]

    def _checked(self, e: CandidateChecked) -> None:
        self.checks += 1

    def _exhausted(self, e: TeamExhausted) -> None:
        if e.team in self.teams:
            self.teams[e.team].exhausted = True

    def _steered(self, e: HumanSteered) -> None:
        self.steering.add(e)
        if e.ref:
            self.steer_refs.add(e.ref)
        if e.source == "directive" and e.team in self.teams:
            self.teams[e.team].directive = e.text

    def _scored(self, e: RestructureScored) -> None:
        self.pending = [p for p in self.pending if p.seq != e.restructure]
        if arm := self.restructure_arms.get(e.restructure):
            n, wins = self.arm_stats.get(arm, (0, 0))
            self.arm_stats[arm] = (n + 1, wins + e.helped)
        self._lesson(
            Lesson(
                [e.by] if e.by else [], scored=e, what=self.restructure_ops.get(e.restructure, "")
            )
        )

    def _attempt_failed(self, e: AttemptFailed) -> None:
        # An outage is the provider's failure, not the team's: it must not make a team look
        # failing or stalled (and so retired), nor the run look stuck.
        if e.kind == "outage":
            return
        self.failed_attempts += 1
        self.attempts_since_eval += 1
        team = self.teams.get(e.team)
        if team:
            team.failed_attempts += 1
            team.failures += 1
            team.since_improvement += 1
        if e.repeats:
            self.repeated_since_eval[e.repeats] = self.repeated_since_eval.get(e.repeats, 0) + 1
            if team:
                team.repeats += 1
                team.repeated = [c for c in team.repeated if c != e.repeats][-4:] + [e.repeats]

    def _evaluated(self, e: CandidateEvaluated) -> None:
        c = Candidate.from_event(e, index=len(self.candidates) + 1)
        same = self.candidates.get(e.same_as or "")
        if same is not None:
            # Not evaluated: the program's result as it stands (re-times included), and an
            # attempt that brought no new evaluation.
            c = replace(c, measurements=list(same.measurements), failed_retime=same.failed_retime)
            self.attempts_since_eval += 1
            self.repeated_since_eval[same.cid] = self.repeated_since_eval.get(same.cid, 0) + 1
        else:
            self.evaluations += 1
            self.attempts_since_eval = 0
            self.repeated_since_eval = {}
            if e.program:
                self._evaluated_program(e.program, c.cid)
        self.candidates[c.cid] = c
        self.knob_index.add(c.cid, c.knobs, c.estimate)
        self.hashes.setdefault(c.source_hash, c.cid)
        last = self.last
        self.recent.append(c.cid)
        threshold = self.threshold()
        team = self.teams.get(e.team)
        if team:
            self._team_evaluated(team, c, last, threshold, e.plan_item)
            team.copies += same is not None
        previous = self.best
        if _better(c.estimate, self.best_speedup, threshold):
            self.since_improvement = 0
            self._clear("run", None, "stalled")
        else:
            self.since_improvement += 1
        if c.estimate is not None and same is None:  # a copy's program ranks as its original
            self._rank(c)
            if self.leaders[0] == c.cid:
                self._lesson(
                    Lesson(
                        [c.cid] + ([previous.cid] if previous else []),
                        new=c,
                        old=previous,
                        new_x=c.estimate,
                        old_x=previous.estimate if previous else None,
                    )
                )
        self._count_knobs(c)

    def _team_evaluated(
        self,
        team: Team,
        c: Candidate,
        last: Candidate | None,
        threshold: float,
        plan_item: int | None,
    ) -> None:
        """A candidate of `team` evaluated (`last`: the run's candidate before it)."""
        if team.local and last is not None and last.team == team.id and team.climbing:
            # The team played on because its last candidate improved its best near the top (see
            # team.pick_team): a turn given for climbing, not taken from the others' share.
            team.free += 1
        if plan_item is not None and plan_item < len(team.plan):
            team.plan[plan_item]["tried"] = c.cid
        team.evals += 1
        team.repeats = 0
        hit = c.estimate is not None and not _better(self.best_speedup, c.estimate, threshold)
        team.hits += hit
        self._clear("team", team.id, "repeating")
        team.failures = 0 if c.status == "ok" else team.failures + 1
        if c.status == "ok":
            self._clear("team", team.id, "failing")
        if _better(c.estimate, team.best_estimate, threshold):
            team.since_improvement = 0
            self._clear("team", team.id, "stalled", "converged")
        else:
            team.since_improvement += 1
        improved = c.estimate is not None and (
            team.best_estimate is None or c.estimate > team.best_estimate
        )
        if improved:
            team.best_id = c.cid
        # A climb far below the top plays on no more than its pace allows: on the recorded
        # cpu_matmul a coordinate climb from the baseline rose 1x -> 5x, a free turn each step,
        # while the run's best stood at 40x.
        team.climbing = improved and hit

    def _count_knobs(self, c: Candidate) -> None:
        """Per (knob, value): how often it was tried, and its best estimate and candidate."""
        for knob, value in c.knobs.items():
            stat = self.knob_stats.setdefault((knob, str(value)), [0, None, None])
            stat[0] += 1
            if c.estimate is not None and (stat[1] is None or c.estimate > stat[1]):
                stat[1], stat[2] = c.estimate, c.cid

    def _clear(self, scope: str, team: str | None, *kinds: str) -> None:
        """A counter was reset: a plateau of these kinds may be declared again."""
        for kind in kinds:
            self.flagged.pop((scope, team, kind), None)

    def _lesson(self, lesson: Lesson) -> None:
        if len(self.lesson_log) >= LESSONS_KEPT:
            for old in self.lesson_log[:LESSONS_BATCH]:
                self.older_lessons += 1
                self.older_ids = list(dict.fromkeys(self.older_ids + old.ids))[:12]
            del self.lesson_log[:LESSONS_BATCH]
        self.lesson_log.append(lesson)

    def _rank(self, c: Candidate) -> None:
        """Put `c` (new, or re-timed) where its assured estimate ranks it among the leaders."""
        ranked = [self.candidates[x] for x in self.leaders if x != c.cid]
        ranked = [x for x in ranked if x.estimate is not None]
        if c.estimate is not None:
            ranked.append(c)
        ranked.sort(key=lambda x: -assured(x, self.cfg.doubt))
        self.leaders = [x.cid for x in ranked[:LEADERS]]

    def _retimed(self, e: EliteRetimed) -> None:
        self.retimes += 1
        c = self.candidates.get(e.candidate)
        if c is None:
            return
        previous = self.best
        was_best = c is previous
        if e.status != "ok" or e.speedup is None:
            c = replace(c, failed_retime=True)
        else:
            c = replace(c, measurements=[*c.measurements, e.speedup])
        # The one place that holds candidates: leaders, recent and teams' bests hold ids.
        self.candidates[c.cid] = c
        self.knob_index.update(c.cid, c.estimate)
        self._rank(c)
        if not self.leaders:  # every leader failed its re-time: rank from scratch
            for x in self.candidates.values():
                if x.estimate is not None:
                    self._rank(x)
        team = self.teams.get(c.team)
        if team:  # the team's best is its highest figure as it stands now, not when it landed
            ranked = [
                x for x in self.candidates.values() if x.team == team.id and x.estimate is not None
            ]
            team.best_id = max(ranked, key=lambda x: x.estimate or 0).cid if ranked else None
        new = self.best
        if previous is not None and new is not None and new.cid != previous.cid:
            old = self.candidates[previous.cid]  # as it stands now: re-timed, if it was
            self._lesson(
                Lesson(
                    list(dict.fromkeys([new.cid, old.cid, c.cid])),
                    new=new,
                    old=old,
                    new_x=new.estimate,
                    old_x=old.estimate,
                    retimed=c,
                )
            )
        if was_best:
            # Measured against the elite's honest value, a later candidate may have been a real
            # gain that the lucky first measurement hid: the run last improved with it.
            ref, threshold, last = c.estimate, self.threshold(), None
            for x in (self.candidates[cid] for cid in self.recent):
                if x.index > c.index and _better(x.estimate, ref, threshold):
                    ref, last = x.estimate, x.index
            if last is not None and len(self.candidates) - last < self.since_improvement:
                self.since_improvement = len(self.candidates) - last
                self._clear("run", None, "stalled")

    def _restructured(self, e: Restructured) -> None:
        self.restructures += 1
        self.restructure_ops[e.seq] = f"{e.op} {e.team or ''}".strip()
        if e.params.get("key"):
            self.applied_keys.add(e.params["key"])
        team = self.teams.get(e.team) if e.team else None
        if e.scope == "run":
            self.since_improvement = 0
            self._clear("run", None, "stalled")
        if team:
            self._clear("team", team.id, *PLATEAU_KINDS)
            team.since_improvement = 0
            team.failures = 0
            team.repeats = 0
            if e.op == "retire":
                team.state = "retired"
            elif e.op == "redirect":
                team.strategy = e.params.get("strategy", team.strategy)
                team.directive = e.params.get("directive", team.directive)
                team.start_from = e.params.get("start_from", team.start_from)
                team.avoid = list(e.params.get("avoid", team.avoid))
                team.redirects += 1
                team.exhausted = False
            elif e.op == "recompose":
                team.roles = list(e.params.get("roles", team.roles))
                team.redirects += 1  # steered: a team that keeps failing after is retired
        judged = [e.team] if e.team and team and e.op != "retire" else []
        if e.op == "rebalance":
            for tid, share in e.params.get("shares", {}).items():
                if tid in self.teams:
                    t = self.teams[tid]
                    if share > t.share:
                        judged.append(tid)
                    due, t.share = t.due, share
                    t.offset = due - t.spent / (share * t.pace)  # same turn, new pace
        if e.params.get("arm"):
            self.restructure_arms[e.seq] = e.params["arm"]
        if judged:
            self.pending.append(
                Pending(
                    seq=e.seq,
                    op=e.op,
                    teams=judged,
                    best_before=e.best_before,
                    at={t: self.teams[t].evals for t in judged},
                )
            )


# The fold of each kind of event that changes the state (RunState.apply).
RunState._FOLDS.update(
    {
        RunStarted: RunState._started,
        TeamSpawned: RunState._spawned,
        CandidateEvaluated: RunState._evaluated,
        EliteRetimed: RunState._retimed,
        PlateauDetected: RunState._plateau,
        Restructured: RunState._restructured,
        LLMCalled: RunState._called,
        SupervisorAdvised: RunState._advised,
        PlanUpdated: RunState._planned,
        AttemptFailed: RunState._attempt_failed,
        CandidateChecked: RunState._checked,
        TeamExhausted: RunState._exhausted,
        HumanSteered: RunState._steered,
        RestructureScored: RunState._scored,
    }
)
