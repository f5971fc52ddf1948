"""Program targets: a candidate file scored by the target's grader in a contained process, its
gain over the baseline, held-out splits, `# eat:knob` marks, and whole runs (offline and an
external agent) on them. Every grader here is real Python run by the real runner."""

import json
import math
import textwrap
from pathlib import Path

import pytest
from history import CFG, History

from eat.agents.offline import render
from eat.errors import TargetError
from eat.events import TeamSpawned
from eat.plateau import detect_plateaus
from eat.report import write_report
from eat.run import run_status, start_run
from eat.runners import runner_for
from eat.runners.program import gain
from eat.target import assign_knobs, load_target, marked_knobs
from eat.turn import evaluated_event

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"

# The optimum is X=3, Y=-1; each seed adds a little deterministic noise.
PROGRAM = """\
X = 0  # eat:knob [0, 1, 2, 3, 4]
Y = 0  # eat:knob [-2, -1, 1]


def solve():
    return X, Y
"""

GRADER = """\
import importlib.util, json, os, random

HERE = os.path.dirname(os.path.abspath(__file__))
HELD = json.load(open(os.path.join(HERE, "private", "held.json")))  # read before the fence


def load(folder):
    spec = importlib.util.spec_from_file_location("cand", os.path.join(folder, "prog.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def grade(folder, split, seed):
    x, y = load(folder).solve()
    assert isinstance(x, (int, float)), f"solve() gave {x!r} for x"
    rng = random.Random(HELD[seed % len(HELD)] if split == "held_out" else seed)
    cost = (x - 3) ** 2 + (y + 1) ** 2
    # an episode's own noise (the seed's, the same for every candidate) and a measurement's
    # (each candidate's own, as a throughput's timing would be; seeded, so the test is the same
    # on every run)
    mine = random.Random(f"{seed}:{x}:{y}")
    score = 100 - cost + rng.gauss(0, NOISE) + mine.gauss(0, JITTER)
    return {"score": score, "cost": cost, "note": "text is kept out"}
"""


def make_target(
    root, *, goal="max", noise=0.2, jitter=0.0, grader_extra="", metric="score", **grader
):
    root.mkdir(parents=True, exist_ok=True)
    fields = {"file": "grader.py", "metric": metric, "goal": goal, "held_out": "held_out"}
    fields |= grader
    lines = "\n".join(f"{k} = {json.dumps(v)}" for k, v in fields.items() if v is not None)
    (root / "target.toml").write_text(
        textwrap.dedent(
            """\
            name = "toy"
            description = "Bring solve() to the grader's optimum."
            runner = "program"
            language = "python"

            [baseline]
            file = "prog.py"

            [evaluation]
            timeout_s = 20

            [grader]
            """
        )
        + lines
        + "\n"
    )
    (root / "prog.py").write_text(PROGRAM)
    (root / "grader.py").write_text(
        GRADER.replace("NOISE", repr(noise)).replace("JITTER", repr(jitter)) + grader_extra
    )
    (root / "private").mkdir(exist_ok=True)
    (root / "private" / "held.json").write_text("[101, 202, 303, 404]")
    return root


@pytest.fixture
def toy(tmp_path):
    return make_target(tmp_path / "toy")


def test_marked_knobs_are_read_and_set_in_place():
    knobs = marked_knobs(PROGRAM)
    assert {k: v.values for k, v in knobs.items()} == {"X": [0, 1, 2, 3, 4], "Y": [0, -2, -1, 1]}
    assert all(k.kind == "assign" for k in knobs.values())
    out = assign_knobs(PROGRAM, {"X": 3, "Y": -1})
    assert out.splitlines()[:2] == [
        "X = 3  # eat:knob [0, 1, 2, 3, 4]",
        "Y = -1  # eat:knob [-2, -1, 1]",
    ]
    assert out.splitlines()[2:] == PROGRAM.splitlines()[2:]
    with pytest.raises(ValueError, match="line 1"):
        marked_knobs("X = 1  # eat:knob\n")
    with pytest.raises(ValueError, match="literals"):
        marked_knobs("X = f(1)  # eat:knob [1, 2]\n")


def test_a_program_target_loads_with_its_knobs_and_bad_ones_name_the_field(toy, tmp_path):
    t = load_target(toy)
    assert t.program and t.grader.metric == "score" and list(t.knobs) == ["X", "Y"]
    assert t.metric_name == "score gain" and t.judge_file == "grader.py"
    bad = make_target(tmp_path / "bad", goal="up")
    with pytest.raises(TargetError, match="grader.goal"):
        load_target(bad)
    with pytest.raises(TargetError, match="grader.file"):
        load_target(make_target(tmp_path / "none", file="missing.py"))
    both = make_target(tmp_path / "both", command=["true"])
    with pytest.raises(TargetError, match="either file"):
        load_target(both)


@pytest.mark.parametrize(
    "score,base,goal,expected",
    [
        (200.0, 100.0, "max", 2.0),
        (-200.0, -800.0, "max", 4.0),  # a return: less negative is better
        (50.0, 100.0, "min", 2.0),
        (-100.0, -50.0, "min", 2.0),
        (10.0, -10.0, "max", 3.0),  # across zero: relative to |base|
    ],
)
def test_gain_is_above_one_when_better_whatever_the_goal(score, base, goal, expected):
    assert gain(score, base, goal) == pytest.approx(expected)


def test_a_better_program_gains_and_the_held_out_split_is_graded_apart(toy):
    t = load_target(toy)
    runner = runner_for(t)
    ev = runner.evaluate(t, render(t, {"X": 3, "Y": -1}))
    assert ev.status == "ok" and ev.metric == "score" and ev.split == "train"
    assert ev.score.median == pytest.approx(100, abs=1) and ev.baseline_score.median < 91
    assert ev.speedup == pytest.approx(ev.score.median / ev.baseline_score.median)
    assert ev.score.metrics["cost"] == 0 and "note" not in ev.score.metrics
    assert 3 <= ev.score.n <= t.grader.max_seeds and ev.score.n == ev.baseline_score.n
    held = runner.evaluate(t, render(t, {"X": 3, "Y": -1}), split="held_out")
    assert held.status == "ok" and held.split == "held_out"
    assert held.score.median != ev.score.median  # other episodes
    assert held.speedup > 1.05


def test_a_min_goal_counts_a_lower_metric_as_a_gain(tmp_path):
    t = load_target(make_target(tmp_path / "min", goal="min", metric="cost"))
    ev = runner_for(t).evaluate(t, render(t, {"X": 2, "Y": -1}))
    # the baseline's cost is 9 + 1 = 10, this one's 1
    assert ev.status == "ok" and ev.score.median == 1 and ev.speedup == pytest.approx(10.0)


def test_noisier_grades_take_more_seeds_and_their_spread_is_the_noise_plateaus_use(tmp_path):
    quiet = load_target(make_target(tmp_path / "quiet", max_seeds=12))
    loud = load_target(make_target(tmp_path / "loud", jitter=15.0, max_seeds=12))
    src = render(quiet, {"X": 2, "Y": -1})
    q, lo = runner_for(quiet).evaluate(quiet, src), runner_for(loud).evaluate(loud, src)
    assert q.score.n == quiet.grader.min_seeds and lo.score.n > q.score.n
    # Every candidate meets the same episodes: what the episodes share is no noise between two
    # candidates; what the measurement adds is.
    assert q.gain_rse < 0.01 and lo.gain_rse > 0.025
    noisy = evaluated_event("c0001", {"team": "a-1"}, lo)
    assert noisy.noise == lo.gain_rse and noisy.score == lo.score.median
    # Gains inside that noise are no progress: the team stalls as its window passes.
    h = History("a-1")
    h.add(noisy.model_copy(update={"seq": 0}))
    for k in range(1, 5):  # graded as noisily
        h.eval("a-1", noisy.speedup * (1 + noisy.noise * k / 5), noise=noisy.noise)
    assert h.state.threshold() == pytest.approx(noisy.noise)
    found = [(p.scope, p.kind, p.team) for p in detect_plateaus(h.state, CFG)]
    assert ("team", "stalled", "a-1") in found


BROKEN = {
    "crash": ("def solve():\n    raise RuntimeError('boom')\n", "crash", "boom"),
    "nan": ("def solve():\n    return float('nan'), -1\n", "crash", "score is nan"),
    "wrong": ("def solve():\n    return 'three', -1\n", "incorrect", "solve() gave 'three'"),
    "hang": (
        "import time\ntime.sleep(60)\ndef solve():\n    return 3, -1\n",
        "timeout",
        "wall-clock",
    ),
    "syntax": ("def solve(:\n", "compile_error", "SyntaxError"),
    "fork": ("import os\nos.fork()\n", "crash", "Operation not permitted"),
    "allocates 8 GB": ("x = bytearray(8 << 30)\n", "crash", "MemoryError"),
    "writes outside": ("open(OUTSIDE, 'w').write('x')\n", "crash", "Permission denied"),
    "exits early": ("import os\nos._exit(0)\n", "crash", "exited with code 0"),
    "reads held-out": (
        "import json\nSEEDS = json.load(open(HELD))\ndef solve():\n    return 3, -1\n",
        "rejected",
        "hidden",
    ),
}


@pytest.mark.parametrize("case", list(BROKEN))
def test_a_broken_candidate_is_a_status_with_its_message(toy, case):
    t = load_target(toy)
    cfg = t.evaluation.model_copy(update={"timeout_s": 5})
    source, status, words = BROKEN[case]
    source = source.replace("HELD", repr(str(toy / "private" / "held.json")))
    source = source.replace("OUTSIDE", repr(str(toy / "written.txt")))
    ev = runner_for(t).evaluate(t, source, config=cfg)
    assert ev.status == status and words in ev.message, ev.message
    assert not (toy / "written.txt").exists()


def test_a_candidate_cannot_forge_its_grades_by_printing(toy):
    t = load_target(toy)
    forged = '{"status": "ok", "message": "graded", "grades": [[{"score": 1e9}]]}'
    source = f"print('EAT-RESULT 0 ' + {forged!r})\n" + PROGRAM
    ev = runner_for(t).evaluate(t, source)
    assert ev.status == "ok" and ev.score.median < 100 and "EAT-RESULT" in ev.stderr


@pytest.mark.parametrize(
    "extra,words",
    [
        ("\ndef grade(folder, split, seed):\n    return {'cost': 1.0}\n", "lacks the metric"),
        ("\ndef grade(folder, split, seed):\n    return [1.0]\n", "not a dict"),
        ("\ndef grade(folder, split, seed):\n    return {'score': 'high'}\n", "not a number"),
    ],
)
def test_a_grader_without_the_metric_is_a_clear_failure(tmp_path, extra, words):
    t = load_target(make_target(tmp_path / "g", grader_extra=extra))
    ev = runner_for(t).evaluate(t, PROGRAM)
    assert ev.status == "crash" and words in ev.message


def test_a_command_grader_prints_json_and_one_that_prints_none_fails(tmp_path):
    root = make_target(tmp_path / "cmd", command=["python3", "grade_cmd.py"], file=None)
    (root / "grade_cmd.py").write_text(
        "import sys, runpy\n"
        "folder, split, seed = sys.argv[1], sys.argv[2], int(sys.argv[3])\n"
        "x, y = runpy.run_path(folder + '/prog.py')['solve']()\n"
        "print('working...')\n"
        "print('{\"score\": %f}' % (100 - (x - 3) ** 2 - (y + 1) ** 2))\n"
    )
    t = load_target(root)
    runner = runner_for(t)
    ev = runner.evaluate(t, render(t, {"X": 3, "Y": -1}))
    assert ev.status == "ok" and ev.score.median == 100 and ev.baseline_score.median == 90
    (root / "grade_cmd.py").write_text("print('no json here')\n")
    ev = runner_for(t).evaluate(t, PROGRAM)
    assert ev.status == "crash" and "no JSON" in ev.message


def test_an_offline_run_improves_the_program_and_grades_its_best_on_held_out(toy, tmp_path):
    ws = tmp_path / "ws"
    _, stop = start_run(toy, ws, max_evals=14, workers=1)
    assert stop.code == "max_evals"
    st = run_status(ws)
    assert st["metric"] == "score" and st["goal"] == "max" and st["best_speedup"] is None
    assert st["best_gain"] > 1.05 and st["best_score"] > 95
    held = st["held_out"]
    assert held["status"] == "ok" and held["candidate"] == st["best_candidate"]
    assert held["gain"] > 1.05 and held["score"] > held["baseline_score"]
    assert "on held_out" in (ws / "EVOLUTION.md").read_text()
    # no agent's prompt or worktree ever held the held-out data
    for f in ws.rglob("*"):
        if f.is_file() and "sealed" not in f.parts and f.suffix in (".md", ".py", ".json"):
            assert "[101, 202" not in f.read_text(errors="replace"), f


def test_an_external_agent_improves_a_program_end_to_end(toy, tmp_path):
    agent = tmp_path / "agent.sh"
    agent.write_text(
        "set -e\n"
        "eat check --json > check.json\n"
        "sed -e 's/^X = [0-9]*/X = 3/' -e 's/^Y = [-0-9]*/Y = -1/' prog.py > candidate.py\n"
        "eat check > check.txt\n"
        "eat submit -m 'X and Y at the optimum' --json > submit.json\n"
    )
    ws = tmp_path / "ws"
    _, stop = start_run(
        toy,
        ws,
        agent="command",
        agent_command=f"sh {agent}",
        teams=["coordinate"],
        max_evals=1,
        workers=1,
    )
    assert stop.code == "max_evals"
    wt = ws / "worktrees" / "coordinate-1"
    reply = json.loads((wt / "submit.json").read_text())
    assert reply["status"] == "ok" and reply["metric"] == "score" and reply["gain"] > 1.05
    assert json.loads((wt / "check.json").read_text())["status"] == "ok"
    assert (wt / "check.txt").read_text().startswith("ok  score 10")  # one seed, no baseline
    assert (wt / "grader.py").is_file() and not (wt / "private").exists()
    st = run_status(ws)
    assert st["best_gain"] == pytest.approx(reply["gain"]) and st["held_out"]["status"] == "ok"
    assert not math.isnan(st["held_out"]["gain"])


def test_status_of_a_program_run_speaks_of_its_metric(toy, tmp_path):
    ws = tmp_path / "ws"
    start_run(toy, ws, max_evals=3, workers=1, teams=["coordinate"])
    (spawned,) = [
        json.loads(line)
        for line in (ws / "history.jsonl").read_text().splitlines()
        if '"team_spawned"' in line
    ]
    assert TeamSpawned.model_validate(spawned).team == "coordinate-1"
    from typer.testing import CliRunner

    from eat.cli import app

    out = CliRunner().invoke(app, ["status", str(ws)]).output
    assert "score gain" in out and "held-out (held_out)" in out and "speedup" not in out
    watch = CliRunner().invoke(app, ["watch", str(ws), "--once"]).output
    assert "best score gain" in watch
    html = write_report(ws).read_text()
    assert "Best score gain over evaluations" in html and "Grades of the best" in html
    assert "score on held_out" in html


@pytest.mark.slow
def test_the_pendulum_example_run_offline_beats_its_baseline_on_held_out_episodes(tmp_path):
    ws = tmp_path / "ws"
    _, stop = start_run(EXAMPLES / "pendulum_policy", ws, max_evals=30, workers=1)
    assert stop.code == "max_evals"
    held = run_status(ws)["held_out"]
    # the baseline's mean return is about -490 on the held-out episodes, a tuned one's -150
    assert held["status"] == "ok" and held["baseline_score"] < -400
    assert held["score"] > -250 and held["gain"] > 1.6
    # its leaders are graded again, and the documents say so (not "re-timed": nothing is timed)
    evolution = (ws / "EVOLUTION.md").read_text()
    assert "graded again: ok" in evolution and "re-timed" not in evolution
    assert "timed again" not in (ws / "LEARNING.md").read_text()


def test_a_program_of_several_files_is_one_bundle_its_knobs_anywhere_in_it(toy, tmp_path):
    (toy / "prog.py").write_text(
        "X = 0  # eat:knob [0, 1, 2, 3, 4]\n\n\ndef solve():\n    return X, HELPER.Y\n"
    )
    (toy / "helper.py").write_text("Y = 0  # eat:knob [-2, -1, 1]\n")
    toml = (toy / "target.toml").read_text()
    (toy / "target.toml").write_text(
        toml.replace('file = "prog.py"', 'file = "prog.py"\nfiles = ["helper.py"]')
    )
    (toy / "grader.py").write_text(
        (toy / "grader.py")
        .read_text()
        .replace(
            "    spec.loader.exec_module(module)",
            "    path = os.path.join(folder, 'helper.py')\n"
            "    helper = importlib.util.spec_from_file_location('helper', path)\n"
            "    module.HELPER = importlib.util.module_from_spec(helper)\n"
            "    helper.loader.exec_module(module.HELPER)\n"
            "    spec.loader.exec_module(module)",
        )
    )
    t = load_target(toy)
    assert t.files == ["prog.py", "helper.py"] and list(t.knobs) == ["X", "Y"]
    assert t.unbundle(t.baseline_source())["helper.py"] == "Y = 0  # eat:knob [-2, -1, 1]\n"
    runner = runner_for(t)
    ev = runner.evaluate(t, render(t, {"X": 3, "Y": -1}))
    assert ev.status == "ok" and ev.score.metrics["cost"] == 0
    lacking = runner.evaluate(t, "# eat:file prog.py\n" + PROGRAM)
    assert lacking.status == "compile_error" and "lacks helper.py" in lacking.message
    ws = tmp_path / "ws"
    start_run(toy, ws, max_evals=14, workers=1)
    st = run_status(ws)
    assert st["best_gain"] > 1.05 and st["held_out"]["status"] == "ok"


def test_an_llm_team_improves_a_program_from_prompts_that_speak_of_its_grader(
    toy, tmp_path, llm_server
):
    better = assign_knobs(PROGRAM, {"X": 3, "Y": -1})
    plan = {"ideas": [{"idea": "X and Y at the grader's optimum", "expected_gain": 1.1}]}

    def answer(req):
        if "# Plan the next ideas" in json.dumps(req["messages"]):
            return json.dumps(plan)
        return f"Set X=3 and Y=-1.\n\n```python\n{better}```\n"

    llm_server.default = answer
    _, stop = start_run(
        toy,
        tmp_path / "ws",
        model="openai/eat-test-model",
        api_base=llm_server.base_url,
        teams=["coordinate"],
        max_evals=1,
        repairs=0,
        llm_backoff_s=0,
        llm_timeout_s=10,
        sleep=lambda s: None,
    )
    assert stop.code == "max_evals"
    st = run_status(tmp_path / "ws")
    assert st["best_gain"] > 1.05 and st["best_score"] > 99
    prompt = json.dumps(llm_server.requests[-1].messages)
    assert "metric `score`" in prompt and "## Grader (grader.py)" in prompt
    assert "speedup" not in prompt.lower() and "[101, 202" not in prompt
