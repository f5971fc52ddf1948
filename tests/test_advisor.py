"""The LLM supervisor: valid decisions are applied, invalid ones explained once, then the rules."""

import json

import pytest

from eat.config import PlateauConfig
from eat.run import start_run
from eat.workspace import Workspace

MODEL = "openai/eat-test-model"
QUICK_PLATEAU = PlateauConfig(team_window=2, run_window=3, min_gain=5.0, score_after=2)


def run(target, ws, server, **kw):
    return start_run(
        target,
        ws,
        supervisor_model=MODEL,
        api_base=server.base_url,
        plateau=QUICK_PLATEAU,
        llm_backoff_s=0,
        llm_timeout_s=10,
        **kw,
    )


def fork_decision(req):
    """Fork a refiner from the newest candidate the prompt shows."""
    prompt = req["messages"][-1]["content"]
    cid = prompt.split("Recent candidates (newest first):\n- ")[1][:5]
    return json.dumps(
        {
            "diagnosis": f"single steps stall; {cid} is a fair restart point",
            "operations": [
                {
                    "op": "fork",
                    "preset": "refiner",
                    "start_from": cid,
                    "directive": "Combine two changes at a time.",
                    "reason": "escape the one-step optimum",
                    "evidence": [cid],
                }
            ],
            "lessons": [f"one-knob steps stalled after {cid}"],
        }
    )


@pytest.mark.slow
def test_a_valid_decision_is_applied_and_its_lessons_reach_learning(
    quick_matmul, tmp_path, llm_server
):
    llm_server.push(fork_decision)
    llm_server.default = fork_decision  # every later plateau gets the same kind of answer
    run(quick_matmul, tmp_path / "ws", llm_server, max_evals=6, teams=["coordinate"])
    events = Workspace.open(tmp_path / "ws").read_events()[0]
    advised = [e for e in events if e.type == "supervisor_advised"]
    assert advised and advised[0].accepted
    forks = [e for e in events if e.type == "restructured" and e.op == "fork"]
    assert forks and forks[0].reason.startswith("supervisor: escape the one-step optimum")
    spawned = [e for e in events if e.type == "team_spawned" and e.preset == "refiner"]
    assert spawned[0].start_from == forks[0].params["start_from"]
    assert "## Supervisor's notes" in (tmp_path / "ws" / "LEARNING.md").read_text()
    assert all(e.agent == "supervisor" for e in events if e.type == "llm_called")


@pytest.mark.slow
def test_an_invalid_reply_is_explained_once_then_the_rules_decide(
    quick_matmul, tmp_path, llm_server
):
    bad = json.dumps(
        {"diagnosis": "x", "operations": [{"op": "retire", "team": "no-such-team", "reason": "r"}]}
    )
    llm_server.reply(bad).reply("not json at all")
    llm_server.default = fork_decision
    run(quick_matmul, tmp_path / "ws", llm_server, max_evals=4, teams=["coordinate"])
    events = Workspace.open(tmp_path / "ws").read_events()[0]
    first = next(e for e in events if e.type == "supervisor_advised")
    assert not first.accepted
    correction = llm_server.requests[1].messages[-1]["content"]
    assert "no-such-team" in correction and "not an active team" in correction
    after = events[events.index(first) + 1 :]
    rules = next(e for e in after if e.type == "restructured")
    assert not rules.reason.startswith("supervisor:")  # the rule-based decision was used


def test_decisions_naming_unknown_things_are_refused():
    from test_rules import History

    from eat.advisor import Decision, problems

    h = History("a-1")
    h.eval("a-1", 2.0)
    d = Decision.model_validate(
        {
            "diagnosis": "d",
            "operations": [
                {
                    "op": "fork",
                    "preset": "nope",
                    "start_from": "c9999",
                    "reason": "r",
                    "evidence": ["c0001", "c0404"],
                },
                {"op": "retire", "team": "a-1", "reason": "r"},
                {"op": "retire", "team": "a-1", "reason": "r"},
            ],
            "lessons": ["a lesson without evidence"],
        }
    )
    found = " | ".join(problems(d, h.state, {"refiner": None}, max_teams=4))
    for words in (
        "preset 'nope'",
        "'c9999' is not a candidate",
        "['c0404']",
        "leave 0 teams active",
        "cites no existing candidate",
    ):
        assert words in found


def test_the_prompt_gives_a_team_s_evaluations_apart_from_its_copies(tmp_path):
    """A team's candidates that repeated an evaluated program spent no evaluation: the
    supervisor's prompt counts them apart, not among the team's evaluations."""
    from pathlib import Path

    from eat.advisor import LLMAdvisor
    from eat.events import CandidateEvaluated, TeamSpawned
    from eat.state import RunState
    from eat.target import load_target

    state = RunState()
    state.apply(TeamSpawned(team="a-1", preset="coordinate", strategy="coordinate", directive="d"))
    for cid, same in (("c0001", None), ("c0002", "c0001"), ("c0003", "c0001")):
        state.apply(
            CandidateEvaluated(
                candidate=cid,
                team="a-1",
                source_hash=cid,
                status="ok",
                speedup=2.0,
                program="p",
                same_as=same,
            )
        )
    target = load_target(Path(__file__).resolve().parents[1] / "examples" / "cpu_matmul")
    prompt = LLMAdvisor(None, target, {}, tmp_path / "LEARNING.md", 4)._prompt([], state)
    line = next(x for x in prompt.splitlines() if x.startswith("- a-1:"))
    assert "1 evaluations (and 2 candidates that repeated a program already evaluated)" in line
