"""Plateau detection and every restructure operation, on synthetic histories."""

import pytest

from eat.config import PlateauConfig
from eat.events import CandidateEvaluated, EliteRetimed, TeamSpawned
from eat.plateau import detect_plateaus, elite_to_retime
from eat.restructure import decide, diagnose, operation_events, score
from eat.state import RunState
from eat.team import load_presets

CFG = PlateauConfig(team_window=4, run_window=6, fail_window=3, min_gain=0.02, score_after=3)


class History:
    """Builds a RunState event by event, the way the log would."""

    def __init__(self, *teams: str, strategy: str = "coordinate"):
        self.state = RunState(CFG)
        self.n = 0
        for t in teams:
            self.add(TeamSpawned(team=t, preset=t.split("-")[0], strategy=strategy,
                                 directive="d"))

    def add(self, event):
        self.state.seq += 0
        event.seq = self.state.seq + 1
        self.state.apply(event)
        return event

    def eval(self, team: str, speedup: float | None, status: str = "ok", noise: float = 0.01,
             **knobs):
        self.n += 1
        return self.add(CandidateEvaluated(
            candidate=f"c{self.n:04d}", team=team, source_hash=f"h{self.n}", status=status,
            speedup=speedup if status == "ok" else None, noise=noise,
            knobs=knobs or {"K": self.n}))


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


PRESETS = load_presets()


def apply_ops(h: History, ops):
    for i, op in enumerate(ops):
        for e in operation_events(op, h.state, f"k:{i}", 0, PRESETS):
            h.add(e)


def test_stalled_team_behind_the_leader_is_replaced_by_a_fork_of_the_elite():
    h = History("a-1", "b-2")
    h.eval("a-1", 5.0)
    for _ in range(5):                     # the first sets b-2's best, four more do not beat it
        h.eval("b-2", 1.5)
    (p,) = [p for p in detect_plateaus(h.state, CFG) if p.team == "b-2"]
    d = diagnose(p, h.state)
    assert d.remedy == "fork"
    ops = decide([d], h.state, max_teams=4)
    assert [(o.op, o.team) for o in ops] == [("fork", None), ("retire", "b-2")]
    apply_ops(h, ops)
    fork = h.state.teams["refiner-3"]
    assert (fork.strategy, fork.start_from, fork.state) == ("refiner", "c0001", "active")
    assert h.state.teams["b-2"].state == "retired"


def test_run_stall_forks_the_elite_and_rebalances_toward_its_team():
    h = History("a-1", "b-2")
    h.eval("a-1", 5.0)
    for i in range(6):
        h.eval("b-2" if i % 2 else "a-1", 1.0)
    run = [p for p in detect_plateaus(h.state, CFG) if p.scope == "run"]
    ops = decide([diagnose(run[0], h.state)], h.state, max_teams=4)
    assert [o.op for o in ops] == ["fork", "rebalance"]
    apply_ops(h, ops)
    assert h.state.teams["a-1"].share == 2.0 and h.state.teams["b-2"].share == 1.0
    assert h.state.since_improvement == 0   # the run-level restructure gets a fresh window


def test_a_second_fork_of_the_same_elite_spawns_an_explorer_and_makes_room():
    h = History("a-1", "b-2")
    h.eval("a-1", 5.0)
    for i in range(6):
        h.eval("b-2" if i % 2 else "a-1", 1.0)
    run = [p for p in detect_plateaus(h.state, CFG) if p.scope == "run"]
    apply_ops(h, decide([diagnose(run[0], h.state)], h.state, max_teams=3))
    for i in range(6):
        h.eval("b-2", 1.0)
    again = [p for p in detect_plateaus(h.state, CFG) if p.scope == "run"]
    ops = decide([diagnose(again[0], h.state)], h.state, max_teams=3)
    assert [(o.op, o.team) for o in ops][:2] == [("retire", "b-2"), ("spawn", None)]
    apply_ops(h, ops)
    assert {t.id for t in h.state.active_teams()} == {"a-1", "refiner-3", "explorer-4"}


def test_failing_team_is_redirected_then_retired():
    h = History("a-1", "b-2")
    h.eval("b-2", 2.0)
    for _ in range(3):
        h.eval("a-1", None, status="crash")
    (p,) = detect_plateaus(h.state, CFG)
    ops = decide([diagnose(p, h.state)], h.state, max_teams=4)
    assert [(o.op, o.team, o.params["strategy"]) for o in ops] == [
        ("redirect", "a-1", "explorer")]
    apply_ops(h, ops)
    team = h.state.teams["a-1"]
    assert (team.strategy, team.redirects, team.failures) == ("explorer", 1, 0)
    for _ in range(3):
        h.eval("a-1", None, status="crash")
    (p,) = [p for p in detect_plateaus(h.state, CFG) if p.team == "a-1"]
    ops = decide([diagnose(p, h.state)], h.state, max_teams=4)
    assert [(o.op, o.team) for o in ops] == [("retire", "a-1")]


def test_an_exhausted_team_is_replaced_by_a_fork_of_the_elite():
    h = History("a-1")
    h.eval("a-1", 2.0)
    h.state.teams["a-1"].exhausted = True
    (p,) = detect_plateaus(h.state, CFG)
    assert p.kind == "exhausted"
    ops = decide([diagnose(p, h.state)], h.state, max_teams=4)
    assert [(o.op, o.team, o.params.get("preset")) for o in ops] == [
        ("fork", None, "refiner"), ("retire", "a-1", None)]


def test_retiring_the_last_team_spawns_a_replacement():
    h = History("a-1")
    h.eval("a-1", 2.0)
    h.state.teams["a-1"].redirects = 1
    for _ in range(3):
        h.eval("a-1", None, status="crash")
    (p,) = [p for p in detect_plateaus(h.state, CFG) if p.kind == "failing"]
    ops = decide([diagnose(p, h.state)], h.state, max_teams=4)
    assert [(o.op, o.team) for o in ops] == [("retire", "a-1"), ("spawn", None)]


def test_restructures_are_scored_by_whether_their_team_beat_the_old_best():
    h = History("a-1", "b-2")
    h.eval("a-1", 5.0)
    for _ in range(5):                     # the first sets b-2's best, four more do not beat it
        h.eval("b-2", 1.5)
    (p,) = [p for p in detect_plateaus(h.state, CFG) if p.team == "b-2"]
    apply_ops(h, decide([diagnose(p, h.state)], h.state, max_teams=4))
    fork_seq = next(x.seq for x in h.state.pending if x.op == "fork")
    h.eval("refiner-3", 6.0)
    assert score(h.state, CFG.score_after) == []       # too early to judge
    h.eval("a-1", 1.0)
    h.eval("a-1", 1.0)
    verdicts = {v.restructure: v for v in score(h.state, CFG.score_after)}
    assert verdicts[fork_seq].helped and verdicts[fork_seq].by == "c0007"
    assert verdicts[fork_seq].best_before == pytest.approx(5.0)
    retire = next(x.seq for x in h.state.pending if x.op == "retire")
    assert verdicts[retire].helped      # the run improved after it too


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


def test_a_leader_that_stalls_is_redirected_to_combined_steps_around_its_best():
    h = History("a-1", "b-2")
    h.eval("a-1", 4.0)
    for _ in range(5):
        h.eval("a-1", 1.0)
    (p,) = [p for p in detect_plateaus(h.state, CFG) if p.team == "a-1"]
    d = diagnose(p, h.state)
    assert (d.remedy, d.around) == ("redirect", "c0001")
    (op,) = decide([d], h.state, max_teams=4)
    assert (op.op, op.params["strategy"], op.params["start_from"]) == \
        ("redirect", "refiner", "c0001")


def test_forks_go_to_another_region_once_the_elite_has_one_and_never_twice():
    h = History("a-1", "b-2")
    h.eval("a-1", 5.0, A=1, B=1)
    h.eval("b-2", 4.0, A=7, B=7)
    for i in range(6):
        h.eval("a-1", 1.0, A=i, B=0)
    run = [p for p in detect_plateaus(h.state, CFG) if p.scope == "run"][0]
    d = diagnose(run, h.state)
    ops = decide([d, d], h.state, max_teams=6)     # the same plateau twice in one step
    forks = [(o.params["start_from"], o.params["preset"]) for o in ops if o.op == "fork"]
    assert forks == [("c0001", "refiner"), ("c0002", "coordinate")]  # elite, then elsewhere
    apply_ops(h, ops)
    (op,) = decide([d], h.state, max_teams=6)
    assert op.op == "fork" and op.params["start_from"] not in ("c0001", "c0002")


def test_with_no_other_region_to_start_from_a_fresh_explorer_is_spawned():
    h = History("a-1")
    h.eval("a-1", 5.0, A=1, B=1)
    h.eval("a-1", 4.0, A=1, B=2)                   # one knob away: the same region
    h.add(TeamSpawned(team="refiner-2", preset="refiner", strategy="refiner", directive="d",
                      start_from="c0001"))
    for _ in range(6):
        h.eval("refiner-2", 1.0, A=1, B=3)
    run = [p for p in detect_plateaus(h.state, CFG) if p.scope == "run"][0]
    ops = decide([diagnose(run, h.state)], h.state, max_teams=6)
    assert [(o.op, o.params.get("preset")) for o in ops] == [("spawn", "explorer")]


def test_a_new_team_gets_its_share_from_now_on_instead_of_catching_up():
    from eat.team import pick_team

    class Ctx:
        state = None

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
