"""Processes as /proc shows them: a process's fields, its identity, its descendants.

Dependency-free: the agent container (eat/agents/contain.py) imports it at start-up.
"""

from __future__ import annotations

import os
from pathlib import Path


def stat(pid: int | str) -> list[str] | None:
    """/proc/PID/stat's fields after the command name (state, ppid, ...); None: no such process."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return text[text.rindex(")") + 2 :].split()


def proc_start(pid: int) -> str | None:
    """The process's start time (its identity: a PID is reused, a start time with it is not)."""
    fields = stat(pid)
    return fields[19] if fields else None


def descendants(root: int) -> list[int]:
    """Every process below `root`, children first."""
    children: dict[int, list[int]] = {}
    for d in Path("/proc").iterdir():
        if d.name.isdigit() and (fields := stat(d.name)):
            children.setdefault(int(fields[1]), []).append(int(d.name))
    out, todo = [], [root]
    while todo:
        for c in children.get(todo.pop(), []):
            out.append(c)
            todo.append(c)
    return out


def alive(pid: int) -> bool:
    """Running (a zombie is not); without /proc (macOS), whether the process exists."""
    fields = stat(pid)
    if fields is not None or Path("/proc/self").exists():
        return fields is not None and fields[0] != "Z"
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's process
        return True
    return True
