"""Steering by files: people's saves survive eat's rewrites; edits become human_steered events
that the next prompts carry."""

import os
import subprocess
import sys
from pathlib import Path

from test_learning import TARGET, grown_history

from eat.learning import BEGIN, END, outside, render, splice, update
from eat.steer import merge_write

PERSON = """
import os, random, sys, time
from pathlib import Path
doc, end = Path(sys.argv[1]), sys.argv[2]
rng = random.Random(7)
for i in range(50):
    text = doc.read_text()        # read, edit, save: as an editor does
    text = text.replace(end, end + f"\\nnote {i} from a person", 1) if i % 3 == 0 \\
        else text.rstrip("\\n") + f"\\nnote {i} from a person\\n"
    if i % 2:                     # in place: truncate, then write
        with open(doc, "w") as f:
            f.write(text)
    else:                         # a new file renamed over the old one
        tmp = doc.with_name(doc.name + ".swp")
        tmp.write_text(text)
        os.replace(tmp, doc)
    time.sleep(rng.uniform(0, 0.01))
"""


def test_fifty_saves_racing_eats_rewrites_lose_nothing(tmp_path):
    # The person is another process, as an editor is, saving both ways editors do while eat
    # rewrites its block as fast as it can.
    doc = tmp_path / "LEARNING.md"
    doc.write_text(f"# Learning\n\n{BEGIN}\nNothing learned yet.\n{END}\n")
    states = [grown_history(n).state for n in range(1, 9)]
    blocks = [render(s, TARGET) for s in states]
    person = subprocess.Popen([sys.executable, "-c", PERSON, str(doc), END])
    rewrites = 0
    while person.poll() is None:
        block = blocks[rewrites % len(blocks)]
        merge_write(doc, lambda text, block=block: splice(text, block), people=outside)
        rewrites += 1
    assert person.returncode == 0
    update(doc, states[-1], TARGET)
    text = doc.read_text()
    missing = [i for i in range(50) if f"note {i} from a person\n" not in text + "\n"]
    assert not missing, f"lost saves {missing} over {rewrites} rewrites"
    assert text.count(BEGIN) == 1 and text.count(END) == 1 and "c0008" in text
    assert rewrites > 0  # eat rewrote while the person saved (how often is the machine's pace)


# -- steering a running loop ---------------------------------------------------------------

import threading  # noqa: E402
import time  # noqa: E402

from fake_runner import FakeRunner  # noqa: E402
from llm_server import Reply  # noqa: E402
from test_llm_loop import MODEL, Script, fenced, kernels  # noqa: E402
from test_rules import History  # noqa: E402

from eat.advisor import LLMAdvisor  # noqa: E402
from eat.events import HumanSteered  # noqa: E402
from eat.run import start_run  # noqa: E402
from eat.steer import send  # noqa: E402
from eat.workspace import Workspace  # noqa: E402


def _events(ws, kind):
    if not (ws / "history.jsonl").exists():
        return []
    return [e for e in Workspace.open(ws).read_events()[0] if e.type == kind]


def _wait_for(ws, kind, n=1, timeout=5.0):
    deadline = time.time() + timeout
    while time.time() < deadline:
        found = _events(ws, kind)
        if len(found) >= n:
            return found
        time.sleep(0.02)
    return _events(ws, kind)


def test_swapped_out_files_kept_for_late_saves_are_bounded(tmp_path):
    # Each rewrite keeps what it swapped out open for a while; a long run with many teams
    # rewrites many files, and must not run out of file descriptors.
    from eat.steer import KEEP_FILES

    before = len(os.listdir("/proc/self/fd"))
    for i in range(3 * KEEP_FILES):
        doc = tmp_path / f"NOTES{i}.md"
        doc.write_text(f"# Notes\n\n{BEGIN}\n{END}\nmine {i}\n")
        assert merge_write(doc, lambda text, i=i: splice(text, f"block {i}"), people=outside)
        assert f"mine {i}" in doc.read_text() and f"block {i}" in doc.read_text()
    assert len(os.listdir("/proc/self/fd")) - before <= KEEP_FILES + 1


def test_eats_own_rewrites_do_not_wake_the_loop_but_a_persons_save_does(tmp_path):
    # Waking on its own writes made the loop re-read every steerable file after every
    # evaluation (a 60-evaluation fake run took twice as long).
    from eat.steer import Steering
    from eat.workspace import Paths

    paths = Paths(tmp_path)
    paths.learning.write_text(f"# Learning\n\n{BEGIN}\nNothing learned yet.\n{END}\n")
    woken = threading.Event()
    steering = Steering(paths)
    steering.wake = woken.set
    steering.start()
    try:
        for n in range(1, 7):
            assert update(paths.learning, grown_history(n).state, TARGET)
        time.sleep(0.5)  # inotify delivers within milliseconds; give it ample time
        assert not woken.is_set()
        paths.learning.write_text(paths.learning.read_text() + "A person's line.\n")
        assert woken.wait(5.0)
    finally:
        steering.stop()


def test_an_edit_to_learning_md_mid_run_is_recorded_within_2s_and_reaches_the_next_prompt(
    quick_matmul, tmp_path, llm_server
):
    ws = tmp_path / "ws"
    _, fast, faster = kernels(quick_matmul)
    saved = {}

    def first(req):  # while the first kernel is being written, a person edits LEARNING.md
        doc = ws / "LEARNING.md"
        doc.write_text(doc.read_text() + "\nFrom Ana: try -funroll-loops next.\n")
        saved["at"] = time.time()
        saved["steered"] = _wait_for(ws, "human_steered")
        return Reply(fenced(fast))

    Script(llm_server).push(first).reply(fenced(faster, "Add -ffast-math."))
    start_run(
        quick_matmul,
        ws,
        model=MODEL,
        api_base=llm_server.base_url,
        teams=["coordinate"],
        max_evals=2,
        repairs=0,
        llm_backoff_s=0,
        llm_timeout_s=10,
        sleep=lambda s: None,
        runner=FakeRunner(lambda k: 2.0),
    )
    (steered,) = saved["steered"]
    assert steered.source == "learning" and steered.team is None
    assert steered.text.strip() == "From Ana: try -funroll-loops next."
    assert steered.time - saved["at"] < 2.0
    coder = [
        r.messages[-1]["content"]
        for r in llm_server.requests
        if "# Your turn" in r.messages[-1]["content"]
    ]
    assert len(coder) == 2
    assert "What the people running this said" not in coder[0]
    said = coder[1].split("What the people running this said")[1].split("\n## ")[0]
    assert "to every team, in LEARNING.md: From Ana: try -funroll-loops next." in said
    assert "From Ana" in (ws / "LEARNING.md").read_text()


class _SlowRunner(FakeRunner):
    """A fake runner that takes a moment per evaluation, so a run lasts a few seconds."""

    def evaluate(self, *args, **kwargs):
        time.sleep(0.05)
        return super().evaluate(*args, **kwargs)


def test_notes_directive_and_eat_steer_are_recorded_mid_run_and_kept(quick_matmul, tmp_path):
    ws = tmp_path / "ws"
    runner = _SlowRunner(lambda k: 3.0 if k.get("LOOP_ORDER") == "IKJ" else 1.0)
    t = threading.Thread(
        target=start_run,
        args=(quick_matmul, ws),
        kwargs=dict(runner=runner, max_evals=60, seed=1, teams=["coordinate", "explorer"]),
    )
    t.start()
    try:
        assert _wait_for(ws, "candidate_evaluated", 3, timeout=20)
        notes = ws / "teams" / "coordinate-1" / "NOTES.md"
        notes.write_text(notes.read_text() + "\nPerson: keep TILE at 64 or above.\n")
        spec = ws / "teams" / "explorer-2" / "team.yaml"
        spec.write_text(
            spec.read_text().replace(
                spec.read_text().split("directive: ")[1].split("\n")[0],
                '"Explore the MR/NR micro-kernel region only."',
            )
        )
        send(ws, "Stop trying -O2.", team="coordinate-1")
        steered = _wait_for(ws, "human_steered", 3, timeout=10)
    finally:
        t.join()
    by = {e.source: e for e in steered}
    assert set(by) == {"notes", "directive", "steer"}
    assert by["notes"].team == "coordinate-1" and "TILE at 64" in by["notes"].text
    assert by["directive"].team == "explorer-2" and "micro-kernel" in by["directive"].text
    assert by["steer"].team == "coordinate-1" and by["steer"].text == "Stop trying -O2."
    assert not list((ws / ".eat" / "steer").glob("*"))  # the message was taken once
    # eat rewrote both files many times after; what the person saved is still there
    assert "Person: keep TILE at 64 or above." in notes.read_text()
    # the person's directive stands until the supervisor itself redirects the team
    redirects = [
        e
        for e in _events(ws, "restructured")
        if e.team == "explorer-2" and e.op == "redirect" and e.seq > by["directive"].seq
    ]
    assert redirects or "micro-kernel region only" in spec.read_text()
    st = __import__("eat.run", fromlist=["run_status"]).run_status(ws)
    assert st["evaluations"] == 60


def test_the_supervisors_prompt_carries_every_teams_steering():
    h = History("coordinate-1", "explorer-1")
    h.eval("coordinate-1", 2.0, TILE=16)
    h.add(HumanSteered(source="steer", team="explorer-1", text="look at PACK=1"))
    h.add(HumanSteered(source="learning", text="the vendor is the goal"))
    advisor = LLMAdvisor(
        client=None, target=TARGET, presets={}, learning_path=Path("/none"), max_teams=4
    )
    prompt = advisor._prompt([], h.state)
    assert "to team explorer-1, with `eat steer`: look at PACK=1" in prompt
    assert "to every team, in LEARNING.md: the vendor is the goal" in prompt


def test_eat_steer_refuses_an_unknown_team_with_exit_2(quick_matmul, tmp_path):
    from typer.testing import CliRunner

    from eat.cli import app

    start_run(quick_matmul, tmp_path / "ws", runner=FakeRunner(lambda k: 1.0), max_evals=2)
    bad = CliRunner().invoke(app, ["steer", str(tmp_path / "ws"), "hi", "--team", "nope"])
    assert bad.exit_code == 2 and "not in this run" in bad.output
    ok = CliRunner().invoke(app, ["steer", str(tmp_path / "ws"), "try PACK=1"])
    assert ok.exit_code == 0 and "picks it up" in ok.output
