"""What a run writes for people to read, besides the log: LEARNING.md (lessons with evidence,
dead ends, open hypotheses), each team's NOTES.md and team.yaml, and the commit of each step.

eat owns the text between the markers and rewrites it from the RunState, on the main thread;
people write outside them. LEARNING.md stays under a size cap by consolidation: the oldest
lessons of a list are merged into one line that still cites their candidates; nothing is cut
off the end.
"""

from __future__ import annotations

import json

import numpy as np

from eat.context import RunContext
from eat.events import clip, gflops_text, speedup_text, verdict_text
from eat.knobspace import differing
from eat.llm import redact
from eat.state import Candidate, RunState, Team, spread
from eat.steer import BEGIN, END, directive_of, merge_write, outside, splice
from eat.target import Target

CAP_CHARS = 6000


def _diff(new: dict, old: dict) -> str:
    changed = [f"{k} {old.get(k)} -> {v}" for k, v in new.items() if old.get(k) != v]
    return ", ".join(changed) or "same knobs (timing noise)"


def _handover(retimed: Candidate, new: Candidate, old, new_x, old_x) -> str:
    """A re-time changed who leads: the re-timed candidate took the lead, or lost it."""
    again = "timed again" if retimed.score is None else "graded again"  # a program is graded
    timed = f"{retimed.cid}, {again} ({len(retimed.measurements)} measurements, now " + (
        f"{speedup_text(retimed.estimate)})" if retimed.estimate is not None else "failing)"
    )
    if retimed.cid == new.cid:
        return f"{timed}, leads: {speedup_text(new_x)} against {old.cid}'s {speedup_text(old_x)}"
    return f"{timed}, no longer leads: {new.cid} does, at {speedup_text(new_x)}"


def _steadier(new: Candidate, old: Candidate, new_x, old_x) -> str:
    """Why a best of a lower figure leads: the run ranks by the figure less its spread."""
    if new_x is None or old_x is None or new_x > old_x:
        return ""
    return f", steadier (±{spread(new):.0%} against ±{spread(old):.0%})"


def _cites(ids: list[str], most: int = 8) -> str:
    shown = ", ".join(ids[:most])
    return shown + (f" and {len(ids) - most} more" if len(ids) > most else "")


def lessons(state: RunState) -> list[tuple[str, list[str]]]:
    """The run's lessons, oldest first, each with the candidate ids it rests on."""
    out = []
    for lesson in state.lesson_log:
        new, old, new_x, old_x = lesson.new, lesson.old, lesson.new_x, lesson.old_x
        if new is not None:
            if lesson.retimed is not None:
                text = _handover(lesson.retimed, new, old, new_x, old_x)
            elif old is None:
                text = (
                    f"first working candidate {new.cid}: {speedup_text(new_x)} ({clip(new.what)})"
                )
            else:
                what = _diff(new.knobs, old.knobs) if new.knobs or old.knobs else None
                text = (
                    f"{what or clip(new.idea) or 'a new source'}: {speedup_text(old_x)} -> "
                    f"{speedup_text(new_x)}{_steadier(new, old, new_x, old_x)} "
                    f"({new.cid} over {old.cid})"
                )
        else:
            s = lesson.scored
            assert s is not None  # a lesson is a new best or a scored restructure
            text = f"restructure ({lesson.what}) {verdict_text(s)}"
        out.append((text, lesson.ids))
    return out


def _grouped(
    state: RunState, items: list[tuple[str, list[str]]]
) -> list[tuple[str, list[str], int]]:
    """The lessons with each run of restructures of one verdict in a row as one line (a stalled
    run forks one team after another, each judged against the same best): (text, ids, how
    many lessons the line stands for)."""
    out: list[tuple[str, list[str], int]] = []
    run: list[str] = []  # what each restructure of the last line did, when it is such a run
    last = None
    for lesson, (text, ids) in zip(state.lesson_log, items):
        scored = lesson.scored
        verdict = verdict_text(scored) if scored is not None else None
        if scored is not None and verdict == last:
            run.append(lesson.what)
            _, cited, n = out[-1]
            many = verdict_text(scored, many=True)
            out[-1] = (f"restructures ({', '.join(run)}) {many}", cited + ids, n + 1)
            continue
        run, last = [lesson.what], verdict
        out.append((text, ids, 1))
    return out


def _tries(n: int) -> str:
    return f"{n} try" if n == 1 else f"{n} tries"


def knob_effects(state: RunState, target: Target) -> tuple[list[str], list[str], list[str]]:
    """Per knob: the best value with its evidence; dead ends; values never tried."""
    effects, dead, untried = [], [], []
    best = state.best_speedup or 0.0
    lead = state.best
    for name, knob in target.knobs.items():
        rows = []
        for value in knob.values:
            tries, top, cid = state.knob_stats.get((name, str(value)), [0, None, None])
            now = state.candidates[cid].estimate if cid in state.candidates else None
            if now is not None:  # its figure now, re-times included, as the rest of the file
                top = now
            # A re-time may have put the cited candidate below the run's best, which the stats
            # (kept as candidates land) do not follow; its own values cite it.
            if lead and str(lead.knobs.get(name)) == str(value) and (top is None or best > top):
                top, cid = best, lead.cid
            if tries == 0:
                untried.append(f"{name}={value}")
            elif top is not None:
                rows.append((top, value, cid, tries))
            if tries >= 3 and (top is None or top < 0.5 * best):
                dead.append(
                    f"{name}={value}: best {speedup_text(top)} over {_tries(tries)}"
                    + (f" ({cid})" if cid else "")
                )
        if rows:
            rows.sort(key=lambda r: -r[0])
            top, value, cid, tries = rows[0]
            worst = rows[-1]
            effects.append(
                f"{name}: best with {value} ({speedup_text(top)}, {cid})"
                + (
                    f"; with {worst[1]} at most {speedup_text(worst[0])} over {_tries(worst[3])}"
                    f" ({worst[2]})"
                    if len(rows) > 1
                    else ""
                )
            )
    return effects, dead, untried


def around_best(state: RunState, target: Target) -> tuple[list[str], list[str]]:
    """The best's neighbours measured with one knob changed, in the knobs' and their values'
    order (how much each knob matters where the run stands, all else equal, unlike the best
    per value above), and the knobs with none."""
    b, index = state.best, state.knob_index
    if b is None or b.cid not in index.rows:  # no best, or one without knobs
        return [], []
    # Over the run's KnobIndex at once: compared one candidate at a time, this took 37% of a
    # step's time after 10,000 candidates.
    names, knob_of = list(target.knobs), list(index.columns)
    codes = index.by_knob()
    best = codes[:, index.rows[b.cid]]
    found: dict[str, list[Candidate]] = {}
    for row in np.flatnonzero(differing(codes, best) == 1):
        (column,) = np.flatnonzero(codes[:, row] != best)
        found.setdefault(knob_of[column], []).append(state.candidates[index.cids[row]])
    lines = []
    for name in names:
        order = [str(v) for v in target.knobs[name].values]
        value = str(b.knobs.get(name))
        for c in sorted(found.get(name, []), key=lambda c: _position(order, c.knobs.get(name))):
            result = speedup_text(c.estimate) if c.estimate is not None else c.status
            same = f", the same program as {c.same_as}" if c.same_as else ""
            lines.append(f"{name} {value} -> {c.knobs.get(name)}: {result} ({c.cid}{same})")
    return lines, [n for n in names if n not in found]


def _position(order: list[str], value) -> int:
    return order.index(str(value)) if str(value) in order else len(order)


def render(state: RunState, target: Target, cap: int = CAP_CHARS) -> str:
    """The managed block; older lessons are consolidated until it fits in `cap`."""
    items = _grouped(state, lessons(state))
    effects, dead, untried = knob_effects(state, target)
    near, unmeasured = around_best(state, target)
    best = best_line(state.best, target)
    keep = len(items)
    while True:
        text = _compose(state, items, keep, effects, dead, untried, near, unmeasured, best)
        if len(text) <= cap or keep == 0:
            break
        keep = keep // 2 if keep > 4 else keep - 1
    while len(text) > cap and (dead or untried or effects or near):
        # Still too long: merge the longest detail list into a count (never drop the tail).
        longest = max((dead, untried, effects, near), key=len)
        longest[:] = [f"{len(longest)} entries consolidated"]
        text = _compose(state, items, keep, effects, dead, untried, near, unmeasured, best)
    return text


def best_line(b: Candidate | None, target: Target, most: int = 160) -> str:
    """How LEARNING.md and SKILL.md name a run's best: its gain (a program's metric named), its
    GFLOP/s beside the vendor's, what it is (clipped to `most` characters)."""
    if b is None:
        return "No verified candidate yet."
    label = f" {target.metric_name}" if target.program else ""  # a kernel's is its speedup
    flops = gflops_text(b.gflops, b.vendor_gflops, target.vendor_name)
    return (
        f"{b.cid} (team {b.team}): {speedup_text(b.estimate)}{label} over the baseline"
        f"{'; ' + flops if flops else ''}; {clip(b.what, most)}"
    )


def _compose(state, items, keep, effects, dead, untried, near, unmeasured, best: str) -> str:
    # Most stable first, so LLM prompt caches keep hitting: the lessons only grow at their end;
    # what changes with every new best comes last.
    lines = ["## Lessons", ""]
    old, recent = items[: len(items) - keep], items[len(items) - keep :]
    if old or state.older_lessons:
        cited = list(dict.fromkeys(state.older_ids + [c for _, ids, _ in old for c in ids]))
        lines.append(
            f"- consolidated: {sum(n for _, _, n in old) + state.older_lessons} earlier "
            f"lessons, resting on {_cites(cited)}"
        )
    lines += [f"- {text}" for text, _, _ in recent] or ["- none yet"]
    if state.supervisor_notes:
        lines += ["", "## Supervisor's notes", ""] + [f"- {n}" for n in state.supervisor_notes]
    if state.knob_stats:
        lines += ["", "## What each knob does", ""] + ([f"- {e}" for e in effects] or ["- no data"])
        lines += ["", "## Dead ends", ""] + ([f"- {d}" for d in dead] or ["- none found"])
        lines += ["", "## Open hypotheses", ""]
        lines.append(
            f"- untried knob values: {', '.join(untried)}"
            if untried
            else "- every knob value has been tried at least once"
        )
    b = state.best
    if b and (near or unmeasured):
        lines += ["", f"## One knob from the best ({b.cid}, {speedup_text(b.estimate)})", ""]
        lines += [f"- {n}" for n in near]
        if unmeasured:
            lines.append(f"- not measured yet: {', '.join(unmeasured)}")
    lines += ["", "## Best so far", "", best]
    if state.restructures:
        lines.append(f"{state.restructures} restructures so far; {state.plateaus} plateaus")
    return "\n".join(lines)


def update(path, state: RunState, target: Target, cap: int = CAP_CHARS) -> bool:
    """Rewrite the managed block of LEARNING.md, keeping people's text, even text saved while
    eat rewrites (merge_write); True if it changed."""
    block = render(state, target, cap)
    empty = f"# Learning\n\n{BEGIN}\n{END}\n"
    return merge_write(path, lambda text: splice(text, block, empty), people=outside)


def commit_step(ctx: RunContext, message: str, teams: list[str], cid: str | None = None) -> None:
    """Refresh LEARNING.md and commit what changed: the candidate, best/, the teams' files."""
    p = ctx.ws.paths
    update(p.learning, ctx.state, ctx.target)
    paths = [p.learning, p.best] + [f for t in teams for f in (p.team_notes(t), p.team_spec(t))]
    if cid:
        paths.append(p.candidate(ctx.state.candidates[cid].team, cid))
    ctx.ws.commit(message, paths)


def write_notes(team: Team, ctx: RunContext) -> None:
    """The team's NOTES.md (eat's block: directive, strategy, best, recent attempts; people
    write outside it) and team.yaml (a directive a person saved there and the loop has not yet
    taken is kept)."""
    paths = ctx.ws.paths
    recent = ctx.state.recent_of(team.id, 10)
    best = team.best
    lines = [
        f"- preset: {team.preset}",
        f"- strategy: {team.strategy}",
        f"- state: {team.state}{' (nothing left to try)' if team.exhausted else ''}",
        f"- directive: {team.directive}",
        f"- evaluations: {team.evaluated}, since last improvement: {team.since_improvement}"
        + (f" ({team.copies} candidates repeated an evaluated program)" if team.copies else ""),
        f"- near the run's best: {team.hits} of them (pace {team.pace:.2f}; a supervised run "
        "gives teams turns by share and pace)",
        f"- best: {best.cid} at {best.estimate:.2f}x"
        if best and best.estimate
        else "- best: none yet",
        "",
        "## Recent attempts",
        "",
    ]
    for c in recent:
        result = f"{c.estimate:.2f}x" if c.estimate else c.status
        lines.append(f"- {c.cid}: {result} ({c.what})")
    if team.plan:
        lines += ["", "## Plan (planner's ideas, best first)", ""]
        for p in team.plan:
            mark = f"[x] {p['tried']}" if p["tried"] else "[ ]"
            lines.append(f"- {mark} {p['idea']} (expected {p['expected_gain']}x)")
    own = paths.agent_notes(team.id)
    if own.is_file():  # an agent with a worktree keeps its own notebook there
        lines += [
            "",
            "## The agent's notes (its worktree's NOTES.md)",
            "",
            redact(own.read_text())[:4000].strip(),
        ]
    spec = {
        "id": team.id,
        "preset": team.preset,
        "strategy": team.strategy,
        "directive": team.directive,
        "share": team.share,
        "state": team.state,
        "start_from": team.start_from,
    }
    notes, block = paths.team_notes(team.id), "\n".join(lines)
    if ctx.written.get(notes) != block:
        empty = (
            f"# Team {team.id}\n\nNotes for this team: write yours outside the markers "
            "(eat rewrites only the part between them); the team's agents are told what "
            f"you add.\n\n{BEGIN}\n{END}\n"
        )
        merge_write(notes, lambda text: splice(text, block, empty), people=outside)
        ctx.written[notes] = block
    spec_path = paths.team_spec(team.id)
    if ctx.written.get(spec_path) != spec:
        last = ctx.written.get(spec_path)

        def make(text: str | None) -> str:
            mine = dict(spec)
            theirs = directive_of(text) if text else None
            if (
                last
                and theirs
                and theirs
                not in (" ".join(last["directive"].split()), " ".join(team.directive.split()))
            ):
                mine["directive"] = theirs  # a person's edit the loop has yet to take
            # JSON scalars are YAML scalars: a readable team.yaml without the emitter's cost.
            return "".join(f"{k}: {json.dumps(v)}\n" for k, v in mine.items())

        merge_write(spec_path, make)
        ctx.written[spec_path] = spec
