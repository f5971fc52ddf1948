"""The knob-space searches: coverage (explorer), the surrogate model, regions kept out of."""

import math
import random
from pathlib import Path

import numpy as np
from history import History

from eat.agents import surrogate
from eat.agents.offline import OfflineAgent
from eat.events import EliteRetimed, TeamSpawned
from eat.knobspace import Fence, differs
from eat.runners.base import source_hash
from eat.target import load_target

SPACE = {"A": list(range(9)), "B": list(range(9))}
TARGET = load_target(Path(__file__).parent.parent / "examples" / "cpu_matmul")


def spread(space, measured: list[dict], *args, **kwargs) -> list[dict]:
    """surrogate.spread of configurations given as knobs."""
    return surrogate.spread(space, [surrogate.indexer(space)(k) for k in measured], *args, **kwargs)


def suggest(space, observed: list[tuple[dict, float | None]], *args, **kwargs) -> list[dict]:
    """surrogate.suggest of (knobs, speedup) pairs."""
    point = surrogate.indexer(space)
    return surrogate.suggest(space, [(point(k), s) for k, s in observed], *args, **kwargs)


def bump(knobs):
    """A smooth bump centred on A=6, B=2."""
    return 1.0 + 3.0 * 0.5 ** ((knobs["A"] - 6) ** 2 + (knobs["B"] - 2) ** 2)


def test_coverage_picks_unused_values_then_the_point_farthest_from_everything_measured():
    (first,) = spread(SPACE, [{"A": 0, "B": 0}], random.Random(0), count=1)
    assert first == {"A": 8, "B": 8}
    measured = [{"A": 0, "B": 0}, {"A": 8, "B": 8}]
    # (8, 0) is farther from both but measures no new value; (1, 7) and (7, 1) measure two
    (first,) = spread(SPACE, measured, random.Random(0), count=1)
    assert first in ({"A": 1, "B": 7}, {"A": 7, "B": 1})
    fence = Fence(radius=2, near={"A": 1, "B": 1})  # A=1 or B=1
    kept = spread(SPACE, measured, random.Random(0), count=5, fence=fence)
    assert len(kept) == 5 and all(1 in k.values() for k in kept)
    assert all(k not in measured for k in kept)


def test_coverage_measures_every_value_of_each_knob_before_it_repeats_one():
    """Maximin alone keeps to the grid's boundary (here values 0, 4 and 2 only), so a good
    value inside the range is never measured by the explorer."""
    space = {k: list(range(5)) for k in "ABC"}
    measured = [dict.fromkeys("ABC", 0)]
    for _ in range(4):
        (pick,) = spread(space, measured, random.Random(0), count=1)
        measured.append(pick)
    assert all({m[k] for m in measured} == set(range(5)) for k in "ABC")


def test_in_a_sampled_space_coverage_still_starts_at_the_far_corner():
    """Past ENUMERATE_UP_TO configurations the pool is a random sample, which seldom holds the
    corner opposite the baseline; each measured point's antipode is added to it."""
    space = {k: list(range(10)) for k in "ABCDE"}  # 100,000 configurations
    assert 10**5 > surrogate.ENUMERATE_UP_TO
    for seed in range(3):
        (first,) = spread(space, [dict.fromkeys("ABCDE", 0)], random.Random(seed), 1)
        assert first == dict.fromkeys("ABCDE", 9)
    near_top = {"A": 9, "B": 9, "C": 7, "D": 2, "E": 0}  # antipode: the other end of each
    (first,) = spread(space, [near_top], random.Random(0), count=1)
    assert first == {"A": 0, "B": 0, "C": 0, "D": 9, "E": 9}


def test_coverage_in_a_space_past_what_one_integer_numbers():
    """8**21 configurations (2**63) cannot be numbered in an int64 (np.ravel_multi_index
    refuses them): coverage keeps the rows as rows, and the far corner is the first pick."""
    space = {f"K{i}": list(range(8)) for i in range(21)}
    (first,) = spread(space, [dict.fromkeys(space, 0)], random.Random(0), count=1)
    assert first == dict.fromkeys(space, 7)


def test_the_model_climbs_to_a_bump_from_a_few_measurements():
    rng = random.Random(1)
    observed = [
        ({"A": a, "B": b}, bump({"A": a, "B": b}))
        for a, b in [(0, 0), (8, 8), (0, 8), (8, 0), (4, 4), (5, 3)]
    ]
    for _ in range(12):
        pick = suggest(SPACE, observed, rng, count=1)[0]
        assert all(pick != k for k, _ in observed)  # never a repeat
        observed.append((pick, bump(pick)))
    best = max(observed, key=lambda o: o[1])[0]
    assert best == {"A": 6, "B": 2}


def test_a_long_runs_model_fits_on_its_best_and_a_sample_and_still_finds_the_bump(monkeypatch):
    """Past FIT_POINTS measurements the fit uses the best FIT_BEST and a sample of the rest (a
    fit on all of them costs their cube: 13 s and 885 MiB at 3,000), and still climbs."""
    space = {k: list(range(8)) for k in "ABCDE"}
    peak = {"A": 6, "B": 2, "C": 5, "D": 1, "E": 3}

    def speed(knobs):
        return 1.0 + 3.0 * 0.7 ** sum((knobs[k] - peak[k]) ** 2 for k in peak)

    fits = []

    class Recorded(surrogate.GP):
        def __init__(self, x, y, lengths=None):
            fits.append(len(x))
            super().__init__(x, y, lengths)

    monkeypatch.setattr(surrogate, "GP", Recorded)
    rng = random.Random(2)
    points = {tuple(rng.randrange(8) for _ in peak) for _ in range(1500)}
    observed = [
        (k, speed(k)) for k in (dict(zip(peak, p)) for p in sorted(points)) if differs(k, peak) > 1
    ]  # the peak's region itself is left unmeasured
    for _ in range(3):
        pick = suggest(space, observed, rng, count=1)[0]
        assert all(pick != k for k, _ in observed)
        observed.append((pick, speed(pick)))
    assert fits == [surrogate.FIT_POINTS] * 3
    assert differs(max(observed, key=lambda o: o[1])[0], peak) <= 1


def test_failed_configurations_count_as_poor_and_unseen_spaces_start_at_random():
    observed = [({"A": 0, "B": 0}, 1.0), ({"A": 1, "B": 0}, None)]
    picks = suggest(SPACE, observed, random.Random(3), count=4)
    assert len(picks) == 4 and {"A": 1, "B": 0} not in picks


def knobs(loop="IJK", tile=0, unroll=1, cflags="-O2", mr=0, nr=8, pack=0, vec=8):
    return {
        "LOOP_ORDER": loop,
        "TILE": tile,
        "UNROLL": unroll,
        "CFLAGS": cflags,
        "MR": mr,
        "NR": nr,
        "PACK": pack,
        "VEC": vec,
    }


def test_a_model_forked_from_a_point_searches_its_region_outside_the_avoided_ones():
    h = History("coordinate-1")
    h.eval("coordinate-1", 9.0, **knobs("IKJ", cflags="-O3 -march=native"))
    h.eval("coordinate-1", 20.0, **knobs("IKJ", 64, 4, "-O3 -march=native", 6, 16, 2))
    h.add(
        TeamSpawned(
            team="model-2",
            preset="model",
            strategy="model",
            directive="d",
            start_from="c0002",
            avoid=["c0001"],
        )
    )
    team = h.state.teams["model-2"]
    agent = OfflineAgent(TARGET, seed=0)
    for _ in range(6):
        p = agent.propose(team, h.state)
        assert differs(p.knobs, h.state.candidates["c0002"].knobs) < 4  # its region
        assert differs(p.knobs, h.state.candidates["c0001"].knobs) >= 4  # not the avoided one
        h.eval("model-2", 5.0, **p.knobs)


def test_an_explorer_keeps_out_of_the_regions_it_was_told_to_avoid():
    h = History("coordinate-1")
    h.eval("coordinate-1", 9.0, **knobs("IKJ", cflags="-O3 -march=native"))
    h.add(
        TeamSpawned(
            team="explorer-2",
            preset="explorer",
            strategy="explorer",
            directive="d",
            avoid=["c0001"],
        )
    )
    agent = OfflineAgent(TARGET, seed=0)
    for _ in range(6):
        p = agent.propose(h.state.teams["explorer-2"], h.state)
        assert differs(p.knobs, h.state.candidates["c0001"].knobs) >= 4
        h.eval("explorer-2", 1.0, **p.knobs)


def test_an_explorer_stops_covering_a_value_that_gave_under_a_tenth_of_the_best_wherever_measured():
    """On cpu_matmul -O2 runs at 1x where the best is 40x: the least-measured-first rule sent
    the explorer back to it again and again. Twice under a tenth of the run's best settles a
    value; once, or within a tenth, does not."""

    def explorer_after(*measured):
        h = History("coordinate-1", "explorer-2")
        h.eval("coordinate-1", 30.0, **knobs("IKJ", cflags="-O3 -march=native", mr=6, nr=16))
        for speedup, kn in measured:
            h.eval("coordinate-1", speedup, **kn)
        agent = OfflineAgent(TARGET, seed=0)
        picks = []
        for _ in range(10):
            p = agent.propose(h.state.teams["explorer-2"], h.state)
            picks.append(p.knobs["CFLAGS"])
            h.eval("explorer-2", 20.0, **p.knobs)
        return picks

    slow = [(1.0, knobs("IJK", cflags="-O3")), (1.2, knobs("KJI", 64, 4, "-O3", 2, 32, 1, 16))]
    assert "-O3" not in explorer_after(*slow)
    assert "-O3" in explorer_after(slow[0])  # measured once: still covered
    assert "-O3" in explorer_after(slow[0], (4.0, slow[1][1]))  # 4x of 30x: within a tenth


def test_the_settled_values_over_the_knob_index_are_the_plain_definitions():
    """KnobIndex.below counts a value's measured rows and takes their best at once; it agrees
    with counting candidate by candidate: with failures (not counted), a knob that appears
    late, and list values (TOML arrays)."""
    for seed in range(6):
        rng = random.Random(seed)
        h = History("coordinate-1")
        for i in range(200):
            kn = {"TILE": rng.choice([0, 16, 32]), "F": rng.choice([["-O2"], ["-O3", "-g"]])}
            if i > 80 and rng.random() < 0.3:
                kn["VEC"] = rng.choice([8, 16])
            ok = rng.random() > 0.1
            slow = kn["TILE"] == 0 or kn.get("VEC") == 16
            speedup = rng.uniform(0.5, 1.5) if slow else rng.uniform(1, 30)
            h.eval("coordinate-1", speedup if ok else None, status="ok" if ok else "crash", **kn)
        level = rng.uniform(1.2, 2)
        seen: dict = {}
        for c in h.state.candidates.values():
            if c.estimate is not None:
                for name, value in c.knobs.items():
                    seen.setdefault((name, str(value)), []).append(c.estimate)
        want: dict = {}
        for (name, value), got in seen.items():
            if len(got) >= 2 and max(got) < level:
                want.setdefault(name, set()).add(value)
        assert h.state.knob_index.below(2, level) == want and want


def test_a_fence_admits_the_same_rows_at_once_as_one_configuration_at_a_time():
    """Searchers filter thousands of index rows a pick through admits_rows; it must agree with
    admits (differs) where values are TOML lists, and where a region sets a knob the space
    lacks or lacks one the space has."""
    space = {"A": list(range(4)), "F": [["-O2"], ["-O3"], ["-O3", "-ffast-math"]], "C": [1, 2]}
    rows = np.indices([4, 3, 2]).reshape(3, -1).T
    configs = [{n: space[n][j] for n, j in zip(space, r)} for r in rows]
    rng = random.Random(0)
    for _ in range(40):
        near = rng.choice([None, rng.choice(configs)])
        avoid = [dict(rng.choice(configs)) for _ in range(rng.randrange(3))]
        for r in avoid[:1]:
            r.pop(rng.choice(list(space)))  # a region that leaves a knob unset
            r["D"] = 1  # and sets one the space lacks
        fence = Fence(radius=rng.choice([1, 2, 3]), near=near, avoid=tuple(avoid))
        assert list(fence.admits_rows(space, rows)) == [fence.admits(c) for c in configs]


def test_a_climb_tries_the_nearest_values_of_a_knob_first():
    h = History("coordinate-1")
    h.eval("coordinate-1", 2.0, **knobs(tile=64))
    team = h.state.teams["coordinate-1"]
    team.evals = 1  # TILE is the second knob: its turn
    p = OfflineAgent(TARGET, seed=0).propose(team, h.state)
    assert p.knobs["TILE"] in (32, 128) and differs(p.knobs, knobs(tile=64)) == 1


def test_a_climb_tries_a_settled_value_only_when_no_other_move_is_left():
    """A one-knob move to a value measured twice under a tenth of the run's best (-O2 here, at
    1x of 30x) comes after every other move of the centre."""
    h = History("coordinate-1")
    best = knobs("IKJ", 64, 4, "-O3 -march=native", 6, 16, 1)
    h.eval("coordinate-1", 30.0, **best)
    h.eval("coordinate-1", 1.0, **knobs("IJK", cflags="-O2"))
    h.eval("coordinate-1", 1.2, **knobs("KJI", 16, 2, "-O2", 2, 32))
    team = h.state.teams["coordinate-1"]
    agent = OfflineAgent(TARGET, seed=0)
    moves = sum(len(k.values) - 1 for k in TARGET.knobs.values())
    tried = []
    for _ in range(moves):
        p = agent.propose(team, h.state)
        tried.append(p.knobs["CFLAGS"])
        # no gain: the climb stays at its centre
        h.eval("coordinate-1", 20.0, digest=source_hash(p.source), **p.knobs)
    assert tried[-1] == "-O2" and tried.count("-O2") == 1


def fork(h: History, team: str, start: str) -> None:
    """Spawn `team`, a coordinate climb started from candidate `start`."""
    h.add(
        TeamSpawned(
            team=team, preset="coordinate", strategy="coordinate", directive="d", start_from=start
        )
    )


def test_a_climb_with_no_start_climbs_from_the_runs_best_and_a_forked_one_from_its_start():
    h = History("coordinate-1", "model-2")
    h.eval("coordinate-1", 2.0, **knobs(tile=64))
    h.eval("model-2", 30.0, **knobs("IKJ", 64, 4, "-O3 -march=native", 6, 16, 2))
    agent = OfflineAgent(TARGET, seed=0)
    p = agent.propose(h.state.teams["coordinate-1"], h.state)
    assert p.parent == "c0002"  # the model's find, not its own worse best
    assert differs(p.knobs, h.state.candidates["c0002"].knobs) == 1

    fork(h, "coordinate-3", "c0001")
    p = agent.propose(h.state.teams["coordinate-3"], h.state)
    assert p.parent == "c0001"  # a fork keeps to the region it was sent to
    assert differs(p.knobs, knobs(tile=64)) == 1


def test_a_climb_with_no_start_climbs_from_the_baseline_while_everything_measured_is_slower():
    """The run's first, far picks can all be slower than the baseline: a climb with no start
    then moves one knob from the baseline's configuration (the knobs' first values, 1.0x), and
    from the run's best once one beats it; a fork keeps to its start however slow."""
    far = knobs("KJI", 256, 8, "-O3", 8, 32, 2, 16)
    h = History("coordinate-1")
    h.eval("coordinate-1", 0.8, **far)
    agent = OfflineAgent(TARGET, seed=0)
    p = agent.propose(h.state.teams["coordinate-1"], h.state)
    assert p.parent is None and differs(p.knobs, knobs()) == 1

    h.eval("coordinate-1", 1.3, **knobs(tile=64))
    p = agent.propose(h.state.teams["coordinate-1"], h.state)
    assert p.parent == "c0002" and differs(p.knobs, knobs(tile=64)) == 1

    fork(h, "coordinate-2", "c0001")
    p = agent.propose(h.state.teams["coordinate-2"], h.state)
    assert p.parent == "c0001" and differs(p.knobs, far) == 1


def first_knob_bump(n: int) -> tuple[np.ndarray, np.ndarray]:
    """`n` measurements over three knobs, only the first of which changes the speedup."""
    rng = np.random.default_rng(0)
    x = rng.integers(0, 5, (n, 3)) / 4.0
    y = np.log(1 + 5 * np.exp(-((x[:, 0] - 0.75) ** 2) / 0.05)) + 0.01 * rng.standard_normal(n)
    return x, y


def test_the_model_learns_which_knobs_matter():
    """Three knobs, only the first of which changes the speedup: the fit gives the other two
    the widest width (they hardly matter) and the first a narrow one, so its picks vary the
    knob that pays, as a per-knob search (TPE) would."""
    gp = surrogate.GP(*first_knob_bump(60))
    assert gp.lengths[0] < 1.0 and list(gp.lengths[1:]) == [surrogate.WIDE] * 2
    mean, _ = gp.predict(np.array([[0.75, 0.0, 1.0], [0.0, 0.0, 1.0]]))
    assert mean[0] > mean[1] + 1.0  # the bump, wherever the other knobs are


def test_a_long_runs_model_chooses_its_widths_on_a_sample_and_still_learns_which_knobs_matter(
    monkeypatch,
):
    """Past WIDTH_POINTS measurements the width search (some hundred factorizations) scores an
    even sample of them, the fit itself uses them all: the knob that pays still gets a narrow
    width and the others the widest."""
    sizes, widths = [], surrogate._widths

    def recorded(x, z):
        sizes.append(len(x))
        return widths(x, z)

    monkeypatch.setattr(surrogate, "_widths", recorded)
    x, y = first_knob_bump(surrogate.FIT_POINTS)
    gp = surrogate.GP(x, y)
    assert sizes == [surrogate.WIDTH_POINTS] and len(gp.x) == surrogate.FIT_POINTS
    assert gp.lengths[0] < 1.0 and list(gp.lengths[1:]) == [surrogate.WIDE] * 2
    surrogate.GP(x[:50], y[:50])
    assert sizes[1] == 50  # a short run's search scores every measurement


def test_the_batched_width_search_scores_each_width_as_one_fit_does():
    """The width search scores its candidate widths in one batched factorization; each score
    is the evidence a single fit with those widths gives (so the widths chosen are too)."""
    import numpy as np

    rng = np.random.default_rng(1)
    x = rng.integers(0, 6, (80, 4)) / 5.0
    y = np.sin(3 * x).sum(axis=1) + 0.1 * rng.standard_normal(80)
    z = (y - y.mean()) / y.std()
    widths = rng.choice([*surrogate.LENGTHS, surrogate.WIDE], size=(7, 4))
    one_by_one = [surrogate._fit(x, z, w)[0] for w in widths]
    assert np.allclose(surrogate._evidences(x, z, widths), one_by_one, rtol=1e-9, atol=1e-9)
    assert len(set(one_by_one)) == 7  # distinct widths, distinct scores: the test can tell


def test_the_picks_between_two_rungs_share_one_width_search(monkeypatch):
    """The width search (most of a pick's cost) is made on the first _rung(n) measurements:
    the picks of a run from 30 to 80 measurements search once per rung, not once per pick,
    and a measurement within the rung that changes (a re-time) makes a search anew."""
    surrogate._searched.cache_clear()
    space = {k: list(range(6)) for k in "ABCD"}
    searched, widths = [], surrogate._widths

    def recorded(x, z):
        searched.append(len(x))
        return widths(x, z)

    monkeypatch.setattr(surrogate, "_widths", recorded)
    rng = random.Random(4)

    def speed(knobs):
        return 1.0 + math.exp(-((knobs["A"] - 4) ** 2) - 0.1 * (knobs["B"] - 1) ** 2)

    observed = []
    while len(observed) < 30:
        k = {n: rng.randrange(6) for n in space}
        if all(k != o for o, _ in observed):
            observed.append((k, speed(k)))
    for _ in range(50):
        pick = suggest(space, observed, rng, count=1)[0]
        observed.append((pick, speed(pick)))
    rungs = sorted({surrogate._rung(n) for n in range(30, 80)})
    assert searched == rungs  # one search per rung, each on the rung's measurements
    first, value = observed[0]
    observed[0] = (first, value * 1.5)
    suggest(space, observed, rng, count=1)
    assert searched[-1] == surrogate._rung(len(observed)) and len(searched) == len(rungs) + 1


def test_an_agent_keeps_the_rows_it_found_and_reads_each_picks_estimates_anew():
    """An agent finds a candidate's index row once a run, and reads the estimates from the
    state at each pick: as the run grows and its candidates are re-timed (one of them failing
    now), its picks are a fresh agent's."""
    h, rng = History("model-1"), random.Random(0)
    agent = OfflineAgent(TARGET, seed=0)
    for step in range(14):
        loop, tile = rng.choice(["IJK", "IKJ", "KJI"]), rng.choice([0, 16, 32, 64])
        h.eval("model-1", rng.uniform(1, 30), **knobs(loop, tile, mr=rng.choice([0, 4, 6])))
        if step in (8, 11):  # a re-time moves c0003's estimate, then fails it
            h.add(EliteRetimed(candidate="c0003", speedup=[80.0, None][step == 11]))
        team = h.state.teams["model-1"]
        assert agent.propose(team, h.state) == OfflineAgent(TARGET, seed=0).propose(team, h.state)
        estimates = [e for _, e in agent._measured(h.state)][1:]
        assert estimates == [c.estimate for c in h.state.candidates.values()]
    assert estimates[2] is None
