"""Rewriting files people also edit (LEARNING.md, a team's NOTES.md and team.yaml) without
losing a save they make meanwhile.

A person's editor saves either by renaming a new file over the old one or in place (truncate,
then write), at any moment and without a lock. eat swaps its new text in atomically
(renameat2 RENAME_EXCHANGE) and reads back what it swapped out: a save that landed before the
swap is in it and is merged again. A save in place that opened the file just before the swap
writes into the swapped-out file: eat keeps that file open for a while (`KEEP_S`) and merges
what lands in it at its next rewrite. Meanwhile the file lacked those lines for a moment, and
an editor that read it then saves without them: people's lines eat has read in the last
`KEEP_S` seconds are put back into a text that lacks them (so a line a person deletes that soon
after writing it may come back).
"""

from __future__ import annotations

import ctypes
import errno
import os
import threading
import time
from collections import deque
from collections.abc import Callable
from functools import partial
from pathlib import Path

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
