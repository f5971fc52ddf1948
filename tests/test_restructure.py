"""The supervisor's decisions (eat.restructure), each on a synthetic history."""

from collections import Counter
from types import SimpleNamespace

from history import CFG, PRESETS, History

from eat.config import RunConfig
from eat.events import (
    AttemptFailed,
    CandidateEvaluated,
    Restructured,
    RestructureScored,
    TeamSpawned,
    describe,
)
from eat.plateau import detect_plateaus
from eat.restructure import Limits, arm_values, decide, diagnose, operation_events, score
from eat.team import pick_team

LIMITS = Limits(max_teams=4)


def act(h: History, limits: Limits = LIMITS, kinds=None, scope=None):
    """Detect, diagnose and decide as one supervisor step does (on the plateaus of these kinds
    and scope); record what it decided."""
    found = [
        p
        for p in detect_plateaus(h.state, CFG)
        if (kinds is None or p.kind in kinds) and (scope is None or p.scope == scope)
    ]
    for p in found:
        h.add(p.event())
    ops = decide([diagnose(p, h.state) for p in found], h.state, limits)
    h.apply(ops)
    return ops


def summary(ops):
    return [(o.op, o.team, o.params.get("preset"), o.params.get("start_from")) for o in ops]


def climbed_optimum(h: History) -> None:
    """coordinate-1 climbs to 2.0x at A=B=C=D=1; explorer-2 samples far, mostly poor."""
    h.eval("coordinate-1", 1.5, A=0, B=1, C=1, D=1)
    h.eval("coordinate-1", 2.0, A=1, B=1, C=1, D=1)
    h.eval("explorer-2", 0.8, A=5, B=5, C=0, D=0)
    h.eval("explorer-2", 0.9, A=0, B=0, C=5, D=5)
    h.eval("explorer-2", 0.8, A=9, B=9, C=9, D=9)


def test_a_region_exploration_opened_gets_a_local_search_kept_out_of_found_optima():
    h = History("coordinate-1", "explorer-2")
    climbed_optimum(h)
    bump = h.eval("explorer-2", 1.6, A=9, B=9, C=9, D=8)  # twice its neighbour: a bump
    ops = act(h)
    # a model of its region: the restart arm the rules trust most before any is scored
    assert summary(ops) == [("fork", None, "model", bump.candidate)]
    assert "chosen: fork model" in ops[0].reason
    team = h.state.teams["model-3"]
    assert team.start_from == bump.candidate and team.avoid == ["c0002"] and team.local
    assert act(h) == []  # declared once, and now being searched


def test_an_opened_region_gets_a_climb_where_forked_models_did_not_pay_or_cannot_run():
    def opened() -> History:
        h = History("coordinate-1", "explorer-2")
        climbed_optimum(h)
        h.eval("explorer-2", 1.6, A=9, B=9, C=9, D=8)
        return h

    h = opened()
    h.state.restructure_arms.update({101: "fork model", 102: "fork model"})
    for seq in (101, 102):
        h.add(RestructureScored(restructure=seq, helped=False, best_before=2.0, best_after=2.0))
    assert summary(act(h)) == [("fork", None, "coordinate", "c0006")]
    # agents that write code: the model team (a knob search) is not among the presets
    no_model = Limits(max_teams=4, presets=frozenset({"coordinate", "explorer", "refiner"}))
    assert summary(act(opened(), no_model)) == [("fork", None, "coordinate", "c0006")]


def test_a_poor_sample_among_poor_neighbours_opens_nothing():
    h = History("coordinate-1", "explorer-2")
    climbed_optimum(h)
    h.eval("explorer-2", 0.85, A=9, B=9, C=9, D=8)
    assert [p.kind for p in detect_plateaus(h.state, CFG)] == []


def test_making_room_retires_the_stalest_local_search_never_an_explorer():
    h = History("coordinate-1", "explorer-2", "coordinate-3")
    climbed_optimum(h)
    h.eval("coordinate-3", 1.0, A=3, B=3, C=3, D=3)
    for _ in range(2):
        h.eval("coordinate-3", 0.9)
    h.eval("explorer-2", 1.6, A=9, B=9, C=9, D=8)
    ops = act(h, Limits(max_teams=3), kinds={"opened"})
    assert [(o.op, o.team) for o in ops] == [("retire", "coordinate-3"), ("fork", None)]
    assert h.state.teams["explorer-2"].state == "active"
    assert ops[0].reason == (  # what the log and EVOLUTION.md say: how stale, and its best
        "making room: coordinate-3, the stalest local search (2 of its 3 candidates since its "
        "last gain; its best 1.00x)"
    )


def test_a_local_search_that_has_not_stalled_is_never_retired_to_make_room():
    """A fork that has not had its first turn, or whose last candidate was a gain, is not
    stale: the region that wanted room goes without (a resumed 10,000-candidate run retired
    each new fork with "0 of its 0 candidates since its last gain" to fork the next)."""
    for speeds in ([], [1.0], [1.0, 0.9, 1.1]):  # none yet; a first gain; a gain after a loss
        h = History("coordinate-1", "explorer-2", "coordinate-3")
        climbed_optimum(h)
        for i, speed in enumerate(speeds):
            h.eval("coordinate-3", speed, A=3, B=3, C=3, D=3 + i)
        h.eval("explorer-2", 1.6, A=9, B=9, C=9, D=8)
        assert act(h, Limits(max_teams=3), kinds={"opened"}) == [], speeds
        assert h.state.teams["coordinate-3"].state == "active"


def test_the_leading_climb_that_stalls_goes_on_while_combined_steps_try_the_elite():
    h = History("coordinate-1", "explorer-2")
    climbed_optimum(h)
    for i in range(4):
        h.eval("coordinate-1", 1.2, A=1, B=1, C=1, D=2 + i)
    ops = act(h, kinds={"stalled"}, scope="team")
    assert summary(ops) == [("fork", None, "refiner", "c0002")]
    assert h.state.teams["coordinate-1"].state == "active"


def test_a_stalled_climb_restarts_in_the_best_unclimbed_region_and_is_replaced():
    h = History("coordinate-1", "explorer-2", "coordinate-3")
    climbed_optimum(h)
    h.eval("explorer-2", 1.7, A=9, B=9, C=9, D=8)
    h.state.opened.add("c0006")  # seen before, but no climb was possible then
    h.eval("coordinate-3", 1.2, A=4, B=4, C=4, D=4)
    for i in range(4):
        h.eval("coordinate-3", 1.0, A=4, B=4, C=4, D=5 + i)
    ops = act(h, kinds={"stalled"}, scope="team")
    assert summary(ops) == [
        ("fork", None, "model", "c0006"),
        ("retire", "coordinate-3", None, None),
    ]
    assert "chosen: fork model" in ops[0].reason


def test_a_stalled_climb_with_nowhere_better_to_go_gives_its_turns_to_the_others():
    h = History("coordinate-1", "explorer-2", "coordinate-3")
    climbed_optimum(h)
    h.eval("coordinate-3", 1.2, A=4, B=4, C=4, D=4)
    for i in range(4):
        h.eval("coordinate-3", 1.0, A=4, B=4, C=4, D=5 + i)
    ops = act(
        h,
        Limits(max_teams=4, presets=frozenset({"coordinate", "explorer"})),
        kinds={"stalled"},
        scope="team",
    )
    assert summary(ops) == [("retire", "coordinate-3", None, None)]


def test_an_explorer_that_stalls_is_kept_out_of_the_regions_found():
    h = History("coordinate-1", "explorer-2")
    climbed_optimum(h)
    for i in range(4):
        h.eval("explorer-2", 0.7, A=i, B=7, C=7, D=7)
    (op,) = act(h, kinds={"stalled"}, scope="team")
    assert (op.op, op.team, op.params["strategy"], op.params["avoid"]) == (
        "redirect",
        "explorer-2",
        "explorer",
        ["c0002"],
    )
    assert h.state.teams["explorer-2"].avoid == ["c0002"]


def test_a_decision_is_scored_only_by_the_team_it_created():
    h = History("coordinate-1", "explorer-2")
    climbed_optimum(h)
    h.eval("explorer-2", 1.6, A=9, B=9, C=9, D=8)
    act(h)  # fork model-3 at c0006
    h.eval("explorer-2", 3.0, A=7, B=0, C=7, D=0)  # another team beats the run's best
    for _ in range(3):
        h.eval("model-3", 1.7)
    (verdict,) = score(h.state, 3)
    assert not verdict.helped and verdict.best_after == 3.0
    h.add(verdict)
    assert h.state.pending == []


def test_retires_are_not_scored_and_a_helpful_fork_is():
    h = History("coordinate-1", "explorer-2", "coordinate-3")
    climbed_optimum(h)
    h.eval("coordinate-3", 1.0, A=3, B=3, C=3, D=3)
    h.eval("coordinate-3", 0.9)
    h.eval("explorer-2", 1.6, A=9, B=9, C=9, D=8)
    act(h, Limits(max_teams=3), kinds={"opened"})  # retire coordinate-3, fork model-4
    assert [p.op for p in h.state.pending] == ["fork"]
    for s in (2.5, 2.4, 2.3):
        h.eval("model-4", s)
    (verdict,) = score(h.state, 3)
    assert verdict.helped and verdict.by == "c0009"


def test_scored_restarts_steer_the_next_choice():
    h = History("coordinate-1")
    before = arm_values(h.state)
    assert max(before, key=before.get) == "fork model"
    h.state.restructure_arms.update({101: "fork model", 102: "fork model"})
    for seq in (101, 102):
        h.add(RestructureScored(restructure=seq, helped=False, best_before=2.0, best_after=2.0))
    after = arm_values(h.state)
    assert h.state.arm_stats["fork model"] == (2, 0)
    assert after["fork model"] < after["fork coordinate"]


def test_a_team_repeating_known_candidates_is_steered_then_retired():
    h = History("coordinate-1", "explorer-2")
    climbed_optimum(h)
    for _ in range(2):
        h.add(AttemptFailed(team="explorer-2", kind="duplicate", reason="r", repeats="c0002"))
    (op,) = act(h, kinds={"repeating"})
    assert (op.op, op.team) == ("redirect", "explorer-2")
    assert "repeated c0002" in op.params["directive"]
    for _ in range(2):
        h.add(AttemptFailed(team="explorer-2", kind="duplicate", reason="r", repeats="c0002"))
    (op,) = act(h, kinds={"repeating"})
    assert (op.op, op.team) == ("retire", "explorer-2")


def test_a_failing_llm_team_gets_a_reviewer_then_is_retired():
    h = History("coordinate-1", "explorer-2")
    h.state.teams["explorer-2"].roles = ["planner", "coder", "debugger"]
    h.eval("coordinate-1", 2.0)
    for _ in range(3):
        h.eval("explorer-2", None, status="compile_error")
    llm = Limits(max_teams=4, llm=True)
    (op,) = act(h, llm, kinds={"failing"})
    assert (op.op, op.params["added"]) == ("recompose", ["reviewer"])
    assert h.state.teams["explorer-2"].roles[-1] == "reviewer"
    for _ in range(3):
        h.eval("explorer-2", None, status="incorrect")
    (op,) = act(h, llm, kinds={"failing"})
    assert (op.op, op.team) == ("retire", "explorer-2")


def test_the_lines_of_a_team_and_a_restructure_say_what_changed():
    """EVOLUTION.md and the commit carry one line an event: a redirect's line gives the new
    directive, a recompose's the roles it added (their reasons say only why)."""
    h = History("coordinate-1", "explorer-2")
    climbed_optimum(h)
    for _ in range(2):
        h.add(AttemptFailed(team="explorer-2", kind="duplicate", reason="r", repeats="c0002"))
    (op,) = act(h, kinds={"repeating"})
    (event,) = operation_events(op, h.state, "k", 0, PRESETS)
    assert describe(event) == (
        f"restructure redirect explorer-2: {op.reason}; now: {op.params['directive']}"
    )
    h = History("coordinate-1", "explorer-2")
    h.state.teams["explorer-2"].roles = ["planner", "coder", "debugger"]
    h.eval("coordinate-1", 2.0)
    for _ in range(3):
        h.eval("explorer-2", None, status="compile_error")
    (op,) = act(h, Limits(max_teams=4, llm=True), kinds={"failing"})
    (event,) = operation_events(op, h.state, "k", 0, PRESETS)
    assert describe(event).endswith("; roles added: reviewer")
    fork = TeamSpawned(team="refiner-4", preset="refiner", strategy="refiner", directive="Go.")
    assert describe(fork.model_copy(update={"start_from": "c0001"})) == (
        "team refiner-4 (refiner from c0001): Go."  # the preset named once where it is the strategy
    )
    coder = TeamSpawned(team="coder-2", preset="coder", strategy="coordinate", directive="Go.")
    assert describe(coder) == "team coder-2 (coder, coordinate): Go."
    shares = {"model-1": 0.5, "coordinate-3": 0.25}  # as the LLM supervisor's advice gives them
    rebalance = Restructured(op="rebalance", reason="pace", params={"shares": shares}, scope="run")
    assert (
        describe(rebalance)
        == "restructure rebalance: pace; shares: model-1 0.50, coordinate-3 0.25"
    )


def test_a_failing_offline_team_is_redirected():
    h = History("coordinate-1", "explorer-2")
    h.eval("coordinate-1", 2.0)
    for _ in range(3):
        h.eval("explorer-2", None, status="compile_error")
    (op,) = act(h, kinds={"failing"})
    assert (op.op, op.params["strategy"]) == ("redirect", "refiner")


def test_no_team_is_spawned_past_the_cap_and_the_last_team_stays():
    h = History("coordinate-1", "explorer-2")
    climbed_optimum(h)
    h.eval("explorer-2", 1.6, A=9, B=9, C=9, D=8)
    assert act(h, Limits(max_teams=4, spawn_cap=2)) == []
    lone = History("coordinate-1")
    lone.eval("coordinate-1", 2.0)
    lone.state.teams["coordinate-1"].redirects = 1
    for _ in range(3):
        lone.eval("coordinate-1", None, status="crash")
    assert act(lone, Limits(max_teams=4, spawn_cap=1), kinds={"failing"}) == []


def test_knobless_candidates_converge_only_on_the_same_source():
    def knobless(h, team, digest, speedup):
        h.n += 1
        h.add(
            CandidateEvaluated(
                candidate=f"c{h.n:04d}",
                team=team,
                source_hash=digest,
                status="ok",
                speedup=speedup,
                noise=0.01,
            )
        )

    for same in (False, True):
        h = History("coordinate-1", "explorer-2")
        knobless(h, "coordinate-1", "h-a", 2.0)
        knobless(h, "explorer-2", "h-a" if same else "h-b", 2.0)
        for i in range(2):
            knobless(h, "coordinate-1", f"x{i}", 1.0)
            knobless(h, "explorer-2", f"y{i}", 1.0)
        converged = [p for p in detect_plateaus(h.state, CFG) if p.kind == "converged"]
        assert bool(converged) is same


def turn_ctx(h: History, opening: int = 0, **config) -> SimpleNamespace:
    """What pick_team reads of a run's context: its state, its config and its opening."""
    return SimpleNamespace(state=h.state, config=RunConfig(target="t", **config), opening=opening)


def test_a_climb_that_just_gained_plays_on_without_spending_the_others_share():
    h = History("coordinate-1", "explorer-2")
    ctx = turn_ctx(h)
    h.eval("coordinate-1", 1.0)
    h.eval("explorer-2", 1.0)
    h.eval("coordinate-1", 1.5)  # a gain: it plays on
    assert pick_team(ctx).id == "coordinate-1"
    h.eval("coordinate-1", 2.0)  # its free turn, and another gain
    assert pick_team(ctx).id == "coordinate-1"
    h.eval("coordinate-1", 1.0)  # no gain: turns by share again
    assert pick_team(ctx).id == "explorer-2"
    assert h.state.teams["coordinate-1"].turns == h.state.teams["explorer-2"].turns + 1
    ctx.config = RunConfig(target="t", supervise=False)
    h.eval("explorer-2", 1.0)
    h.eval("coordinate-1", 3.0)
    assert pick_team(ctx).id == "explorer-2"  # without supervision, no one plays on


def test_a_team_whose_candidates_land_near_the_top_plays_more_often_than_one_whose_do_not():
    def turns(**config) -> Counter:
        h = History("model-1", "explorer-2")
        ctx = turn_ctx(h, **config)
        played: Counter = Counter()
        for _ in range(60):
            team = pick_team(ctx).id
            played[team] += 1
            h.eval(team, 2.0 if team == "model-1" else 1.0)  # the model's all at the top
        assert h.state.teams["model-1"].pace > 0.9 and h.state.teams["explorer-2"].pace < 0.2
        return played

    paced = turns()
    assert paced["model-1"] > 5 * paced["explorer-2"] > 0  # the explorer slowed, not stopped
    assert turns(supervise=False) == {"model-1": 30, "explorer-2": 30}


def test_a_climb_far_below_the_runs_best_does_not_play_on_for_free():
    h = History("explorer-1", "coordinate-2", "model-3")
    ctx = turn_ctx(h)
    h.eval("explorer-1", 40.0)
    h.eval("coordinate-2", 1.2)
    h.eval("model-3", 39.5)
    h.eval("coordinate-2", 2.0)  # its best, far below the run's: it takes its turn by pace
    coordinate = h.state.teams["coordinate-2"]
    assert not coordinate.climbing and coordinate.free == 0
    assert pick_team(ctx).id != "coordinate-2"
    h.eval("model-3", 30.0)
    h.eval("coordinate-2", 39.5)  # near the top, though not the run's best: it plays on
    assert coordinate.climbing and pick_team(ctx).id == "coordinate-2"
    h.eval("coordinate-2", 39.0)
    assert coordinate.free == 1  # on a turn that did not count against its share


def test_a_global_team_whose_candidate_became_the_run_best_plays_on():
    h = History("coordinate-1", "explorer-2", "model-3")
    ctx = turn_ctx(h)
    h.eval("coordinate-1", 2.0)
    h.eval("coordinate-1", 1.0)  # the climb's loss: turns by share again
    assert pick_team(ctx).id == "explorer-2"
    h.eval("explorer-2", 1.5)  # its own best, not the run's: it does not play on
    assert pick_team(ctx).id == "model-3"
    h.eval("model-3", 2.5)  # the run's best: the model plays on
    assert pick_team(ctx).id == "model-3"
    h.eval("model-3", 2.2)  # no longer its best: the lowest turns again
    assert pick_team(ctx).id != "model-3"


def test_of_teams_with_equal_turns_the_one_spawned_first_plays():
    """The start's teams play in their configured order (an explorer first, then the model
    that learns from its pick), not in the order of their names."""

    h = History("explorer-1", "model-2", "coordinate-3")
    ctx = turn_ctx(h)
    assert pick_team(ctx).id == "explorer-1"
    h.eval("explorer-1", 2.0)  # the run's best: it plays on
    h.eval("explorer-1", 1.0)
    assert pick_team(ctx).id == "model-2"  # by name, coordinate-3 would come first
    h.eval("model-2", 1.0)
    assert pick_team(ctx).id == "coordinate-3"


def test_in_the_opening_explorers_of_equal_turns_also_play_in_spawn_order():
    h = History("coordinate-1", "explorer-2", "explorer-10")  # by name, explorer-10 is first
    ctx = turn_ctx(h, opening=4)
    assert pick_team(ctx).id == "explorer-2"
    h.eval("explorer-2", 0.5)
    assert pick_team(ctx).id == "explorer-10"


def test_a_knob_search_starts_with_a_model_team_an_explorer_and_a_climb_and_no_opening():
    offline = RunConfig(target="t")
    assert offline.start_teams() == ["model", "explorer", "coordinate"]
    assert offline.opening_for(7) == 0  # the model's picks spread as they go
    chosen = RunConfig(target="t", teams=["coordinate", "explorer"])
    assert chosen.opening_for(7) == 14  # without a model, the explorer opens
    agents = RunConfig(target="t", model="openai/some-model")
    assert agents.start_teams() == ["coordinate", "explorer"]  # the model team is knobs-only
    assert agents.opening_for(7) == 0


def test_the_explorer_plays_the_opening_then_the_teams_take_turns_by_share():
    h = History("coordinate-1", "explorer-2")
    ctx = turn_ctx(h, opening=3)
    picked = []
    for speedup in (1.5, 1.2, 1.3, 1.5, 1.5, 1.5):  # the explorer's last is not the run's best
        picked.append(pick_team(ctx).id)
        h.eval(picked[-1], speedup)
    # three from the explorer first; then the climb, level with the top, catches up on its share
    assert picked == ["explorer-2"] * 3 + ["coordinate-1"] * 3
    h = History("coordinate-1", "explorer-2")
    ctx.state = h.state
    ctx.config = RunConfig(target="t", supervise=False)
    assert pick_team(ctx).id == "coordinate-1"  # without supervision, no opening
    ctx.config = RunConfig(target="t")
    assert pick_team(ctx, busy={"explorer-2"}).id == "coordinate-1"  # it waits for no one
    h.state.teams["explorer-2"].exhausted = True
    assert pick_team(ctx).id == "coordinate-1"


def test_the_opening_is_twice_the_knobs_unless_set():
    assert RunConfig(target="t", teams=["coordinate", "explorer"]).opening_for(6) == 12
    assert RunConfig(target="t", opening=0).opening_for(6) == 0
    assert RunConfig(target="t", opening=5).opening_for(0) == 5
    assert RunConfig(target="t", model="openai/gpt-x").opening_for(6) == 0  # agents write code
    assert RunConfig(target="t", agent="command", agent_command="x").opening_for(6) == 0
