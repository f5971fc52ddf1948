"""Agents are fenced as candidates are: real `--agent command` scripts on the CPU target try
every write (and read) a gaming agent would, with the fence and without it.

Fenced, each attempt is refused (EACCES in the agent), the run goes on, and its best is what an
honest `eat eval` against the pristine target gives. Unfenced (`[agents] confine = false`),
the same attempts land, which shows the fenced test can fail, and eat's own checks catch what
would lie: a changed target stops the run, a forged log line is named and skipped, best/ is
rewritten from the log, a changed cache entry is made again.
"""

import json
import subprocess
import sys
from pathlib import Path

import pytest

import eat
from eat.agents.fence import holds
from eat.run import run_status, start_run
from eat.runners.sandbox import landlock_abi
from eat.seal import digest, files_of
from eat.workspace import Workspace

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(landlock_abi() < 1, reason="needs Landlock (Linux 5.13+)"),
]

SECRET = "held-out-7f3a"
HONEST = "// eat:cflags -O3 -march=native\n#define LOOP_ORDER IKJ\n"
ZEROS = (
    "void matmul(const float *A, const float *B, float *C, int M, int N, int K)\n"
    "{ for (long i = 0; i < (long)M * N; i++) C[i] = 0; }\n"
)
FORGED = json.dumps(
    {
        "type": "candidate_evaluated",
        "seq": 9999,
        "candidate": "c9999",
        "team": "coordinate-1",
        "source_hash": "0",
        "status": "ok",
        "speedup": 999.0,
    }
)

# Each attempt writes `<name> written|refused` to attacks.log in the agent's worktree; which
# ones run is $ATTACKS. Then the agent checks and submits its candidate ($CANDIDATE).
AGENT = r"""
ws=$EAT_WORKSPACE
attempt() {
    what=$1; shift
    if ( "$@" ) 2>/dev/null; then echo "$what written" >> attacks.log
    else echo "$what refused" >> attacks.log; fi
}
wants() { case " $ATTACKS " in *" $1 "*) return 0;; esac; return 1; }
eat check > /dev/null   # builds the baseline and makes the input sets: the cache is full
wants reference && attempt reference sh -c \
    "printf '\ndef reference(A, B, M, N, K):\n    return np.zeros((M, N))\n' >> $T/reference.py"
wants baseline && attempt baseline sed -i \
    's/^{$/{ for (volatile long s = 0; s < 20000000; s++) {}/' $T/baseline.c
wants history && attempt history sh -c "echo '$FORGED' >> $ws/history.jsonl"
if wants best && [ -f $ws/best/result.json ]; then
    attempt best sh -c "echo '{\"status\": \"ok\", \"speedup\": 999.0}' > $ws/best/result.json"
fi
wants config && attempt config sh -c "echo '# mine' >> $ws/eat.toml"
wants learning && attempt learning sh -c "echo 'forged lesson' >> $ws/LEARNING.md"
for other in $ws/worktrees/*/; do
    if wants worktree && [ "$other" != "$PWD/" ]; then
        attempt worktree sh -c "echo '#error sabotage' >> ${other}candidate.c"
    fi
done
wants package && attempt package touch $PKG/$PROBE-$EAT_TEAM
if wants cache; then
    attempt inputs sh -c "printf junk >> $(ls $EAT_CACHE_DIR/inputs/*/*.set | head -1)"
    attempt builds cp /bin/true $(ls $EAT_CACHE_DIR/builds/*baseline*.so | head -1)
fi
if wants private; then
    attempt private sh -c "cat $T/private/secret.txt >> leaked.txt"
    attempt sealed sh -c "cat $ws/.eat/sealed/target/private/secret.txt >> leaked.txt"
    attempt key sh -c "cat $ws/.eat/sealed/key >> leaked.txt"
fi
printf "$CANDIDATE" > candidate.c
[ "$CANDIDATE" = HONEST ] && { printf '%s' "$HONEST" | cat - baseline.c > candidate.c; }
printf 'static const char by[] = "%s";\n' "$EAT_TEAM" >> candidate.c  # a program of its own
eat submit -m "after the attempts" > /dev/null
"""


@pytest.fixture
def target(quick_matmul):
    """The CPU target with a held-out file in private/, which its reference reads."""
    (quick_matmul / "private").mkdir()
    (quick_matmul / "private" / "secret.txt").write_text(SECRET)
    with open(quick_matmul / "reference.py", "a") as f:
        f.write(
            "\n\nfrom pathlib import Path\n"
            "assert Path(__file__).with_name('private').joinpath('secret.txt').read_text()\n"
        )
    return quick_matmul


def attacked(ws: Path, team: str) -> dict[str, str]:
    log = ws / "worktrees" / team / "attacks.log"
    return dict(line.split() for line in log.read_text().splitlines()) if log.exists() else {}


def probe(tmp_path: Path) -> str:
    return f".fence-probe-{tmp_path.name}"


def run_agent(
    target, tmp_path, monkeypatch, attacks, *, confine=True, candidate="HONEST", max_evals=2
):
    script = tmp_path / "agent.sh"
    script.write_text(AGENT)
    for name, value in {
        "ATTACKS": " ".join(attacks),
        "T": str(target),
        "FORGED": FORGED,
        "PKG": str(Path(eat.__file__).parent),
        "PROBE": probe(tmp_path),  # the test's own: tests beside it write probes too
        "CANDIDATE": candidate,
        "HONEST": HONEST,
    }.items():
        monkeypatch.setenv(name, value)
    ws = tmp_path / "ws"
    _, stop = start_run(
        target,
        ws,
        agent="command",
        agent_command=f"sh {script}",
        teams=["coordinate", "explorer"],
        max_evals=max_evals,
        workers=1,
        supervise=False,
        agents={"confine": confine},
    )  # a turn each, in turn
    return ws, stop


def honest_eval(target: Path, source: str, tmp_path: Path) -> dict:
    """`eat eval` of `source` against `target` as it is on disk, in a process of its own."""
    file = tmp_path / "judged.c"
    file.write_text(source)
    done = subprocess.run(
        [sys.executable, "-m", "eat", "eval", str(target), str(file), "--json"],
        capture_output=True,
        text=True,
        timeout=300,
    )
    return json.loads(done.stdout)


def test_a_fenced_agent_changes_nothing_but_its_worktree(
    target, tmp_path, monkeypatch, eat_cache_dir
):
    before = digest(files_of(target))
    everything = [
        "reference",
        "baseline",
        "history",
        "best",
        "config",
        "learning",
        "worktree",
        "package",
        "cache",
        "private",
    ]
    ws, stop = run_agent(target, tmp_path, monkeypatch, everything)
    assert stop.code == "max_evals"
    first, second = attacked(ws, "coordinate-1"), attacked(ws, "explorer-2")
    assert set(first.values()) == set(second.values()) == {"refused"}
    assert {
        "reference",
        "baseline",
        "history",
        "package",
        "inputs",
        "builds",
        "private",
        "sealed",
        "key",
        "config",
        "learning",
    } <= first.keys()
    assert {"best", "worktree"} <= second.keys()  # there was a best and another worktree then
    assert digest(files_of(target)) == before
    assert not list(Path(eat.__file__).parent.glob(f"{probe(tmp_path)}-*"))
    assert not (ws / "worktrees" / "coordinate-1" / "leaked.txt").read_text()
    st = run_status(ws)
    assert st["evaluations"] == 2 and st["tampered"] is None
    kept = json.loads((ws / "best" / "result.json").read_text())
    assert kept["speedup"] == st["best_speedup"]
    # What the run reports is what an honest judge of its best says against the pristine target.
    best = Workspace.open(ws).paths.candidate(*_where(ws, st["best_candidate"]))
    honest = honest_eval(target, (best / "candidate.c").read_text(), tmp_path)
    assert honest["status"] == "ok"
    assert 1 / 3 < st["best_speedup"] / honest["speedup"] < 3  # same machine, same hour
    assert "Landlock" in holds()


def _where(ws: Path, cid: str) -> tuple[str, str]:
    (folder,) = (ws / "teams").glob(f"*/candidates/{cid}")
    return folder.parent.parent.name, cid


def test_unfenced_the_writes_land_and_eat_catches_what_would_lie(target, tmp_path, monkeypatch):
    ws, stop = run_agent(
        target,
        tmp_path,
        monkeypatch,
        ["history", "best", "worktree", "package", "cache", "private"],
        confine=False,
    )
    pkg = Path(eat.__file__).parent
    try:
        assert stop.code == "max_evals"
        first, second = attacked(ws, "coordinate-1"), attacked(ws, "explorer-2")
        assert set(first.values()) == set(second.values()) == {"written"}
        assert {"best", "worktree"} <= second.keys()
        assert sorted(p.name for p in pkg.glob(f"{probe(tmp_path)}-*")) == [
            f"{probe(tmp_path)}-coordinate-1",
            f"{probe(tmp_path)}-explorer-2",
        ]
        assert SECRET in (ws / "worktrees" / "coordinate-1" / "leaked.txt").read_text()
    finally:
        for path in pkg.glob(f"{probe(tmp_path)}-*"):
            path.unlink()
    st = run_status(ws)  # the forged lines are named and skipped; the rest is read
    assert st["evaluations"] == 2 and st["tampered"] and "line" in st["tampered"]
    events = [e for e in Workspace.open(ws).read_events()[0] if e.type == "candidate_evaluated"]
    assert [e.candidate for e in events] == ["c0001", "c0002"]
    # Both evaluations after the cache was written to were judged on sets and builds made
    # again, and best/ was written anew from the log when the run stopped.
    assert [e.status for e in events] == ["ok", "ok"]
    kept = json.loads((ws / "best" / "result.json").read_text())
    assert kept["speedup"] == st["best_speedup"] != 999.0


def test_unfenced_a_rewritten_reference_stops_the_run_instead_of_a_zeros_kernel_winning(
    target, tmp_path, monkeypatch
):
    ws, stop = run_agent(
        target,
        tmp_path,
        monkeypatch,
        ["reference", "baseline"],
        confine=False,
        candidate=ZEROS.replace("\n", "\\n"),
        max_evals=1,
    )
    assert attacked(ws, "coordinate-1") == {"reference": "written", "baseline": "written"}
    assert stop.code == "target_changed"
    (changed,) = [e for e in Workspace.open(ws).read_events()[0] if e.type == "target_changed"]
    assert changed.files == ["baseline.c", "reference.py"]
    st = run_status(ws)
    assert st["stopped"] == "target_changed" and st["best_speedup"] is None
    pristine = tmp_path / "pristine"
    subprocess.run(["cp", "-r", str(ws / ".eat" / "sealed" / "target"), str(pristine)], check=True)
    assert honest_eval(pristine, ZEROS, tmp_path)["status"] == "incorrect"
