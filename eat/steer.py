"""Steering by files: a person's edits, noticed while a run goes, become human_steered events.

What a person may edit: LEARNING.md outside eat's markers (for every agent and the
supervisor), a team's NOTES.md outside its markers or the directive in its team.yaml (for that
team), and `eat steer DIR TEXT [--team ID]`, which drops a message into the workspace's inbox.
A watchdog observer (its own thread) only notes which of these files changed and wakes the
loop; the loop's main thread reads them, compares them with what it saw last and records what
changed (the log has one writer). The next prompts of the agents concerned and of the
supervisor show it (RunState.steering_for).
"""

from __future__ import annotations

import difflib
import json
import os
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

import yaml

from eat.errors import BadInput
from eat.events import HumanSteered
from eat.merge import ours, outside, read_settled
from eat.workspace import Paths, Workspace, write_atomic

if TYPE_CHECKING:
    from watchdog.observers.api import BaseObserver

MAX_TEXT = 2000  # characters of an edit kept in the event (and shown in prompts)


def _changed_lines(old: str, new: str) -> tuple[str, str]:
    """(lines added, lines removed) between two texts, blank lines left out."""
    added, removed = [], []
    for line in difflib.ndiff(old.splitlines(), new.splitlines()):
        if line.startswith("+ ") and line[2:].strip():
            added.append(line[2:])
        elif line.startswith("- ") and line[2:].strip():
            removed.append(line[2:])
    return "\n".join(added)[:MAX_TEXT], "\n".join(removed)[:MAX_TEXT]


def directive_of(text: str) -> str | None:
    """The directive a team.yaml names (None: unreadable, or none)."""
    try:
        spec = yaml.safe_load(text)
    except yaml.YAMLError:
        return None
    value = spec.get("directive") if isinstance(spec, dict) else None
    return " ".join(str(value).split()) if value else None


def watch_writes(observer: BaseObserver, folder: Path, noticed: Callable[[Path], None]) -> None:
    """Have `observer` call `noticed` (on its thread) with each path a write in `folder` (not
    its subfolders) touched: created, changed, closed after writing, a rename's source and
    target. Opens and reads are left out by inotify's mask, not by a test here: every read of
    these folders' files (eat's rewrites, git's commits) would otherwise reach Python as
    events, which cost the run more CPU than its search."""
    from watchdog.events import (
        FileClosedEvent,
        FileCreatedEvent,
        FileModifiedEvent,
        FileMovedEvent,
        FileSystemEventHandler,
    )

    class Handler(FileSystemEventHandler):
        def on_any_event(self, event):
            for p in (event.src_path, getattr(event, "dest_path", "")):
                if p:
                    noticed(Path(os.fsdecode(p)))

    writes = [FileCreatedEvent, FileModifiedEvent, FileClosedEvent, FileMovedEvent]
    observer.schedule(Handler(), str(folder), recursive=False, event_filter=writes)


class Steering:
    """The watcher of one running workspace. `start` / `stop` the observer; `take` (main thread
    only) records what people changed since the last call."""

    def __init__(self, paths: Paths):
        self.paths = paths
        self.wake: Callable[[], None] = lambda: None  # the loop sets it: hand `take` to main
        self._changed: set[Path] = set()
        self._lock = threading.Lock()
        self._woken = False
        self._observer: BaseObserver | None = None
        self._watched: set[Path] = set()
        try:
            self.seen: dict[str, str] = json.loads(paths.seen.read_text())
        except (OSError, ValueError):
            self.seen = {}  # lost: edits made while no run was going are taken as the start

    # -- the observer thread --------------------------------------------------------------------

    def start(self) -> None:
        from watchdog.observers import Observer

        self.paths.inbox.mkdir(parents=True, exist_ok=True)
        self.paths.teams.mkdir(parents=True, exist_ok=True)
        self._observer = Observer()
        self._observer.daemon = True
        for folder in (self.paths.root, self.paths.inbox):
            self._watch(folder)
        self._watch_teams()
        self._observer.start()

    def stop(self) -> None:
        if self._observer is not None:
            self._observer.stop()
            self._observer.join(timeout=5)
            self._observer = None

    def _watch(self, folder: Path) -> None:
        # One folder, not recursive: .git and the candidates' folders would flood the queue.
        assert self._observer is not None  # start() made it
        watch_writes(self._observer, folder, self._noticed)
        self._watched.add(folder)

    def _watch_teams(self) -> None:
        if self._observer is None:
            return
        for folder in sorted(self.paths.teams.iterdir()):
            if folder.is_dir() and folder not in self._watched:
                self._watch(folder)

    def _noticed(self, path: Path) -> None:
        """On the observer's thread: note a file people may edit, and wake the loop once."""
        if path.name.startswith("."):
            return  # eat's own temporary files
        relevant = (
            path == self.paths.learning
            or path.parent == self.paths.inbox
            or (path.parent.parent == self.paths.teams and path.name in ("NOTES.md", "team.yaml"))
        )
        if not relevant or ours(path):
            return  # eat's own rewrite: nothing a person said
        with self._lock:
            self._changed.add(path)
            wake, self._woken = not self._woken, True
        if wake:
            self.wake()

    # -- the main thread ----------------------------------------------------------------------

    def take(self, ctx, everything: bool = False) -> list[HumanSteered]:
        """Record what people changed (every steerable file with `everything`); main thread."""
        with self._lock:
            changed, self._changed, self._woken = self._changed, set(), False
        self._watch_teams()
        p = self.paths
        if everything:
            changed |= (
                {p.learning}
                | set(p.inbox.glob("[!.]*"))
                | {f for t in ctx.state.teams for f in (p.team_notes(t), p.team_spec(t))}
            )
        events = []
        for path in sorted(changed):
            try:
                events += self._events(path, ctx.state)
            except (OSError, UnicodeDecodeError, ValueError):
                continue  # mid-save or gone: its next event will bring it back
        for event in events:
            ctx.record(event)
        for path in sorted(changed):
            if path.parent == p.inbox and path.exists():
                path.unlink()  # recorded (durably) first: a crash in between records it once
        if any(path.parent != p.inbox for path in changed):
            write_atomic(p.seen, json.dumps(self.seen), durable=False)
        return events

    def _events(self, path: Path, state) -> list[HumanSteered]:
        p = self.paths
        if path.parent == p.inbox:
            if not path.is_file() or path.name in state.steer_refs:
                return []
            msg = json.loads(path.read_text())
            return [
                HumanSteered(
                    source="steer",
                    team=msg.get("team"),
                    text=str(msg["text"])[:MAX_TEXT],
                    ref=path.name,
                )
            ]
        text = read_settled(path)
        if text is None:
            return []
        if path.name == "team.yaml":
            team = state.teams.get(path.parent.name)
            new = directive_of(text)
            if team is None or new is None or new == " ".join(team.directive.split()):
                return []
            return [
                HumanSteered(
                    source="directive",
                    team=team.id,
                    text=new[:MAX_TEXT],
                    removed=team.directive[:MAX_TEXT],
                )
            ]
        key = str(path.relative_to(p.root))
        mine, before = outside(text), self.seen.get(key)
        self.seen[key] = mine
        if before is None or before == mine:
            return []  # first sight: what is there now is where the comparison starts
        added, removed = _changed_lines(before, mine)
        if not added and not removed:
            return []
        team = path.parent.name if path.name == "NOTES.md" else None
        return [
            HumanSteered(
                source="notes" if team else "learning",
                team=team,
                text=added or "(lines removed)",
                removed=removed,
            )
        ]


def prompt_lines(state, team: str | None) -> list[str]:
    """People's latest steering as the prompts show it: a team's agents see what concerns
    them, the supervisor (team None) sees all of it."""
    where = {
        "learning": "in LEARNING.md",
        "notes": "in the team's NOTES.md",
        "directive": "as the team's new directive",
        "steer": "with `eat steer`",
    }
    return [
        f"to {'team ' + e.team if e.team else 'every team'}, {where[e.source]}: {e.text}"
        for e in state.steering_for(team)
    ]


def send(workspace: Path, text: str, team: str | None = None) -> tuple[Path, bool]:
    """`eat steer`: leave a message for the run's next prompts (the whole run's, or one
    team's); returns (the message file, whether a run is going now to pick it up)."""
    from eat.status import run_status

    if not text.strip():
        raise BadInput("the message is empty")
    ws = Workspace.open(workspace)
    if team is not None:
        teams = [t["id"] for t in run_status(workspace)["teams"]]
        if team not in teams:
            raise BadInput(f"team {team!r} is not in this run (have: {', '.join(teams)})")
    ws.paths.inbox.mkdir(parents=True, exist_ok=True)
    path = ws.paths.inbox / f"{time.time_ns()}-{os.getpid()}.json"
    write_atomic(path, json.dumps({"text": text.strip(), "team": team}))
    return path, ws.is_locked()
