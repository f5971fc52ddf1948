"""The typed events of history.jsonl, one JSON object a line with `type` and `seq`.

Events are facts, written once and never edited; everything else a run knows (teams, best,
plateau counters) is folded from them by `eat.state.RunState`.
"""

from __future__ import annotations

import time
from typing import Annotated, Any, Literal

from pydantic import BaseModel, Field, TypeAdapter

# The run's vocabularies, defined once: every module that names one of these imports it here.
Scope = Literal["run", "team"]
PlateauKind = Literal["stalled", "failing", "exhausted", "converged", "repeating", "opened"]
Op = Literal["spawn", "retire", "fork", "redirect", "recompose", "rebalance"]
Strategy = Literal["coordinate", "explorer", "refiner", "model"]
AttemptKind = Literal["malformed", "duplicate", "llm_error", "outage", "no_candidate"]


class _Event(BaseModel):
    seq: int = Field(0, description="Position in the log, from 1; set when appended.")
    time: float = Field(default_factory=time.time, description="Unix time of the fact.")
    elapsed_s: float = Field(0.0, description="Run time so far, summed over every session.")


class RunStarted(_Event):
    type: Literal["run_started"] = "run_started"
    target: str
    target_path: str
    model: str
    config: dict[str, Any] = {}
    skill: dict[str, Any] | None = Field(
        None,
        description="The skill the run was started with "
        "(eat.skill.record: name, file, best); None: none.",
    )
    target_digest: str | None = Field(
        None,
        description="Content hash of the target folder "
        "when the run started (eat.target.digest); None in logs "
        "older than it.",
    )


class RunResumed(_Event):
    type: Literal["run_resumed"] = "run_resumed"
    recovered: list[str] = Field(
        [],
        description="Candidates whose results were on disk but "
        "not in the log (the process died in between).",
    )


class RunStopped(_Event):
    type: Literal["run_stopped"] = "run_stopped"
    reason: str = Field(description="Why, in one line for people.")
    code: str = Field(
        "",
        description="Why, as a stable code: max_evals, max_time, max_cost, "
        "max_llm_calls, max_attempts, max_checks, no_progress, exhausted, "
        "llm_unusable, target_changed, interrupted ('' in logs older than the "
        "codes).",
    )


class HeldOutGraded(_Event):
    type: Literal["held_out_graded"] = "held_out_graded"
    candidate: str = Field(description="The run's best, graded on the held-out split at its end.")
    split: str = Field(description="The split's name (the target's grader.held_out).")
    status: str = Field(description="The evaluation's status; only `ok` has figures.")
    score: float | None = Field(None, description="The best's metric, median over seeds.")
    baseline_score: float | None = Field(None, description="The baseline's, on the same seeds.")
    gain: float | None = Field(None, description="The best's gain over the baseline there.")
    message: str = ""


class TargetChanged(_Event):
    type: Literal["target_changed"] = "target_changed"
    files: list[str] = Field(
        description="Files of the target folder (relative paths) that "
        "differ from the run's snapshot: changed, added or removed."
    )
    digest: str = Field(description="The folder's content hash now.")
    accepted: bool = Field(
        False,
        description="True: `eat resume --accept-target-change` made "
        "the changed folder the run's target from here on; False: "
        "evaluations were refused.",
    )


class LogTampered(_Event):
    type: Literal["log_tampered"] = "log_tampered"
    lines: list[int] = Field(
        description="Lines of history.jsonl found wrong when the run "
        "resumed: those eat did not write as they stand (forged, changed, "
        "replayed), which every reader skips, and those after a gap in "
        "the seqs (lines deleted), which are kept."
    )
    first: str = Field("", description="What is wrong with the first of them, for people.")


class TeamSpawned(_Event):
    type: Literal["team_spawned"] = "team_spawned"
    team: str
    preset: str
    strategy: Strategy
    directive: str
    share: float = 1.0
    start_from: str | None = Field(None, description="Candidate id the team starts from.")
    avoid: list[str] = Field(
        [], description="Candidates whose regions the team keeps out of (optima already found)."
    )
    roles: list[str] = Field(
        [],
        description="Its members (planner, coder, debugger, profiler, reviewer), from its preset.",
    )
    seed: int = 0


class CandidateEvaluated(_Event):
    type: Literal["candidate_evaluated"] = "candidate_evaluated"
    candidate: str
    team: str
    idea: str = Field("", description="What the agent meant to try.")
    knobs: dict[str, Any] = {}
    parent: str | None = None
    source_hash: str
    status: str
    speedup: float | None = None
    noise: float | None = Field(
        None,
        description="Relative spread (IQR/median) of its timing; on a program target, the "
        "relative standard error of its per-seed gains' median.",
    )
    score: float | None = Field(
        None, description="Program targets: its metric, the median over the seeds graded."
    )
    gflops: float | None = None
    vendor_gflops: float | None = None
    message: str = ""
    plan_item: int | None = Field(None, description="Index of the team plan's idea it tried.")
    program: str | None = Field(
        None,
        description="What its source builds, as the runner keys it (Runner.program): sources "
        "with the same key are one program. None: the runner cannot tell.",
    )
    same_as: str | None = Field(
        None,
        description="The candidate whose program this source builds too: it was not evaluated "
        "again, and its result is that candidate's (no evaluation is spent on it).",
    )
    seen_seq: int | None = Field(
        None,
        description="With turns running at once: the log's seq "
        "when its turn began, the state its proposal saw (None: one turn "
        "at a time, it saw every event before it).",
    )


class EliteRetimed(_Event):
    type: Literal["elite_retimed"] = "elite_retimed"
    candidate: str
    speedup: float | None = Field(description="The new measurement (None: it failed now).")
    status: str = "ok"
    score: float | None = Field(
        None, description="Program targets: the metric's median in this grading."
    )


class PlateauDetected(_Event):
    type: Literal["plateau_detected"] = "plateau_detected"
    scope: Scope
    team: str | None = None
    kind: PlateauKind
    window: int
    best: float | None = None
    threshold: float = 0.0
    evidence: list[str] = []
    message: str = ""


class Restructured(_Event):
    type: Literal["restructured"] = "restructured"
    op: Op
    team: str | None = Field(None, description="The team created or changed.")
    reason: str
    evidence: list[str] = Field([], description="Candidate ids the decision rests on.")
    params: dict[str, Any] = Field({}, description="Operation details (strategy, shares ...).")
    best_before: float | None = Field(None, description="Run best when it was decided.")
    scope: Scope = "team"


class RestructureScored(_Event):
    type: Literal["restructure_scored"] = "restructure_scored"
    restructure: int = Field(description="seq of the Restructured event scored.")
    helped: bool
    best_before: float | None
    best_after: float | None
    by: str | None = Field(None, description="Candidate that beat the old best, if any.")


class LLMCalled(_Event):
    type: Literal["llm_called"] = "llm_called"
    agent: str = Field(description="Who called: '<team>/<role>' or 'supervisor'.")
    team: str | None = None
    model: str
    prompt_tokens: int = 0
    completion_tokens: int = 0
    cached_tokens: int = 0
    cost_usd: float | None = Field(None, description="None: the model's price is unknown.")
    ok: bool = True
    error: str | None = None


class PlanUpdated(_Event):
    type: Literal["plan_updated"] = "plan_updated"
    team: str
    ideas: list[dict[str, Any]] = Field(description="{idea, expected_gain}, best first.")


class SupervisorAdvised(_Event):
    type: Literal["supervisor_advised"] = "supervisor_advised"
    model: str
    accepted: bool = Field(description="False: both replies were invalid; the rules decided.")
    diagnosis: str = ""
    lessons: list[str] = []


class AttemptFailed(_Event):
    type: Literal["attempt_failed"] = "attempt_failed"
    team: str
    kind: AttemptKind
    reason: str
    repeats: str | None = Field(None, description="The candidate a duplicate repeats.")
    seen_seq: int | None = Field(
        None,
        description="With turns running at once: the log's seq "
        "when its turn began, the state its proposal saw (None: one turn "
        "at a time, it saw every event before it).",
    )


class CandidateChecked(_Event):
    type: Literal["candidate_checked"] = "candidate_checked"
    team: str
    source_hash: str
    status: str = Field(description="Built and verified: ok, or the failing status.")
    speedup: float | None = Field(None, description="From a few timed rounds only: rough.")
    message: str = ""


class TeamExhausted(_Event):
    type: Literal["team_exhausted"] = "team_exhausted"
    team: str = Field(description="Its agent has nothing left to try from where it stands.")


class HumanSteered(_Event):
    type: Literal["human_steered"] = "human_steered"
    source: Literal["learning", "notes", "directive", "steer"] = Field(
        description="What the person edited: LEARNING.md outside eat's markers, a team's "
        "NOTES.md outside them, a team's directive (team.yaml), or `eat steer`."
    )
    team: str | None = Field(None, description="The team it is for (None: the whole run).")
    text: str = Field(
        description="What changed: the lines added (or the new directive, or "
        "the message), as the next prompts show it."
    )
    removed: str = Field("", description="Lines the edit removed, if any.")
    ref: str | None = Field(
        None,
        description="The `eat steer` message's file, so a message "
        "is recorded once even if the run dies before deleting it.",
    )


Event = Annotated[
    RunStarted
    | RunResumed
    | RunStopped
    | TeamSpawned
    | CandidateEvaluated
    | EliteRetimed
    | PlateauDetected
    | Restructured
    | RestructureScored
    | LLMCalled
    | AttemptFailed
    | SupervisorAdvised
    | PlanUpdated
    | TeamExhausted
    | HumanSteered
    | CandidateChecked
    | TargetChanged
    | HeldOutGraded
    | LogTampered,
    Field(discriminator="type"),
]
EVENT = TypeAdapter(Event)


def parse_event(line: str | bytes) -> Event:
    """One log line to its typed event; raises pydantic.ValidationError or ValueError."""
    return EVENT.validate_json(line)


def speedup_text(v: float | None) -> str:
    """A speedup as people read it: '12.34x', or '-' when there is none."""
    return "-" if v is None else f"{v:.2f}x"


def gflops_text(gflops: float | None, vendor_gflops: float | None, vendor: str | None) -> str:
    """A kernel's GFLOP/s beside the vendor's from the same evaluation, as people read it:
    '110.7 GFLOP/s, numpy (OpenBLAS) 100.7 GFLOP/s'; '' where the target counts no flops."""
    if not gflops:
        return ""
    if not vendor_gflops:
        return f"{gflops:.1f} GFLOP/s"
    return f"{gflops:.1f} GFLOP/s, {vendor or 'the vendor'} {vendor_gflops:.1f} GFLOP/s"


def clip(text: str, most: int = 160) -> str:
    """`text` cut to `most` characters at a word's end, marked: a knob list cut mid-name
    read as a knob that does not exist."""
    if len(text) <= most:
        return text
    return text[: most - 2].rsplit(" ", 1)[0].rstrip(",;") + " …"


def verdict_text(e: RestructureScored, many: bool = False) -> str:
    """A scored restructure's verdict as every document says it: judged against the run's best
    when it was made (by the time it is judged, other teams' work may have raised the run's
    best, and a re-time lowered it); `many`: said of several restructures with this verdict."""
    before, then = speedup_text(e.best_before), speedup_text(e.best_after)
    its, made = ("their", "they were made") if many else ("its", "it was made")
    if e.helped:
        who = e.by or f"{its} teams"
        return f"helped: {who} beat the run's best when {made}, {before} ({then} when judged)"
    judged = "" if e.best_after == e.best_before else f" ({then} when judged)"
    return f"did not help: {its} teams did not beat the run's best when {made}, {before}{judged}"


def _what_changed(e: Restructured) -> str:
    """What a redirect, recompose or rebalance changed, which its reason does not say (a spawn
    or fork has its own team_spawned line; a retire changes nothing else)."""
    p = e.params
    if e.op == "redirect" and p.get("directive"):
        return f"; now: {clip(' '.join(str(p['directive']).split()), 200)}"
    if e.op == "recompose" and isinstance(p.get("added"), list):
        return f"; roles added: {', '.join(map(str, p['added']))}"
    if e.op == "rebalance" and isinstance(p.get("shares"), dict):
        shares = [f"{t} {v:.2f}" for t, v in p["shares"].items() if isinstance(v, int | float)]
        return "; shares: " + ", ".join(shares) if shares else ""
    return ""


def describe(e: Event) -> str:
    """One line for people: EVOLUTION.md rows and git commit messages."""
    match e:
        case RunStarted():
            skill = f", from the skill {e.skill['name']}" if e.skill else ""
            return f"run started on {e.target} with model {e.model}{skill}"
        case RunResumed():
            extra = f", recovered {', '.join(e.recovered)}" if e.recovered else ""
            return f"run resumed{extra}"
        case RunStopped():
            return f"run stopped: {e.code + ': ' if e.code else ''}{e.reason}"
        case HeldOutGraded():
            if e.status != "ok":
                return f"{e.candidate} on {e.split}: {e.status} {e.message[:120]}"
            return (
                f"{e.candidate} on {e.split}: {speedup_text(e.gain)} "
                f"(score {e.score:.4g}, baseline {e.baseline_score:.4g})"
            )
        case TargetChanged():
            what = "accepted as the run's target" if e.accepted else "evaluations refused"
            return f"the target changed ({', '.join(e.files[:5])}): {what}"
        case LogTampered():
            return (
                f"history.jsonl: {len(e.lines)} line(s) eat did not write, skipped "
                f"(first: line {e.lines[0] if e.lines else '?'}: {e.first})"
            )
        case TeamSpawned():
            start = f" from {e.start_from}" if e.start_from else ""
            kind = e.preset if e.preset == e.strategy else f"{e.preset}, {e.strategy}"
            return f"team {e.team} ({kind}{start}): {e.directive}"
        case CandidateEvaluated():
            knobs = ", ".join(f"{k}={v}" for k, v in e.knobs.items())
            what = speedup_text(e.speedup) if e.status == "ok" else e.message[:120]
            what += f" (score {e.score:.4g})" if e.score is not None else ""
            what += f", the same program as {e.same_as}: not evaluated again" if e.same_as else ""
            return f"{e.candidate} by {e.team}: {e.status} {what} ({knobs or e.idea})"
        case EliteRetimed():
            if e.score is None:
                return f"elite {e.candidate} re-timed: {e.status} {speedup_text(e.speedup)}"
            return (  # a program target's candidate is graded, not timed
                f"elite {e.candidate} graded again: {e.status} {speedup_text(e.speedup)} "
                f"(score {e.score:.4g})"
            )
        case PlateauDetected():
            who = f"team {e.team}" if e.team else "run"
            return f"plateau ({e.kind}) of {who}: {e.message}"
        case Restructured():
            who = f" {e.team}" if e.team else ""
            return f"restructure {e.op}{who}: {e.reason}{_what_changed(e)}"
        case TeamExhausted():
            return f"team {e.team} has nothing left to try"
        case HumanSteered():
            who = f"team {e.team}" if e.team else "the run"
            return f"a person steered {who} ({e.source}): {' '.join(e.text.split())[:200]}"
        case CandidateChecked():
            return f"team {e.team} checked a candidate: {e.status} {e.message[:100]}"
        case AttemptFailed():
            return f"team {e.team}: attempt failed ({e.kind}): {e.reason[:160]}"
        case PlanUpdated():
            return (
                f"team {e.team} planned: "
                + "; ".join(f"{i['idea'][:60]} (~{i['expected_gain']}x)" for i in e.ideas)[:300]
            )
        case SupervisorAdvised():
            if not e.accepted:
                return f"supervisor ({e.model}): invalid replies, the rules decided"
            return f"supervisor ({e.model}): {e.diagnosis[:200]}"
        case RestructureScored():
            return f"restructure #{e.restructure} {verdict_text(e)}"
    return ""
