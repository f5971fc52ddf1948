"""The run's target, frozen at its start: judged from a snapshot, watched for changes.

`start_run` copies the target folder into the workspace's sealed folder (no agent may read or
write there) and records its content digest in run_started; the run's Target is loaded from
the copy, so every evaluation judges against what the run started with, private/ included.
Before each evaluation `Guarded` compares the target folder, and the copy, with that digest: a
change by anyone is recorded once (target_changed) and the evaluation is refused with
TargetChangedError naming the files, which stops the run. `eat resume` refuses a changed
target unless told to accept it (then a new snapshot, recorded: eat.run._reseal).
"""

from __future__ import annotations

import hashlib
import os
import shutil
import threading
from pathlib import Path

from eat.runners.base import HarnessError

# Left out of a target's content: what Python and git keep beside sources.
_SKIPPED_DIRS = {"__pycache__", ".git"}
_SKIPPED_SUFFIXES = (".pyc",)


class TargetChangedError(HarnessError):
    """The target folder is not what the run started with: no evaluation may use it."""

    code = "target_changed"

    def __init__(self, files: list[str], root: Path):
        self.files = files
        shown = ", ".join(files[:5]) + (f" and {len(files) - 5} more" if len(files) > 5 else "")
        super().__init__(
            f"the target changed since the run started: {shown} in {root} "
            "(restore it, or `eat resume --accept-target-change` to go on with it)"
        )


def _walk(root: Path, leave_out: tuple[Path, ...]):
    """os.walk of `root`, links followed, without caches nor the folders of `leave_out` (a
    workspace made inside its own target folder)."""
    out, top = {os.path.realpath(p) for p in leave_out}, os.path.realpath(root)
    for parent, dirs, names in os.walk(root, followlinks=True):
        dirs[:] = sorted(d for d in dirs if not _skipped(os.path.join(parent, d), top, out))
        yield parent, sorted(names)


def _skipped(folder: str, top: str, out: set[str]) -> bool:
    """Whether a folder met in the walk of `top` is no part of its content: a cache, one of
    `out`, or a link to a folder within `top` (its files are there already; a link up the tree
    would be walked forever)."""
    real = os.path.realpath(folder)
    return (
        os.path.basename(folder) in _SKIPPED_DIRS
        or real in out
        or (os.path.islink(folder) and (real == top or real.startswith(top + os.sep)))
    )


def files_of(root: Path, leave_out: tuple[Path, ...] = ()) -> dict[str, str]:
    """Every file beneath `root`: its path relative to `root` -> the sha256 of its bytes."""
    found = {}
    for parent, names in _walk(root, leave_out):
        for name in names:
            if not name.endswith(_SKIPPED_SUFFIXES):
                path = Path(parent) / name
                found[str(path.relative_to(root))] = _sha256(path)
    return found


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def digest(files: dict[str, str]) -> str:
    """One hash of a folder's files and their contents."""
    return hashlib.sha256(
        "".join(f"{k}\0{v}\n" for k, v in sorted(files.items())).encode()
    ).hexdigest()[:32]


def hidden(sealed: Path, original: Path) -> list[str]:
    """What no agent nor candidate may read: the workspace's sealed folder (`sealed`: the log's
    key, the snapshot) and the target folder's own private/, where it has one."""
    private = Path(original) / "private"
    return [str(sealed)] + ([str(private)] if private.is_dir() else [])


def recorded_digest(events) -> str | None:
    """The digest the log holds the target to: run_started's, or the last target_changed's
    that was accepted; None in a log older than seals."""
    found = None
    for e in events:
        if e.type == "run_started" or (e.type == "target_changed" and e.accepted):
            found = e.target_digest if e.type == "run_started" else e.digest
    return found


def differences(a: dict[str, str], b: dict[str, str]) -> list[str]:
    """The files that differ between two listings: changed, added or removed."""
    return sorted(k for k in a.keys() | b.keys() if a.get(k) != b.get(k))


def snapshot(src: Path, dst: Path, leave_out: tuple[Path, ...] = ()) -> str:
    """Copy the target folder `src` to `dst` (replacing what is there, whole or not at all),
    without `leave_out`; returns the copy's digest."""
    part = dst.with_name(dst.name + ".part")
    shutil.rmtree(part, ignore_errors=True)
    out, top = {os.path.realpath(p) for p in leave_out}, os.path.realpath(src)

    def ignored(folder: str, names: list[str]) -> set[str]:
        return {
            n
            for n in names
            if n.endswith(_SKIPPED_SUFFIXES)
            or (os.path.isdir(path := os.path.join(folder, n)) and _skipped(path, top, out))
        }

    shutil.copytree(src, part, symlinks=False, ignore=ignored)
    old = dst.with_name(dst.name + ".old")
    if dst.exists():
        os.replace(dst, old)
    os.replace(part, dst)
    shutil.rmtree(old, ignore_errors=True)
    return digest(files_of(dst))


class Seal:
    """What the run's target must stay: `original` (the user's folder) and `copy` (the
    snapshot evaluations use) both match `expected`, the digest the log records."""

    def __init__(self, original: Path, copy: Path, expected: str, leave_out: tuple[Path, ...] = ()):
        self.original, self.copy, self.expected = Path(original), Path(copy), expected
        self.leave_out = leave_out  # the workspace, when it lies in the target folder
        made = _files(self.copy)
        self.files = made if digest(made) == expected else {}  # the listing the digest is of
        self._seen: dict[Path, tuple] = {}  # folder -> its files' stat when it last matched

    def changed(self) -> list[str]:
        """The files that differ from the run's start ([]: none); reads contents only when a
        file's size, times or inode moved since the last check that found it whole."""
        for folder, label in ((self.copy, "(the run's copy) "), (self.original, "")):
            marks = stats(folder, self.leave_out)
            if marks and self._seen.get(folder) == marks:
                continue
            files = _files(folder, self.leave_out)
            if files and digest(files) == self.expected:
                self._seen[folder] = marks
                continue
            return [label + f for f in differences(self.files, files)] or [
                f"{label}(all of {folder})"
            ]
        return []


def _files(folder: Path, leave_out: tuple[Path, ...] = ()) -> dict[str, str]:
    """files_of(folder), or {} when it is gone or cannot be read."""
    try:
        return files_of(folder, leave_out) if folder.is_dir() else {}
    except OSError:
        return {}


def stats(folder: Path, leave_out: tuple[Path, ...] = ()) -> tuple:
    """Every file's path, size, mtime, ctime and inode: what any write moves."""
    out = []
    for parent, names in _walk(folder, leave_out):
        for name in names:
            if not name.endswith(_SKIPPED_SUFFIXES):
                try:
                    st = os.stat(os.path.join(parent, name))
                except OSError:
                    return ()
                out.append((parent, name, st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_ino))
    return tuple(out)


class Guarded:  # a runners.base.Runner
    """A runner that refuses to evaluate once the sealed target changed; `on_change(files)`
    hears of each new change once (it records target_changed)."""

    def __init__(self, runner, seal: Seal, on_change):
        self.runner, self.seal, self.on_change = runner, seal, on_change
        self._reported: set[tuple[str, ...]] = set()
        self._lock = threading.Lock()  # turns on several threads check at once

    @property
    def name(self) -> str:
        return self.runner.name

    def unavailable(self, target=None) -> str | None:
        return self.runner.unavailable(target)

    def program(self, target, source) -> str | None:
        return self.runner.program(target, source)

    def evaluate(self, target, source, **kwargs):
        with self._lock:
            files = self.seal.changed()
            new = files and tuple(files) not in self._reported
            self._reported.add(tuple(files))
        if files:
            if new:
                self.on_change(files)
            raise TargetChangedError(files, self.seal.original)
        return self.runner.evaluate(target, source, **kwargs)

    def close(self) -> None:
        if hasattr(self.runner, "close"):
            self.runner.close()
