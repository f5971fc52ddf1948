"""Plateau detection, elite re-times and turn-taking, on synthetic histories."""

from eat.config import RunConfig
from eat.events import EliteRetimed, TeamSpawned
from eat.plateau import detect_plateaus, elite_to_retime
from history import CFG, History

def kinds(plateaus):
    return sorted((p.scope, p.kind, p.team) for p in plateaus)


def test_gains_inside_the_noise_do_not_count_as_progress():
    h = History("a-1")
    h.eval("a-1", 2.0, noise=0.05)        # elite with a 5% spread
    for s in (2.04, 2.06, 2.08, 2.09):    # each a new best, none beyond the spread
        h.eval("a-1", s)
    assert h.state.teams["a-1"].since_improvement == 4
    assert kinds(detect_plateaus(h.state, CFG)) == [("team", "stalled", "a-1")]
    h.eval("a-1", 2.5)                     # a real gain resets the counter
    assert h.state.teams["a-1"].since_improvement == 0
    assert detect_plateaus(h.state, CFG) == []


def test_run_plateau_needs_the_whole_run_to_stall_and_is_declared_once():
    h = History("a-1", "b-2")
    h.eval("a-1", 3.0)
    for i in range(6):
        h.eval("b-2" if i % 2 else "a-1", 1.5)
    found = detect_plateaus(h.state, CFG)
    assert ("run", "stalled", None) in kinds(found)
    for p in found:
        h.add(p.event())
    assert ("run", "stalled", None) not in kinds(detect_plateaus(h.state, CFG))
    for _ in range(6):                     # another full window without progress: again
        h.eval("a-1", 1.0)
    assert ("run", "stalled", None) in kinds(detect_plateaus(h.state, CFG))


def test_repeated_failures_are_a_failing_team():
    h = History("a-1")
    h.eval("a-1", 1.2)
    for status in ("compile_error", "crash", "incorrect"):
        h.eval("a-1", None, status=status)
    (p,) = detect_plateaus(h.state, CFG)
    assert (p.kind, p.team, p.evidence) == ("failing", "a-1", ["c0004", "c0003", "c0002"])
    assert "compile_error" in p.message


def test_two_teams_with_the_same_best_have_converged():
    h = History("a-1", "b-2")
    h.eval("a-1", 2.0, K=1)
    h.eval("b-2", 1.9, K=1)
    for _ in range(2):
        h.eval("a-1", 1.0, K=2)
        h.eval("b-2", 1.0, K=3)
    assert ("team", "converged", "b-2") in kinds(detect_plateaus(h.state, CFG))


def test_elite_is_retimed_before_a_stall_and_a_lucky_elite_steps_down():
    h = History("a-1")
    h.eval("a-1", 2.0)
    h.eval("a-1", 3.0)                      # lucky measurement
    h.eval("a-1", 2.8)
    for _ in range(3):
        h.eval("a-1", 1.0)
    plateaus = detect_plateaus(h.state, CFG)
    assert elite_to_retime(h.state, plateaus).cid == "c0002"
    h.add(EliteRetimed(candidate="c0002", speedup=2.0))   # median of 3.0 and 2.0 is 2.5
    assert h.state.best.cid == "c0003"
    assert h.state.since_improvement == 3   # c0003 beat the honest 2.5 by more than the noise
    assert elite_to_retime(h.state, detect_plateaus(h.state, CFG)) is None or \
        h.state.best.cid not in h.state.retimed


def test_a_retime_that_confirms_the_elite_changes_no_counter():
    h = History("a-1")
    h.eval("a-1", 2.0)
    h.eval("a-1", 2.02)
    for _ in range(5):
        h.eval("a-1", 1.0)
    h.add(EliteRetimed(candidate="c0002", speedup=1.98))   # best is now c0001 (2.0 > 2.0)
    assert h.state.since_improvement == 6                   # still no gain since c0001


def test_an_elite_that_fails_its_retime_loses_its_place():
    h = History("a-1")
    h.eval("a-1", 2.0)
    h.eval("a-1", 5.0)
    h.add(EliteRetimed(candidate="c0002", speedup=None, status="incorrect"))
    assert h.state.best.cid == "c0001"
    assert h.state.candidates["c0002"].estimate is None


def test_a_forked_team_searches_around_its_start_until_it_beats_it():
    from eat.agents.offline import OfflineAgent
    from eat.target import load_target
    from pathlib import Path

    target = load_target(Path(__file__).parent.parent / "examples" / "cpu_matmul")
    h = History("a-1")
    h.eval("a-1", 9.0, LOOP_ORDER="IKJ", TILE=0, UNROLL=4, CFLAGS="-O3 -march=native")
    h.add(TeamSpawned(team="refiner-2", preset="refiner", strategy="refiner", directive="d",
                      start_from="c0001"))
    h.eval("refiner-2", 2.0, LOOP_ORDER="JKI", TILE=0, UNROLL=4, CFLAGS="-O3 -march=native")
    agent = OfflineAgent(target, seed=0)
    for _ in range(5):
        p = agent.propose(h.state.teams["refiner-2"], h.state)
        assert p.parent == "c0001"                  # not the team's own weaker best
        h.eval("refiner-2", 1.0, **p.knobs)


def test_a_new_team_gets_its_share_from_now_on_instead_of_catching_up():
    from eat.team import pick_team

    class Ctx:
        state = None
        config = RunConfig(target="t")

    h = History("a-1", "b-2")
    for _ in range(10):
        h.eval("a-1", 1.0)
        h.eval("b-2", 1.0)
    h.add(TeamSpawned(team="c-3", preset="c", strategy="coordinate", directive="d"))
    Ctx.state = h.state
    turns = []
    for _ in range(6):
        team = pick_team(Ctx)
        turns.append(team.id)
        h.eval(team.id, 1.0)
    assert sorted(turns) == ["a-1", "a-1", "b-2", "b-2", "c-3", "c-3"]


def test_an_llm_outage_does_not_make_a_team_look_failing():
    from eat.events import AttemptFailed

    h = History("a-1")
    h.eval("a-1", 2.0)
    for _ in range(6):
        h.add(AttemptFailed(team="a-1", kind="outage", reason="503 five times"))
    team = h.state.teams["a-1"]
    assert (team.failures, team.since_improvement, team.failed_attempts) == (0, 0, 0)
    assert detect_plateaus(h.state, CFG) == []
    for _ in range(3):
        h.add(AttemptFailed(team="a-1", kind="malformed", reason="no code"))
    assert [p.kind for p in detect_plateaus(h.state, CFG)] == ["failing"]
