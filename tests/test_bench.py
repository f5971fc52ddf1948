"""bench/search_efficiency.py serves several budgets from one run where an arm never reads its
budget but to stop: here each shared figure is held against a run of its own at that budget."""

import importlib.util
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def bench():
    spec = importlib.util.spec_from_file_location(
        "search_efficiency", ROOT / "bench" / "search_efficiency.py"
    )
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def land(bench):
    return bench.Synthetic("broad")


@pytest.fixture(scope="module")
def target(bench, land, tmp_path_factory):
    return bench.make_target(land, tmp_path_factory.mktemp("bench") / "broad")


def figures(run: dict) -> dict:
    return {k: run[k] for k in ("best", "true", "measured", "used", "reached", "why", "trail")}


@pytest.mark.parametrize(
    "overrides",
    [{"supervise": False}, {"teams": ["coordinate"], "supervise": False}],
    ids=["unrestructured", "static coordinate"],
)
def test_a_run_that_does_not_supervise_serves_every_smaller_budget(bench, land, target, overrides):
    shared = bench.one_run(land, target, [12, 30], 3, overrides)
    for budget in (12, 30):
        alone = bench.one_run(land, target, [budget], 3, overrides)[budget]
        assert figures(shared[budget]) == figures(alone)
    assert shared[12]["used"] == 12 and shared[12]["why"] == "max_evals"
    assert shared[12]["trail"] == shared[30]["trail"][:12]


def test_a_supervised_run_is_run_anew_for_each_budget(bench):
    assert not bench.shares_runs("supervised", {})
    assert bench.shares_runs("static model", {"teams": ["model"], "supervise": False})


@pytest.mark.parametrize("peer", ["random", "tpe"])
def test_a_peer_that_never_reads_its_budget_serves_every_smaller_budget(bench, land, peer):
    if peer == "tpe":
        pytest.importorskip("optuna")
    shared = bench.peer_run(land, [10, 25], 1, peer)
    for budget in (10, 25):
        alone = bench.peer_run(land, [budget], 1, peer)[budget]
        assert figures(shared[budget]) == figures(alone)
        assert len(alone["trail"]) == budget


def result(true: float, reached: int = 10) -> dict:
    """A run's figures as read_run gives them, for a best of `true` reached after `reached`."""
    return {
        "best": None,
        "true": true,
        "measured": true,
        "used": 60,
        "reached": reached,
        "why": "max_evals",
        "plateaus": 0,
        "restructures": 0,
        "trail": [],
        "curve": [(i, 1.0) for i in range(1, reached)] + [(reached, true)],
    }


def test_every_contender_is_scored_against_every_other_and_the_bar_names_who_meets_it(bench, land):
    seeds = 10
    runs = {
        arm: [result(1.5, reached=20) for _ in range(seeds)]
        for arm in ("supervised", "unrestructured", "static coordinate", "tpe", "ngopt", "random")
    }
    runs["static model"] = [result(2.0) for _ in range(seeds)]  # the best on every seed
    runs["tpe"][9] = result(1.5, reached=5)  # the same best, reached in a quarter of the time
    report = bench.compare(land, 150, runs, lambda *a: None)
    pairs = report["pairs"]
    assert report["static_team"] == "model"
    assert set(pairs) == {"supervised", "static", "tpe", "ngopt", "random"}
    assert pairs["static"]["tpe"] == {"wins": 10, "ties": 0, "losses": 0}
    assert pairs["tpe"]["supervised"] == {"wins": 1, "ties": 9, "losses": 0}
    assert pairs["supervised"]["tpe"] == report["vs"]["tpe"]
    assert report["bar"] == ["static"]
    # On four seeds the static team only ties the others, TPE's quicker one included: 6 wins
    # of 10 miss the bar at 150, and are enough below it (more wins than losses).
    runs["static model"][6:] = [result(1.5, reached=20) for _ in range(4)]
    report = bench.compare(land, 150, runs, lambda *a: None)
    assert report["pairs"]["static"]["tpe"] == {"wins": 6, "ties": 3, "losses": 1}
    assert report["bar"] == []
    assert bench.compare(land, 60, runs, lambda *a: None)["bar"] == ["static"]


def test_the_oracles_wins_show_where_the_bar_is_out_of_anyones_reach(bench, land):
    top = land.true(land.top())
    assert top == pytest.approx(2.98, abs=0.01)  # broad's highest bump, not its broad one
    runs = {
        arm: [result(1.5, reached=20) for _ in range(10)]
        for arm in ("supervised", "unrestructured", "static model", "tpe", "ngopt", "random")
    }
    runs["random"][:4] = [result(top, reached=1) for _ in range(4)]  # the top at its first pick
    runs["random"][4] = result(top, reached=2)  # at its second: an oracle still wins
    ceiling = bench.compare(land, 150, runs, lambda *a: None)["ceiling"]
    assert ceiling == {"static": 10, "unrestructured": 10, "tpe": 10, "ngopt": 10, "random": 6}


def test_runs_whose_bests_are_equal_within_noise_are_timed_to_the_same_level(bench):
    class Recorded(bench.Landscape):  # a steady configuration and a noisy one just below it
        knobs = {"K": {"values": [0, 1]}}

        def measure(self, idx):
            return {(0,): ("ok", 40.0, 0.05), (1,): ("ok", 38.0, 0.30)}[idx]

    land = Recorded()
    # Both evaluate the noisy 38x first; one goes on to the steady 40x and reports it.
    steady = result(40.0, reached=20) | {"best": (0,), "curve": [(1, 38.0), (20, 40.0)]}
    noisy = result(38.0, reached=1) | {"best": (1,), "curve": [(1, 38.0)]}
    # Timed against its own best and noise the steady run got there at 20, the noisy one at 1
    # (`reached`, which the rule scored by before). Against the same level (the higher best,
    # less the pair's noise) both were there at 1.
    assert bench.record(land, [steady], [noisy]) == {"wins": 0, "ties": 1, "losses": 0}
    assert bench.record(land, [noisy], [steady]) == {"wins": 0, "ties": 1, "losses": 0}


@pytest.mark.parametrize(
    "wins, ties, losses, budget, met",
    [
        (7, 2, 1, 150, True),
        (7, 1, 2, 150, False),
        (6, 4, 0, 150, False),
        (3, 5, 2, 60, True),
        (2, 6, 2, 60, False),
    ],
)
def test_the_bar(bench, wins, ties, losses, budget, met):
    assert bench.meets_bar({"wins": wins, "ties": ties, "losses": losses}, budget) is met


def test_the_landscape_reads_a_configuration_from_what_render_prepends(bench, land, target):
    """The baseline defines its own defaults (VEC 8 among them, a name the synthetic grid
    shares): they are not knob settings, so the baseline reads as every knob's first value."""
    from eat.agents.offline import render
    from eat.target import load_target

    t = load_target(target)
    assert "#define VEC 8" in t.baseline_source()
    assert land.parse(t.baseline_source()) == (0,) * len(land.knobs)
    knobs = {"BLOCK_M": 64, "VEC": 16, "CFLAGS": "-O3 -march=native"}
    assert land.parse(render(t, knobs)) == land.index(knobs)


def test_every_arm_draws_the_same_noise_for_a_configuration(bench, land, target):
    """Common random numbers: the n-th measurement of a configuration on a seed is the same
    for eat's runner and for a peer, whatever the source's text; a re-measurement differs."""
    from eat.agents.offline import render
    from eat.target import load_target

    t = load_target(target)
    knobs = {"BLOCK_M": 64, "VEC": 16}
    runner, measure = bench.LandscapeRunner(land, seed=4), bench.Measure(land, seed=4)
    first, again = (runner.evaluate(t, render(t, knobs)).speedup for _ in range(2))
    assert first == measure(land.index(knobs)) and again == measure(land.index(knobs))
    assert first != again
    other_text = render(t, knobs) + "\n/* the same configuration */\n"
    assert runner.evaluate(t, other_text).speedup == measure(land.index(knobs))
