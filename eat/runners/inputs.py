"""Input sets and expected outputs of a target: made once per target, kept on disk.

A set is one seed's inputs for one workload and what the reference makes of them. Verification
uses seeds 0..seeds-1. Timing uses a pool of other seeds, one per timed round, so no timed call
of a candidate sees inputs it has seen before in its process: a memo keyed on input content
gains nothing. The pool holds warmup + max_repeats sets where they fit in `pool_mb`; where they
do not (large GPU workloads), rounds cycle through fewer sets.

Sets are made by a child with no candidate code in it (native targets: `python -m
eat.runners.inputs`; Python ones: `python -m eat.runners.py_harness prepare`, which calls the
reference in its framework) and kept as files under cache_dir()/inputs/<target>-<key>/, the
key hashing everything that decides them (the reference's source, the arguments, shapes and
workloads, numpy's and the framework's versions), so a changed target gets new sets. The child
reports each file's fingerprint (inode, size, ctime: any write, rename or chmod changes the
ctime, which no system call sets back); harnesses refuse a file that no longer matches it, and
the child makes a file again when its fingerprint is none its folder's manifests record for it,
so a set changed on disk after that is not trusted.

A workload whose sets would take more than the job's `room` (a share of the cache's cap: a
KernelBench ReLU's set is 12.8 GB) gets no files: the manifest names its seeds instead, and the
harness makes those sets itself from them, with the reference, in its setup before any
candidate code loads (`workload_sets`, `MadeSets`); on a GPU the reference then runs on the
device that uses them. Only numpy and the standard library are imported here (the native
child's side).
"""

from __future__ import annotations

import importlib.util
import io
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

from eat.runners.cabi import C_TYPES
from eat.runners.job import Job, MakeSets, NativeJob

PROBE_TAG = "EAT-INPUTS "
TIMED_SEED0 = 1_000_000  # timed seeds start here: none is a verification seed
VERSION = "5"  # bump when what a set file or manifest holds changes (5: generated workloads)


def pool_size(set_bytes: int, warmup: int, rounds: int, pool_mb: int) -> int:
    """Timed sets per workload: one per warmup call and round, as many as fit in pool_mb."""
    fit = (pool_mb << 20) // max(1, set_bytes)
    return max(1, min(warmup + rounds, fit))


def set_index(r: int, warmup: int, pool: int) -> int:
    """The timed set of round r (warmup calls take sets 0..warmup-1)."""
    return (warmup + r) % pool


# -- making sets (the child) -----------------------------------------------------------------


def load_py(path: str, name: str):
    """A target's Python file (reference, vendor, a Python candidate) as a fresh module."""
    spec = importlib.util.spec_from_file_location(f"eat_target_{name}", path)
    assert spec is not None and spec.loader is not None  # a .py path has a source loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def make_set(job: MakeSets | NativeJob, workload: dict, ref_mod, seed: int) -> dict:
    """{"inputs": {name: array}, "expected": {name: array}} for one seed of one workload."""
    params, shapes = workload["params"], workload["shapes"]
    rng = np.random.default_rng(seed)
    made = {}
    if name := job["reference"].get("inputs"):
        made = getattr(ref_mod, name)(rng, **params)
    inputs, outputs, scalars = {}, {}, {}
    for a in job["args"]:
        if not a["pointer"]:
            scalars[a["name"]] = params[a["name"]]
            continue
        shape, dtype = tuple(shapes[a["name"]]), np.dtype(C_TYPES[a["ctype"]])
        if not a["const"]:
            outputs[a["name"]] = (shape, dtype)
            continue
        src = made.get(a["name"])
        if src is None:
            src = (rng.random(shape) * 2 - 1) if dtype.kind == "f" else rng.integers(0, 100, shape)
        inputs[a["name"]] = np.ascontiguousarray(np.asarray(src).reshape(shape), dtype=dtype)
    saved = {k: v.copy() for k, v in inputs.items()}
    got = getattr(ref_mod, job["reference"]["function"])(**inputs, **scalars)
    if len(outputs) == 1 and not isinstance(got, (dict, tuple, list)):
        got = {next(iter(outputs)): got}
    elif isinstance(got, (tuple, list)):
        got = dict(zip(outputs, got))
    for k in inputs:
        if not np.array_equal(inputs[k], saved[k]):
            raise RuntimeError(f"the reference modified its input {k}")
    expected = {
        k: np.asarray(got[k], dtype=dt).reshape(shape) for k, (shape, dt) in outputs.items()
    }
    return {"inputs": inputs, "expected": expected}


def fingerprint(path: Path) -> str:
    """What changes whenever the file does: cheaper than a hash of its bytes, and as sure."""
    st = path.stat()
    return f"{st.st_ino}:{st.st_size}:{st.st_ctime_ns}"


def _write_set(path: Path, s: dict) -> None:
    """One file: a JSON line naming the arrays (and the set's `meta`, if any), then each array
    as .npy (quicker to read than .npz)."""
    names = [f"in.{k}" for k in s["inputs"]] + [f"out.{k}" for k in s["expected"]]
    buf = io.BytesIO()
    buf.write(json.dumps({"names": names, "meta": s.get("meta")}).encode() + b"\n")
    for arr in [*s["inputs"].values(), *s["expected"].values()]:
        # order="C", not ascontiguousarray: that makes a 0-d array (a loss) 1-d
        np.lib.format.write_array(buf, np.asarray(arr, order="C"), allow_pickle=False)
    tmp = path.with_name(f".{path.name}.{os.getpid()}")
    tmp.write_bytes(buf.getvalue())
    os.replace(tmp, path)  # atomic: racing makers agree


def set_bytes(s: dict) -> int:
    """What a set holds: its inputs and expected outputs."""
    return sum(np.asarray(a).nbytes for part in ("inputs", "expected") for a in s[part].values())


def prepare(folder: Path, cfg: dict, workloads: int, make, room: int | None = None) -> dict:
    """Make the sets of every workload with make(workload index, seed) that are missing or
    changed since a manifest recorded them; {"workloads": [{"verify": [[file, fingerprint]...],
    "time": [...], "bytes", "make_s"}]}. A workload whose sets would take over `room` bytes
    (None: no cap) is {"generate": {"verify": [seed...], "time": [...]}, "bytes", "make_s"}
    instead: the harness makes them (workload_sets). Runs where no candidate ever ran."""
    folder.mkdir(parents=True, exist_ok=True)
    recorded: dict[str, set[str]] = {}
    for manifest in folder.glob("manifest-*.json"):
        try:
            for name, mark in _entries(json.loads(manifest.read_text())):
                recorded.setdefault(name, set()).add(mark)
        except (OSError, ValueError, KeyError, TypeError):
            continue  # unreadable: it vouches for nothing
    out = []
    for wi in range(workloads):
        # One set made first says what a set costs, in bytes and seconds (a Python target's
        # shapes are known only once its reference has made them), before any file is written.
        t0 = time.perf_counter()
        first = make(wi, 0)
        made_s, size = time.perf_counter() - t0, set_bytes(first)
        pool = pool_size(size, cfg["warmup"], cfg["max_repeats"], cfg["pool_mb"])
        seeds = {
            "verify": list(range(cfg["seeds"])),
            "time": [TIMED_SEED0 + j for j in range(pool)],
        }
        cost: dict[str, Any] = {"bytes": size, "make_s": round(made_s, 4)}
        if room is not None and size * (cfg["seeds"] + pool) > room:
            out.append({"generate": seeds, **cost})
            continue

        def kept(seed: int, wi: int = wi, first: dict = first) -> list[str]:
            path = folder / f"w{wi}-s{seed}.set"
            mark = fingerprint(path) if path.exists() else None
            # Made again once changed since a manifest recorded it (none yet: a racing maker's).
            if mark is None or mark not in recorded.get(path.name, {mark}):
                _write_set(path, first if seed == 0 else make(wi, seed))
                mark = fingerprint(path)
            return [path.name, mark]

        out.append({mode: [kept(seed) for seed in s] for mode, s in seeds.items()} | cost)
        first = None  # a large set is not held while the next workload's are made
    return {"workloads": out}


def prepare_job(job: MakeSets) -> dict:
    """prepare() for a native target: the arrays of its C signature."""
    ref_mod = load_py(job["reference"]["file"], "reference")
    return prepare(
        Path(job["dir"]),
        job["config"],
        len(job["workloads"]),
        lambda wi, seed: make_set(job, job["workloads"][wi], ref_mod, seed),
        job.get("room"),
    )


def _manifest(folder: Path, sizes: tuple) -> Path:
    return folder / f"manifest-{'-'.join(map(str, sizes))}.json"


def write_manifest(folder: Path, sizes: tuple, made: dict) -> None:
    """Keep prepare_job's answer for these pool sizes, so a later process need not ask again."""
    path = _manifest(folder, sizes)
    tmp = path.with_name(f".{path.name}.{os.getpid()}")
    tmp.write_text(json.dumps(made))
    os.replace(tmp, path)


def read_manifest(folder: Path, sizes: tuple) -> dict | None:
    """A kept answer of prepare_job, if every file it names still has its fingerprint (else
    None: the child looks again, and makes what is missing or changed)."""
    try:
        made = json.loads(_manifest(folder, sizes).read_text())
        if any(fingerprint(folder / name) != want for name, want in _entries(made)):
            return None
    except (OSError, ValueError, KeyError, TypeError):
        return None
    return made


def _entries(made: dict):
    """(file, fingerprint) of every set a manifest names."""
    for workload in made["workloads"]:
        for mode in ("verify", "time"):
            yield from workload.get(mode, [])  # (name, mark); a generated workload has none


# -- reading sets (the harnesses) ------------------------------------------------------------


class SetChanged(Exception):
    """A set on disk is not what was made: the harness cannot judge anything with it."""


class SetFiles:
    """The sets of one workload and mode, loaded from disk when first asked for.

    Indexable like a list of sets; keeps the few most recently used, so a long pool of large
    sets does not have to fit in memory at once. `convert`, if given, turns a set as read
    (its "inputs", "expected" and "meta") into what is kept, e.g. arrays on a device.
    """

    KEEP = 4  # sets kept loaded

    def __init__(self, folder: str, entries: list[list[str]], keep: int = KEEP, convert=None):
        self.folder, self.entries, self.keep = Path(folder), entries, keep
        self.convert = convert or (lambda s: s)
        self._loaded: dict[int, dict] = {}

    def __len__(self) -> int:
        return len(self.entries)

    def __getitem__(self, i: int) -> dict:
        if i not in self._loaded:
            name, want = self.entries[i]
            path = self.folder / name
            s: dict[str, Any] = {"inputs": {}, "expected": {}}
            # Read straight into the arrays (numpy reads a real file without a staging copy);
            # the fingerprint, taken after, says whether what was read is what was made.
            with open(path, "rb") as f:
                head = json.loads(f.readline())
                s["meta"] = head["meta"]
                for key in head["names"]:
                    kind, name_ = key.split(".", 1)
                    s["inputs" if kind == "in" else "expected"][name_] = np.lib.format.read_array(
                        f, allow_pickle=False
                    )
            if fingerprint(path) != want:
                raise SetChanged(f"input set {path} changed on disk after it was made")
            while len(self._loaded) >= self.keep:
                self._loaded.pop(next(iter(self._loaded)))
            self._loaded[i] = self.convert(s)
        return self._loaded[i]


class MadeSets:
    """The sets of one workload and mode that the harness makes itself (the manifest's
    "generate"), all made when constructed: in the harness's setup, before a candidate loads,
    so no candidate code can touch the reference that makes them. Indexable as SetFiles is."""

    def __init__(self, seeds: list[int], make, convert=None):
        convert = convert or (lambda s: s)
        self.sets = [convert(make(seed)) for seed in seeds]

    def __len__(self) -> int:
        return len(self.sets)

    def __getitem__(self, i: int) -> dict:
        return self.sets[i]


def generates(job: Job) -> bool:
    """Whether the harness makes some of the job's sets itself (and so needs the reference)."""
    return any("generate" in w for w in job["sets"]["workloads"])


def workload_sets(job: Job, index: int, make, convert=None):
    """Workload `index`'s sets for the job's mode: read from their files (SetFiles), or, where
    the manifest says to generate them, made now with make(seed) (MadeSets)."""
    entry = job["sets"]["workloads"][index]
    if "generate" in entry:
        return MadeSets(entry["generate"][job["mode"]], make, convert)
    return SetFiles(job["sets"]["dir"], entry[job["mode"]], convert=convert)


def answer(prepare_fn) -> None:
    """The child's side: the job on stdin, prepare_fn's answer (or why the reference failed)
    on one tagged line."""
    job = json.loads(sys.stdin.read())
    try:
        print(PROBE_TAG + json.dumps(prepare_fn(job)), flush=True)
    except Exception as e:  # the target's reference failed: say so on one line
        print(PROBE_TAG + json.dumps({"error": f"{type(e).__name__}: {e}"[:300]}), flush=True)


def main() -> None:
    answer(prepare_job)


if __name__ == "__main__":
    main()
