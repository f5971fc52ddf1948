"""`python -m eat.agents.mini`: mini-swe-agent (the real package) on a team's worktree.

Run by the `mini-swe-agent` runtime as its command, in the worktree, contained like any
external agent. It drives mini-swe-agent's DefaultAgent with its LitellmModel (the team's
model, through litellm) and LocalEnvironment (bash in the worktree, where `eat check` and
`eat submit` work), with the task from TASK.md and the turn's step limit, then prints one
`EAT-USAGE {json}` line: the calls, tokens and cost eat counts against the run's budgets.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

INSTANCE = """{{task}}

Work step by step with bash commands in this folder: read files, edit the candidate with a
heredoc or sed, run `eat check`, and `eat submit -m "what you tried"` for every version you
believe is faster. When you have submitted your best version, finish with the command
`echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT` (alone)."""

SYSTEM = (
    "You are a performance engineer who works through a bash tool, one or more commands "
    "per reply, each with a line of reasoning first."
)


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", required=True)
    ap.add_argument("--api-base")
    ap.add_argument("--steps", type=int, default=30)
    ap.add_argument("--command-timeout", type=int, default=600)
    ap.add_argument(
        "--cost-limit",
        type=float,
        default=0.0,
        help="USD the agent may spend in this turn (0: no limit)",
    )
    args = ap.parse_args(argv)
    # mini-swe-agent prints a banner and keeps a config folder: quiet, and inside the worktree
    os.environ.setdefault("MSWEA_SILENT_STARTUP", "1")
    os.environ.setdefault("MSWEA_GLOBAL_CONFIG_DIR", str(Path(".mini").resolve()))
    os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
    from minisweagent.agents.default import DefaultAgent
    from minisweagent.environments.local import LocalEnvironment
    from minisweagent.models.litellm_model import LitellmModel

    kwargs: dict = {"num_retries": 0}
    if args.api_base:
        kwargs["api_base"] = args.api_base
        if args.model.startswith("openai/") and not os.environ.get("OPENAI_API_KEY"):
            kwargs["api_key"] = "none"  # local servers want some key; this is no secret
    model = LitellmModel(model_name=args.model, model_kwargs=kwargs, cost_tracking="ignore_errors")
    env = LocalEnvironment(cwd=os.getcwd(), timeout=args.command_timeout)
    agent = DefaultAgent(
        model,
        env,
        system_template=SYSTEM,
        instance_template=INSTANCE,
        step_limit=args.steps,
        cost_limit=args.cost_limit,
    )
    task = Path(os.environ.get("EAT_TASK", "TASK.md")).read_text()
    status = "error"
    try:
        status = agent.run(task).get("exit_status", "")
    finally:
        print("EAT-USAGE " + json.dumps(usage(agent, args.model)), flush=True)
    print(f"mini-swe-agent ended: {status}", flush=True)
    return 0


def usage(agent, model: str) -> dict:
    """Calls, tokens and cost from the agent's messages (each model reply carries its
    response)."""
    prompt = completion = cached = 0
    for m in agent.messages:
        u = ((m.get("extra") or {}).get("response") or {}).get("usage") or {}
        prompt += u.get("prompt_tokens") or 0
        completion += u.get("completion_tokens") or 0
        cached += (u.get("prompt_tokens_details") or {}).get("cached_tokens") or 0
    return {
        "model": model,
        "calls": agent.n_calls,
        "prompt_tokens": prompt,
        "completion_tokens": completion,
        "cached_tokens": cached,
        "cost_usd": agent.cost or None,
    }


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
