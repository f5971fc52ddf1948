"""The in-process half of the CPU harness: `python -m eat.runners.harness` in a contained child.

Reads a JSON job on stdin, locks the process down, then verifies or times the candidate on input
sets whose expected outputs the target's reference made in another process, where no candidate
ran (inputs.py), and writes one result line, tagged with the job's nonce, to a private copy of
stdout. Timed calls take fresh sets: no call works on inputs the candidate saw before.
Only numpy and the standard library are imported here: this runs once per check. The GPU
harness (gpu_harness.py) is this one with device buffers: it reuses serve, Workload, verify and
time_native, overriding how a call is made, waited for and timed.
"""

from __future__ import annotations

import ctypes
import gc
import json
import os
import sys
import time
import traceback
from functools import partial

import numpy as np

from eat.runners.cabi import C_TYPES
from eat.runners.inputs import SetChanged, generates, load_py, make_set, set_index, workload_sets
from eat.runners.job import Call, Job, NativeJob, Race
from eat.runners.sandbox import confine, lock_down
from eat.runners.verify import Mismatch, compare, poison

_DTYPES = {name: np.dtype(dtype) for name, dtype in C_TYPES.items()}
_CTYPES = {name: np.ctypeslib.as_ctypes_type(dtype) for name, dtype in _DTYPES.items()}


class Outcome(Exception):
    """Ends the job early with a candidate status."""

    def __init__(self, status: str, message: str, **detail):
        super().__init__(message)
        self.status, self.message, self.detail = status, message, detail


def aligned_empty(shape, dtype, align: int = 64) -> np.ndarray:
    """A C-contiguous array whose data starts on an `align`-byte boundary (for SIMD loads)."""
    dtype = np.dtype(dtype)
    nbytes = max(1, int(np.prod(shape)) * dtype.itemsize)
    raw = np.empty(nbytes + align, dtype=np.uint8)
    offset = (-raw.ctypes.data) % align
    return raw[offset : offset + nbytes].view(dtype).reshape(shape)


class Snapshots:
    """Whether outputs change after a call returned, from read_outputs(); the GPU harness keeps
    its snapshot on the device instead."""

    def read_outputs(self) -> dict[str, np.ndarray]:
        """A copy of the outputs as they are now (each kind of workload reads its own)."""
        raise NotImplementedError

    def snapshot(self):
        """The outputs as they are now, to hand to changed() later."""
        return self.read_outputs()

    def changed(self, snapshot) -> str | None:
        """The key of an output that differs from `snapshot` now, if any."""
        for k, out in self.read_outputs().items():
            if not np.array_equal(out, snapshot[k], equal_nan=True):
                return k
        return None


class Workload(Snapshots):
    """One workload: its input sets with expected outputs (inputs.py), and one set of buffers.

    `sets` are the verification seeds in a verify job and the timed pool in a time job. Every
    call goes through the same buffers, the set's inputs copied in and the outputs poisoned
    first, so a candidate that keys saved results on buffer addresses is caught.
    """

    def __init__(self, job: NativeJob, index: int, ref_mod=None):
        workload = job["workloads"][index]
        params, shapes = workload["params"], workload["shapes"]
        self.params = params
        self.label = ", ".join(f"{k}={v}" for k, v in params.items())
        self.inputs: dict[str, np.ndarray] = {}
        self.outputs: dict[str, np.ndarray] = {}
        self.values: dict[str, np.ndarray | int | float] = {}
        for a in job["args"]:
            if not a["pointer"]:
                self.values[a["name"]] = params[a["name"]]
                continue
            arr = aligned_empty(tuple(shapes[a["name"]]), _DTYPES[a["ctype"]])
            (self.inputs if a["const"] else self.outputs)[a["name"]] = arr
            self.values[a["name"]] = arr
        # ref_mod: the reference, loaded where the manifest says to make sets here
        self.sets = workload_sets(job, index, partial(make_set, job, workload, ref_mod))
        self.c_args = call_args(
            job["args"],
            {k: v.ctypes.data if isinstance(v, np.ndarray) else v for k, v in self.values.items()},
        )

    def load(self, i: int) -> None:
        """Set up a call on input set `i`: inputs copied into the buffers, outputs poisoned."""
        for k, buf in self.inputs.items():
            np.copyto(buf, self.sets[i]["inputs"][k])
        for out in self.outputs.values():
            poison(out)

    def call(self, fn) -> float:
        """Call the entry point on the loaded set; seconds until it returned."""
        t0 = time.perf_counter()
        fn(*self.c_args)
        return time.perf_counter() - t0

    def read_outputs(self) -> dict[str, np.ndarray]:
        """A copy of the outputs as they are now."""
        return {k: v.copy() for k, v in self.outputs.items()}

    def output_label(self, key: str) -> str:
        """How messages name an output of read_outputs()."""
        return f"output {key}"

    @property
    def vendor_args(self) -> dict:
        """Keyword arguments of the vendor function: the loaded buffers and the scalars."""
        return self.values

    def check_inputs(self, i: int, when: str) -> None:
        for k, buf in self.inputs.items():
            if not np.array_equal(buf, self.sets[i]["inputs"][k], equal_nan=True):
                raise Outcome(
                    "rejected",
                    f"the candidate modified its input {k} ({when}, {self.label})",
                    workload=self.params,
                )

    def check_outputs(self, i: int, tol: dict, when: str, keys=None) -> None:
        """Raise an Outcome unless the outputs (those named in `keys`, else all) match set
        `i`'s expected ones."""
        for k in keys or self.outputs:
            out = self.outputs[k]
            bad: Mismatch | None = compare(
                out, self.sets[i]["expected"][k], tol["rtol"], tol["atol"]
            )
            if bad:
                raise Outcome(
                    "incorrect",
                    f"output {k} wrong ({when}, {self.label}): {bad.summary}",
                    workload=self.params,
                    output=k,
                    **bad.as_dict(),
                )


def call_args(args: list[dict], values: dict) -> tuple:
    """ctypes arguments of the entry point: pointers (addresses) as void *, scalars typed."""
    return tuple(
        ctypes.c_void_p(values[a["name"]])
        if a["pointer"]
        else _CTYPES[a["ctype"]](values[a["name"]])
        for a in args
    )


def bind_entry(path: str, job: NativeJob):
    """The job's entry point in the built library at `path` (a compile_error when it is not
    there to load)."""
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


def verify(job: Job, workloads: list[Workload], fn) -> dict:
    tol = job["tolerance"]
    for w in workloads:
        for seed in range(len(w.sets)):
            w.load(seed)
            took = w.call(fn)
            snapshot = w.snapshot()
            w.check_inputs(seed, f"seed {seed}")
            # Work finishing after the call returned (a detached thread) shows up as a change.
            time.sleep(min(0.02, max(0.002, 2 * took)))
            if (k := w.changed(snapshot)) is not None:
                raise Outcome(
                    "rejected",
                    f"{w.output_label(k)} kept changing after the call "
                    f"returned ({w.label}): work escaped the call",
                    workload=w.params,
                )
            w.check_inputs(seed, f"seed {seed}, after return")
            w.check_outputs(seed, tol, f"seed {seed}")
    return {"status": "ok", "message": "verified"}


class _CpuWatch:
    """CPU time burnt by threads other than the caller's, inside the windows it is opened on."""

    def __init__(self):
        self.extra_ns = 0
        self.wall_ns = 0

    # The thread clock is read first at both ends: with RLIMIT_CPU set, the kernel samples the
    # process clock late, and the other order reads a steady bias as background CPU.
    def __enter__(self):
        self._t = time.thread_time_ns()
        self._p = time.process_time_ns()
        self._w = time.perf_counter_ns()

    def __exit__(self, *exc):
        t = time.thread_time_ns()
        self.extra_ns += (time.process_time_ns() - self._p) - (t - self._t)
        self.wall_ns += time.perf_counter_ns() - self._w


REFERENCE_MIN = 10  # timed calls of a baseline or vendor at least (the candidate's: min_repeats)


def rse(samples: list[float]) -> float:
    """Relative standard error of the median, from the IQR (robust to the odd slow call); a
    program's grades use it too, so a median may be negative. inf where it is not defined."""
    if len(samples) < 2:
        return float("inf")
    q1, med, q3 = np.percentile(samples, [25, 50, 75])
    if q3 == q1:
        return 0.0
    return 0.93 * (q3 - q1) / (abs(med) * len(samples) ** 0.5) if med else float("inf")


def _stat(samples: list[float]) -> dict:
    q1, med, q3 = np.percentile(samples, [25, 50, 75])
    return {"median_s": float(med), "iqr_s": float(q3 - q1), "n": len(samples)}


class HostTimer:
    """Wall-clock latency of a call on this core; `flush` writes a buffer larger than the LLC."""

    def __init__(self, flush_bytes: int | None):
        self.buf = np.zeros(flush_bytes, dtype=np.uint8) if flush_bytes else None

    def flush(self) -> None:
        if self.buf is not None:
            np.add(self.buf, 1, out=self.buf)

    def time(self, call) -> float:
        t0 = time.perf_counter_ns()
        call()
        return (time.perf_counter_ns() - t0) / 1e9


def load_vendor(call: Call) -> tuple:
    """(the vendor function, seconds its loading took), or instead of the function a string
    saying why it cannot be had here (torch missing, say): the vendor is then not timed, and the
    candidate is judged without it."""
    t0 = time.perf_counter()
    try:
        fn = getattr(load_py(call["file"], "vendor"), call["function"])
    except Exception as e:
        fn = f"the vendor could not be loaded: {type(e).__name__}: {e}"[:300]
    return fn, time.perf_counter() - t0


def implementations(fn, base_fn, vendor_fn) -> dict:
    """What time_all times: impl(workload) -> a call with no arguments, the candidate first."""
    impls = {"candidate": lambda w: partial(fn, *w.c_args)}
    if base_fn:
        impls["baseline"] = lambda w: partial(base_fn, *w.c_args)
    if callable(vendor_fn):
        impls["vendor"] = lambda w: partial(vendor_fn, **w.vendor_args)
    return impls


def time_native(job: NativeJob, workloads: list[Workload], fn, base_fn, vendor, timer) -> dict:
    """time_all over the candidate, baseline and vendor (load_vendor's pair, or None) of a
    native job; a vendor that could not be loaded is reported as `vendor_error`, the seconds
    its loading took as `vendor_load_s`."""
    vendor_fn, load_s = vendor or (None, 0.0)
    impls = implementations(fn, base_fn, vendor_fn)
    res = time_all(job, workloads, impls, timer, race=job.get("race"))
    return (
        res
        | {"vendor_load_s": load_s}
        | ({"vendor_error": vendor_fn} if isinstance(vendor_fn, str) else {})
    )


def time_all(
    job: Job,
    workloads: list[Workload],
    impls: dict,
    timer,
    watch_others: bool = True,
    race: Race | None = None,
) -> dict:
    """Median and IQR of each implementation per workload, the candidate's outputs re-checked.

    `impls` comes from implementations(); each call is built before the timer starts. `timer`
    has flush() and time(call) -> seconds. CPU burnt by other threads is watched in an idle
    window after each workload and, with `watch_others`, while the baseline and vendor run
    (not where a framework runs them on threads of its own, as MLX does). A `race` stops
    timing a workload whose candidate is far slower than the best one so far.
    """
    cfg, tol = job["config"], job["tolerance"]
    watch = _CpuWatch()
    results = []

    def run(kind: str, w: Workload, i: int) -> float:
        w.load(i)
        call = impls[kind](w)
        timer.flush()
        if kind == "candidate" or not watch_others:
            return timer.time(call)
        with watch:
            return timer.time(call)

    warmup = cfg["warmup"]
    raced = []
    for wi, w in enumerate(workloads):
        kinds = list(impls)
        samples: dict[str, list[float]] = {k: [] for k in kinds}
        for r in range(warmup):
            for kind in kinds:
                run(kind, w, r % len(w.sets))
        # Each round takes the next unseen set of the pool; past its end, sets come round again.
        rounds = max(cfg["min_repeats"], min(cfg["max_repeats"], len(w.sets) - warmup))
        start = time.perf_counter()
        for r in range(rounds):
            i = set_index(r, warmup, len(w.sets))
            # Rotating the order keeps drift and cache state from favouring one implementation.
            for kind in kinds[r % len(kinds) :] + kinds[: r % len(kinds)]:
                samples[kind].append(run(kind, w, i))
                if kind == "candidate":
                    w.check_inputs(i, f"timed call {r}")
                    w.check_outputs(i, tol, f"timed call {r}")
            # A baseline or vendor whose median is already as sure as asked is timed no more:
            # min_repeats is the candidate's floor (a slow naive baseline's calls dominate).
            kinds = [
                k
                for k in kinds
                if k == "candidate"
                or len(samples[k]) < REFERENCE_MIN
                or rse(samples[k]) >= cfg["target_rse"]
            ]
            if r + 1 >= cfg["min_repeats"] and (
                time.perf_counter() - start > cfg["budget_s"]
                or max(rse(v) for v in samples.values()) < cfg["target_rse"]
            ):
                break
            if (
                race
                and r + 1 >= race["rounds"]
                and race["ratios"][wi]
                < np.median(samples["candidate"]) / np.median(samples[race["kind"]])
            ):
                raced.append(w.label)  # lost by far: more rounds would not change that
                break
        results.append({k: _stat(v) for k, v in samples.items()})
        with watch:  # an idle window: nothing of ours runs in it
            time.sleep(0.02)
    if watch.extra_ns > 5_000_000 + 0.05 * watch.wall_ns:
        raise Outcome(
            "rejected",
            f"background threads used {watch.extra_ns / 1e6:.1f} ms of CPU "
            "while the candidate was not running",
            extra_cpu_s=watch.extra_ns / 1e9,
        )
    return {
        "status": "ok",
        "message": "timed",
        "workloads": results,
        "raced": raced,
        "extra_cpu_s": max(0.0, watch.extra_ns / 1e9),
    }


def serve(setup, check) -> None:
    """Run the job on stdin and write its one tagged result line.

    `setup(job)` runs before any candidate code (its failures are the target's: harness_error);
    then the process may write only in its working directory (and /dev, for device runtimes),
    is locked down, and `check(job, state)` loads and judges the candidate.
    """
    job = json.loads(sys.stdin.read())
    sys.stdin.close()
    result_fd = os.dup(1)
    os.dup2(2, 1)  # whatever the candidate prints lands in the log, never in the result channel
    phase = "setup"
    try:
        state = setup(job)
        if job.get("confine_writes", True) and (
            why := confine([os.getcwd(), "/dev"], job.get("unreadable", []))
        ):
            print(f"eat harness: {why}", file=sys.stderr)
        if job.get("lock_down", True):
            why = lock_down()
            if why and os.geteuid() == 0:
                # As root RLIMIT_NPROC does not hold: without the filter nothing stops a fork bomb.
                raise RuntimeError(f"cannot contain candidates as root: {why}")
            if why:
                print(f"eat harness: {why}; relying on RLIMIT_NPROC", file=sys.stderr)
        elif os.geteuid() == 0:
            print(
                "eat harness: candidates may start processes and this is root: nothing "
                "holds a fork bomb but the wall clock",
                file=sys.stderr,
            )
        phase = "candidate"
        result = check(job, state)
    except Outcome as o:
        result = {"status": o.status, "message": o.message, "detail": o.detail}
    except SetChanged as e:  # not the candidate's doing to answer for: the target's inputs
        result = {"status": "harness_error", "message": str(e), "detail": {"set_changed": True}}
    except Exception:
        tb = traceback.format_exc(limit=6)
        status = "harness_error" if phase == "setup" else "crash"
        result = {
            "status": status,
            "message": tb.strip().splitlines()[-1][:300],
            "detail": {"traceback": tb[-3000:]},
        }
    os.write(result_fd, f"EAT-RESULT {job['nonce']} {json.dumps(result)}\n".encode())
    os.close(result_fd)


def _setup(job: NativeJob) -> tuple:
    ref_mod = load_py(job["reference"]["file"], "reference") if generates(job) else None
    workloads = [Workload(job, i, ref_mod) for i in range(len(job["workloads"]))]
    base_fn = vendor = None
    if job["mode"] == "time":
        if (cpu := job.get("cpu")) is not None:
            os.sched_setaffinity(0, {cpu})
        if lib := job.get("baseline_lib"):
            base_fn = bind_entry(lib, job)
        if call := job.get("vendor"):
            vendor = load_vendor(call)
    return workloads, base_fn, vendor


def _check(job: NativeJob, state: tuple) -> dict:
    workloads, base_fn, vendor = state
    fn = bind_entry(job["candidate_lib"], job)
    gc.disable()
    if job["mode"] == "verify":
        return verify(job, workloads, fn)
    flush = job.get("flush_bytes", 64 << 20) if job["config"]["flush_cache"] else None
    return time_native(job, workloads, fn, base_fn, vendor, HostTimer(flush))


def main() -> None:
    serve(_setup, _check)


if __name__ == "__main__":
    main()
