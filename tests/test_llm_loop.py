"""LLM teams end to end: a scripted OpenAI-compatible server on 127.0.0.1, the real CPU runner."""

import json
import os
import subprocess
import sys

import pytest
from llm_server import HTTPError, Reply

from eat.run import resume_run, run_status, start_run
from eat.workspace import Workspace

MODEL = "openai/eat-test-model"
SECRET = "sk-eat-test-secret-4242"


def fenced(source: str, idea: str = "Use ikj order at -O3 so the inner loop streams rows.") -> str:
    return f"{idea}\n\n```c\n{source}```\n"


def kernels(target):
    base = (target / "baseline.c").read_text()
    fast = f"// eat:cflags -O3 -march=native\n#define LOOP_ORDER IKJ\n{base}"
    faster = f"// eat:cflags -O3 -march=native -ffast-math\n#define LOOP_ORDER IKJ\n{base}"
    return base, fast, faster


PLAN = {
    "ideas": [
        {"idea": "ikj loop order at -O3", "expected_gain": 8},
        {"idea": "add -ffast-math", "expected_gain": 1.5},
    ]
}


class Script:
    """Answers planner prompts with PLAN and coder/debugger prompts from a queue, in order."""

    def __init__(self, server):
        self.coder, self.planner_calls = [], 0
        server.default = self

    def reply(self, content, **usage):
        self.coder.append(Reply(content, **usage))
        return self

    def push(self, step):
        self.coder.append(step)
        return self

    def __call__(self, req):
        text = json.dumps(req["messages"])
        if "# Plan the next ideas" in text:
            self.planner_calls += 1
            return Reply(json.dumps(PLAN), prompt_tokens=500, completion_tokens=50)
        return self.coder.pop(0) if self.coder else HTTPError(500, "script exhausted")


def events(ws, kind):
    return [e for e in Workspace.open(ws).read_events()[0] if e.type == kind]


def run(target, ws, server, **kw):
    kw = {
        "teams": ["coordinate"],
        "max_evals": 2,
        "repairs": 0,
        "llm_backoff_s": 0,
        "llm_timeout_s": 10,
        "sleep": lambda s: None,
    } | kw
    return start_run(target, ws, model=MODEL, api_base=server.base_url, **kw)


@pytest.mark.slow
def test_the_models_faster_kernel_becomes_the_best_and_tokens_are_counted(
    quick_matmul, tmp_path, llm_server
):
    _, fast, faster = kernels(quick_matmul)
    script = Script(llm_server)
    script.reply(fenced(fast), prompt_tokens=3000, completion_tokens=400, cached_tokens=0)
    script.reply(
        fenced(faster, "Add -ffast-math."),
        prompt_tokens=3100,
        completion_tokens=420,
        cached_tokens=2800,
    )
    _, stop = run(quick_matmul, tmp_path / "ws", llm_server)
    assert stop.code == "max_evals"
    st = run_status(tmp_path / "ws")
    assert st["best_speedup"] > 2 and st["best_candidate"] in ("c0001", "c0002")
    assert script.planner_calls == 1  # one plan of two ideas serves both turns
    assert st["tokens"] == {"prompt": 6600, "completion": 870, "cached": 2800}
    assert st["llm_calls"] == 3 and st["cost_usd"] == 0 and st["llm_unpriced_calls"] == 3
    planner, first, second = (r.messages for r in llm_server.requests)
    assert "Idea to implement now (from your team's planner): ikj loop order" in first[1]["content"]
    notes = (tmp_path / "ws" / "teams" / "coordinate-1" / "NOTES.md").read_text()
    assert "[x] c0001 ikj loop order at -O3" in notes and "[x] c0002 add -ffast-math" in notes
    assert first[0]["role"] == "system" and first[0] == second[0]
    # The stable part (target, reference, baseline, learning) comes first; the second prompt
    # differs only after it.
    stable = first[1]["content"].split("# Your turn")[0]
    assert second[1]["content"].startswith(stable.split("## What the run has learned")[0])
    assert "Use ikj order" in events(tmp_path / "ws", "candidate_evaluated")[0].idea


@pytest.mark.slow
def test_malformed_replies_get_one_correction_then_count_as_a_failed_attempt(
    quick_matmul, tmp_path, llm_server
):
    _, fast, _ = kernels(quick_matmul)
    Script(llm_server).reply("I would unroll the loop.").reply("Still no code, sorry.").reply(
        fenced(fast)
    )
    run(quick_matmul, tmp_path / "ws", llm_server, max_evals=1)
    (failed,) = events(tmp_path / "ws", "attempt_failed")
    assert failed.kind == "malformed" and "no code block" in failed.reason
    correction = llm_server.requests[2].messages[-1]["content"]
    assert "SEARCH" in correction and "fenced" in correction
    assert [e.status for e in events(tmp_path / "ws", "candidate_evaluated")] == ["ok"]


@pytest.mark.slow
def test_a_failed_candidate_is_repaired_with_the_compiler_message(
    quick_matmul, tmp_path, llm_server
):
    _, fast, _ = kernels(quick_matmul)
    broken = fast.replace("memset(C, 0,", "memset(C, 0 zero,")
    Script(llm_server).reply(fenced(broken)).reply(
        fenced(fast, "A stray token broke memset; removed it.")
    )
    run(quick_matmul, tmp_path / "ws", llm_server, repairs=2)
    first, second = events(tmp_path / "ws", "candidate_evaluated")
    assert first.status == "compile_error" and second.status == "ok"
    assert second.parent == "c0001" and second.idea.startswith("repair of c0001")
    repair_prompt = llm_server.requests[2].messages[-1]["content"]
    log = Workspace.open(tmp_path / "ws").repo.git.log("--format=%s")
    assert "c0001 coordinate-1: compile_error" in log and "c0002 coordinate-1: ok" in log
    assert "compile_error" in repair_prompt and "zero" in repair_prompt


@pytest.mark.slow
def test_the_cost_cap_stops_new_calls_mid_run(quick_matmul, tmp_path, llm_server):
    _, fast, faster = kernels(quick_matmul)
    Script(llm_server).reply(fenced(fast), prompt_tokens=1000, completion_tokens=100).reply(
        fenced(faster), prompt_tokens=1000, completion_tokens=100
    )
    _, stop = run(
        quick_matmul,
        tmp_path / "ws",
        llm_server,
        max_evals=5,
        max_cost_usd=0.0015,
        input_cost_per_token=1e-6,
        output_cost_per_token=1e-6,
    )
    assert stop.code == "max_cost"
    # planner 0.55 m$, coder 1.1 m$: over the cap after the second call, and no third call
    assert len(llm_server.requests) == 2
    assert run_status(tmp_path / "ws")["cost_usd"] == pytest.approx(0.00165)
    # The spend survives resume: a cap of 2 m$ for the whole run allows one more call only.
    _, stop = resume_run(tmp_path / "ws", max_cost_usd=0.002, sleep=lambda s: None)
    assert stop.code == "max_cost"
    assert len(llm_server.requests) == 3
    assert run_status(tmp_path / "ws")["cost_usd"] == pytest.approx(0.00275)


@pytest.mark.slow
def test_an_outage_pauses_the_teams_and_the_run_goes_on(quick_matmul, tmp_path, llm_server):
    _, fast, _ = kernels(quick_matmul)
    pauses = []
    script = Script(llm_server)
    script.push(HTTPError(503))  # both tries of the first coder call fail
    script.push(HTTPError(503))

    def sleep(seconds):
        pauses.append(seconds)
        if len([p for p in pauses if p >= 30]) == 2:
            script.reply(fenced(fast))  # the provider comes back

    _, stop = run(
        quick_matmul, tmp_path / "ws", llm_server, max_evals=1, llm_attempts=2, sleep=sleep
    )
    assert stop.code == "max_evals"
    outages = events(tmp_path / "ws", "attempt_failed")
    assert [o.kind for o in outages] == ["outage", "outage"]
    assert [p for p in pauses if p >= 30] == [30.0, 60.0]
    assert run_status(tmp_path / "ws")["llm_failed_calls"] == 4


@pytest.mark.slow
def test_cli_start_against_a_local_server(quick_matmul, tmp_path, llm_server):
    _, fast, faster = kernels(quick_matmul)
    Script(llm_server).reply(fenced(fast), prompt_tokens=2000, completion_tokens=300).reply(
        fenced(faster), prompt_tokens=2100, completion_tokens=310
    )
    ws = tmp_path / "ws"
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "eat",
            "start",
            str(quick_matmul),
            "-w",
            str(ws),
            "--model",
            MODEL,
            "--api-base",
            llm_server.base_url,
            "--max-evals",
            "2",
        ],
        capture_output=True,
        text=True,
        timeout=300,
        env=os.environ | {"OPENAI_API_KEY": SECRET},
    )
    assert done.returncode == 0, done.stderr
    st = json.loads(
        subprocess.run(
            [sys.executable, "-m", "eat", "status", str(ws), "--json"],
            capture_output=True,
            text=True,
        ).stdout
    )
    assert st["best_speedup"] > 2 and st["tokens"]["prompt"] >= 4100
    assert f"best: {st['best_candidate']}, {st['best_speedup']:.2f}x the baseline" in done.stdout
    assert llm_server.requests[0].json["model"] == "eat-test-model"
    leaks = [p for p in ws.rglob("*") if p.is_file() and SECRET.encode() in p.read_bytes()]
    assert leaks == [] and SECRET not in done.stdout + done.stderr


@pytest.mark.slow
def test_a_rejected_key_stops_the_run_as_failed(quick_matmul, tmp_path, llm_server):
    Script(llm_server).push(HTTPError(401, "Incorrect API key provided"))
    ws = tmp_path / "ws"
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "eat",
            "start",
            str(quick_matmul),
            "-w",
            str(ws),
            "--model",
            MODEL,
            "--api-base",
            llm_server.base_url,
            "--max-evals",
            "3",
        ],
        capture_output=True,
        text=True,
        timeout=300,
        env=os.environ | {"OPENAI_API_KEY": SECRET},
    )
    assert done.returncode == 1
    assert "stopped: llm_unusable" in done.stdout and "AuthenticationError" in done.stdout
    assert run_status(ws)["evaluations"] == 0
    assert len(llm_server.requests) == 2  # the plan, then the rejected coder call


@pytest.mark.slow
def test_a_model_that_repeats_one_kernel_ends_the_run_with_bounded_spend(
    quick_matmul, tmp_path, llm_server
):
    # Every reply, to the planner, the coders and the supervisor alike, is the same correct
    # kernel: real models repeat themselves, and that must not run the loop away.
    _, fast, _ = kernels(quick_matmul)
    llm_server.default = lambda req: Reply(fenced(fast), prompt_tokens=1000, completion_tokens=200)
    ws = tmp_path / "ws"
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "eat",
            "start",
            str(quick_matmul),
            "-w",
            str(ws),
            "--model",
            MODEL,
            "--supervisor-model",
            MODEL,
            "--api-base",
            llm_server.base_url,
            "--max-evals",
            "8",
        ],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 1, done.stderr
    assert "stopped: no_progress" in done.stdout and "c0001" in done.stdout
    st = run_status(ws)
    assert st["stopped"] == "no_progress" and "repeated c0001" in st["stop_reason"]
    assert st["best_candidate"] == "c0001" and st["best_speedup"] > 2
    assert st["llm_calls"] == len(llm_server.requests) <= 80
    assert len(st["teams"]) <= 12
    # The repeating team was told which candidate it repeated, then steered.
    told = [
        r
        for r in llm_server.requests
        if "Your last replies repeated candidates already evaluated" in json.dumps(r.messages)
    ]
    assert told and "c0001" in json.dumps(told[0].messages)
    kinds = {(e.op, e.reason.split(":")[0]) for e in events(ws, "restructured")}
    assert any(op == "redirect" for op, _ in kinds)
    assert {e.kind for e in events(ws, "plateau_detected")} >= {"repeating"}


def test_a_forked_llm_team_works_from_its_start_and_an_explorer_from_the_baseline():
    from history import History

    from eat.agents.base import start_candidate
    from eat.events import TeamSpawned

    h = History("coordinate-1")
    h.eval("coordinate-1", 2.0)
    h.eval("coordinate-1", 9.0)
    h.add(
        TeamSpawned(
            team="refiner-2",
            preset="refiner",
            strategy="refiner",
            directive="d",
            start_from="c0001",
        )
    )
    h.add(TeamSpawned(team="explorer-3", preset="explorer", strategy="explorer", directive="d"))
    h.add(
        TeamSpawned(team="coordinate-4", preset="coordinate", strategy="coordinate", directive="d")
    )
    assert start_candidate(h.state.teams["refiner-2"], h.state).cid == "c0001"  # not the best
    assert start_candidate(h.state.teams["explorer-3"], h.state) is None  # the baseline
    assert start_candidate(h.state.teams["coordinate-4"], h.state).cid == "c0002"
    h.eval("refiner-2", 3.0)
    assert start_candidate(h.state.teams["refiner-2"], h.state).cid == "c0003"  # its own line


@pytest.mark.slow
def test_a_reviewer_sends_a_flawed_candidate_back_and_the_profile_reaches_the_coder(
    quick_matmul, tmp_path, llm_server
):
    _, fast, faster = kernels(quick_matmul)
    reviews = []

    def answer(req):
        text = json.dumps(req["messages"])
        if "# Plan the next ideas" in text:
            return Reply(json.dumps(PLAN))
        if "# Review before evaluation" in text:
            reviews.append(text)
            verdict = (
                {"approve": False, "problems": ["the flags miss -ffast-math"]}
                if len(reviews) == 1
                else {"approve": True}
            )
            return Reply(json.dumps(verdict))
        if "# Revise" in text:
            return Reply(fenced(faster, "Added -ffast-math as the reviewer asked."))
        return Reply(
            fenced(fast)
            if "## Profile of the starting point" not in text
            else fenced(fast.replace("IKJ", "KIJ"), "KIJ streams rows too.")
        )

    llm_server.default = answer
    run(quick_matmul, tmp_path / "ws", llm_server, teams=["refiner"], max_evals=2)
    first, second = events(tmp_path / "ws", "candidate_evaluated")
    assert "revised after review: the flags miss -ffast-math" in first.idea
    assert (
        "-ffast-math"
        in (
            tmp_path / "ws" / "teams" / "refiner-1" / "candidates" / "c0001" / "candidate.c"
        ).read_text()
    )
    assert len(reviews) == 2 and "LOOP_ORDER IKJ" in reviews[0]
    coder = [
        r
        for r in llm_server.requests
        if "## Profile of the starting point" in json.dumps(r.messages)
    ]
    assert coder and "GFLOP/s" in json.dumps(coder[0].messages) and second.parent == "c0001"
    assert "vectorized: line" in json.dumps(coder[0].messages)  # the compiler's remarks too
