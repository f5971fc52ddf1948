"""Plateau detection, elite re-times and turn-taking, on synthetic histories."""

import math
import random

from history import CFG, History

from eat.config import RunConfig
from eat.events import CandidateEvaluated, EliteRetimed, TeamSpawned
from eat.plateau import (
    LOOK,
    PROMISING,
    RETIMED_TO,
    climbed,
    closing,
    detect_plateaus,
    elite_to_retime,
    far_apart,
    promising_regions,
)


def kinds(plateaus):
    return sorted((p.scope, p.kind, p.team) for p in plateaus)


def test_gains_inside_the_noise_do_not_count_as_progress():
    h = History("a-1")
    h.eval("a-1", 2.0, noise=0.05)  # elite with a 5% spread
    for s in (2.04, 2.06, 2.08, 2.09):  # each a new best, none beyond the spread
        h.eval("a-1", s)
    assert h.state.teams["a-1"].since_improvement == 4
    assert kinds(detect_plateaus(h.state, CFG)) == [("team", "stalled", "a-1")]
    h.eval("a-1", 2.5)  # a real gain resets the counter
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
    for _ in range(6):  # another full window without progress: again
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
    h.eval("a-1", 3.0)  # lucky measurement
    h.eval("a-1", 2.8)
    for _ in range(3):
        h.eval("a-1", 1.0)
    plateaus = detect_plateaus(h.state, CFG)
    assert elite_to_retime(h.state, plateaus).cid == "c0002"
    h.add(EliteRetimed(candidate="c0002", speedup=2.0))  # median of 3.0 and 2.0 is 2.5
    assert h.state.best.cid == "c0003"
    assert h.state.since_improvement == 3  # c0003 beat the honest 2.5 by more than the noise
    assert (
        elite_to_retime(h.state, detect_plateaus(h.state, CFG)) is None
        or len(h.state.best.measurements) < RETIMED_TO
    )


def test_a_teams_best_follows_its_candidates_re_times():
    """A team's best is its highest figure as it stands: a re-time that lowers it, or fails,
    hands it to the team's next (its NOTES.md, `eat status` and its plateaus read it)."""
    h = History("a-1", "b-1")
    h.eval("a-1", 3.0)  # c0001, lucky
    h.eval("a-1", 2.8)
    h.eval("b-1", 2.9)
    h.eval("a-1", 2.6)
    team = h.state.teams["a-1"]
    assert team.best.cid == "c0001"
    h.add(EliteRetimed(candidate="c0001", speedup=2.0))  # median 2.5
    assert team.best.cid == "c0002" and h.state.teams["b-1"].best.cid == "c0003"
    h.add(EliteRetimed(candidate="c0002", status="error", speedup=None))
    assert team.best.cid == "c0004"
    h.add(EliteRetimed(candidate="c0001", speedup=3.1))  # median of 3.0, 2.0, 3.1: 3.0
    assert team.best.cid == "c0001"


def test_a_stalled_elite_is_retimed_until_it_has_three_measurements():
    h = History("a-1")
    h.eval("a-1", 3.0)
    for _ in range(6):
        h.eval("a-1", 1.0)
    stalled = detect_plateaus(h.state, CFG)
    assert any(p.kind == "stalled" for p in stalled)
    assert elite_to_retime(h.state, stalled).cid == "c0001"
    h.add(EliteRetimed(candidate="c0001", speedup=2.9))
    assert elite_to_retime(h.state, stalled).cid == "c0001"  # two draws can both be lucky
    h.add(EliteRetimed(candidate="c0001", speedup=3.1))
    assert h.state.best.measurements == [3.0, 2.9, 3.1]
    assert elite_to_retime(h.state, stalled) is None


def test_a_noisy_leader_that_may_be_better_is_retimed_before_the_steady_best():
    h = History("a-1")
    h.eval("a-1", 3.0, noise=0.02)  # steady: the best
    h.eval("a-1", 3.6, noise=0.3)  # higher, but one timing of a noisy kernel ranks it below
    h.eval("a-1", 2.0, noise=0.02)  # below the best however it is timed: never re-timed
    for _ in range(6):
        h.eval("a-1", 1.0)
    stalled = detect_plateaus(h.state, CFG)
    assert h.state.best.cid == "c0001"
    assert elite_to_retime(h.state, stalled).cid == "c0002"
    h.add(EliteRetimed(candidate="c0002", speedup=3.5))
    assert elite_to_retime(h.state, stalled).cid == "c0002"
    h.add(EliteRetimed(candidate="c0002", speedup=3.6))
    assert h.state.best.cid == "c0002"  # three timings narrow its spread: it leads
    assert elite_to_retime(h.state, stalled) is None  # the steady 3.0x cannot beat it by 30%


def test_leaders_within_the_noise_of_the_best_are_not_retimed():
    h = History("a-1")
    h.eval("a-1", 3.0, noise=0.02)
    h.eval("a-1", 2.99, noise=0.02)  # the same kernel, as far as the timing can tell
    for _ in range(6):
        h.eval("a-1", 1.0)
    stalled = detect_plateaus(h.state, CFG)
    assert elite_to_retime(h.state, stalled).cid == "c0001"
    h.add(EliteRetimed(candidate="c0001", speedup=3.0))
    h.add(EliteRetimed(candidate="c0001", speedup=3.0))
    assert elite_to_retime(h.state, stalled) is None


def test_the_runs_closing_evaluations_retime_the_leaders_without_a_stall():
    h = History("a-1")
    h.eval("a-1", 3.0, noise=0.02)
    h.eval("a-1", 3.6, noise=0.3)
    assert detect_plateaus(h.state, CFG) == []
    assert elite_to_retime(h.state, []) is None
    assert not closing(left=10, max_evals=60) and closing(left=3, max_evals=60)
    assert closing(left=1, max_evals=20) and not closing(left=1, max_evals=19)  # none if small
    assert elite_to_retime(h.state, [], at_close=True).cid == "c0002"


def test_a_retime_that_confirms_the_elite_changes_no_counter():
    h = History("a-1")
    h.eval("a-1", 2.0)
    h.eval("a-1", 2.02)
    for _ in range(5):
        h.eval("a-1", 1.0)
    h.add(EliteRetimed(candidate="c0002", speedup=1.98))  # best is now c0001 (2.0 > 2.0)
    assert h.state.since_improvement == 6  # still no gain since c0001


def test_a_noisy_kernels_lucky_timing_does_not_lead_a_steady_one_until_retimes_bear_it_out():
    h = History("a-1")
    h.eval("a-1", 2.0, noise=0.02)  # steady: 2.0 less 2% is about 1.96
    h.eval("a-1", 2.5, noise=0.40)  # one timing of a kernel whose runs spread 40%: about 1.68
    assert h.state.best.cid == "c0001"
    assert h.state.leaders == ["c0001", "c0002"]
    h.add(EliteRetimed(candidate="c0002", speedup=2.6))  # two timings: 2.55 less 40%/sqrt(2)
    assert h.state.best.cid == "c0001"
    h.add(EliteRetimed(candidate="c0002", speedup=3.2))  # three: 2.6 less 40%/sqrt(3), about 2.06
    assert h.state.best.cid == "c0002"

    credulous = History("a-1", cfg=CFG.model_copy(update={"doubt": 0.0}))
    credulous.eval("a-1", 2.0, noise=0.02)
    credulous.eval("a-1", 2.5, noise=0.40)
    assert credulous.state.best.cid == "c0002"  # the median alone


def test_an_elite_that_fails_its_retime_loses_its_place():
    h = History("a-1")
    h.eval("a-1", 2.0)
    h.eval("a-1", 5.0)
    h.add(EliteRetimed(candidate="c0002", speedup=None, status="incorrect"))
    assert h.state.best.cid == "c0001"
    assert h.state.candidates["c0002"].estimate is None


def test_a_forked_team_searches_around_its_start_until_it_beats_it():
    from pathlib import Path

    from eat.agents.offline import OfflineAgent
    from eat.target import load_target

    target = load_target(Path(__file__).parent.parent / "examples" / "cpu_matmul")
    h = History("a-1")
    h.eval("a-1", 9.0, LOOP_ORDER="IKJ", TILE=0, UNROLL=4, CFLAGS="-O3 -march=native")
    h.add(
        TeamSpawned(
            team="refiner-2",
            preset="refiner",
            strategy="refiner",
            directive="d",
            start_from="c0001",
        )
    )
    h.eval("refiner-2", 2.0, LOOP_ORDER="JKI", TILE=0, UNROLL=4, CFLAGS="-O3 -march=native")
    agent = OfflineAgent(target, seed=0)
    for _ in range(5):
        p = agent.propose(h.state.teams["refiner-2"], h.state)
        assert p.parent == "c0001"  # not the team's own weaker best
        h.eval("refiner-2", 1.0, **p.knobs)


def test_a_new_team_gets_its_share_from_now_on_instead_of_catching_up():
    from eat.team import pick_team

    class Ctx:
        state = None
        config = RunConfig(target="t")
        opening = 0

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


def _regions_by_definition(state, known, taken):
    """promising_regions written out candidate by candidate, as its docstring defines it."""
    ok = [c for c in state.candidates.values() if c.estimate is not None and c.knobs]
    if not ok:
        return []
    median = sorted(c.estimate for c in ok)[len(ok) // 2]
    found, looked = [], 0
    for c in sorted(ok, key=lambda c: -c.estimate):
        if c.estimate <= median:
            break
        if c.cid in taken or not all(far_apart(c, x) for x in known + found):
            continue
        if looked == LOOK:
            break
        looked += 1
        around = sorted(x.estimate for x in ok if x is not c and not far_apart(x, c))
        if not around or c.estimate >= PROMISING * around[len(around) // 2]:
            found.append(c)
    return found


def test_promising_regions_are_what_their_definition_finds():
    """The vectorized search over the run's KnobIndex agrees with the plain definition: on
    rugged and flat histories, with failures, re-times (the elite's estimate moves, or it
    fails), knob values of mixed types, a knob that appears late, and a known point that has
    no knobs at all."""
    for seed in range(12):
        rng = random.Random(seed)
        h = History("explorer-1", "coordinate-2")
        rugged, wide = seed % 2 == 0, seed % 3 == 0  # wide: more regions than LOOK looks at
        for i in range(1500 if wide else rng.choice((60, 150, 400))):
            knobs = {
                "A": rng.randrange(4),
                "B": rng.choice(["x", "y", "z"]),
                "C": rng.choice([1, 2.5, "2.5"]),
                "D": rng.randrange(3),
            }
            if wide:
                knobs |= {"F": rng.randrange(5), "G": rng.randrange(5), "H": rng.randrange(5)}
            if i > 30 and rng.random() < 0.1:
                knobs["E"] = rng.randrange(2)
            status = "incorrect" if rng.random() < 0.1 else "ok"
            # Rounded, so that equal estimates happen (the earlier candidate comes first).
            speed = (
                round(rng.uniform(0.5, 4), 1)
                if rugged
                else 1 + 0.01 * sum(v for v in knobs.values() if isinstance(v, int))
            )
            h.eval(rng.choice(["explorer-1", "coordinate-2"]), speed, status=status, **knobs)
            if rng.random() < 0.05 and h.state.best:
                ok = rng.random() < 0.7
                h.add(
                    EliteRetimed(
                        candidate=h.state.best.cid,
                        status="ok" if ok else "crash",
                        speedup=rng.uniform(0.5, 4) if ok else None,
                    )
                )
        h.add(
            CandidateEvaluated(
                candidate="llm",
                team="explorer-1",
                source_hash="llm",
                status="ok",
                speedup=3.0,
                knobs={},
            )
        )  # an LLM team's start
        state, no_knobs = h.state, h.state.candidates["llm"]
        known = climbed(state) + [no_knobs] + rng.sample(list(state.candidates.values()), 3)
        taken = set(rng.sample(sorted(state.candidates), 5))
        want = [c.cid for c in _regions_by_definition(state, known, taken)]
        assert [c.cid for c in promising_regions(state, known, taken)] == want, seed
        assert want or not rugged  # the rugged histories do have regions worth a climb


def test_a_turns_snapshot_and_the_live_state_go_their_own_ways():
    """A snapshot shares the candidates (so it is cheap in a long run), yet a re-time on the
    live state leaves what the snapshot sees as it was, and the snapshot's own events stay in
    it."""
    h = History("a-1", "b-2")
    h.eval("a-1", 2.0, A=1)
    h.eval("b-2", 3.0, A=2)
    snap = h.state.snapshot()
    assert snap.candidates["c0002"] is h.state.candidates["c0002"]
    h.add(EliteRetimed(candidate="c0002", status="crash", speedup=None))  # the elite fails
    assert h.state.best.cid == "c0001" and h.state.teams["b-2"].best is None
    assert snap.best.cid == "c0002" and snap.teams["b-2"].best.estimate == 3.0
    assert snap.candidates["c0002"].estimate == 3.0
    h.add(EliteRetimed(candidate="c0001", status="ok", speedup=1.0))  # measured again, slower
    live = h.state.candidates["c0001"]
    assert live.measurements == [2.0, 1.0] and h.state.teams["a-1"].best is live
    assert h.state.best is live and h.state.recent_of("a-1", 1) == [live]
    assert snap.teams["a-1"].best.estimate == 2.0 and snap.recent_of("a-1", 1)[0].estimate == 2.0
    own = CandidateEvaluated(
        candidate="c0003",
        team="a-1",
        source_hash="h3",
        status="ok",
        speedup=5.0,
        noise=0.01,
        knobs={"A": 3},
    )
    own.seq = snap.seq + 1
    snap.apply(own)
    assert snap.best.cid == "c0003" and snap.teams["a-1"].evals == 2
    assert "c0003" not in h.state.candidates and "h3" not in h.state.hashes
    assert h.state.teams["a-1"].evals == 1 and h.state.knob_index.cids == ["c0001", "c0002"]
    assert math.isnan(h.state.knob_index.estimates[1]) and snap.knob_index.estimates[1] == 3.0
