"""Do LLM prompts stay bounded as a run grows, and how much of each sits in a cache-stable prefix?

Every call pays for its whole prompt, so a prompt that grows with the run's history makes long
runs ever dearer; a cached prompt prefix is billed at a fraction of the price, so the part
identical to the previous call's prompt should be most of it (for this, system, target,
reference, baseline and LEARNING.md come first). The real loop (start_run on
examples/cpu_matmul, model "openai/eat-test-model") runs against tests/llm_server.py's scripted
server, which answers a coder or debugger with the baseline plus a distinct `#define UNUSED_<n>`
line and a planner with a valid five-idea JSON plan, reporting usage from the tokenizer below
(cached = the stable prefix). A fake runner answers at once: speedup from a hash of the source
times a slow drift in n, so new bests keep coming; --fail-rate of candidates fail to compile.

Per request: (a) prompt tokens: litellm.token_counter(model="gpt-4o"), tiktoken o200k_base from
litellm's bundled BPE files, so offline (else the script says so and uses len(text)/4);
(b) stable prefix: the longest common prefix, in o200k tokens of roles and contents, with the
previous prompt of the same role (planner, coder, debugger, told apart by the changing part's
heading; each role's first call is left out). "block" is what is laid out to be stable: the
system message plus the context before that heading. Windows: max(10, N/10) evaluations ending
at N; a call belongs to the evaluation the run was working towards.

Targets: prompt size bounded (mean per call within +5% from 30% of the run to its end);
>= 60% of prompt tokens in the stable prefix.
Run from the repository root:  python bench/prompt_tokens.py [--evals 1000] [--repairs 1]
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import re
import statistics
import sys
import tempfile
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

import eat.llm
from eat.events import CandidateEvaluated
from eat.learning import BEGIN, CAP_CHARS, END
from eat.run import run_status, start_run
from eat.runners.base import Evaluation, Stat, WorkloadResult, source_hash

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))
from llm_server import Reply, serve  # noqa: E402  (the tests' scripted server)

TARGET = ROOT / "examples" / "cpu_matmul"
ROLES = {"Your turn": "coder", "Repair": "debugger", "Plan the next ideas": "planner"}
HEADING = re.compile(rf"\n\n# ({'|'.join(ROLES)}): team ")
SHARE_TARGET, GROWTH_LIMIT = 0.60, 0.05


class Tokens:
    """Prompt tokens by litellm's counter, and token ids for prefixes (or characters / 4)."""

    def __init__(self):
        os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
        try:
            import litellm
            import tiktoken

            litellm.token_counter(model="gpt-4o", text="x")  # points tiktoken at litellm's files
            enc = tiktoken.get_encoding("o200k_base")
            self.count = lambda msgs: litellm.token_counter(model="gpt-4o", messages=msgs)
            self.ids = lambda text: enc.encode(text, disallowed_special=())
            self.per, self.how = 1, "litellm.token_counter(gpt-4o) = tiktoken o200k_base, offline"
        except Exception as e:  # no BPE file offline: a documented approximation
            self.count = lambda msgs: sum(len(m["role"]) + len(m["content"]) for m in msgs) // 4
            self.ids, self.per = list, 4  # characters; a prefix of c characters ~ c / 4 tokens
            self.how = f"APPROXIMATION len(text)/4: no tokenizer offline ({type(e).__name__})"


@dataclass
class Row:
    evaluation: int  # the evaluation this call works towards (1-based)
    role: str
    tokens: int
    prefix: int | None  # common prefix with the previous prompt of the same role
    block: int  # system + context before the changing part
    learning: int  # characters of LEARNING.md's managed block in the prompt
    cut: str | None  # the section where the prefix ends, when it ends inside the block


def common_prefix(a: list, b: list) -> int:
    n = min(len(a), len(b))
    return next((i for i in range(n) if a[i] != b[i]), n)


class Model:
    """The server's one step: a new answer per request, and the request's figures."""

    def __init__(self, tok: Tokens, baseline: str):
        self.tok, self.baseline, self.evals, self.seconds, self.rows, self.last = (
            tok,
            baseline,
            0,
            0.0,
            [],
            {},
        )

    def on_event(self, event, state):
        if isinstance(event, CandidateEvaluated):
            self.evals = state.evaluations

    def __call__(self, req: dict) -> Reply:
        t0, tok, n = time.perf_counter(), self.tok, len(self.rows) + 1
        msgs = [{"role": m["role"], "content": m["content"]} for m in req["messages"]]
        user = msgs[1]["content"]  # [system, user], then a correction round at times
        m = HEADING.search(user)
        role, context = (ROLES[m[1]], user[: m.start()]) if m else ("other", user)
        text = "".join(f"<|{x['role']}|>{x['content']}" for x in msgs)
        ids = tok.ids(text)
        (prev, old), self.last[role] = self.last.get(role, (None, "")), (ids, text)
        prefix = common_prefix(prev, ids) // tok.per if prev is not None else None
        block = (len(tok.ids(msgs[0]["content"])) + len(tok.ids(context))) // tok.per
        managed = context.split(BEGIN, 1)[-1].split(END, 1)[0] if BEGIN in context else ""
        cut = None
        if prefix is not None and prefix < block - 8:  # a few tokens of slack at the seam
            heads = re.findall(r"\n#+ ([^\n]+)", text[: common_prefix(old, text)])
            cut = repr((heads or ["(start)"])[-1][:30])
        self.rows.append(
            Row(self.evals + 1, role, tok.count(msgs), prefix, block, len(managed), cut)
        )
        reply = (
            f"Variant {n}: retune the blocking of the inner loop so rows of B stay in L1 "
            f"and the compiler can vectorize it.\n\n```c\n#define UNUSED_{n} {n}\n"
            f"{self.baseline}```\n"
        )
        if role == "planner":
            reply = json.dumps(
                {
                    "ideas": [
                        {
                            "idea": f"idea {n}.{k}: block i and j by {16 << k} "
                            "so the tiles of B and C stay in cache",
                            "expected_gain": 1.1 + k / 10,
                        }
                        for k in range(5)
                    ]
                }
            )
        self.seconds += time.perf_counter() - t0
        return Reply(
            reply,
            prompt_tokens=self.rows[-1].tokens,
            cached_tokens=prefix or 0,
            completion_tokens=len(tok.ids(reply)) // tok.per,
        )


class FakeRunner:
    """Answers at once: speedup from a hash of the source with a drift in n; some fail."""

    name = "cpu"

    def __init__(self, fail_rate: float):
        self.fail_rate = fail_rate

    def unavailable(self, target=None):
        return None

    def program(self, target, source):
        return None  # each source its own program

    def evaluate(self, target, source, *, config=None, workdir=None) -> Evaluation:
        digest = hashlib.sha256(source.encode()).hexdigest()
        h, fail = (int(digest[i : i + 8], 16) / 2**32 for i in (0, 8))
        common = {"target": target.name, "runner": "fake", "source_hash": source_hash(source)}
        if fail < self.fail_rate:
            error = "candidate.c:3:5: error: expected ';' before 'for'"
            return Evaluation(status="compile_error", message=error, compile_log=error, **common)
        n = int(m[1]) if (m := re.search(r"UNUSED_(\d+)", source)) else 0
        s = (0.5 + 3.0 * h) * (1 + n / 500)
        rows = [
            WorkloadResult(
                params=p,
                candidate=Stat(median_s=1e-3 / s, iqr_s=1e-5 / s, n=30),
                baseline=Stat(median_s=1e-3, iqr_s=1e-5, n=30),
                speedup=s,
                gflops=target.metric("flops", p) / (1e-3 / s) / 1e9,
            )
            for p in target.workloads
        ]
        return Evaluation(status="ok", speedup=s, workloads=rows, **common)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--evals", "--max-evals", type=int, default=1000, help="run length")
    ap.add_argument("--repairs", type=int, default=1, help="repairs per failed candidate")
    ap.add_argument("--fail-rate", type=float, default=0.08, help="share of failed candidates")
    args = ap.parse_args()
    tok, chat, llm_s = Tokens(), eat.llm.LLMClient.chat, [0.0]
    model, runner = Model(tok, (TARGET / "baseline.c").read_text()), FakeRunner(args.fail_rate)

    def timed_chat(*a, **kw):  # this process only: time spent in LLM calls
        t0 = time.perf_counter()
        try:
            return chat(*a, **kw)
        finally:
            llm_s[0] += time.perf_counter() - t0

    eat.llm.LLMClient.chat = timed_chat
    with tempfile.TemporaryDirectory(prefix="eat-bench-") as tmp, serve() as server:
        server.default, t0 = model, time.perf_counter()
        _, why = start_run(
            TARGET,
            Path(tmp) / "ws",
            model="openai/eat-test-model",
            api_base=server.base_url,
            runner=runner,
            on_event=model.on_event,
            sleep=lambda s: None,
            max_evals=args.evals,
            repairs=args.repairs,
            llm_backoff_s=0,
            llm_timeout_s=30,
        )
        wall, st = time.perf_counter() - t0, run_status(Path(tmp) / "ws")
    rows, n, llm = model.rows, st["evaluations"], llm_s[0]
    roles = ", ".join(f"{k} {v}" for k, v in sorted(Counter(r.role for r in rows).items()))
    print(
        f"tokens: {tok.how}\nrun: {n} evaluations, {len(rows)} LLM calls ({roles}), "
        f"{len(st['teams'])} teams spawned in all; stopped: {why}"
    )
    print(
        f"time: {wall:.1f} s wall = LLM calls {llm:.1f} s (measuring prompts {model.seconds:.1f}"
        f" s of it) + eat and the instant fake runner {wall - llm:.1f} s\n"
    )

    def window(end: int) -> list[Row]:
        return [r for r in rows if end - max(10, end // 10) < r.evaluation <= end]

    def share(ws: list[Row]) -> float:
        ws = [r for r in ws if r.prefix is not None]
        return sum(r.prefix for r in ws) / max(1, sum(r.tokens for r in ws))

    print(
        f"{'evals':>6} {'window':>9} {'calls':>5} {'prompt mean':>11} {'max':>5} "
        f"{'prefix mean':>11} {'share':>6} {'block share':>11} {'LEARNING.md block':>17}"
    )
    for end in sorted({c for c in (10, 100, 300, 1000) if c < n} | {n}):
        if w := window(end):
            pre = [r.prefix for r in w if r.prefix is not None] or [0]
            print(
                f"{end:>6} {f'{w[0].evaluation}-{end}':>9} {len(w):>5} "
                f"{statistics.mean(r.tokens for r in w):>11.0f} {max(r.tokens for r in w):>5} "
                f"{statistics.mean(pre):>11.0f} {share(w):>6.1%} "
                f"{sum(r.block for r in w) / sum(r.tokens for r in w):>11.1%} "
                f"{f'{max(r.learning for r in w)} chars':>17}"
            )

    def growth(a: list[Row], b: list[Row]) -> float:
        return statistics.mean(r.tokens for r in b) / statistics.mean(r.tokens for r in a) - 1

    last, early, half = window(n), window(max(10, round(0.3 * n))), window(max(10, n // 2))
    top, overall = max(rows, key=lambda r: r.tokens), share(rows)
    measured = [r for r in rows if r.prefix is not None]
    cuts = Counter(r.cut for r in measured if r.cut)
    shares = sorted(r.prefix / r.tokens for r in measured)
    g = growth(early, last)
    print(
        f"\nsummary\n  prompt size bounded: mean per call {g:+.1%} from evaluation "
        f"{early[-1].evaluation} to {n} (target: within +{GROWTH_LIMIT:.0%}) -> "
        f"{'PASS' if g <= GROWTH_LIMIT else 'FAIL'}\n    {growth(half, last):+.1%} from "
        f"evaluation {half[-1].evaluation} to {n}; largest prompt {top.tokens} tokens "
        f"(evaluation {top.evaluation}, {top.role}); LEARNING.md's block reached "
        f"{max(r.learning for r in rows)} of its {CAP_CHARS}-character cap"
    )
    print(
        f"  stable prefix: {overall:.1%} of prompt tokens over the run (target >= "
        f"{SHARE_TARGET:.0%}) -> {'PASS' if overall >= SHARE_TARGET else 'FAIL'}\n    per call"
        f" min {shares[0]:.1%}, median {statistics.median(shares):.1%}; "
        f"{sum(cuts.values()) / len(measured):.0%} of calls lose part of the stable block (it "
        "changed since that role's previous call), cut in section "
        + ", ".join(f"{k} {v}" for k, v in cuts.most_common(6))
    )
    print(
        f"  eat's own counters: {st['tokens']['prompt']} prompt tokens in {st['llm_calls']} "
        f"calls, {st['tokens']['cached']} cached "
        f"({st['tokens']['cached'] / max(1, st['tokens']['prompt']):.1%})"
    )


if __name__ == "__main__":
    main()
