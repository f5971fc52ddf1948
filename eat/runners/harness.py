"""The in-process half of the CPU harness: `python -m eat.runners.harness` in a contained child.

Reads a JSON job on stdin, builds inputs and expected outputs with the target's reference
*before* any candidate code is loaded, locks the process down, then verifies or times the
candidate and writes one result line, tagged with the job's nonce, to a private copy of stdout.
Only numpy and the standard library are imported here: this runs once per check.
"""

from __future__ import annotations

import ctypes
import gc
import importlib.util
import json
import os
import sys
import time
import traceback

import numpy as np

from eat.runners.sandbox import lock_down
from eat.runners.verify import Mismatch, compare, poison

_CTYPES = {"float": ctypes.c_float, "double": ctypes.c_double, "int": ctypes.c_int32,
           "int32_t": ctypes.c_int32, "int64_t": ctypes.c_int64, "long": ctypes.c_int64,
           "size_t": ctypes.c_uint64, "uint8_t": ctypes.c_uint8, "int8_t": ctypes.c_int8,
           "uint32_t": ctypes.c_uint32, "int16_t": ctypes.c_int16, "uint16_t": ctypes.c_uint16}
_DTYPES = {"float": np.float32, "double": np.float64, "int": np.int32, "int32_t": np.int32,
           "int64_t": np.int64, "long": np.int64, "size_t": np.uint64, "uint8_t": np.uint8,
           "int8_t": np.int8, "uint32_t": np.uint32, "int16_t": np.int16, "uint16_t": np.uint16}


class Outcome(Exception):
    """Ends the job early with a candidate status."""

    def __init__(self, status: str, message: str, **detail):
        super().__init__(message)
        self.status, self.message, self.detail = status, message, detail


def _load_py(path: str, name: str):
    spec = importlib.util.spec_from_file_location(f"eat_target_{name}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def aligned_empty(shape, dtype, align: int = 64) -> np.ndarray:
    """A C-contiguous array whose data starts on an `align`-byte boundary (for SIMD loads)."""
    dtype = np.dtype(dtype)
    nbytes = max(1, int(np.prod(shape)) * dtype.itemsize)
    raw = np.empty(nbytes + align, dtype=np.uint8)
    offset = (-raw.ctypes.data) % align
    return raw[offset:offset + nbytes].view(dtype).reshape(shape)


class Case:
    """One workload and seed: inputs, expected outputs, output buffers and the call's arguments."""

    def __init__(self, job: dict, workload: dict, seed: int, ref_mod):
        params, shapes = workload["params"], workload["shapes"]
        self.params = params
        rng = np.random.default_rng(seed)
        made = {}
        if job["reference"].get("inputs"):
            made = getattr(ref_mod, job["reference"]["inputs"])(rng, **params)
        self.inputs, self.outputs, self.values = {}, {}, {}
        for a in job["args"]:
            dtype = _DTYPES[a["ctype"]]
            if not a["pointer"]:
                self.values[a["name"]] = params[a["name"]]
                continue
            arr = aligned_empty(tuple(shapes[a["name"]]), dtype)
            if a["const"]:
                src = made.get(a["name"])
                if src is None:
                    src = (rng.random(arr.shape) * 2 - 1) if arr.dtype.kind == "f" \
                        else rng.integers(0, 100, arr.shape)
                arr[...] = np.asarray(src).reshape(arr.shape)
                self.inputs[a["name"]] = arr
            else:
                self.outputs[a["name"]] = arr
            self.values[a["name"]] = arr
        self.saved = {k: v.copy() for k, v in self.inputs.items()}
        ref_fn = getattr(ref_mod, job["reference"]["function"])
        got = ref_fn(**{k: v for k, v in self.values.items() if k not in self.outputs})
        if len(self.outputs) == 1 and not isinstance(got, (dict, tuple, list)):
            got = {next(iter(self.outputs)): got}
        elif isinstance(got, (tuple, list)):
            got = dict(zip(self.outputs, got))
        self.expected = {k: np.asarray(got[k], dtype=v.dtype).reshape(v.shape)
                         for k, v in self.outputs.items()}
        for k in self.inputs:
            if not np.array_equal(self.inputs[k], self.saved[k]):
                raise RuntimeError(f"the reference modified its input {k}")
        self.c_args = tuple(
            ctypes.c_void_p(v.ctypes.data) if isinstance(v, np.ndarray)
            else _CTYPES[a["ctype"]](v) for a, v in zip(job["args"], self.values.values()))
        self.label = ", ".join(f"{k}={v}" for k, v in params.items())


def _bind(path: str, job: dict):
    try:
        lib = ctypes.CDLL(path, mode=os.RTLD_NOW | os.RTLD_LOCAL)
    except OSError as e:
        raise Outcome("compile_error", f"cannot load the built library: {e}") from None
    fn = getattr(lib, job["entry"], None)
    if fn is None:
        raise Outcome("compile_error", f"the candidate does not define {job['entry']}()")
    fn.restype = None
    fn.argtypes = [ctypes.c_void_p if a["pointer"] else _CTYPES[a["ctype"]] for a in job["args"]]
    return fn


def _check_inputs(case: Case, when: str) -> None:
    for k, arr in case.inputs.items():
        if not np.array_equal(arr, case.saved[k], equal_nan=True):
            raise Outcome("rejected", f"the candidate modified its input {k} ({when}, "
                          f"{case.label})", workload=case.params)


def _check_outputs(case: Case, tol: dict, when: str) -> None:
    for k, out in case.outputs.items():
        bad: Mismatch | None = compare(out, case.expected[k], tol["rtol"], tol["atol"])
        if bad:
            raise Outcome("incorrect", f"output {k} wrong ({when}, {case.label}): {bad.summary}",
                          workload=case.params, output=k, **bad.as_dict())


def verify(job: dict, cases: list[list[Case]], fn) -> dict:
    tol = job["tolerance"]
    for w_cases in cases:
        for seed, case in enumerate(w_cases):
            for out in case.outputs.values():
                poison(out)
            t0 = time.perf_counter()
            fn(*case.c_args)
            took = time.perf_counter() - t0
            snapshot = {k: v.copy() for k, v in case.outputs.items()}
            _check_inputs(case, f"seed {seed}")
            # Work finishing after the call returned (a detached thread) shows up as a change.
            time.sleep(min(0.02, max(0.002, 2 * took)))
            for k, out in case.outputs.items():
                if not np.array_equal(out, snapshot[k], equal_nan=True):
                    raise Outcome("rejected", f"output {k} kept changing after the call returned "
                                  f"({case.label}): work escaped the call",
                                  workload=case.params)
            _check_inputs(case, f"seed {seed}, after return")
            _check_outputs(case, tol, f"seed {seed}")
    return {"status": "ok", "message": "verified"}


class _CpuWatch:
    """CPU time burnt by threads other than the caller's, inside the windows it is opened on."""

    def __init__(self):
        self.extra_ns = 0
        self.wall_ns = 0

    def __enter__(self):
        self._p, self._t, self._w = time.process_time_ns(), time.thread_time_ns(), \
            time.perf_counter_ns()

    def __exit__(self, *exc):
        self.extra_ns += (time.process_time_ns() - self._p) - (time.thread_time_ns() - self._t)
        self.wall_ns += time.perf_counter_ns() - self._w


def _stat(samples: list[float]) -> dict:
    q1, med, q3 = np.percentile(samples, [25, 50, 75])
    return {"median_s": float(med), "iqr_s": float(q3 - q1), "n": len(samples)}


def time_all(job: dict, cases: list[list[Case]], fn, base_fn, vendor_fn) -> dict:
    cfg, tol = job["config"], job["tolerance"]
    flush = None
    if cfg["flush_cache"]:
        flush = np.zeros(job.get("flush_bytes", 64 << 20), dtype=np.uint8)
    watch = _CpuWatch()
    results = []

    def run(kind: str, case: Case) -> float:
        for out in case.outputs.values():
            poison(out)
        if flush is not None:
            np.add(flush, 1, out=flush)
        if kind == "candidate":
            t0 = time.perf_counter_ns()
            fn(*case.c_args)
            t1 = time.perf_counter_ns()
        else:
            with watch:
                t0 = time.perf_counter_ns()
                if kind == "baseline":
                    base_fn(*case.c_args)
                else:
                    vendor_fn(**case.values)
                t1 = time.perf_counter_ns()
        return (t1 - t0) / 1e9

    kinds = ["candidate"] + (["baseline"] if base_fn else []) + (["vendor"] if vendor_fn else [])
    for w_cases in cases:
        samples = {k: [] for k in kinds}
        for i in range(cfg["warmup"]):
            for kind in kinds:
                run(kind, w_cases[i % len(w_cases)])
        start = time.perf_counter()
        r = 0
        while r < cfg["max_repeats"]:
            if r >= cfg["min_repeats"] and time.perf_counter() - start > cfg["budget_s"]:
                break
            case = w_cases[r % len(w_cases)]
            # Rotating the order keeps drift and cache state from favouring one implementation.
            for kind in kinds[r % len(kinds):] + kinds[:r % len(kinds)]:
                samples[kind].append(run(kind, case))
                if kind == "candidate":
                    _check_inputs(case, f"timed call {r}")
                    _check_outputs(case, tol, f"timed call {r}")
            r += 1
        results.append({k: _stat(v) for k, v in samples.items()})
    with watch:
        time.sleep(0.02)
    if watch.extra_ns > 5_000_000 + 0.05 * watch.wall_ns:
        raise Outcome("rejected", f"background threads used {watch.extra_ns / 1e6:.1f} ms of CPU "
                      "while the candidate was not running", extra_cpu_s=watch.extra_ns / 1e9)
    return {"status": "ok", "message": "timed", "workloads": results,
            "extra_cpu_s": watch.extra_ns / 1e9}


def main() -> None:
    job = json.loads(sys.stdin.read())
    sys.stdin.close()
    result_fd = os.dup(1)
    os.dup2(2, 1)  # whatever the candidate prints lands in the log, never in the result channel
    phase = "setup"
    try:
        ref_mod = _load_py(job["reference"]["file"], "reference")
        cases = [[Case(job, w, seed, ref_mod) for seed in range(job["config"]["seeds"])]
                 for w in job["workloads"]]
        base_fn = vendor_fn = None
        if job["mode"] == "time":
            if job.get("cpu") is not None:
                os.sched_setaffinity(0, {job["cpu"]})
            if job.get("baseline_lib"):
                base_fn = _bind(job["baseline_lib"], job)
            if job.get("vendor"):
                vendor_fn = getattr(_load_py(job["vendor"]["file"], "vendor"),
                                    job["vendor"]["function"])
        if job.get("lock_down", True):
            why = lock_down()
            if why:
                print(f"eat harness: {why}", file=sys.stderr)
        phase = "candidate"
        fn = _bind(job["candidate_lib"], job)
        gc.disable()
        result = verify(job, cases, fn) if job["mode"] == "verify" else \
            time_all(job, cases, fn, base_fn, vendor_fn)
    except Outcome as o:
        result = {"status": o.status, "message": o.message, "detail": o.detail}
    except Exception:
        tb = traceback.format_exc(limit=6)
        status = "harness_error" if phase == "setup" else "crash"
        result = {"status": status, "message": tb.strip().splitlines()[-1][:300],
                  "detail": {"traceback": tb[-3000:]}}
    os.write(result_fd, f"EAT-RESULT {job['nonce']} {json.dumps(result)}\n".encode())
    os.close(result_fd)


if __name__ == "__main__":
    main()
