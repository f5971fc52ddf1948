"""The run's target is frozen at its start: evaluations judge against a snapshot, a change to
the folder stops the run (target_changed), and `eat resume` refuses it unless told."""

import pytest
from fake_runner import FakeRunner

from eat.errors import BadInput
from eat.run import resume_run, run_status, start_run
from eat.seal import Seal, digest, files_of, snapshot
from eat.workspace import Workspace


def events(ws, kind):
    return [e for e in Workspace.open(ws).read_events()[0] if e.type == kind]


class EditsTheTarget(FakeRunner):
    """A fake runner that, at its `at`-th evaluation, has someone edit the target folder (as a
    person or an unfenced agent might mid-run), and notes which folder each evaluation read."""

    def __init__(self, folder, at: int):
        super().__init__(lambda k: 2.0)
        self.folder, self.at, self.roots = folder, at, []

    def evaluate(self, target, source, **kwargs):
        self.roots.append(target.root)
        self.hidden = target.unreadable
        if self.calls + 1 == self.at:
            with open(self.folder / "reference.py", "a") as f:
                f.write("\n# changed mid-run\n")
        return super().evaluate(target, source, **kwargs)


def test_a_target_changed_mid_run_stops_the_run_and_resume_refuses_it(quick_matmul, tmp_path):
    ws = tmp_path / "ws"
    runner = EditsTheTarget(quick_matmul, at=2)
    _, stop = start_run(quick_matmul, ws, runner=runner, max_evals=6, workers=1)
    assert stop.code == "target_changed" and stop.exit_code == 1
    assert "reference.py" in stop.message and "--accept-target-change" in stop.message
    (changed,) = events(ws, "target_changed")
    assert changed.files == ["reference.py"] and not changed.accepted
    # The evaluations read the run's snapshot, never the folder someone was editing; the one
    # that ran while it changed was kept (it judged the snapshot), the next one was refused.
    sealed = ws / ".eat" / "sealed" / "target"
    assert set(runner.roots) == {sealed} and runner.calls == 2
    assert runner.hidden == [str(sealed.parent)]  # no candidate reads the sealed folder
    assert "changed mid-run" not in (sealed / "reference.py").read_text()
    st = run_status(ws)
    assert st["stopped"] == "target_changed" and st["evaluations"] == 2
    started = events(ws, "run_started")[0]
    assert started.target_digest == digest(files_of(sealed))

    with pytest.raises(BadInput, match=r"reference\.py.*--accept-target-change"):
        resume_run(ws, runner=FakeRunner(lambda k: 2.0), max_evals=8)
    # Restored, it resumes without a word; changed again and accepted, it is the run's target.
    text = (quick_matmul / "reference.py").read_text()
    (quick_matmul / "reference.py").write_text(text.replace("\n# changed mid-run\n", ""))
    _, stop = resume_run(ws, runner=FakeRunner(lambda k: 2.0), max_evals=3)
    assert stop.code == "max_evals" and len(events(ws, "target_changed")) == 1
    (quick_matmul / "reference.py").write_text(text)
    _, stop = resume_run(
        ws, runner=FakeRunner(lambda k: 2.0), max_evals=4, accept_target_change=True
    )
    assert stop.code == "max_evals"
    accepted = events(ws, "target_changed")[-1]
    assert accepted.accepted and accepted.files == ["reference.py"]
    assert (sealed / "reference.py").read_text() == text
    _, stop = resume_run(ws, runner=FakeRunner(lambda k: 2.0), max_evals=5)  # the new seal holds
    assert stop.code == "max_evals"


def test_a_seal_names_what_changed_in_the_folder_or_in_its_copy(tmp_path):
    src, copy = tmp_path / "target", tmp_path / "copy"
    src.mkdir()
    (src / "a.c").write_text("int a;")
    (src / "private").mkdir()
    (src / "private" / "held.txt").write_text("hidden")
    seal = Seal(src, copy, snapshot(src, copy))
    assert seal.changed() == [] and seal.changed() == []
    (src / "__pycache__").mkdir()  # what Python keeps beside sources is no change
    (src / "__pycache__" / "a.cpython-311.pyc").write_bytes(b"\0")
    assert seal.changed() == []
    (src / "private" / "held.txt").write_text("other")
    (src / "new.c").write_text("")
    assert seal.changed() == ["new.c", "private/held.txt"]
    snapshot(src, copy)  # someone rewrote the copy itself
    assert seal.changed() == ["(the run's copy) new.c", "(the run's copy) private/held.txt"]


def test_a_workspace_inside_its_target_folder_is_no_part_of_the_target(quick_matmul):
    """`eat start .` from the target folder puts the workspace inside it: its files, written
    all run long, are neither copied into the snapshot nor taken for a change."""
    ws = quick_matmul / "workspaces" / "run"
    _, stop = start_run(quick_matmul, ws, runner=FakeRunner(lambda k: 2.0), max_evals=3, workers=1)
    assert stop.code == "max_evals" and not events(ws, "target_changed")
    assert not list((ws / ".eat" / "sealed" / "target").rglob("history.jsonl"))


LEAKY = r"""
#include <stdio.h>
/* Before any call: print what the run keeps from agents, for the reply's log to carry. */
__attribute__((constructor)) static void leak(void)
{
    const char *paths[] = {PATHS};
    for (int i = 0; i < (int)(sizeof paths / sizeof *paths); i++) {
        char got[64] = "";
        FILE *f = fopen(paths[i], "r");
        if (f) { fgets(got, sizeof got, f); fclose(f); }
        fprintf(stderr, "leak %d: [%s]\n", i, f ? got : "refused");
    }
}
"""


@pytest.mark.slow
def test_a_candidate_cannot_read_the_sealed_folder_or_private_data(quick_matmul, tmp_path):
    """The harness sees private/ (the reference reads it); the candidate loaded after it, in
    the same process, cannot read it, nor the log's key: it could otherwise print them into
    the log its agent gets back. Without the rule (unreadable = []) it can: the test can fail."""
    from eat.runners import runner_for
    from eat.target import load_target

    (quick_matmul / "private").mkdir()
    (quick_matmul / "private" / "held.txt").write_text("held-out-77")
    ws = tmp_path / "ws"
    start_run(quick_matmul, ws, runner=FakeRunner(lambda k: 2.0), max_evals=1)
    sealed = ws / ".eat" / "sealed"
    paths = [
        sealed / "key",
        sealed / "target" / "private" / "held.txt",
        quick_matmul / "private" / "held.txt",
    ]
    source = (
        LEAKY.replace("PATHS", ", ".join(f'"{p}"' for p in paths))
        + (quick_matmul / "baseline.c").read_text()
    )
    target = load_target(sealed / "target")
    cfg = target.evaluation.model_copy(update={"timed": False})
    runner = runner_for(target)
    target.unreadable = [str(sealed), str(quick_matmul / "private")]  # as the run sets it
    fenced = runner.evaluate(target, source, config=cfg)
    assert fenced.status == "ok"
    assert [f"leak {i}: [refused]" in fenced.stderr for i in range(3)] == [True] * 3
    target.unreadable = []
    open_ = runner.evaluate(target, source + "\n", config=cfg)
    assert "held-out-77" in open_.stderr and "leak 0: [refused]" not in open_.stderr


def test_a_link_back_up_the_target_folder_is_walked_once(tmp_path):
    (tmp_path / "t" / "sub").mkdir(parents=True)
    (tmp_path / "t" / "a.c").write_text("a")
    (tmp_path / "t" / "sub" / "up").symlink_to(tmp_path / "t")
    assert files_of(tmp_path / "t") == files_of(tmp_path / "t") and sorted(
        files_of(tmp_path / "t")
    ) == ["a.c"]
    (tmp_path / "t" / "sub" / "b.c").write_text("b")
    (tmp_path / "t" / "again").symlink_to(tmp_path / "t" / "sub")
    assert digest(files_of(tmp_path / "t")) == snapshot(tmp_path / "t", tmp_path / "copy")
