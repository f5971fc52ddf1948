"""A target's input sets as the runners (the parent's side) find them: kept by this process,
else left by an earlier one beside the sets (their manifest), else made by a child with no
candidate in it (inputs.py's native child, or the Python harness's `prepare`)."""

from __future__ import annotations

import hashlib
import importlib.metadata
import json
import threading
from pathlib import Path

from eat.cache import inputs_dir
from eat.runners import inputs, sandbox
from eat.runners.base import HarnessError, eat_pythonpath

# Input sets' manifests, per folder and pool sizes: made (and fingerprinted) once per process.
_SETS: dict[tuple[Path, tuple], dict] = {}
_SETS_LOCK = threading.Lock()


def input_sets(name: str, key: list, job: dict, command: list[str],
               env: dict[str, str] | None = None, limits: sandbox.Limits | None = None) -> dict:
    """The manifest of target `name`'s input sets ({"dir", "workloads"}): kept in this process,
    else by an earlier one beside the sets, else made by `command`, a child with no candidate
    in it that reads `job` (plus "dir") on stdin and answers as inputs.answer does.

    `key` is everything besides the file format and numpy that decides the sets' contents.
    """
    digest = hashlib.sha256(json.dumps([inputs.VERSION, importlib.metadata.version("numpy"),
                                        *key]).encode()).hexdigest()[:16]
    folder = inputs_dir() / f"{name}-{digest}"
    cfg = job["config"]
    sizes = tuple(cfg[k] for k in ("seeds", "warmup", "max_repeats", "pool_mb"))
    with _SETS_LOCK:  # turns on several threads: one child makes them, the others wait
        if (folder, sizes) not in _SETS and (kept := inputs.read_manifest(folder, sizes)):
            _SETS[(folder, sizes)] = kept | {"dir": str(folder)}  # made by an earlier process
        if (folder, sizes) not in _SETS:
            limits = limits or sandbox.Limits(address_space_bytes=cfg["memory_mb"] << 20)
            limits.wall_s, limits.cpu_s = max(600.0, cfg["timeout_s"]), max(600, cfg["cpu_s"])
            limits.max_output_chars = 1 << 24
            env = sandbox.clean_env(folder.parent, {"PYTHONPATH": eat_pythonpath()} | (env or {}))
            run = sandbox.run(command, cwd=folder.parent, env=env, limits=limits,
                              stdin=json.dumps(job | {"dir": str(folder)}))
            made = next((json.loads(line[len(inputs.PROBE_TAG):]) for line in
                         run.stdout.splitlines() if line.startswith(inputs.PROBE_TAG)), None)
            if made is None or "error" in made:
                why = made["error"] if made else (run.stderr.strip().splitlines() or ["died"])[-1]
                raise HarnessError(f"target {name}: making its inputs with the reference "
                                   f"failed: {why[:300]}")
            inputs.write_manifest(folder, sizes, made)
            _SETS[(folder, sizes)] = made | {"dir": str(folder)}
        return _SETS[(folder, sizes)]
