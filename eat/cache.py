"""Every file eat keeps outside a workspace: builds (each checked against the sha256 eat
recorded beside it), machine measurements, device locks; and the cap on what builds and input
sets may take (least recently used first out)."""

from __future__ import annotations

import fcntl
import hashlib
import math
import os
import shutil
import threading
import time
from contextlib import contextmanager
from pathlib import Path

from eat.errors import BadInput

IDLE_S = 3600.0  # an entry used this recently may be read by a running evaluation
PRUNE_EVERY_S = 600.0  # maybe_prune's pace in one process
TRASH = ".trash-"  # a folder being removed: renamed first, so readers see all of it or none
SIDECAR = ".sha256"  # beside each build: the sha256 of the file eat wrote there


def cache_dir() -> Path:
    """$EAT_CACHE_DIR, else $XDG_CACHE_HOME/eat, else ~/.cache/eat; created on first use."""
    root = (
        os.environ.get("EAT_CACHE_DIR")
        or Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "eat"
    )
    path = Path(root)
    path.mkdir(parents=True, exist_ok=True)
    return path


def builds_dir() -> Path:
    """Compiled candidates and baselines, keyed by a hash of source, flags and compiler."""
    path = cache_dir() / "builds"
    path.mkdir(exist_ok=True)
    return path


def inputs_dir() -> Path:
    """Targets' input sets and expected outputs (runners/inputs.py), keyed by target content."""
    path = cache_dir() / "inputs"
    path.mkdir(exist_ok=True)
    return path


def anchors_dir() -> Path:
    """Baseline and vendor latencies measured together, per target and device (native.Anchor)."""
    path = cache_dir() / "anchors"
    path.mkdir(exist_ok=True)
    return path


def doctor_file() -> Path:
    """What `eat doctor` measured on this machine."""
    return cache_dir() / "doctor.json"


@contextmanager
def device_lock(device: str):
    """Exclusive use of a device for timing, across every eat process on this machine."""
    locks = cache_dir() / "locks"
    locks.mkdir(exist_ok=True)
    with open(locks / f"{device}.lock", "w") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


def keep_build(built: Path, kept: Path) -> None:
    """Copy the library at `built` to `kept` in the builds folder, its sha256 beside it (each
    file replaced atomically, the sha256 first: a reader never sees a new build without it)."""
    tag = f".{os.getpid()}-{threading.get_ident()}.part"
    sidecar = _sidecar(kept)
    sum_part, lib_part = (p.with_name(p.name + tag) for p in (sidecar, kept))
    sum_part.write_text(_sha256(built))
    os.replace(sum_part, sidecar)
    shutil.copyfile(built, lib_part)
    os.replace(lib_part, kept)


def intact_build(kept: Path, copy: Path | None = None) -> bool:
    """Whether the build at `kept` (or `copy`, a copy of it) is the file keep_build wrote
    there: False when it changed since, or has no sha256 beside it (not eat's)."""
    try:
        return _sha256(copy or kept) == _sidecar(kept).read_text()
    except FileNotFoundError:
        return False


def _sidecar(build: Path) -> Path:
    return build.with_name(build.name + SIDECAR)


def _sha256(path: Path) -> str:
    with open(path, "rb") as f:
        return hashlib.file_digest(f, "sha256").hexdigest()


def max_bytes() -> int:
    """Bytes builds and input sets may take: $EAT_CACHE_MAX_GB GB (default 20); else BadInput."""
    text = os.environ.get("EAT_CACHE_MAX_GB") or "20"
    try:
        gb = float(text)
    except ValueError:
        gb = math.nan
    if not (math.isfinite(gb) and gb > 0):
        raise BadInput(
            f"EAT_CACHE_MAX_GB={text!r}: give the cache's cap in gigabytes, a "
            "positive number (default 20)"
        )
    return int(gb * 1e9)


def used(path: Path) -> None:
    """Mark a kept build or input-set folder as just used, so prune keeps it longest."""
    try:
        os.utime(path)
    except OSError:
        pass  # gone or not ours: the reader finds out when it opens it


def prune(limit_bytes: int | None = None, idle_s: float = IDLE_S) -> list[Path]:
    """Remove the least recently used builds (each file, with its sha256) and input sets (each
    folder) until they hold at most `limit_bytes` (default max_bytes()), and leftovers (`.part`
    files, trash, a sha256 whose build is gone); never one used in the last `idle_s` seconds.
    Returns what it removed."""
    limit = max_bytes() if limit_bytes is None else limit_bytes
    now = time.time()
    entries, leftovers = listing()
    removed = [p for mtime, p in leftovers if now - mtime >= idle_s and _remove(p, mtime)]
    total = sum(size for _, size, _ in entries)
    for mtime, size, path in sorted(entries):
        if total <= limit or now - mtime < idle_s:
            break  # oldest first: every later entry is as fresh
        if _remove(path, mtime):
            total -= size
            removed.append(path)
    return removed


_pruned_at: float | None = None
_prune_lock = threading.Lock()


def forget_prunes() -> None:
    """Forget when this process last pruned: its next maybe_prune prunes, as a new process's
    would."""
    global _pruned_at
    with _prune_lock:
        _pruned_at = None


def maybe_prune(force: bool = False) -> None:
    """prune(), at most once per PRUNE_EVERY_S in this process unless `force`; a disk error
    (or a bad cap) is left for the next time, never raised into the evaluation that called it."""
    global _pruned_at
    with _prune_lock:
        now = time.monotonic()
        if not force and _pruned_at is not None and now - _pruned_at < PRUNE_EVERY_S:
            return
        _pruned_at = now
        try:
            prune()
        except (OSError, BadInput):  # BadInput: the cap, checked when the run or eval began
            pass


def listing() -> tuple[list[tuple[float, int, Path]], list[tuple[float, Path]]]:
    """(mtime, bytes, path) of each entry of builds/ and inputs/; (mtime, path) of leftovers.
    A build's sha256 is no entry of its own: it goes with its build (_remove)."""
    entries, leftovers = [], []
    for folder in (builds_dir(), inputs_dir()):
        for path in folder.iterdir():
            try:
                st = path.stat()
            except OSError:
                continue  # removed meanwhile
            build = path.with_name(path.name.removesuffix(SIDECAR))
            if build != path and build.exists():
                continue  # a build's sha256
            if path.name.endswith((".part", SIDECAR)) or path.name.startswith(TRASH):
                leftovers.append((st.st_mtime, path))
            elif not path.name.startswith("."):  # a child's HOME litter is none of ours
                size = _folder_size(path) if path.is_dir() else st.st_size
                entries.append((st.st_mtime, size, path))
    return entries, leftovers


def _folder_size(folder: Path) -> int:
    """The sizes of the files in `folder`, at any depth."""
    total = 0
    for parent, _, names in os.walk(folder):
        for name in names:
            try:
                total += os.stat(os.path.join(parent, name)).st_size
            except OSError:
                pass  # removed meanwhile
    return total


def _remove(path: Path, mtime: float) -> bool:
    """Remove `path` (a build with its sha256) unless it was used since its mtime was read; a
    folder is renamed to a trash name first, so a reader sees it whole or not at all."""
    try:
        if path.stat().st_mtime != mtime:
            return False  # used meanwhile
        if not path.is_dir():
            path.unlink()
            _sidecar(path).unlink(missing_ok=True)
            return True
        trash = (
            path
            if path.name.startswith(TRASH)
            else path.with_name(f"{TRASH}{path.name}.{os.getpid()}")
        )
        os.rename(path, trash)
    except OSError:
        return False
    shutil.rmtree(trash, ignore_errors=True)  # what is left is a leftover for a later prune
    return True
