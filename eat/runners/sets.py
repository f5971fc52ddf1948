"""A target's input sets as the runners (the parent's side) find them: kept by this process,
else left by an earlier one beside the sets (their manifest), else made by a child with no
candidate in it (inputs.py's native child, or the Python harness's `prepare`); made again
when a harness finds one changed on disk. A workload whose sets exceed room() has none on
disk: its harness makes them (inputs.workload_sets), and `grown` gives that harness the memory
and time they take."""

from __future__ import annotations

import hashlib
import importlib.metadata
import json
import math
import os
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from eat.cache import PRUNE_EVERY_S, inputs_dir, max_bytes, maybe_prune, used
from eat.runners import inputs, sandbox
from eat.runners.base import Evaluation, HarnessError, SetsChanged, eat_pythonpath
from eat.runners.inputs import SetFiles
from eat.runners.job import MakeSets, Reference, Sets
from eat.seal import digest, files_of, stats
from eat.target import EvalConfig

# Input sets' manifests, per folder and pool sizes: made (and fingerprinted) once per process.
_SETS: dict[tuple[Path, tuple], Sets] = {}
_SETS_LOCK = threading.Lock()
# When this process last marked each of them used (time.monotonic()).
_USED: dict[tuple[Path, tuple], float] = {}
ROOM_SHARE = 4  # one workload's sets may take up to this share of the cache's cap (room())


def input_sets(
    name: str,
    key: list,
    job: MakeSets,
    command: list[str],
    env: dict[str, str] | None = None,
    limits: sandbox.Limits | None = None,
) -> Sets:
    """The manifest of target `name`'s input sets ({"dir", "workloads"}): kept in this process,
    else by an earlier one beside the sets, else made by `command`, a child with no candidate
    in it that reads `job` (plus "dir") on stdin and answers as inputs.answer does.

    `key` is everything besides the file format and numpy that decides the sets' contents.
    """
    digest = hashlib.sha256(
        json.dumps([inputs.VERSION, importlib.metadata.version("numpy"), *key]).encode()
    ).hexdigest()[:16]
    folder = inputs_dir() / f"{name}-{digest}"
    sizes = tuple(job["config"][k] for k in ("seeds", "warmup", "max_repeats", "pool_mb"))
    slot = (folder, sizes)
    with _SETS_LOCK:  # turns on several threads: one child makes them, the others wait
        _mark_used(slot)
        if slot not in _SETS and (kept := inputs.read_manifest(folder, sizes)):
            # made by an earlier process
            _SETS[slot] = {"dir": str(folder), "workloads": kept["workloads"]}
        made = slot not in _SETS
        if made:
            _SETS[slot] = make_sets(name, slot, job, command, env, limits)
        manifest = _SETS[slot]
    if made:
        maybe_prune(force=True)  # new sets are large: keep the cache under its cap now
    return manifest


def room() -> int:
    """The most one workload's sets may take in the cache; larger ones the harness makes."""
    return max_bytes() // ROOM_SHARE


HELD = 3  # besides its sets, a harness holds about this many sets' worth per workload (buffers,
#           the outputs read back, a copy on the device)


def grown(limits: sandbox.Limits, manifest: Sets, cfg: EvalConfig, mode: str) -> sandbox.Limits:
    """A harness's `limits` (for a job of `mode` on these sets) grown with its workloads: memory
    for the sets it holds (every set of a workload it makes, else SetFiles' few) and its
    buffers; wall and CPU seconds for making sets and for calls as slow as the reference's
    (a fixed limit timed the reference of a large problem out)."""
    memory, seconds = 0, 0.0
    calls = cfg.seeds if mode == "verify" else 2 * (cfg.warmup + cfg.max_repeats)
    for w in manifest["workloads"]:
        made = len(w["generate"][mode]) if "generate" in w else 0
        held = made or min(len(w[mode]), SetFiles.KEEP)
        memory += (held + HELD) * w.get("bytes", 0)
        seconds += 2 * w.get("make_s", 0.0) * (made + calls)
    if limits.address_space_bytes is not None:
        limits.address_space_bytes += memory
    if limits.data_bytes is not None:
        limits.data_bytes += memory
    limits.wall_s += seconds
    limits.cpu_s += math.ceil(seconds)
    return limits


def sets_detail(manifest: Sets, cfg: EvalConfig) -> dict:
    """What an evaluation's detail says of its input sets where they are fewer than a run's
    default or made in the harness: per workload, how many distinct sets it verified and timed
    on, and where they came from; {} where every workload had all of them from the cache."""
    rows: list[dict[str, Any]] = [
        {
            "verify": len(w["generate"]["verify"] if "generate" in w else w["verify"]),
            "timed": len(w["generate"]["time"] if "generate" in w else w["time"]),
            "made": "harness" if "generate" in w else "cache",
        }
        for w in manifest["workloads"]
    ]
    if all(r["made"] == "cache" and r["timed"] >= cfg.warmup + cfg.max_repeats for r in rows):
        return {}
    return {"input_sets": rows}


def source_key(reference: Reference, root: Path) -> list:
    """What of a target's files decides its sets, wherever its folder lies (a run judges a
    copy of it): the reference's name and source, and what private/ holds (data the reference
    may read)."""
    path = Path(reference["file"])
    return [reference | {"file": path.name}, path.read_text(), _digest_of(root / "private")]


_DIGESTS: dict[Path, tuple[tuple, str]] = {}  # folder -> (its files' stats, their digest)


def _digest_of(folder: Path) -> str | None:
    """The digest of a folder's contents (None: there is none), read again only when a file's
    stat moved: private data may be large, and this is asked at every evaluation."""
    if not folder.is_dir():
        return None
    marks = stats(folder)
    if _DIGESTS.get(folder, ((),))[0] != marks or not marks:
        _DIGESTS[folder] = (marks, digest(files_of(folder)))
    return _DIGESTS[folder][1]


def forget() -> None:
    """Forget every input set this process knows, as a new process would: the next evaluation
    reads their manifests (or makes them) again."""
    with _SETS_LOCK:
        _SETS.clear()
        _USED.clear()


def again_if_sets_changed(evaluate: Callable[[], Evaluation]) -> Evaluation:
    """evaluate(); where a harness found an input set changed on disk (SetsChanged), once more
    with the sets read anew (a changed file is made again): a second SetsChanged is raised."""
    try:
        return evaluate()
    except SetsChanged:
        forget()  # the manifests this process kept name files no longer there
        return evaluate()


def _mark_used(slot: tuple[Path, tuple]) -> None:
    """Mark the sets' folder used (at most once per PRUNE_EVERY_S) and forget what this
    process keeps of them then, and whenever the folder is gone: another process may have
    pruned them, and made them again."""
    now = time.monotonic()
    if slot in _USED and now - _USED[slot] < PRUNE_EVERY_S and slot[0].is_dir():
        return
    used(slot[0])  # before reading: a prune that listed it sees it fresh, or its files are gone
    _USED[slot] = now
    _SETS.pop(slot, None)


def make_sets(
    name: str,
    slot: tuple[Path, tuple],
    job: MakeSets,
    command: list[str],
    env: dict[str, str] | None,
    limits: sandbox.Limits | None,
) -> Sets:
    """The manifest of the sets `command` makes in the folder of `slot` (also kept there)."""
    (folder, sizes), cfg = slot, job["config"]
    limits = limits or sandbox.Limits(address_space_bytes=cfg["memory_mb"] << 20)
    limits.wall_s, limits.cpu_s = max(600.0, cfg["timeout_s"]), max(600, cfg["cpu_s"])
    limits.max_output_chars = 1 << 24
    # The maker runs no candidate: a set may be as large as the cache may hold, and one set as
    # large as the machine's memory (it makes one before it knows what a set costs).
    limits.file_size_bytes = max(limits.file_size_bytes, max_bytes())
    ram = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    if limits.address_space_bytes is not None:
        limits.address_space_bytes = max(limits.address_space_bytes, ram)
    if limits.data_bytes is not None:
        limits.data_bytes = max(limits.data_bytes, ram)
    env = sandbox.clean_env(folder.parent, {"PYTHONPATH": eat_pythonpath()} | (env or {}))
    run = sandbox.run(
        command,
        cwd=folder.parent,
        env=env,
        limits=limits,
        stdin=json.dumps(job | {"dir": str(folder), "room": room()}),
    )
    made = next(
        (
            json.loads(line[len(inputs.PROBE_TAG) :])
            for line in run.stdout.splitlines()
            if line.startswith(inputs.PROBE_TAG)
        ),
        None,
    )
    if made is None or "error" in made:
        why = made["error"] if made else (run.stderr.strip().splitlines() or ["died"])[-1]
        raise HarnessError(
            f"target {name}: making its inputs with the reference failed: {why[:300]}"
        )
    inputs.write_manifest(folder, sizes, made)
    return {"dir": str(folder), "workloads": made["workloads"]}
