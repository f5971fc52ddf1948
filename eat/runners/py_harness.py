"""The in-process half of the Python runner: `python -m eat.runners.py_harness` in a child.

Same protocol as harness.py (JSON job on stdin, one nonce-tagged result line on a private copy
of stdout). Inputs and expected outputs are the target's input sets (inputs.py), made once per
target by `python -m eat.runners.py_harness prepare`, a child that calls the reference's input
maker and the reference and never sees a candidate; the harness reads them from their files and
moves each set to the device once. Timed calls get sets of their own, none seen before;
harness.verify and harness.time_all judge and time, a Case standing for a Workload and the
backend (py_backends.py: torch on a CPU or GPU, MLX) for the timer.
"""

from __future__ import annotations

import gc
import os
import sys
import time
from functools import partial
from pathlib import Path

import numpy as np

from eat.runners import inputs
from eat.runners.harness import Outcome, Snapshots, serve, time_all, verify
from eat.runners.inputs import load_py, workload_sets
from eat.runners.job import MakeSets, PythonJob
from eat.runners.py_backends import arrays_in, backend
from eat.runners.verify import compare


def _map(value, fn):
    if isinstance(value, tuple):
        return tuple(_map(v, fn) for v in value)
    if isinstance(value, list):
        return [_map(v, fn) for v in value]
    if isinstance(value, dict):
        return {k: _map(v, fn) for k, v in value.items()}
    return fn(value)


def _pack(value, is_array, arrays: list):
    """A JSON form of a nest of arrays and plain values; arrays are appended to `arrays` and
    stand in it as {"a": their index}. Tuples and dicts are tagged (JSON has lists only)."""
    if is_array(value):
        arrays.append(value)
        return {"a": len(arrays) - 1}
    if isinstance(value, tuple):
        return {"t": [_pack(v, is_array, arrays) for v in value]}
    if isinstance(value, list):
        return [_pack(v, is_array, arrays) for v in value]
    if isinstance(value, dict):
        return {"d": [[k, _pack(v, is_array, arrays)] for k, v in value.items()]}
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    raise TypeError(
        f"inputs() gave a {type(value).__name__}: an input set holds arrays, "
        "numbers, strings and None, in tuples, lists and dicts"
    )


def _unpack(packed, arrays: list):
    if isinstance(packed, list):
        return [_unpack(v, arrays) for v in packed]
    if isinstance(packed, dict):
        if "a" in packed:
            return arrays[packed["a"]]
        if "t" in packed:
            return tuple(_unpack(v, arrays) for v in packed["t"])
        return {k: _unpack(v, arrays) for k, v in packed["d"]}
    return packed


def named(mod, name: str | None):
    """The reference module's function `name`, one the target declares (a Python target names
    its inputs maker, a module target its constructor arguments' too: load_target checks)."""
    if name is None:
        raise ValueError("the target names no such function of its reference")
    return getattr(mod, name)


def _reference(job: MakeSets | PythonJob, params: dict, be, ref_mod):
    """The reference's callable for this workload (a module entry built as candidates are)."""
    ref = job["reference"]
    ref_fn = getattr(ref_mod, ref["function"])
    if job["kind"] != "module":
        return ref_fn
    return be.build(ref_fn, named(ref_mod, ref.get("init_inputs"))(**params))


def make_set(be, make, ref_fn, params: dict, seed: int) -> dict:
    """One seed's arguments and what the reference makes of them, as inputs.prepare keeps a
    set: the array arguments, the expected arrays by label, the rest in "meta"."""
    be.seed(seed)
    args = _map(list(make(seed, **params)), be.to_device)
    leaves = [a for _, a in arrays_in(args, be.is_array)]
    work = _map(args, lambda x: be.clone(x) if be.is_array(x) else x)
    out = ref_fn(*work)
    be.sync()
    after = arrays_in(work, be.is_array, "argument")
    # Arguments the reference wrote into are outputs too (destination-passing style).
    dest = [
        i
        for i, ((_, a), b) in enumerate(zip(after, leaves))
        if not np.array_equal(be.numpy(a), be.numpy(b), equal_nan=True)
    ]
    expected = {lbl: be.numpy(a) for lbl, a in arrays_in(out, be.is_array)}
    expected |= {after[i][0]: be.numpy(after[i][1]) for i in dest}
    host = [be.to_host(a) for a in leaves]
    packed = _pack(args, be.is_array, [])
    return {
        "inputs": {str(i): a for i, (a, _) in enumerate(host)},
        "expected": expected,
        "meta": {"args": packed, "dest": dest, "dtypes": [d for _, d in host]},
    }


def prepare(job: MakeSets) -> dict:
    """The sets of every workload (inputs.prepare), made with the reference on the device."""
    be = backend(job)
    ref_mod = load_py(job["reference"]["file"], "reference")
    make = named(ref_mod, job["reference"]["inputs"])
    refs = [_reference(job, params, be, ref_mod) for params in job["workloads"]]
    return inputs.prepare(
        Path(job["dir"]),
        job["config"],
        len(job["workloads"]),
        lambda wi, seed: make_set(be, make, refs[wi], job["workloads"][wi], seed),
        job.get("room"),
    )


class Case(Snapshots):
    """One workload: its argument sets (one per seed), what the reference made of each, and one
    set of argument objects every call goes through (so results cannot be keyed on them).

    It is a harness.Workload to harness.verify and harness.time_all: the "function" they pass
    is a module (the candidate's or the baseline's), whose entry Case.bind finds or builds.
    """

    def __init__(self, job: PythonJob, index: int, be, ref_mod):
        params = job["workloads"][index]
        self.be, self.params, self.job = be, params, job
        self.out = None  # what the last call returned
        self._bound: dict[int, object] = {}
        self.label = ", ".join(f"{k}={v}" for k, v in params.items()) or "default workload"
        self.init_args = (
            named(ref_mod, job["reference"].get("init_inputs"))(**params)
            if job["kind"] == "module"
            else None
        )
        # Sets the manifest says to make here: by the reference, on this device, before any
        # candidate code loads (Case is built in the harness's setup).
        make = (
            partial(
                make_set,
                be,
                named(ref_mod, job["reference"]["inputs"]),
                _reference(job, params, be, ref_mod),
                params,
            )
            if "generate" in job["sets"]["workloads"][index]
            else None
        )
        self.sets = workload_sets(job, index, make, convert=self._on_device)
        first = self.sets[0]
        self.args = _map(first["args"], lambda x: be.clone(x) if be.is_array(x) else x)
        self.leaves = [a for _, a in arrays_in(self.args, be.is_array, "argument")]
        self.dest = first["dest"]

    def _on_device(self, s: dict) -> dict:
        """A set as read from its file made ready for calls: its arguments on the device, the
        host values the inputs must keep, the expected outputs by label."""
        be, meta = self.be, s["meta"]
        host = [s["inputs"][str(i)] for i in range(len(meta["dtypes"]))]
        leaves = [be.from_host(a, d) for a, d in zip(host, meta["dtypes"])]
        # An input kept as raw bits (bfloat16) is compared as be.numpy() shows it.
        saved = [be.numpy(x) if d else a for a, d, x in zip(host, meta["dtypes"], leaves)]
        expected = list(s["expected"].items())
        return {
            "args": _unpack(meta["args"], leaves),
            "inputs": saved,
            "dest": meta["dest"],
            "expected": expected,
            # Checked where the outputs are, the host only explaining a failure.
            "expected_here": [
                (lbl, be.from_host(w, None)) for lbl, w in expected if w.dtype.kind == "f"
            ]
            if be.close
            else None,
        }

    def load(self, i: int) -> None:
        """Set up a call on argument set `i`: its values copied in, destinations poisoned."""
        be = self.be
        src = [a for _, a in arrays_in(self.sets[i]["args"], be.is_array)]
        # The seed's structure and plain values, around the same array objects as every call.
        mine = iter(self.leaves)
        self.args = _map(self.sets[i]["args"], lambda x: next(mine) if be.is_array(x) else x)
        for k, (dst, s) in enumerate(zip(self.leaves, src)):
            if k in self.dest:
                be.poison(dst)
            else:
                be.copy_into(dst, s)

    def labels(self) -> list[str]:
        """Where each array argument sits in the call, e.g. argument[0][1]."""
        return [lbl for lbl, _ in arrays_in(self.args, self.be.is_array, "argument")]

    def bind(self, mod):
        """The module's entry for this workload: its function, or its class built like the
        reference's (`kind = "module"`), once per module."""
        if id(mod) not in self._bound:
            entry = getattr(mod, self.job["entry"])
            self._bound[id(mod)] = (
                self.be.build(entry, self.init_args) if self.job["kind"] == "module" else entry
            )
        return self._bound[id(mod)]

    def run(self, mod) -> None:
        """Call the module's entry on the loaded set; its outputs are ready when this returns."""
        self.out = self.bind(mod)(*self.args)
        self.be.materialize(self.out)

    def call(self, mod) -> float:
        """run() and wait for the device; seconds until then."""
        t0 = time.perf_counter()
        self.run(mod)
        self.be.sync()
        return time.perf_counter() - t0

    def given(self) -> list[tuple[str, object]]:
        """What the last call gave, where it is: its returned arrays, then the destination
        arguments."""
        labels = self.labels()
        return arrays_in(self.out, self.be.is_array) + [
            (labels[k], self.leaves[k]) for k in self.dest
        ]

    def outputs(self) -> list[tuple[str, np.ndarray]]:
        """given(), on the host."""
        return [(lbl, self.be.numpy(a)) for lbl, a in self.given()]

    def read_outputs(self) -> dict[str, np.ndarray]:
        self.be.sync()  # waits for anything launched since the call
        return dict(self.outputs())

    def output_label(self, key: str) -> str:
        return key  # already says where it sits: output[0], argument[1]

    def check_inputs(self, i: int, when: str) -> None:
        """Raise an Outcome unless every non-destination argument still holds set `i`."""
        be, s = self.be, self.sets[i]
        # The set's own arrays on the device: copied into the call's arguments, never passed.
        kept = [a for _, a in arrays_in(s["args"], be.is_array)]
        for k, (a, saved) in enumerate(zip(self.leaves, s["inputs"])):
            if k in self.dest or (be.same and be.same(a, kept[k])):
                continue
            if not np.array_equal(be.numpy(a), saved, equal_nan=True):
                raise Outcome(
                    "rejected",
                    f"the candidate modified its input {self.labels()[k]} ({when}, {self.label})",
                    workload=self.params,
                )

    def check_outputs(self, i: int, tol: dict, when: str) -> None:
        """Raise an Outcome unless the last call's outputs match set `i`'s."""
        if self._close_here(i, tol):
            return
        got = self.outputs()
        want = self.sets[i]["expected"]
        if [lbl for lbl, _ in got] != [lbl for lbl, _ in want]:
            names = lambda arrays: ", ".join(lbl for lbl, _ in arrays) or "nothing"  # noqa: E731
            raise Outcome(
                "incorrect",
                f"gave {names(got)}; the reference gives {names(want)} ({when}, {self.label})",
                workload=self.params,
            )
        for (lbl, g), (_, w) in zip(got, want):
            if g.shape != w.shape or g.dtype != w.dtype:
                raise Outcome(
                    "incorrect",
                    f"{lbl} is {g.dtype}{list(g.shape)}, want "
                    f"{w.dtype}{list(w.shape)} ({when}, {self.label})",
                    workload=self.params,
                )
            bad = compare(g, w, tol["rtol"], tol["atol"])
            if bad:
                raise Outcome(
                    "incorrect",
                    f"{lbl} wrong ({when}, {self.label}): {bad.summary}",
                    workload=self.params,
                    output=lbl,
                    **bad.as_dict(),
                )

    def _close_here(self, i: int, tol: dict) -> bool:
        """The common case decided on the device, nothing copied: every output given, where
        and as the reference gives it, within tolerance. False: check_outputs decides."""
        want = self.sets[i]["expected_here"]
        if want is None or len(want) != len(self.sets[i]["expected"]):
            return False
        got = self.given()
        return [lbl for lbl, _ in got] == [lbl for lbl, _ in want] and all(
            self.be.close(g, w, tol["rtol"], tol["atol"]) for (_, g), (_, w) in zip(got, want)
        )


def _load_candidate(path: str, job: PythonJob):
    try:
        mod = load_py(path, "candidate")
    except Exception as e:
        raise Outcome(
            "compile_error", f"importing the candidate failed: {type(e).__name__}: {e}"[:300]
        ) from None
    if not hasattr(mod, job["entry"]):
        raise Outcome("compile_error", f"the candidate does not define {job['entry']}")
    return mod


def _setup(job: PythonJob) -> tuple:
    if job["mode"] == "time" and (cpu := job.get("cpu")) is not None:
        # The timing core, as the native harness takes it: only timing holds it (its lock), so
        # a verification beside it runs elsewhere.
        os.sched_setaffinity(0, {cpu})
    be = backend(job)
    # The inputs come from the cached sets, but the reference is still loaded before the
    # candidate: it may put modules a candidate imports by name in sys.modules (GPU MODE's
    # `from task import input_t`), and a module entry's init arguments come from it.
    ref_mod = load_py(job["reference"]["file"], "reference")
    cases = [Case(job, i, be, ref_mod) for i in range(len(job["workloads"]))]
    base_mod = load_py(job["baseline"], "baseline") if job["mode"] == "time" else None
    return cases, base_mod


def _check(job: PythonJob, state: tuple) -> dict:
    cases, base_mod = state
    sys.path.insert(0, os.path.dirname(job["candidate"]))
    mod = _load_candidate(job["candidate"], job)
    gc.disable()
    if job["mode"] == "verify":
        return verify(job, cases, mod)
    impls = {
        "candidate": lambda case: partial(case.run, mod),
        "baseline": lambda case: partial(case.run, base_mod),
    }
    be = cases[0].be
    return time_all(job, cases, impls, be, watch_others=be.own_thread)


def main() -> None:
    if sys.argv[1:] == ["prepare"]:
        inputs.answer(prepare)
    else:
        serve(_setup, _check)


if __name__ == "__main__":
    main()
