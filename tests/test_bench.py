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
