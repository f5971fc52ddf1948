"""Why a run stops: every budget and the no-progress rule, on synthetic histories."""

import pytest

from eat.budget import Stop, why_stop
from eat.config import RunConfig, make_config
from eat.errors import BadInput
from eat.events import AttemptFailed, CandidateEvaluated, EliteRetimed, LLMCalled, TeamSpawned
from eat.state import RunState


def config(**kw) -> RunConfig:
    return make_config(target="t", **kw)


class Log:
    def __init__(self):
        self.state = RunState()
        self.add(TeamSpawned(team="a-1", preset="coordinate", strategy="coordinate", directive="d"))

    def add(self, e):
        e.seq = self.state.seq + 1
        self.state.apply(e)

    def eval(self, cid, speedup=2.0):
        self.add(
            CandidateEvaluated(
                candidate=cid,
                team="a-1",
                source_hash=f"h{cid}",
                status="ok",
                speedup=speedup,
                noise=0.01,
            )
        )

    def duplicate(self, of):
        self.add(AttemptFailed(team="a-1", kind="duplicate", reason="r", repeats=of))

    def call(self, ok=True, cost=None):
        self.add(LLMCalled(agent="a-1/coder", team="a-1", model="m", ok=ok, cost_usd=cost))


def test_re_times_spend_evaluations():
    log = Log()
    log.eval("c0001")
    log.eval("c0002")
    assert why_stop(log.state, config(max_evals=3), 0) is None
    log.add(EliteRetimed(candidate="c0002", speedup=2.0))
    stop = why_stop(log.state, config(max_evals=3), 0)
    assert stop.code == "max_evals" and "2 candidates, 1 re-times" in stop.message


def test_no_configuration_leaves_llm_calls_unbounded():
    assert config(max_evals=8).llm_call_cap() == 80
    assert config(max_evals=8, max_llm_calls=5).llm_call_cap() == 5
    log = Log()
    for _ in range(80):
        log.call(ok=False)  # failed tries count too
    assert why_stop(log.state, config(max_evals=8), 0).code == "max_llm_calls"
    with pytest.raises(BadInput, match="no_progress"):
        make_config(target="t", no_progress=0)
    with pytest.raises(BadInput, match="no_progress"):
        make_config(target="t", no_progress=10**6)


def test_the_cost_cap_stops_the_run():
    log = Log()
    log.call(cost=0.4)
    assert why_stop(log.state, config(max_cost_usd=0.5), 0) is None
    log.call(cost=0.2)
    assert why_stop(log.state, config(max_cost_usd=0.5), 0).code == "max_cost"


def test_attempts_without_an_evaluation_stop_the_run_naming_the_repeats():
    log = Log()
    log.eval("c0001", 2.4)
    cfg = config(no_progress=4)
    for _ in range(3):
        log.duplicate("c0001")
    assert why_stop(log.state, cfg, 0) is None
    log.add(AttemptFailed(team="a-1", kind="malformed", reason="no code"))
    stop = why_stop(log.state, cfg, 0)
    assert stop == Stop(
        "no_progress",
        "4 attempts in a row without a new evaluation; the teams repeated c0001 (2.40x) 3x",
    )
    assert stop.exit_code == 1
    log.eval("c0002")  # a new evaluation starts the count again
    assert why_stop(log.state, cfg, 0) is None


def test_an_outage_is_not_an_attempt_without_progress():
    log = Log()
    for _ in range(20):
        log.add(AttemptFailed(team="a-1", kind="outage", reason="503"))
    assert why_stop(log.state, config(no_progress=4), 0) is None
    assert log.state.teams["a-1"].failures == 0


def test_every_attempt_counts_against_the_attempt_budget():
    log = Log()
    cfg = config(max_evals=2, no_progress=100)  # by default 3 attempts per evaluation: 6
    log.eval("c0001")
    for _ in range(4):
        log.add(AttemptFailed(team="a-1", kind="malformed", reason="r"))
    assert why_stop(log.state, cfg, 0) is None
    log.duplicate("c0001")
    stop = why_stop(log.state, cfg, 0)
    assert stop.code == "max_attempts" and "5 gave no candidate" in stop.message


def test_stop_codes_give_exit_codes():
    assert Stop("max_evals", "").exit_code == 0
    assert Stop("exhausted", "").exit_code == 0
    assert Stop("llm_unusable", "").exit_code == 1
    assert Stop("interrupted", "").exit_code == 130


def test_a_copy_of_an_evaluated_program_spends_no_evaluation_but_is_an_attempt():
    """A candidate recorded with the result of the program it builds (`same_as`) is a
    candidate (its own id, its knobs known) that spent no evaluation, ranks as its original
    does (not beside it), and is an attempt without a new evaluation."""
    log = Log()
    log.add(
        CandidateEvaluated(
            candidate="c0001", team="a-1", source_hash="h1", status="ok", speedup=2.0, program="p"
        )
    )
    log.add(EliteRetimed(candidate="c0001", speedup=2.4))
    log.add(
        CandidateEvaluated(
            candidate="c0002",
            team="a-1",
            source_hash="h2",
            status="ok",
            speedup=2.0,
            program="p",
            same_as="c0001",
            knobs={"LOOP_ORDER": "IKJ"},
        )
    )
    st = log.state
    assert (st.evaluations, st.copies, st.retimes, st.spent_evals) == (1, 1, 1, 2)
    assert st.next_candidate_id() == "c0003" and st.hashes["h2"] == "c0002"
    assert st.programs == {"p": "c0001"}  # the program is the one evaluated
    assert st.candidates["c0002"].estimate == st.candidates["c0001"].estimate == 2.2
    assert st.leaders == ["c0001"] and st.attempts_since_eval == 1
    assert why_stop(st, config(max_evals=3), 0) is None
    stop = why_stop(st, config(max_evals=2, max_attempts=3), 0)
    assert stop.code == "max_evals"
    copies = "; 1 copies of an evaluated program, which spent none"
    assert f"(1 candidates, 1 re-times{copies})" in stop.message
    assert why_stop(st, config(max_evals=5, max_attempts=2), 0).code == "max_attempts"
    for _ in range(3):  # nothing but copies: no progress, naming what they repeat
        log.add(
            CandidateEvaluated(
                candidate=st.next_candidate_id(),
                team="a-1",
                source_hash=f"h{st.next_candidate_id()}",
                status="ok",
                speedup=2.0,
                program="p",
                same_as="c0001",
            )
        )
    stop = why_stop(st, config(max_evals=10, no_progress=4), 0)
    assert stop.code == "no_progress" and "repeated c0001 (2.20x) 4x" in stop.message
