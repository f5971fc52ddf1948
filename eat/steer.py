"""Files people and eat both edit during a run: people's edits noticed (steering), and eat's
rewrites that keep them.

Steering by files. What a person may edit: LEARNING.md outside eat's markers (for every agent
and the supervisor), a team's NOTES.md outside its markers or the directive in its team.yaml
(for that team), and `eat steer DIR TEXT [--team ID]`, which drops a message into the
workspace's inbox. A watchdog observer (its own thread) only notes which of these files changed
and wakes the loop; the loop's main thread reads them, compares them with what it saw last and
records what changed (the log has one writer). The next prompts of the agents concerned and of
the supervisor show it (RunState.steering_for).

Rewriting those files without losing a save (`merge_write`). A person's editor saves either by
renaming a new file over the old one or in place (truncate, then write), at any moment and
without a lock. eat swaps its new text in atomically (renameat2 RENAME_EXCHANGE) and reads back
what it swapped out: a save that landed before the swap is in it and is merged again. A save in
place that opened the file just before the swap writes into the swapped-out file: eat keeps
that file open for a while (`KEEP_S`) and merges what lands in it at its next rewrite.
Meanwhile the file lacked those lines for a moment, and an editor that read it then saves
without them: people's lines eat has read in the last `KEEP_S` seconds are put back into a text
that lacks them (so a line a person deletes that soon after writing it may come back).
"""

from __future__ import annotations

import ctypes
import difflib
import errno
import json
import os
import threading
import time
from collections import deque
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING

import yaml

from eat.errors import BadInput
from eat.events import HumanSteered
from eat.workspace import Paths, Workspace, write_atomic

if TYPE_CHECKING:
    from watchdog.observers.api import BaseObserver

KEEP_S = 10.0  # how long a swapped-out file and people's newly read lines are kept
KEEP_FILES = 64  # swapped-out files kept open at most (eat may rewrite very often)
MERGE_TRIES = 50
_RENAME_EXCHANGE, _AT_FDCWD = 2, -100
_libc = ctypes.CDLL(None, use_errno=True)
# eat owns the text between these markers and rewrites it; people own the rest of the file.
BEGIN, END = "<!-- eat:begin -->", "<!-- eat:end -->"


def _exchange(a: Path, b: Path) -> bool:
    """Swap two paths atomically; False where the system or filesystem cannot."""
    fn = getattr(_libc, "renameat2", None)
    if fn is None:
        return False
    if fn(_AT_FDCWD, os.fsencode(a), _AT_FDCWD, os.fsencode(b), _RENAME_EXCHANGE) == 0:
        return True
    err = ctypes.get_errno()
    if err in (errno.ENOSYS, errno.EINVAL, errno.ENOTSUP):
        return False
    raise OSError(err, os.strerror(err), str(b))


def _mark(path: Path) -> tuple | None:
    """What changes when anyone saves the file: its inode, size and modification time."""
    try:
        st = os.stat(path)
    except FileNotFoundError:
        return None
    return st.st_ino, st.st_size, st.st_mtime_ns


def _settled(read: Callable[[], str], seen: str) -> str:
    """The text once an in-place save caught between its truncate and its write has written
    (a moment later the text stops changing)."""
    while True:
        time.sleep(0.02)
        again = read()
        if again == seen:
            return seen
        seen = again


def _whole(read: Callable[[], str]) -> str:
    """A text read whole: an empty one may be a save in place between its truncate and its
    write, so it is read again until it stops changing."""
    text = read()
    return _settled(read, text) if text == "" else text


def _read(path: Path) -> tuple[str | None, tuple | None]:
    """The file's text (None: no file) and its mark, read so that they agree."""
    while True:
        mark = _mark(path)
        if mark is None:
            return None, None
        text = _whole(path.read_text)
        if _mark(path) == mark:
            return text, mark


def read_settled(path: Path) -> str | None:
    """A file people may be saving: its text (None: no file), not caught mid-save."""
    return _read(path)[0]


class _People:
    """What eat has seen people write in one file: each line with when eat first read it and
    the line before it."""

    def __init__(self) -> None:
        self.lines: dict[str, tuple[float, str | None]] = {}

    def observe(self, text: str | None, people: Callable[[str], str]) -> None:
        if text is None:
            return
        theirs = set(people(text).split("\n"))
        lines, now = text.split("\n"), time.monotonic()
        for i, line in enumerate(lines):
            if line.strip() and line in theirs and line not in self.lines:
                self.lines[line] = (now, lines[i - 1] if i else None)

    def restore(self, text: str | None) -> str | None:
        """`text` with the lines first read in the last KEEP_S seconds put back where they were
        (after the same line, else at the end)."""
        if text is None:
            return None
        now = time.monotonic()
        lines = text.split("\n")
        for line, (at, before) in list(self.lines.items()):
            if now - at >= KEEP_S or line in lines:
                continue
            where = lines.index(before) + 1 if before in lines else len(lines)
            if where == len(lines) and lines and lines[-1] == "":
                where -= 1  # before the final newline
            lines.insert(where, line)
        return "\n".join(lines)


def _pread_all(fd: int) -> str:
    size = os.fstat(fd).st_size
    return os.pread(fd, size, 0).decode() if size else ""


_seen: dict[Path, _People] = {}
# Files eat swapped out in the last KEEP_S seconds, still open: (path, fd, text as read, when).
_swapped: list[tuple[Path, int, str, float]] = []
# path -> the marks of the texts eat last put there: a watcher may look at a file only after
# eat's next rewrite has begun (or ended), so the last few count as eat's own.
_written: dict[Path, deque] = {}
_lock = threading.Lock()  # one rewrite at a time, whichever thread asks


def ours(path: Path) -> bool:
    """Whether the file at `path` is one eat wrote there lately, untouched since (a watcher's
    way to tell eat's own rewrites from people's saves, with one stat)."""
    return _mark(path) in _written.get(path.resolve(), ())


def _late_saves(path: Path, seen: _People, people: Callable[[str], str]) -> None:
    """Observe what saves in place wrote into `path`'s swapped-out files since eat read them;
    close every swapped-out file older than KEEP_S, or beyond the newest KEEP_FILES."""
    now, kept = time.monotonic(), []
    for i, (where, fd, text, at) in enumerate(_swapped):
        if where == path:
            landed = _pread_all(fd)
            if landed != text:
                seen.observe(_settled(partial(_pread_all, fd), landed), people)
                text = landed
        if now - at < KEEP_S and len(_swapped) - i <= KEEP_FILES:
            kept.append((where, fd, text, at))
        else:
            os.close(fd)
    _swapped[:] = kept


def merge_write(
    path: Path, make: Callable[[str | None], str], people: Callable[[str], str] | None = None
) -> bool:
    """Replace `path` with `make(its text)` (None: no file) without losing a save a person
    makes meanwhile; True if it wrote. `make` must keep what people wrote (e.g. splice only
    eat's block). `people(text)` is the part of a text people write (outside eat's markers);
    without it (a structured file such as team.yaml) a save that lands before the swap is
    merged, but none is kept or put back. Without an atomic swap (other systems) a check just
    before the replace narrows the window instead of closing it."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.merge.tmp")
    with _lock:
        key = path.resolve()
        written = _written.setdefault(key, deque(maxlen=8))
        seen = _seen.setdefault(key, _People()) if people else None
        if seen and people:
            _late_saves(key, seen, people)

        def merged(text: str | None) -> str | None:
            if seen and people:
                seen.observe(text, people)
                text = seen.restore(text)
            return text

        there, mark = _read(path)  # what is at `path` now, and its mark
        base, wrote = there, False  # the text eat's new version is made from
        for _ in range(MERGE_TRIES):
            new = make(merged(base))
            if new == there:
                return wrote
            tmp.write_text(new)
            if there is None:
                try:
                    written.append(_mark(tmp))
                    os.link(tmp, path)  # fails if a file appeared meanwhile: merge with it
                    return True
                except FileExistsError:
                    there, mark = _read(path)
                    base = there
                    continue
                finally:
                    tmp.unlink()
            if _mark(path) != mark:  # saved since we read it: merge that first
                tmp.unlink()
                there, mark = _read(path)
                base = there
                continue
            written.append(_mark(tmp))  # before the swap: a watcher may look at once
            if not _exchange(tmp, path):
                os.replace(tmp, path)  # no atomic swap here: the check above is all we have
                return True
            wrote = True
            fd = os.open(tmp, os.O_RDONLY)  # what we swapped out: a save in place that opened
            tmp.unlink()  # it just before may still write into it
            old = _whole(partial(_pread_all, fd))
            if seen:
                _swapped.append((key, fd, old, time.monotonic()))
            else:
                os.close(fd)
            if old == there:
                return True
            # someone saved between our read and the swap: merge their text into what is
            # at `path` now (our `new`, unless they saved again since, which the mark shows)
            base, there, mark = old, new, _mark(path)
        raise RuntimeError(f"{path}: changed {MERGE_TRIES} times while eat rewrote it")


def splice(text: str | None, block: str, empty: str = f"{BEGIN}\n{END}\n") -> str:
    """`text` with eat's block between the markers replaced by `block`, the rest kept as it is
    (no file: `empty`; markers removed by hand: added anew at the end)."""
    text = empty if text is None else text
    if BEGIN not in text or END not in text:
        text = text.rstrip() + f"\n\n{BEGIN}\n{END}\n"
    before, rest = text.split(BEGIN, 1)
    _, after = rest.split(END, 1)
    return f"{before}{BEGIN}\n{block}\n{END}{after}"


def outside(text: str) -> str:
    """What people wrote: the text outside eat's markers."""
    if BEGIN not in text or END not in text:
        return text
    before, rest = text.split(BEGIN, 1)
    return before + rest.split(END, 1)[1]


# Steering: people's edits noticed.

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
