"""The workspace: event log durability and damage, the lock, atomic best/, git history."""

import json
import threading
import time

import pytest

from eat.config import RunConfig
from eat.errors import BadInput
from eat.events import RunStarted, RunStopped, TeamSpawned
from eat.workspace import BACKLOG, Workspace


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


@pytest.mark.parametrize("tail", [b'{"type": "run_stopped", "seq": 4, "rea', b'{"type":',
                                  b'{"type": "run_stopped", "seq": 4, "reason": "x"}'])
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


def test_damage_before_the_end_is_refused(ws):
    _fill(ws, 4)
    lines = ws.paths.history.read_text().splitlines()
    lines[1] = lines[1][:20]
    ws.paths.history.write_text("\n".join(lines) + "\n")
    with pytest.raises(BadInput, match="line 2 is damaged"):
        ws.read_events()


def test_seq_gap_is_refused(ws):
    _fill(ws)
    rows = [json.loads(line) for line in ws.paths.history.read_text().splitlines()]
    rows[2]["seq"] = 7
    ws.paths.history.write_text("".join(json.dumps(r) + "\n" for r in rows))
    with pytest.raises(BadInput, match="seq 7, expected 3"):
        ws.read_events()


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
        "c0002 t-1: ok 3.00x (new best)", "c0001 t-1: ok 2.00x"]
    tracked = ws.repo.git.ls_files().split()
    assert "history.jsonl" not in tracked and "best/candidate.c" in tracked


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
