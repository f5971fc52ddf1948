"""The in-process half of the Python runner: `python -m eat.runners.py_harness` in a child.

Same protocol as harness.py (JSON job on stdin, one nonce-tagged result line on a private copy
of stdout). Inputs and expected outputs are the target's input sets (inputs.py), made once per
target by `python -m eat.runners.py_harness prepare`, a child that calls the reference's input
maker and the reference and never sees a candidate; the harness reads them from their files and
moves each set to the device once. Timed calls get sets of their own, none seen before;
harness.verify and harness.time_all judge and time, a Case standing for a Workload and the
backend for the timer. A backend hides the framework (torch on a CPU or GPU, MLX): moving
arguments to the device and back, copying, poisoning, synchronizing and timing.
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
from eat.runners.inputs import SetFiles, load_py
from eat.runners.verify import compare, poison


class TorchBackend:
    """torch on the CPU (one thread) or on a CUDA/ROCm GPU (CUDA events, L2 flushed)."""

    # The baseline's work runs on the calling thread, so CPU burnt by other threads while it
    # runs is a candidate's leftover.
    own_thread = True

    def __init__(self, device: str):
        import torch
        self.torch = torch
        self.device = torch.device("cuda" if device == "cuda" else "cpu")
        self.gpu = device == "cuda"
        torch.set_grad_enabled(False)
        if self.gpu:
            props = torch.cuda.get_device_properties(self.device)
            l2 = getattr(props, "L2_cache_size", 0) or (64 << 20)
            self.flush_buf = torch.empty(2 * l2, dtype=torch.uint8, device=self.device)
            self._reset_persisting_l2("hip" if torch.version.hip else "cuda")
        else:
            torch.set_num_threads(1)

    @staticmethod
    def _reset_persisting_l2(kind: str) -> None:
        """Lines an earlier process pinned in L2 would favour whoever touches them first."""
        from eat.runners.gpurt import GpuError, Runtime
        try:
            Runtime(kind).reset_persisting_l2()
        except (GpuError, OSError):
            pass  # older runtimes and HIP have no persisting L2

    def is_array(self, x) -> bool:
        return isinstance(x, self.torch.Tensor)

    def to_device(self, x):
        return x.to(self.device) if self.is_array(x) else x

    def to_host(self, x) -> tuple[np.ndarray, str | None]:
        """x as a numpy array for a set file, and the dtype to view it as when that is not
        numpy's (bfloat16, float8: their bits, as integers of their width)."""
        x = x.detach().cpu()
        try:
            return x.numpy(), None
        except TypeError:
            bits = {1: self.torch.int8, 2: self.torch.int16, 4: self.torch.int32}
            return x.view(bits[x.element_size()]).numpy(), str(x.dtype).removeprefix("torch.")

    def from_host(self, a: np.ndarray, dtype: str | None):
        x = self.torch.from_numpy(a)
        return (x.view(getattr(self.torch, dtype)) if dtype else x).to(self.device)

    def clone(self, x):
        return x.clone()

    def copy_into(self, dst, src) -> None:
        dst.copy_(src)

    def poison(self, x) -> None:
        if x.is_floating_point() or x.is_complex():
            x.fill_(float("nan"))
        elif x.dtype == self.torch.bool:
            x.fill_(True)
        else:
            x.fill_(0x5A)

    def comparable(self, x):
        """x as it is compared: half, bfloat16 and float8 widened to float32."""
        x = x.detach()
        if x.dtype in (self.torch.bfloat16, self.torch.float16) or str(x.dtype).startswith(
                "torch.float8"):
            x = x.float()
        return x

    def numpy(self, x) -> np.ndarray:
        return self.comparable(x).cpu().numpy().copy()

    def same(self, a, b) -> bool:
        """Whether a holds b's values (NaN where b has NaN), decided where they are."""
        if a.shape != b.shape or a.dtype != b.dtype:
            return False
        eq = a == b
        if a.is_floating_point():
            eq |= a.isnan() & b.isnan()
        return bool(eq.all())

    def close(self, out, ref, rtol: float, atol: float) -> bool:
        """verify._close_fast on the device: True when every element of `out` is finite and
        within tolerance of `ref` (a float tensor there); False leaves it to compare()."""
        out = self.comparable(out)
        if out.shape != ref.shape or out.dtype != ref.dtype or not out.is_floating_point():
            return False
        mag = ref.abs()
        scale = float(mag.mean(dtype=self.torch.float64)) if mag.numel() else 0.0
        if not np.isfinite(scale):
            return False
        return bool(((out - ref).abs() <= mag * rtol + (atol + rtol * scale)).all())

    def seed(self, s: int) -> None:
        self.torch.manual_seed(s)

    def build(self, cls, init_args: list):
        self.seed(0)
        return cls(*init_args).to(self.device).eval()

    def sync(self) -> None:
        if self.gpu:
            self.torch.cuda.synchronize()

    def flush(self) -> None:
        if self.gpu:
            self.flush_buf.zero_()

    def materialize(self, out) -> None:
        pass  # torch runs eagerly

    def time(self, call) -> float:
        if not self.gpu:
            t0 = time.perf_counter_ns()
            call()
            return (time.perf_counter_ns() - t0) / 1e9
        cuda = self.torch.cuda
        start, end = cuda.Event(enable_timing=True), cuda.Event(enable_timing=True)
        cuda.synchronize()
        start.record()
        call()
        # Device-wide: work a candidate put on a side stream finishes inside the timed window.
        cuda.synchronize()
        end.record()
        end.synchronize()
        return start.elapsed_time(end) / 1e3


class MlxBackend:
    """MLX (lazy: a call's outputs are evaluated before the clock stops).

    MLX arrays are immutable to MLX code, but their evaluated buffers are writable through
    numpy: that is how the same argument objects get each seed's values, as with torch.
    """

    own_thread = False  # ops run on MLX's stream thread

    def __init__(self, device: str):
        import mlx.core as mx
        self.mx = mx

    def is_array(self, x) -> bool:
        return isinstance(x, self.mx.array)

    def to_device(self, x):
        return x

    def to_host(self, x) -> tuple[np.ndarray, str | None]:
        try:
            return np.array(x), None
        except ValueError:  # bfloat16 has no buffer format: its bits, as int16
            return np.array(x.view(self.mx.int16)), str(x.dtype).removeprefix("mlx.core.")

    def from_host(self, a: np.ndarray, dtype: str | None):
        x = self.mx.array(a)
        return x.view(getattr(self.mx, dtype)) if dtype else x

    def clone(self, x):
        return self.mx.array(np.array(x))

    def copy_into(self, dst, src) -> None:
        np.asarray(dst)[...] = np.asarray(src)

    def poison(self, x) -> None:
        poison(np.asarray(x))

    def numpy(self, x) -> np.ndarray:
        if x.dtype in (self.mx.bfloat16, self.mx.float16):
            x = x.astype(self.mx.float32)
        return np.array(x)

    # Unified memory: the host checks read MLX's buffers where they are.
    close = same = None

    def seed(self, s: int) -> None:
        self.mx.random.seed(s)

    def build(self, cls, init_args: list):
        self.seed(0)
        return cls(*init_args)

    def sync(self) -> None:
        self.mx.synchronize()

    def flush(self) -> None:
        pass

    def materialize(self, out) -> None:
        self.mx.eval([a for _, a in _leaves(out, self.is_array)])

    def time(self, call) -> float:
        t0 = time.perf_counter_ns()
        call()  # Case.run: the call and the evaluation of its outputs
        self.mx.synchronize()
        return (time.perf_counter_ns() - t0) / 1e9


def _leaves(value, is_array, label: str = "output") -> list[tuple[str, object]]:
    """(label, array) for every array in a nest of tuples, lists and dicts."""
    if is_array(value):
        return [(label, value)]
    if isinstance(value, (tuple, list)):
        return [leaf for i, v in enumerate(value) for leaf in _leaves(v, is_array,
                                                                       f"{label}[{i}]")]
    if isinstance(value, dict):
        return [leaf for k, v in value.items() for leaf in _leaves(v, is_array,
                                                                    f"{label}[{k!r}]")]
    return []


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
    raise TypeError(f"inputs() gave a {type(value).__name__}: an input set holds arrays, "
                    "numbers, strings and None, in tuples, lists and dicts")


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


def _reference(job: dict, params: dict, be, ref_mod):
    """The reference's callable for this workload (a module entry built as candidates are)."""
    ref = job["reference"]
    ref_fn = getattr(ref_mod, ref["function"])
    if job["kind"] != "module":
        return ref_fn
    return be.build(ref_fn, getattr(ref_mod, ref["init_inputs"])(**params))


def make_set(be, make, ref_fn, params: dict, seed: int) -> dict:
    """One seed's arguments and what the reference makes of them, as inputs.prepare keeps a
    set: the array arguments, the expected arrays by label, the rest in "meta"."""
    be.seed(seed)
    args = _map(list(make(seed, **params)), be.to_device)
    leaves = [a for _, a in _leaves(args, be.is_array)]
    work = _map(args, lambda x: be.clone(x) if be.is_array(x) else x)
    out = ref_fn(*work)
    be.sync()
    after = _leaves(work, be.is_array, "argument")
    # Arguments the reference wrote into are outputs too (destination-passing style).
    dest = [i for i, ((_, a), b) in enumerate(zip(after, leaves))
            if not np.array_equal(be.numpy(a), be.numpy(b), equal_nan=True)]
    expected = {lbl: be.numpy(a) for lbl, a in _leaves(out, be.is_array)}
    expected |= {after[i][0]: be.numpy(after[i][1]) for i in dest}
    host = [be.to_host(a) for a in leaves]
    packed = _pack(args, be.is_array, [])
    return {"inputs": {str(i): a for i, (a, _) in enumerate(host)}, "expected": expected,
            "meta": {"args": packed, "dest": dest, "dtypes": [d for _, d in host]}}


def prepare(job: dict) -> dict:
    """The sets of every workload (inputs.prepare), made with the reference on the device."""
    be = _backend(job)
    ref_mod = load_py(job["reference"]["file"], "reference")
    make = getattr(ref_mod, job["reference"]["inputs"])
    refs = [_reference(job, params, be, ref_mod) for params in job["workloads"]]
    return inputs.prepare(Path(job["dir"]), job["config"], len(job["workloads"]),
                          lambda wi, seed: make_set(be, make, refs[wi],
                                                    job["workloads"][wi], seed))


class Case(Snapshots):
    """One workload: its argument sets (one per seed), what the reference made of each, and one
    set of argument objects every call goes through (so results cannot be keyed on them).

    It is a harness.Workload to harness.verify and harness.time_all: the "function" they pass
    is a module (the candidate's or the baseline's), whose entry Case.bind finds or builds.
    """

    def __init__(self, job: dict, index: int, be, ref_mod):
        params = job["workloads"][index]
        self.be, self.params, self.job = be, params, job
        self.out = None  # what the last call returned
        self._bound: dict[int, object] = {}
        self.label = ", ".join(f"{k}={v}" for k, v in params.items()) or "default workload"
        self.init_args = (getattr(ref_mod, job["reference"]["init_inputs"])(**params)
                          if job["kind"] == "module" else None)
        sets = job["sets"]
        self.sets = SetFiles(sets["dir"], sets["workloads"][index][job["mode"]],
                             convert=self._on_device)
        first = self.sets[0]
        self.args = _map(first["args"], lambda x: be.clone(x) if be.is_array(x) else x)
        self.leaves = [a for _, a in _leaves(self.args, be.is_array, "argument")]
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
        return {"args": _unpack(meta["args"], leaves), "inputs": saved, "dest": meta["dest"],
                "expected": expected,
                # Checked where the outputs are, the host only explaining a failure.
                "expected_here": [(lbl, be.from_host(w, None)) for lbl, w in expected
                                  if w.dtype.kind == "f"] if be.close else None}

    def load(self, i: int) -> None:
        """Set up a call on argument set `i`: its values copied in, destinations poisoned."""
        be = self.be
        src = [a for _, a in _leaves(self.sets[i]["args"], be.is_array)]
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
        return [lbl for lbl, _ in _leaves(self.args, self.be.is_array, "argument")]

    def bind(self, mod):
        """The module's entry for this workload: its function, or its class built like the
        reference's (`kind = "module"`), once per module."""
        if id(mod) not in self._bound:
            entry = getattr(mod, self.job["entry"])
            self._bound[id(mod)] = (self.be.build(entry, self.init_args)
                                    if self.job["kind"] == "module" else entry)
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

    def outputs(self) -> list[tuple[str, np.ndarray]]:
        """What the last call gave: its returned arrays, then the destination arguments."""
        got = [(lbl, self.be.numpy(a)) for lbl, a in _leaves(self.out, self.be.is_array)]
        got += [(self.labels()[k], self.be.numpy(self.leaves[k])) for k in self.dest]
        return got

    def read_outputs(self) -> dict[str, np.ndarray]:
        self.be.sync()  # waits for anything launched since the call
        return dict(self.outputs())

    def output_label(self, key: str) -> str:
        return key  # already says where it sits: output[0], argument[1]

    def check_inputs(self, i: int, when: str) -> None:
        """Raise an Outcome unless every non-destination argument still holds set `i`."""
        be, s = self.be, self.sets[i]
        # The set's own arrays on the device: copied into the call's arguments, never passed.
        kept = [a for _, a in _leaves(s["args"], be.is_array)]
        for k, (a, saved) in enumerate(zip(self.leaves, s["inputs"])):
            if k in self.dest or (be.same and be.same(a, kept[k])):
                continue
            if not np.array_equal(be.numpy(a), saved, equal_nan=True):
                raise Outcome("rejected", f"the candidate modified its input {self.labels()[k]} "
                              f"({when}, {self.label})", workload=self.params)

    def check_outputs(self, i: int, tol: dict, when: str) -> None:
        """Raise an Outcome unless the last call's outputs match set `i`'s."""
        if self._close_here(i, tol):
            return
        got = self.outputs()
        want = self.sets[i]["expected"]
        if [lbl for lbl, _ in got] != [lbl for lbl, _ in want]:
            names = lambda arrays: ", ".join(lbl for lbl, _ in arrays) or "nothing"  # noqa: E731
            raise Outcome("incorrect", f"gave {names(got)}; the reference gives {names(want)} "
                          f"({when}, {self.label})", workload=self.params)
        for (lbl, g), (_, w) in zip(got, want):
            if g.shape != w.shape or g.dtype != w.dtype:
                raise Outcome("incorrect", f"{lbl} is {g.dtype}{list(g.shape)}, want "
                              f"{w.dtype}{list(w.shape)} ({when}, {self.label})",
                              workload=self.params)
            bad = compare(g, w, tol["rtol"], tol["atol"])
            if bad:
                raise Outcome("incorrect", f"{lbl} wrong ({when}, {self.label}): "
                              f"{bad.summary}", workload=self.params, output=lbl,
                              **bad.as_dict())

    def _close_here(self, i: int, tol: dict) -> bool:
        """The common case decided on the device, nothing copied: every output given, where
        and as the reference gives it, within tolerance. False: check_outputs decides."""
        want = self.sets[i]["expected_here"]
        if want is None or len(want) != len(self.sets[i]["expected"]):
            return False
        got = _leaves(self.out, self.be.is_array)
        got += [(self.labels()[k], self.leaves[k]) for k in self.dest]
        return [lbl for lbl, _ in got] == [lbl for lbl, _ in want] and all(
            self.be.close(g, w, tol["rtol"], tol["atol"]) for (_, g), (_, w) in zip(got, want))


def _load_candidate(path: str, job: dict):
    try:
        mod = load_py(path, "candidate")
    except Exception as e:
        raise Outcome("compile_error", f"importing the candidate failed: "
                      f"{type(e).__name__}: {e}"[:300]) from None
    if not hasattr(mod, job["entry"]):
        raise Outcome("compile_error", f"the candidate does not define {job['entry']}")
    return mod


def _backend(job: dict):
    return (MlxBackend if job["framework"] == "mlx" else TorchBackend)(job["device"])


def _setup(job: dict) -> tuple:
    if job.get("cpu") is not None:
        os.sched_setaffinity(0, {job["cpu"]})
    be = _backend(job)
    # The inputs come from the cached sets, but the reference is still loaded before the
    # candidate: it may put modules a candidate imports by name in sys.modules (GPU MODE's
    # `from task import input_t`), and a module entry's init arguments come from it.
    ref_mod = load_py(job["reference"]["file"], "reference")
    cases = [Case(job, i, be, ref_mod) for i in range(len(job["workloads"]))]
    base_mod = load_py(job["baseline"], "baseline") if job["mode"] == "time" else None
    return cases, base_mod


def _check(job: dict, state: tuple) -> dict:
    cases, base_mod = state
    sys.path.insert(0, os.path.dirname(job["candidate"]))
    mod = _load_candidate(job["candidate"], job)
    gc.disable()
    if job["mode"] == "verify":
        return verify(job, cases, mod)
    impls = {"candidate": lambda case: partial(case.run, mod),
             "baseline": lambda case: partial(case.run, base_mod)}
    be = cases[0].be
    return time_all(job, cases, impls, be, watch_others=be.own_thread)


def main() -> None:
    if sys.argv[1:] == ["prepare"]:
        inputs.answer(prepare)
    else:
        serve(_setup, _check)


if __name__ == "__main__":
    main()
