"""The tools runtime: eat's own tool-calling loop over litellm, in the team's worktree.

Each step is one model call; the model answers with tool calls (read, write and edit files of
the worktree, list them, check, submit, profile, write notes) whose results go back as tool
messages, until it answers without one, or the turn's limits end it: `agent_steps` model calls,
the desk's limits (steps, submits, wall clock, the run stopping), the run's LLM budget (every
call goes through the run's LLMClient, so `--max-cost` and `--max-llm-calls` hold).
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from eat.agents.llm import render
from eat.llm import LLMClient
from eat.state import RunState, Team
from eat.workspace import Paths

MAX_RESULT = 12_000  # characters of a tool's result the model sees


def _tool(name: str, description: str, **params: str) -> dict:
    return {
        "type": "function",
        "function": {
            "name": name,
            "description": description,
            "parameters": {
                "type": "object",
                "required": list(params),
                "properties": {k: {"type": "string", "description": v} for k, v in params.items()},
            },
        },
    }


TOOLS = [
    _tool(
        "read_file",
        "Read a file of the worktree (TASK.md, the candidate, the reference, "
        "LEARNING.md, others/...).",
        path="Path relative to the worktree.",
    ),
    _tool(
        "write_file",
        "Replace a file of the worktree with `content`.",
        path="Path relative to the worktree.",
        content="The whole new content.",
    ),
    _tool(
        "edit_file",
        "Replace the one occurrence of `old` in a file with `new`.",
        path="Path relative to the worktree.",
        old="Exact text to replace (unique).",
        new="Replacement text.",
    ),
    _tool("list_files", "List the worktree's files."),
    _tool("check", "Build and verify the candidate file (no timing: submit times it)."),
    _tool(
        "submit",
        "Evaluate the candidate file fully and record it as the team's candidate.",
        message="One line: what this candidate tries.",
    ),
    _tool(
        "profile",
        "Per-workload times and fraction of peak (once submitted), and the "
        "compiler's remarks on the candidate's loops.",
    ),
    _tool(
        "write_notes", "Append to your NOTES.md (kept with your submits).", text="What to remember."
    ),
]


class ToolsAgent:  # a base.Worker
    """A team's tool-calling agent; `client` is the run's LLMClient for the team's model."""

    def __init__(self, client: LLMClient, paths: Paths):
        self.client, self.paths = client, paths
        self._stopped: str | None = None

    def stop(self, why: str = "stopped by eat") -> None:
        """End the loop before its next model call."""
        self._stopped = why

    def work(self, team: Team, state: RunState, desk) -> str:
        self._stopped = None
        root = self.paths.worktree(team.id)
        source = next(iter(sorted(root.glob("candidate.*"))))
        messages: list[dict[str, Any]] = [
            {"role": "system", "content": render("tools_system.md.j2")},
            {"role": "user", "content": self.paths.task_file(team.id).read_text()},
        ]
        for _ in range(desk.cfg.agent_steps):
            why = self._stopped or desk.why_end()
            if why:
                return why
            reply = self.client.complete(
                messages, agent=f"{team.id}/coder", team=team.id, tools=TOOLS
            )
            calls = reply.tool_calls or []
            messages.append(
                {
                    "role": "assistant",
                    "content": reply.content or "",
                    **({"tool_calls": [c.model_dump() for c in calls]} if calls else {}),
                }
            )
            if not calls:
                return "the model ended its turn"
            for call in calls:
                result = self._run(call.function.name, call.function.arguments, root, source, desk)
                messages.append(
                    {"role": "tool", "tool_call_id": call.id, "content": result[-MAX_RESULT:]}
                )
        return f"step limit ({desk.cfg.agent_steps} model calls a turn)"

    def _run(self, name: str, arguments: str, root: Path, source: Path, desk) -> str:
        """One tool call's result, as text for the model (errors too: it may correct itself)."""
        try:
            args = json.loads(arguments or "{}")
        except ValueError:
            return "error: the arguments are not a JSON object"
        try:
            if name == "read_file":
                return _inside(root, args["path"]).read_text()
            if name == "write_file":
                path = _writable(root, args["path"])
                path.write_text(args["content"])
                return f"wrote {args['path']} ({len(args['content'])} characters)"
            if name == "edit_file":
                path = _writable(root, args["path"])
                text = path.read_text()
                if text.count(args["old"]) != 1:
                    return (
                        f"error: `old` occurs {text.count(args['old'])} times in "
                        f"{args['path']}; it must occur once"
                    )
                path.write_text(text.replace(args["old"], args["new"]))
                return f"edited {args['path']}"
            if name == "list_files":
                return "\n".join(
                    sorted(
                        str(p.relative_to(root))
                        for p in root.rglob("*")
                        if p.is_file() and ".git" not in p.parts and ".requests" not in p.parts
                    )
                )
            if name == "write_notes":
                with open(root / "NOTES.md", "a") as f:
                    f.write(args["text"].rstrip() + "\n")
                return "noted"
            if name == "submit":
                return json.dumps(desk.submit(source.read_text(), args.get("message", "")))
            if name in ("check", "profile"):
                return json.dumps(getattr(desk, name)(source.read_text()))
        except KeyError as e:
            return f"error: missing argument {e}"
        except (OSError, UnicodeDecodeError, ValueError) as e:
            return f"error: {e}"
        return f"error: no tool {name!r}"


def _inside(root: Path, rel: str) -> Path:
    """`rel` within the worktree (no absolute paths, no way out with ..)."""
    path = Path(os.path.normpath(root / rel))
    if not path.is_relative_to(root) or ".git" in path.relative_to(root).parts:
        raise ValueError(f"{rel}: outside the worktree")
    return path


def _writable(root: Path, rel: str) -> Path:
    path = _inside(root, rel)
    top = path.relative_to(root).parts[0]
    if not (top.startswith("candidate.") or top == "NOTES.md" or top.startswith("scratch")):
        raise ValueError(
            f"{rel}: only the candidate file, NOTES.md and scratch* files may be written"
        )
    return path
