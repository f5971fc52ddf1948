"""Skills: what a run learned, as a SKILL.md that later runs and agent tools can read.

A skill is YAML front matter (`name`, `description`: what agent tools index) and markdown for
people and models (the lessons that held, with their evidence; what each knob does; dead ends;
the best candidate), then one fenced ```yaml block for eat itself (`SkillData`): the target,
a fingerprint of its knob space, and the best configurations with their speedups.

`eat start --skill FILE` refuses a skill whose knob space differs from the target's (BadInput):
its configurations would name knobs or values the target lacks, and a skill's prose about
other knobs would mislead more than help. The text goes into every LLM prompt; the offline
agents start from its configurations (eat.agents.offline).
"""

from __future__ import annotations

import hashlib
import json
import re
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, Field, ValidationError

from eat import learning
from eat.errors import BadInput, read_file
from eat.events import clip, speedup_text
from eat.state import Candidate, RunState, known_estimate
from eat.target import Target, load_target
from eat.workspace import Workspace, write_output

VERSION = 1
TOP = 8  # configurations kept, best first
SOURCE_CAP = 12_000  # the best candidate's source is shown up to this many characters
_FRONT = re.compile(r"\A---\n(.*?)\n---\n", re.S)
_YAML = re.compile(r"^```yaml\n(.*?)^```", re.S | re.M)


class Config(BaseModel):
    """A configuration the earlier run measured."""

    candidate: str = Field(description="Its candidate id in the earlier run.")
    speedup: float = Field(description="Its speedup there (median of its measurements).")
    knobs: dict[str, Any] = Field({}, description="Its knob values ({} for an LLM's source).")


class SkillData(BaseModel):
    """The machine-readable part of a SKILL.md (its ```yaml block)."""

    eat_skill: int = Field(VERSION, description="Format version of this block.")
    target: str = Field(description="Name of the target the run optimized.")
    knob_space: str = Field(
        description="Fingerprint of the target's knobs (names, kinds, "
        "values, in order): a skill is used only on the same space."
    )
    knobs: dict[str, list[Any]] = Field(
        {}, description="The knob space itself, to explain a mismatch."
    )
    evaluations: int = Field(0, description="Evaluations the run spent.")
    best: Config = Field(description="The run's best candidate.")
    top: list[Config] = Field(
        description="The best configurations, best first (the best included)."
    )


class Skill(BaseModel):
    """A SKILL.md as read back."""

    name: str = Field(description="Front matter `name`.")
    description: str = Field(description="Front matter `description`.")
    text: str = Field(description="The whole file, as given.")
    data: SkillData = Field(description="Its machine-readable part.")


def body(text: str) -> str:
    """What prompts show of a SKILL.md: the file without its front matter."""
    return _FRONT.sub("", text, count=1).strip()


def fingerprint(target: Target) -> str:
    """A short hash of the target's knob space: names, kinds and values, in their order (the
    offline agents place values by their index)."""
    space = [[name, k.kind, [str(v) for v in k.values]] for name, k in target.knobs.items()]
    return "sha256:" + hashlib.sha256(json.dumps(space).encode()).hexdigest()[:16]


# -- export ------------------------------------------------------------------------------------


def export(workspace: Path, out: Path | None = None) -> Path:
    """Write the run's skill to `out` (default: SKILL.md in the current folder); returns it.
    Read-only on the workspace, so it is safe while the run goes on."""
    ws = Workspace.open(workspace)
    config = ws.config()
    events, _ = ws.read_events()
    state = RunState.from_events(events, config.windows())
    target = load_target(config.target)
    if state.best is None:
        raise BadInput(f"{workspace}: the run has no verified candidate yet; nothing to export")
    best = state.best
    source_file = ws.paths.source(best.team, best.cid, target.language)
    source = source_file.read_text() if source_file.is_file() else None
    out = Path(out) if out is not None else Path("SKILL.md")
    _refuse_to_clobber(out)
    write_output(out, render(state, target, source))
    return out


def _refuse_to_clobber(out: Path) -> None:
    """BadInput when `out` holds something other than a skill eat exported: a person's own
    SKILL.md (or any file) in the folder is never written over."""
    if not out.is_file():
        return  # nothing to keep (a folder or a missing one is write_output's to refuse)
    try:
        parse(out.read_text(), str(out))
    except (BadInput, OSError, UnicodeDecodeError):
        raise BadInput(
            f"{out}: exists and is not a skill eat exported; it is left as it is "
            "(remove it, or write elsewhere with -o FILE)"
        ) from None


def top_configs(state: RunState, n: int = TOP) -> list[Config]:
    """The run's best candidates by their estimate, one per program (configuration, source)."""
    seen, out = set(), []
    ranked = sorted(
        (c for c in state.candidates.values() if c.estimate is not None and not c.same_as),
        key=lambda c: (-known_estimate(c), c.index),
    )
    for c in ranked:
        key = json.dumps(c.knobs, sort_keys=True) if c.knobs else c.source_hash
        if key not in seen:
            seen.add(key)
            out.append(Config(candidate=c.cid, speedup=round(known_estimate(c), 4), knobs=c.knobs))
    return out[:n]


def held(state: RunState) -> tuple[list[tuple[str, list[str]]], int]:
    """The lessons still true now (a new best still above what it beat, after re-times; a
    restructure that helped), with their evidence; and how many did not hold."""
    kept, dropped = [], 0
    for lesson, (text, ids) in zip(state.lesson_log, learning.lessons(state)):
        if lesson.scored is not None:
            ok = lesson.scored.helped
        else:
            assert lesson.new is not None  # a lesson is a new best or a scored restructure
            # The lesson keeps the candidates as they were then; re-times replaced them since.
            new = state.candidates[lesson.new.cid].estimate
            old = state.candidates[lesson.old.cid].estimate if lesson.old else None
            ok = new is not None and (old is None or new > old)
        if ok:
            kept.append((text, ids))
        else:
            dropped += 1
    return kept, dropped


def _key_ideas(best: Candidate, target: Target) -> list[str]:
    """Each knob the best sets away from the baseline's value, with what the knob does."""
    lines = []
    for name, knob in target.knobs.items():
        value = best.knobs.get(name)
        if value is not None and str(value) != str(knob.values[0]):
            lines.append(
                f"{name}={value} (baseline {knob.values[0]})"
                + (f": {knob.help}" if knob.help else "")
            )
    return lines


def _slug(text: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-")


def render(state: RunState, target: Target, source: str | None = None) -> str:
    """The SKILL.md of a run: front matter, the markdown, the ```yaml block."""
    best = state.best
    assert best is not None  # export() refuses a run without a verified candidate
    top = top_configs(state)
    data = SkillData(
        target=target.name,
        knob_space=fingerprint(target),
        knobs={n: list(k.values) for n, k in target.knobs.items()},
        evaluations=state.spent_evals,
        best=top[0],
        top=top,
    )
    # a kernel is made faster; a program is made better by its grader's metric
    goal = f"better by its {target.grader.metric}" if target.grader else "faster"
    description = (
        f"What eat learned making {target.name} {goal}: best "
        f"{speedup_text(best.estimate)} {target.metric_name} over its baseline "
        f"({clip(best.what, 200)}) after {state.spent_evals} evaluations. Use when optimizing "
        f"{target.name} or a {'program' if target.grader else 'kernel'} with the same knobs; "
        f"`eat start {target.name} --skill SKILL.md` starts from its configurations."
    )
    front = yaml.safe_dump(
        {"name": f"eat-{_slug(target.name)}"[:64], "description": description[:1024]},
        sort_keys=False,
        width=100,
    )
    lessons, dropped = held(state)
    effects, dead, _ = learning.knob_effects(state, target)
    lines = [
        f"---\n{front}---",
        "",
        f"# Making {target.name} {goal}",
        "",
        f"Learned by an eat run ({state.spent_evals} evaluations, {len(state.teams)} "
        f"teams). Figures are the {target.metric_name} over the target's baseline, "
        + (
            "graded on the same seeds (a configuration's `speedup` below is that figure)"
            if target.grader
            else "timed beside it"
        )
        + "; candidate ids are the run's.",
        "",
        "## Lessons that held",
        "",
    ]
    if state.older_lessons:
        lines.append(
            f"- {state.older_lessons} earlier lessons, consolidated, resting on "
            f"{', '.join(state.older_ids)}"
        )
    lines += [f"- {text}" for text, _ in lessons] or ["- none"]
    if dropped:
        lines.append(f"- ({dropped} more did not hold when re-timed or scored)")
    if state.supervisor_notes:
        lines += ["", "## The supervisor's notes", ""] + [f"- {n}" for n in state.supervisor_notes]
    if target.knobs:
        lines += ["", "## What each knob does", ""] + ([f"- {e}" for e in effects] or ["- no data"])
        lines += ["", "## Dead ends", ""] + ([f"- {d}" for d in dead] or ["- none found"])
    lines += ["", "## The best candidate", "", learning.best_line(best, target, most=300)]
    ideas = _key_ideas(best, target)
    if ideas:
        lines += ["", "Key ideas (its source is the baseline with these knob values):"] + [
            f"- {i}" for i in ideas
        ]
    elif source and len(source) <= SOURCE_CAP:  # an agent's own source: the idea is the code
        lines += ["", f"```{target.fence}", source.rstrip(), "```"]
    near, _ = learning.around_best(state, target)
    if near:
        lines += ["", "One knob changed from it, all else equal:"] + [f"- {n}" for n in near]
    lines += ["", "## Top configurations", ""]
    lines += [
        f"- {c.candidate}: {speedup_text(c.speedup)}"
        + (f" ({', '.join(f'{k}={v}' for k, v in c.knobs.items())})" if c.knobs else "")
        for c in top
    ]
    lines += [
        "",
        "## For eat (machine-readable)",
        "",
        "```yaml",
        yaml.safe_dump(
            data.model_dump(), sort_keys=False, width=100, default_flow_style=None
        ).rstrip(),
        "```",
        "",
    ]
    return "\n".join(lines)


# -- reading -----------------------------------------------------------------------------------


def parse(text: str, where: str = "skill") -> Skill:
    """A SKILL.md's parts; BadInput saying what is wrong with it."""
    front = _FRONT.match(text)
    if not front:
        raise BadInput(f"{where}: not a skill (no YAML front matter between --- lines)")
    try:
        meta = yaml.safe_load(front.group(1))
    except yaml.YAMLError as e:
        raise BadInput(f"{where}: front matter is not valid YAML: {e}") from None
    if not isinstance(meta, dict) or not meta.get("name") or not meta.get("description"):
        raise BadInput(f"{where}: not a skill (front matter needs name and description)")
    for block in _YAML.findall(text):
        try:
            found = yaml.safe_load(block)
        except yaml.YAMLError:
            continue
        if isinstance(found, dict) and "eat_skill" in found:
            try:
                data = SkillData.model_validate(found)
            except ValidationError as e:
                err = e.errors()[0]
                raise BadInput(
                    f"{where}: eat block: {'.'.join(map(str, err['loc']))}: {err['msg']}"
                ) from None
            return Skill(
                name=str(meta["name"]), description=str(meta["description"]), text=text, data=data
            )
    raise BadInput(
        f"{where}: no eat block (a ```yaml block with eat_skill); export one with "
        "`eat skill export`"
    )


def load(path: Path, target: Target) -> Skill:
    """The skill at `path`, checked against `target`: BadInput when it is missing, is not a
    skill, or was learned on another knob space."""
    skill = parse(read_file(path), str(path))
    mismatch = _mismatch(skill.data, target)
    if mismatch:
        raise BadInput(
            f"{path}: learned on {skill.data.target}, whose knobs differ from "
            f"{target.name}'s: {mismatch}"
        )
    return skill


def _mismatch(data: SkillData, target: Target) -> str:
    """What differs between the skill's knob space and the target's ('' when none does)."""
    if data.knob_space == fingerprint(target):
        return ""
    ours = {n: [str(v) for v in k.values] for n, k in target.knobs.items()}
    theirs = {n: [str(v) for v in vs] for n, vs in data.knobs.items()}
    diffs = [f"{n} only in the skill" for n in theirs if n not in ours]
    diffs += [f"{n} only in the target" for n in ours if n not in theirs]
    diffs += [f"{n} has other values" for n in ours if n in theirs and ours[n] != theirs[n]]
    return ", ".join(diffs) or "knob order or kinds differ"


def evaluations_to_reach(events: list, speedup: float) -> int | None:
    """What a skill is for, measured: the evaluations a run spent (candidates and re-times, in
    log order) up to the first candidate measured at `speedup` or above (None: never)."""
    used = 0
    for e in events:
        if e.type in ("candidate_evaluated", "elite_retimed"):
            used += 1
            if e.type == "candidate_evaluated" and (e.speedup or 0.0) >= speedup:
                return used
    return None


def record(skill: Skill, given: Path) -> dict[str, Any]:
    """What run_started records of the skill a run was given."""
    return {
        "name": skill.name,
        "file": str(given),
        "target": skill.data.target,
        "knob_space": skill.data.knob_space,
        "best": skill.data.best.candidate,
        "best_speedup": skill.data.best.speedup,
        "configurations": len(skill.data.top),
    }
