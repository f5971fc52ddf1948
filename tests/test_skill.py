"""Skills: `eat skill export` writes what a run learned as SKILL.md; `eat start --skill` gives it
to every agent and the supervisor, and offline teams start from its best configurations."""

import itertools
import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from conftest import EXAMPLES, QUICK_EVALUATION
from fake_runner import FakeRunner
from llm_server import Reply

from eat.config import PlateauConfig
from eat.errors import BadInput
from eat.run import resume_run, run_status, start_run
from eat.skill import body, evaluations_to_reach, export, fingerprint, parse
from eat.target import load_target
from eat.workspace import Workspace

MODEL = "openai/eat-test-model"
# The optimum's value of each knob (the rest score by their distance in the knob's list):
# far from the baseline's first values, so a climb from the baseline takes many steps.
PEAK = {
    "LOOP_ORDER": "KJI",
    "TILE": "64",
    "UNROLL": "8",
    "MR": "6",
    "NR": "24",
    "PACK": "2",
    "CFLAGS": "-O3 -march=native -ffast-math",
    "VEC": "16",
}


def landscape(target):
    """Speedup: 1.2 ** (the baseline's distance to PEAK - the configuration's), the distance
    summed over knobs in steps along each knob's list of values."""
    t = load_target(target)

    def distance(knobs):
        return sum(
            abs(
                [str(v) for v in k.values].index(knobs.get(name, str(k.values[0])))
                - [str(v) for v in k.values].index(PEAK[name])
            )
            for name, k in t.knobs.items()
        )

    return lambda knobs: 1.2 ** (distance({}) - distance(knobs))


# Runs here have no opening (RunConfig.opening): the explorer's first pick, the configuration
# farthest from the baseline, lies next to PEAK, so an opening would find it at once with or
# without a skill; what a skill saves is the climb from the baseline.
def earlier_run(target, ws, evals=30, seed=0):
    return start_run(
        target, ws, runner=FakeRunner(landscape(target)), max_evals=evals, seed=seed, opening=0
    )


def evals_to_reach(ws, speedup):
    return evaluations_to_reach(Workspace.open(ws).read_events()[0], speedup)


@pytest.fixture(scope="module")
def earlier(tmp_path_factory):
    """One earlier run for the module's tests (read only): its target, workspace and skill."""
    root = tmp_path_factory.mktemp("earlier")
    target = root / "cpu_matmul"
    shutil.copytree(EXAMPLES / "cpu_matmul", target)
    with open(target / "target.toml", "a") as f:
        f.write(QUICK_EVALUATION)
    earlier_run(target, root / "ws")
    return target, root / "ws", export(root / "ws", root / "SKILL.md")


@pytest.fixture
def quick_matmul(earlier):
    return earlier[0]


@pytest.fixture
def skill_file(earlier, tmp_path):
    """A copy of the earlier run's skill; `tmp_path / "earlier"` is its workspace."""
    (tmp_path / "earlier").symlink_to(earlier[1])
    return Path(shutil.copy(earlier[2], tmp_path / "SKILL.md"))


def test_export_writes_front_matter_lessons_knobs_dead_ends_and_a_yaml_part(
    quick_matmul, tmp_path, skill_file
):
    text = skill_file.read_text()
    st = run_status(tmp_path / "earlier")
    front = yaml.safe_load(text.split("---\n")[1])
    assert front["name"] == "eat-cpu-matmul"
    assert f"{st['best_speedup']:.2f}x" in front["description"]
    assert "## Lessons that held" in text and "## What each knob does" in text
    assert "## Dead ends" in text
    # Lessons cite their evidence: a knob change with both candidates' ids and speedups.
    lesson = next(line for line in text.splitlines() if " over c0" in line and "->" in line)
    assert "x ->" in lesson and "x (c0" in lesson
    assert f"{st['best_candidate']} (team" in text and "Key ideas" in text
    assert "- MR=" in text and "Rows of the C block" in text  # a knob the best set, and why
    # How each knob matters at the best, all else equal: candidates one knob away from it.
    knobs = {
        e.candidate: e.knobs
        for e in Workspace.open(tmp_path / "earlier").read_events()[0]
        if e.type == "candidate_evaluated"
    }
    near = text.split("One knob changed from it, all else equal:\n")[1].split("\n\n")[0]
    for line in near.splitlines():
        cid = line.rsplit("(", 1)[1].rstrip(")")
        differ = [k for k, v in knobs[cid].items() if v != knobs[st["best_candidate"]][k]]
        assert len(differ) == 1 and line.startswith(f"- {differ[0]} "), line
    skill = parse(text)
    data = skill.data
    assert data.target == "cpu_matmul"
    assert data.knob_space == fingerprint(load_target(quick_matmul))
    assert data.best.candidate == st["best_candidate"] == data.top[0].candidate
    assert data.best.speedup == pytest.approx(st["best_speedup"], rel=1e-3)
    assert [c.speedup for c in data.top] == sorted((c.speedup for c in data.top), reverse=True)
    assert 1 < len(data.top) <= 8 and len({json.dumps(c.knobs) for c in data.top}) == len(data.top)
    # The yaml part round-trips: written again, it reads back the same.
    again = yaml.safe_dump(data.model_dump(), sort_keys=False)
    assert parse(text.replace(text.split("```yaml\n")[1].split("```")[0], again)).data == data
    assert body(skill.text).startswith("# Making cpu_matmul faster")


def test_cli_export_writes_skill_md_here_and_never_over_a_persons_file(tmp_path, skill_file):
    here = tmp_path / "here"
    here.mkdir()
    done = subprocess.run(
        [sys.executable, "-m", "eat", "skill", "export", str(tmp_path / "earlier")],
        cwd=here,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    written = here / "SKILL.md"
    assert parse(written.read_text()).data == parse(skill_file.read_text()).data
    again = export(tmp_path / "earlier", written)  # a skill eat wrote is written over
    assert parse(again.read_text()).data == parse(skill_file.read_text()).data

    mine = "# My own notes on this kernel\n"
    written.write_text(mine)
    done = subprocess.run(
        [sys.executable, "-m", "eat", "skill", "export", str(tmp_path / "earlier")],
        cwd=here,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 2 and done.stderr.count("\n") == 1, done.stderr
    assert "not a skill eat exported" in done.stderr
    assert written.read_text() == mine


def test_export_to_a_place_it_cannot_write_is_bad_input_and_makes_nothing(tmp_path, skill_file):
    earlier = tmp_path / "earlier"
    for out, words in [
        (tmp_path / "no" / "SKILL.md", "no such folder"),  # was made, folders and all
        (tmp_path, "is a folder"),
        (Path("/proc/SKILL.md"), "cannot write"),  # was a traceback
    ]:
        with pytest.raises(BadInput, match=words):
            export(earlier, out)
    assert not (tmp_path / "no").exists()


def test_a_run_given_the_skill_reaches_the_earlier_best_sooner(quick_matmul, tmp_path, skill_file):
    best = run_status(tmp_path / "earlier")["best_speedup"]
    # Seeds other than the earlier run's: the skill must help, not the same random choices.
    # The explorer does not play first: its first pick lies next to PEAK (see above).
    teams = ["coordinate", "explorer", "model"]
    for seed in (1, 2):
        start_run(
            quick_matmul,
            tmp_path / f"with{seed}",
            runner=FakeRunner(landscape(quick_matmul)),
            max_evals=12,
            seed=seed,
            skill=skill_file,
            teams=teams,
        )
        start_run(
            quick_matmul,
            tmp_path / f"without{seed}",
            runner=FakeRunner(landscape(quick_matmul)),
            max_evals=12,
            seed=seed,
            opening=0,
            teams=teams,
        )
        with_skill = evals_to_reach(tmp_path / f"with{seed}", best)
        without = evals_to_reach(tmp_path / f"without{seed}", best)
        assert with_skill is not None and (without is None or with_skill < without)
    first = Workspace.open(tmp_path / "with1").read_events()[0]
    started = first[0]
    assert started.skill["name"] == "eat-cpu-matmul" and started.skill["file"] == str(skill_file)
    assert (tmp_path / "with1" / "SKILL.md").read_text() == skill_file.read_text()
    assert (
        run_status(tmp_path / "with1")["skill"]["best"]
        == parse(skill_file.read_text()).data.best.candidate
    )
    ideas = [e.idea for e in first if e.type == "candidate_evaluated"]
    assert any(i.startswith("the skill's c0") for i in ideas)


def test_resume_uses_the_workspace_copy_of_the_skill(quick_matmul, tmp_path, skill_file):
    ws = tmp_path / "ws"
    runner = FakeRunner(landscape(quick_matmul))
    # The explorer plays first and goes elsewhere; the refiner's first turn comes after resume
    # (unsupervised, so the explorer's first candidate, the run's best, does not play on).
    start_run(
        quick_matmul,
        ws,
        runner=runner,
        max_evals=1,
        teams=["explorer", "refiner"],
        skill=skill_file,
        supervise=False,
    )
    skill_file.unlink()  # the run keeps its own copy
    resume_run(ws, runner=runner, max_evals=2)
    first, second = [
        e for e in Workspace.open(ws).read_events()[0] if e.type == "candidate_evaluated"
    ]
    best = parse((ws / "SKILL.md").read_text()).data.best
    assert first.team == "explorer-1" and not first.idea.startswith("the skill's")
    assert second.team == "refiner-2" and second.knobs == best.knobs
    assert second.idea.startswith(f"the skill's {best.candidate}")


def test_bad_and_mismatched_skills_exit_2_and_create_nothing(quick_matmul, tmp_path, skill_file):
    other = tmp_path / "other"
    other.mkdir()
    toml = (quick_matmul / "target.toml").read_text()
    (other / "target.toml").write_text(
        toml.replace("values = [0, 2, 4, 6, 8]", "values = [0, 2, 4]")
    )
    for name in ("reference.py", "baseline.c"):
        (other / name).write_text((quick_matmul / name).read_text())
    no_yaml = tmp_path / "plain.md"
    no_yaml.write_text("---\nname: x\ndescription: y\n---\n# nothing for eat\n")
    for i, (target, skill, words) in enumerate(
        [
            (quick_matmul, tmp_path / "missing.md", "file not found"),
            (quick_matmul, quick_matmul / "baseline.c", "not a skill"),
            (quick_matmul, no_yaml, "no eat block"),
        ]
    ):
        with pytest.raises(BadInput, match=words):
            start_run(target, tmp_path / f"w{i}", skill=skill, max_evals=1)
        assert not (tmp_path / f"w{i}").exists()
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "eat",
            "start",
            str(other),
            "-w",
            str(tmp_path / "w"),
            "--skill",
            str(skill_file),
            "--max-evals",
            "1",
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 2, done.stderr
    assert done.stderr.count("\n") == 1 and "MR has other values" in done.stderr, done.stderr
    assert not (tmp_path / "w").exists()
    with pytest.raises(BadInput, match="nothing to export"):
        start_run(
            quick_matmul, tmp_path / "failing", runner=FakeRunner(lambda k: None), max_evals=2
        )
        export(tmp_path / "failing", tmp_path / "none.md")
    assert not (tmp_path / "none.md").exists()


@pytest.mark.slow
def test_llm_coder_and_supervisor_prompts_carry_the_skill(
    quick_matmul, tmp_path, skill_file, llm_server
):
    base = (quick_matmul / "baseline.c").read_text()
    variants = itertools.count()

    def answer(req):
        text = json.dumps(req["messages"])
        if "# Supervisor's decision" in text:
            return Reply(
                json.dumps({"diagnosis": "stalled after c0001", "operations": [], "lessons": []})
            )
        if "# Plan the next ideas" in text:
            return Reply(json.dumps({"ideas": [{"idea": "unroll", "expected_gain": 1.2}]}))
        return Reply(f"Try variant.\n\n```c\n// variant {next(variants)}\n{base}```\n")

    llm_server.default = answer
    start_run(
        quick_matmul,
        tmp_path / "ws",
        runner=FakeRunner(lambda k: 1.0),
        model=MODEL,
        supervisor_model=MODEL,
        api_base=llm_server.base_url,
        teams=["coordinate"],
        max_evals=5,
        repairs=0,
        llm_backoff_s=0,
        llm_timeout_s=10,
        skill=skill_file,
        plateau=PlateauConfig(team_window=2, run_window=2, min_gain=5.0, score_after=2),
        sleep=lambda s: None,
    )
    prompts = [json.dumps(r.messages) for r in llm_server.requests]
    coder = [p for p in prompts if "# Your turn" in p]
    supervisor = [p for p in prompts if "# Supervisor's decision" in p]
    assert coder and supervisor
    best = parse(skill_file.read_text()).data.best
    for prompt in coder[:1] + supervisor[:1]:
        assert "A skill learned by an earlier run on this target (SKILL.md)" in prompt
        assert "# Making cpu_matmul faster" in prompt and f"{best.candidate} (team" in prompt
        assert "name: eat-cpu-matmul" not in prompt  # the front matter stays out


def test_a_new_best_that_a_retime_put_below_what_it_beat_is_not_a_lesson_that_held():
    from test_rules import History

    from eat.events import EliteRetimed
    from eat.skill import held

    h = History("coordinate-1")
    h.eval("coordinate-1", 2.0, TILE=0)
    h.eval("coordinate-1", 2.5, TILE=16)  # a new best over c0001 ...
    h.eval("coordinate-1", 3.0, TILE=32)  # ... and one over c0002
    for t in (1.8, 1.9):
        h.add(EliteRetimed(candidate="c0003", speedup=t))  # c0003 is 1.90x by its median now
    kept, dropped = held(h.state)
    texts = [t for t, _ in kept]
    assert any("(c0002 over c0001)" in t for t in texts)
    assert not any("(c0003 over c0002)" in t for t in texts) and dropped == 1


def test_a_programs_skill_names_its_best_by_the_graders_metric_as_learning_md_does():
    """SKILL.md names the best as LEARNING.md does (one sentence): a program's gain is its
    grader's metric, not a speedup."""
    from history import History

    from eat.learning import best_line
    from eat.skill import render

    h = History("coordinate-1")
    h.eval("coordinate-1", 1.2)
    h.eval("coordinate-1", 1.5)
    target = load_target(EXAMPLES / "pendulum_policy")
    line = render(h.state, target).split("## The best candidate\n\n")[1].splitlines()[0]
    assert line == best_line(h.state.best, target, most=300)
    assert line.startswith(f"c0002 (team coordinate-1): 1.50x {target.metric_name} over the")
