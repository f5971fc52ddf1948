"""Every file eat keeps outside a workspace: builds, machine measurements, device locks."""

from __future__ import annotations

import fcntl
import os
from contextlib import contextmanager
from pathlib import Path


def cache_dir() -> Path:
    """$EAT_CACHE_DIR, else $XDG_CACHE_HOME/eat, else ~/.cache/eat; created on first use."""
    root = os.environ.get("EAT_CACHE_DIR") or Path(
        os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "eat"
    path = Path(root)
    path.mkdir(parents=True, exist_ok=True)
    return path


def builds_dir() -> Path:
    """Compiled baselines, keyed by a hash of source, flags and compiler."""
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
