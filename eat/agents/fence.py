"""What an external agent may write and read: its `Fence`, made for each turn.

An agent's whole process tree runs under Landlock (eat.runners.sandbox.confine, applied by
eat.agents.contain before it starts the agent's command): files change only beneath its
worktree, its turn's own temporary folder, /dev, and the folders its runtime declares
(`Preset.writes`, e.g. ~/.claude) or the run adds (`[agents] writes`); nothing can be read
beneath the workspace's sealed folder (the log's key, the target's snapshot with its
private/) nor the target's own private/. The network stays open: agents call their providers.
"""

from __future__ import annotations

import os
from dataclasses import asdict, dataclass, field
from pathlib import Path

from eat.config import EXTERNAL
from eat.errors import BadInput
from eat.runners.sandbox import landlock_abi
from eat.seal import hidden


@dataclass
class Fence:
    """The folders an agent may change files beneath, and those it may not read."""

    writable: list[str]
    unreadable: list[str] = field(default_factory=list)
    left_out: list[str] = field(default_factory=list)  # declared folders that could not be made

    def to_json(self) -> dict:
        return asdict(self)


def fence_for(ctx, team: str, tmp: Path, declared: tuple[str, ...] = ()) -> Fence | None:
    """The fence of `team`'s agent for a turn whose temporary folder is `tmp`; None where the
    run lifts it (`[agents] confine = false`) or this kernel has no Landlock."""
    if not ctx.config.agents.confine or landlock_abi() < 1:
        return None
    paths = ctx.ws.paths
    writable = [paths.worktree(team), tmp, Path("/dev")]
    kept = [paths.root.resolve(), Path(ctx.config.target).resolve()]
    left_out = []
    for entry in (*declared, *ctx.config.agents.writes):
        try:
            path = writable_path(entry)
        except OSError:
            left_out.append(entry)  # it cannot be made (now): there is nothing there to write
            continue
        # A folder holding the workspace or the target would open them all: left out.
        if path.exists() and not any(k.is_relative_to(path.resolve()) for k in kept):
            writable.append(path)
    return Fence(
        writable=[str(p) for p in writable],
        unreadable=hidden(paths.sealed, Path(ctx.config.target)),
        left_out=left_out,
    )


def writable_path(entry: str) -> Path:
    """An entry of a `writes` list as a path; one ending in '/' (a CLI's own folder, there from
    its start) is made if missing (OSError where it cannot be)."""
    path = Path(os.path.expanduser(entry))
    if entry.endswith("/"):
        path.mkdir(parents=True, exist_ok=True)
    return path


def check_writes(entries: list[str]) -> None:
    """Before a run: BadInput for an `[agents] writes` folder that cannot be made."""
    for entry in entries:
        try:
            writable_path(entry)
        except OSError as e:
            why = e.strerror or str(e)
            raise BadInput(f"[agents] writes: {entry}: cannot be made ({why})") from None


def holds(confine: bool = True) -> str:
    """What holds an agent on this machine, in words (`eat doctor`, the start of a run)."""
    if not confine:
        return "nothing: [agents] confine = false lets agents write wherever the user can"
    if landlock_abi() < 1:
        return (
            "nothing: this kernel has no Landlock, so agents write wherever the user can "
            "(Linux 5.13 or newer fences them)"
        )
    return (
        "Landlock: agents change files only in their worktree, their own temporary folder "
        "and their CLI's folders, and cannot read the run's sealed files or private/"
    )


def warning(config) -> str | None:
    """A line for people when this run's external agents go unfenced; None when fenced or
    when no team runs an external agent."""
    if config.agent not in EXTERNAL:
        return None
    if config.agents.confine and landlock_abi() >= 1:
        return None
    return f"warning: agents are not fenced: {holds(config.agents.confine)}"
