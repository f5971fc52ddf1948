"""The workspace: event log durability and damage, lines eat did not write, the lock, atomic
best/, git history."""

import io
import json
import subprocess
import sys
import threading
import time

import pytest
from fake_runner import FakeRunner
from rich.console import Console

from eat.config import RunConfig
from eat.errors import BadInput
from eat.events import RunStarted, RunStopped, TeamSpawned
from eat.report import render
from eat.run import resume_run, start_run
from eat.status import run_status
from eat.watch import RunView, watch
from eat.workspace import BACKLOG, PACK_EVERY, Workspace


@pytest.fixture
def ws(tmp_path):
    w = Workspace.create(tmp_path / "ws", RunConfig(target="t"))
    w.load()
    return w


def _fill(ws, n=3):
    ws.append(RunStarted(target="t", target_path="t", model="offline"))
    for i in range(n - 1):
        ws.append(TeamSpawned(team=f"x-{i}", preset="x", strategy="coordinate", directive="d"))


def test_append_assigns_seq_and_renders_evolution(ws):
    _fill(ws)
    events, _ = ws.read_events()
    assert [e.seq for e in events] == [1, 2, 3]
    assert [e.type for e in events] == ["run_started", "team_spawned", "team_spawned"]
    assert ws.paths.evolution.read_text().count("\n- `") == 3


@pytest.mark.parametrize(
    "tail",
    [
        b'{"type": "run_stopped", "seq": 4, "rea',
        b'{"type":',
        b'{"type": "run_stopped", "seq": 4, "reason": "x"}',
    ],
)
def test_torn_last_line_is_dropped_on_load(ws, tail):
    _fill(ws)
    with open(ws.paths.history, "ab") as f:
        f.write(tail)  # no newline: the write was cut by a crash
    size = ws.paths.history.stat().st_size
    events, good = ws.read_events()
    assert len(events) == 3 and good < size
    fresh = Workspace.open(ws.paths.root)
    assert len(fresh.load()) == 3 and fresh.paths.history.stat().st_size == good
    fresh.append(RunStopped(reason="again"))
    assert [e.seq for e in fresh.read_events()[0]] == [1, 2, 3, 4]


def test_the_key_is_private_and_every_line_carries_a_mac(ws):
    _fill(ws)
    assert ws.paths.key.stat().st_mode & 0o777 == 0o600
    assert ws.paths.sealed.stat().st_mode & 0o777 == 0o700
    assert len(bytes.fromhex(ws.paths.key.read_text())) == 32
    for line in ws.paths.history.read_text().splitlines():
        assert len(json.loads(line)["mac"]) == 64


# Each damage edits the lines of a log of 5 events and returns the line to be named, words of
# why, and the seqs every reader keeps.
def _forged(lines):
    """A complete, plausible line eat did not write: the next seq, valid JSON, no mac."""
    lines.insert(3, RunStopped(seq=4, reason="forged").model_dump_json().encode())
    return 4, "no mac", [1, 2, 3, 4, 5]


def _forged_mac(lines):
    row = json.loads(lines[2])
    row["directive"], row["seq"] = "forged", 4
    lines.insert(3, json.dumps(row, separators=(",", ":")).encode())  # a genuine line's mac
    return 4, "wrong mac", [1, 2, 3, 4, 5]


def _changed(lines):
    lines[2] = lines[2].replace(b'"directive":"d"', b'"directive":"e"')
    return 3, "wrong mac", [1, 2, 4, 5]


def _deleted(lines):
    del lines[2]
    return 3, "1 missing", [1, 2, 4, 5]  # the line after the gap is named, and kept


def _replayed(lines):
    lines.insert(4, lines[1])
    return 5, "a replay: seq 2 after seq 4", [1, 2, 3, 4, 5]


def _junk(lines):
    lines.insert(2, b"rm -rf / # not json")
    return 3, "not an event", [1, 2, 3, 4, 5]


@pytest.mark.parametrize("damage", [_forged, _forged_mac, _changed, _deleted, _replayed, _junk])
def test_a_line_eat_did_not_write_is_named_and_every_other_kept(ws, damage):
    _fill(ws, 5)
    lines = ws.paths.history.read_bytes().splitlines()
    line, why, kept = damage(lines)
    ws.paths.history.write_bytes(b"\n".join(lines) + b"\n")
    log = Workspace.open(ws.paths.root).read_log()
    assert [e.seq for e in log.events] == kept
    assert [n for n, _ in log.bad] == [line] and why in log.bad[0][1]
    assert log.end == ws.paths.history.stat().st_size
    assert run_status(ws.paths.root)["tampered"] == f"line {line}: {log.bad[0][1]}"
    view = RunView(Workspace.open(ws.paths.root))  # eat watch: the same verdict, bit by bit
    data, read = ws.paths.history.read_bytes(), []
    ws.paths.history.write_bytes(b"")
    for cut in range(0, len(data), 97):
        with open(ws.paths.history, "ab") as f:
            f.write(data[cut : cut + 97])
        read += view.read()
    assert [e.seq for e in read] == kept and view.log.bad == log.bad


def test_load_keeps_a_forged_line_and_append_goes_on_past_it(ws):
    _fill(ws)
    forged = {
        "type": "candidate_evaluated",
        "seq": 9999,
        "team": "x-0",
        "candidate": "c9999",
        "status": "ok",
        "speedup": 99.0,
    }  # what an agent wrote into a real run's log
    with open(ws.paths.history, "a") as f:
        f.write(json.dumps(forged) + "\n")
    before = ws.paths.history.read_bytes()
    fresh = Workspace.open(ws.paths.root)
    assert [e.seq for e in fresh.load()] == [1, 2, 3]
    assert ws.paths.history.read_bytes() == before  # evidence: left as it is
    assert [n for n, _ in fresh.bad] == [4]
    fresh.append(RunStopped(reason="next"))
    fresh.append(RunStopped(reason="after"))
    log = Workspace.open(ws.paths.root).read_log()
    assert [e.seq for e in log.events] == [1, 2, 3, 4, 5]
    assert log.bad == fresh.bad  # the forged line, and nothing else


def _older(ws, n):
    """The log of `n` events as eat wrote it before keys: no key, no macs; its rows."""
    _fill(ws, n)
    rows = [json.loads(line) for line in ws.paths.history.read_text().splitlines()]
    for row in rows:
        del row["mac"]
    ws.paths.key.unlink()
    ws.paths.history.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return rows


def test_an_older_log_without_a_key_loads_and_is_keyed_from_then_on(ws):
    _older(ws, 4)
    old = Workspace.open(ws.paths.root)
    log = old.read_log()
    assert [e.seq for e in log.events] == [1, 2, 3, 4] and log.bad == []
    assert [e.seq for e in old.load()] == [1, 2, 3, 4]  # a resume: the log gets its key
    assert ws.paths.key.is_file()
    old.append(RunStopped(reason="resumed"))
    with open(ws.paths.history, "a") as f:  # no mac, after a line with one
        f.write(RunStopped(seq=6, reason="forged").model_dump_json() + "\n")
    log = Workspace.open(ws.paths.root).read_log()
    assert [e.seq for e in log.events] == [1, 2, 3, 4, 5]
    assert log.bad == [(6, "no mac: not written by eat")]


def test_an_older_log_names_a_bad_line_instead_of_refusing(ws):
    rows = _older(ws, 5)
    rows[2]["seq"] = 1  # a replayed seq
    ws.paths.history.write_text("".join(json.dumps(r) + "\n" for r in rows) + "junk\n")
    log = Workspace.open(ws.paths.root).read_log()
    assert [e.seq for e in log.events] == [1, 2, 4, 5]
    assert [n for n, _ in log.bad] == [3, 6]  # the replay, the junk


def test_a_log_whose_key_is_gone_is_read_unchecked_and_not_written(ws):
    _fill(ws)
    ws.paths.key.unlink()
    log = Workspace.open(ws.paths.root).read_log()
    assert [e.seq for e in log.events] == [1, 2, 3]
    assert [n for n, _ in log.bad] == [1] and "key is missing" in log.bad[0][1]
    with pytest.raises(BadInput, match="macs cannot be checked"):
        Workspace.open(ws.paths.root).load()
    assert not ws.paths.key.exists()  # not replaced: the lines it keyed would all be bad


def test_status_watch_and_report_say_a_log_was_tampered(ws):
    _fill(ws)
    with open(ws.paths.history, "a") as f:
        f.write(RunStopped(seq=4, reason="forged").model_dump_json() + "\n")
    said = "tampered: line 4: no mac"
    done = subprocess.run(
        [sys.executable, "-m", "eat", "status", str(ws.paths.root)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    assert said in done.stdout
    screen = Console(file=io.StringIO(), width=160)
    assert watch(ws.paths.root, screen, once=True) == 0 and said in screen.file.getvalue()
    assert said in render(Workspace.open(ws.paths.root))


def test_a_resume_tells_of_tampering_once(quick_matmul, tmp_path):
    runner = FakeRunner(lambda knobs: 2.0)
    root, _ = start_run(quick_matmul, tmp_path / "ws", runner=runner, max_evals=2)
    history = root / "history.jsonl"
    forged = RunStopped(seq=len(history.read_text().splitlines()) + 1, reason="forged")
    with open(history, "a") as f:
        f.write(forged.model_dump_json() + "\n")
    forged_line = len(history.read_text().splitlines())
    resume_run(root, runner=runner, max_evals=3)
    resume_run(root, runner=runner, max_evals=3)  # nothing new to tell
    log = Workspace.open(root).read_log()
    told = [e for e in log.events if e.type == "log_tampered"]
    assert [(e.lines, e.first) for e in told] == [([forged_line], "no mac: not written by eat")]
    assert log.bad == [(forged_line, told[0].first)]
    assert [e.type for e in log.events].count("run_resumed") == 2


def test_second_holder_of_the_lock_gets_a_clear_error(ws):
    with ws.lock():
        other = Workspace.open(ws.paths.root)
        assert other.is_locked()
        with pytest.raises(BadInput, match=r"in use by another eat process \(pid \d+\)"):
            with other.lock():
                pass
    assert not ws.is_locked()
    with Workspace.open(ws.paths.root).lock():
        pass


def test_create_refuses_a_non_empty_folder(tmp_path):
    (tmp_path / "keep.txt").write_text("mine")
    with pytest.raises(BadInput, match="not empty"):
        Workspace.create(tmp_path, RunConfig(target="t"))
    assert (tmp_path / "keep.txt").read_text() == "mine"


def test_open_refuses_what_is_not_a_workspace(tmp_path):
    with pytest.raises(BadInput, match="no such workspace"):
        Workspace.open(tmp_path / "nope")
    with pytest.raises(BadInput, match="eat.toml is missing"):
        Workspace.open(tmp_path)


def test_best_is_replaced_whole_and_commits_read_as_history(ws):
    ws.write_candidate("t-1", "c0001", {"candidate.c": "a"}, {"status": "ok"})
    ws.set_best("t-1", "c0001")
    ws.commit("c0001 t-1: ok 2.00x")
    ws.write_candidate("t-1", "c0002", {"candidate.c": "b"}, {"status": "ok"})
    ws.set_best("t-1", "c0002")
    ws.commit("c0002 t-1: ok 3.00x (new best)")
    ws.flush()
    assert (ws.paths.best / "candidate.c").read_text() == "b"
    assert (ws.paths.best / "CANDIDATE").read_text().strip() == "t-1/c0002"
    assert [c.summary for c in ws.repo.iter_commits()][:2] == [
        "c0002 t-1: ok 3.00x (new best)",
        "c0001 t-1: ok 2.00x",
    ]
    tracked = ws.repo.git.ls_files().split()
    assert "history.jsonl" not in tracked and "best/candidate.c" in tracked


def test_loose_objects_are_packed_every_pack_every_commits_and_at_stop(ws):
    """Commits start no `git maintenance` (it cost as much as the commit); the git thread runs
    `git gc --auto` every PACK_EVERY commits and the run once at stop, so a run that goes for
    a week does not keep a file per object."""

    def loose() -> int:
        counts = dict(line.split(": ") for line in ws.repo.git.count_objects("-v").splitlines())
        return int(counts["count"])

    def candidates(first: int, n: int, message: str) -> None:
        # Fixed contents, fixed object names: 3 of c0000-c0599's land in objects/17/.
        for i in range(first, first + n):
            ws.write_candidate("t-1", f"c{i:04d}", {"candidate.c": str(i)}, {"status": "ok"})
        ws.commit(message)
        ws.flush()

    assert ws.repo.config_reader().get_value("maintenance", "auto") is False
    with ws.repo.config_writer() as cw:
        cw.set_value("gc", "auto", "256")  # git's sample: over 1 loose object in objects/17/
    candidates(0, 600, "600 candidates")
    for i in range(PACK_EVERY - 2):
        ws.commit(f"step {i}")
    ws.flush()
    assert loose() > 600
    ws.commit("the PACK_EVERY-th commit")
    ws.flush()
    assert loose() == 0
    candidates(600, 600, "600 more")
    assert loose() > 600
    ws.pack()
    assert loose() == 0
    assert ws.repo.git.show("HEAD:teams/t-1/candidates/c1199/candidate.c") == "1199"


def test_commits_queued_past_the_backlog_go_in_as_one_and_lose_nothing(ws):
    """When git falls behind (a commit costs more as the repository grows) the queued commits
    are made together: every file and every message still lands, in one commit."""
    ws.commit("first")
    ws.flush()
    gate = threading.Event()
    blocked = threading.Thread(target=ws.git_call, args=(lambda repo: gate.wait(30),))
    blocked.start()  # holds the git thread while the run queues its commits
    n = BACKLOG + 3
    while ws._git().jobs.unfinished_tasks == 0:
        time.sleep(0.01)
    for i in range(n):
        ws.write_candidate("t-1", f"c{i:04d}", {"candidate.c": str(i)}, {"status": "ok"})
        ws.commit(f"c{i:04d} t-1: ok")
    gate.set()
    blocked.join()
    ws.flush()
    commits = list(ws.repo.iter_commits())
    assert commits[0].summary == f"{n} commits in one, from c0000 t-1: ok"
    assert all(f"c{i:04d} t-1: ok" in commits[0].message for i in range(n))
    assert commits[1].summary == "first"
    tracked = ws.repo.git.ls_files().split()
    assert all(f"teams/t-1/candidates/c{i:04d}/candidate.c" in tracked for i in range(n))
