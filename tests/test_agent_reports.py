"""What eat reads from agents and toolchains: usage reports of the CLIs, profiles, `eat submit`
outside a worktree."""

import subprocess
import sys

from eat.agents.external import aider_usage, claude_usage, codex_usage, eat_usage
from eat.agents.profile import remarks, speed_of_light


def test_usage_reports_of_each_cli():
    claude = (
        '{"type":"system"}\n{"type":"result","num_turns":4,"total_cost_usd":0.5,'
        '"usage":{"input_tokens":10,"cache_read_input_tokens":90,'
        '"cache_creation_input_tokens":5,"output_tokens":7},'
        '"modelUsage":{"claude-sonnet-4-5":{}}}'
    )
    u = claude_usage(claude)
    assert (
        u.calls,
        u.prompt_tokens,
        u.cached_tokens,
        u.completion_tokens,
        u.cost_usd,
        u.model,
    ) == (4, 105, 90, 7, 0.5, "claude-sonnet-4-5")
    codex = "\n".join(
        [
            '{"type":"turn.completed","usage":{"input_tokens":100,'
            '"cached_input_tokens":40,"output_tokens":9}}'
        ]
        * 2
    )
    u = codex_usage(codex)
    assert (u.calls, u.prompt_tokens, u.cached_tokens, u.completion_tokens, u.cost_usd) == (
        2,
        200,
        80,
        18,
        None,
    )
    aider = (
        "Tokens: 2.1k sent, 310 received. Cost: $0.01 message, $0.01 session.\n"
        "Tokens: 3k sent, 1.2k cache hit, 1k received. Cost: $0.02 message, $0.03 "
        "session.\n"
    )
    u = aider_usage(aider)
    assert (u.calls, u.prompt_tokens, u.completion_tokens, u.cost_usd) == (2, 5100, 1310, 0.03)
    u = eat_usage(
        'noise\nEAT-USAGE {"calls": 3, "prompt_tokens": 30, "cost_usd": 0.1}\n'
        'EAT-USAGE {"prompt_tokens": 5}\n'
    )
    assert (u.calls, u.prompt_tokens, u.cost_usd) == (4, 35, 0.1)
    assert claude_usage("not json") is None and codex_usage("") is None
    assert aider_usage("nothing") is None and eat_usage("") is None


def test_vectorization_remarks_name_the_candidates_lines():
    source = "void f(float *a) {\n  for (int i = 0; i < 64; i++) a[i] += 1;\n}\n"
    log = (
        "candidate.c:2:21: optimized: loop vectorized using 64 byte vectors\n"
        "candidate.c:2:21: optimized: loop vectorized using 64 byte vectors\n"
        "/usr/include/x.h:9:1: missed: not ours\n"
        "candidate.c:1:6: missed: couldn't vectorize loop\n"
    )
    assert remarks(log, source).splitlines() == [
        "vectorized: line 2 (for (int i = 0; i < 64; i++) a[i] += 1;): loop vectorized using "
        "64 byte vectors",
        "not vectorized: line 1 (void f(float *a) {): couldn't vectorize loop",
    ]


def test_ncu_speed_of_light_csv_becomes_one_line_per_kernel():
    csv_text = (
        '==PROF== Connected\n"ID","Process ID","Kernel Name","Section Name",'
        '"Metric Name","Metric Unit","Metric Value"\n'
        '"0","1","softmax_kernel","GPU Speed Of Light Throughput",'
        '"Memory Throughput","%","91.2"\n'
        '"0","1","softmax_kernel","GPU Speed Of Light Throughput",'
        '"Compute (SM) Throughput","%","23.5"\n'
        '"0","1","softmax_kernel","GPU Speed Of Light Throughput","Duration","us",'
        '"412.3"\n'
    )
    assert speed_of_light(csv_text) == (
        "softmax_kernel: compute (sm) throughput 23.5%, memory throughput 91.2%, duration 412.3 us"
    )
    assert speed_of_light("no csv") == ""


def test_eat_submit_outside_a_worktree_is_bad_input(tmp_path):
    done = subprocess.run(
        [sys.executable, "-m", "eat", "submit"],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env={"PATH": "/usr/bin:/bin", "PYTHONPATH": sys.path[0]},
    )
    assert done.returncode == 2
    assert done.stderr.startswith("error: EAT_WORKSPACE, EAT_TEAM, EAT_TASK not set")
