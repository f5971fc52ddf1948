"""The in-process half of the GPU harness: `python -m eat.runners.gpu_harness` in a contained child.

The CPU harness's protocol and pieces (harness.py): the job on stdin, inputs and expected
outputs made on the host by the reference in a process of their own (inputs.py), the lock-down,
verify and time_all, one nonce-tagged result line. What differs is where the buffers live and
how a call is waited for and timed:

- the candidate is called with device pointers; each input set is uploaded once and copied
  into the call buffers on the device; outputs are poisoned with a memset (0xFF, a NaN in every
  float);
- outputs are compared with the expected ones, and inputs with their set, on the device (the
  kernels of device_check.cu, built by the runner): only a failure is copied to the host, where
  verify.py's comparison explains it. Without those kernels, everything is compared on the host;
- every call is followed by a device-wide synchronize, so work launched on any stream counts,
  and the outputs are compared with a snapshot after a delay to catch work launched after the
  call returned;
- timing: L2 reset of persisting lines once, then before every timed call a memset of a buffer
  twice the L2 size; events recorded around call + device-wide synchronize.

The expected outputs sit in the candidate's process (on the device now, as on the host before):
a candidate that searched its own process's memory for them could copy them. What stops a
memo of earlier results is that every timed call gets a set it has not seen.
"""

from __future__ import annotations

import ctypes
import gc
import os
import time
from typing import Any

import numpy as np

from eat.runners.gpurt import GpuError, Runtime
from eat.runners.harness import (
    Outcome,
    Workload,
    bind_entry,
    call_args,
    load_vendor,
    serve,
    time_native,
    verify,
)
from eat.runners.inputs import generates, load_py
from eat.runners.job import NativeJob
from eat.runners.verify import poison_byte


class DeviceArray:
    """A device buffer as the vendor function gets it: `torch.as_tensor(x, device="cuda")` and
    `cupy.asarray(x)` wrap it without a copy (__cuda_array_interface__). Marked writable even
    for inputs: torch refuses a read-only one ("the read only flag is not supported"), and the
    vendor is the target's own code, not a candidate's."""

    def __init__(self, ptr: int, host: np.ndarray):
        self.ptr, self.shape, self.dtype = ptr, host.shape, host.dtype
        self.__cuda_array_interface__ = {
            "shape": host.shape,
            "typestr": host.dtype.str,
            "data": (ptr, False),
            "strides": None,
            "version": 3,
        }


class DeviceChecks:
    """device_check.cu's kernels: counts of output elements off their expected values and of
    input words changed, computed where the data is. Zero is a pass; anything else sends the
    caller to the host comparison, which says what is wrong (and has the last word)."""

    _FAR = {
        np.dtype(np.float32): ("eat_far_f32", ctypes.c_float),
        np.dtype(np.float64): ("eat_far_f64", ctypes.c_double),
    }

    def __init__(self, path: str, rt: Runtime):
        self.rt = rt
        lib = ctypes.CDLL(path, mode=os.RTLD_NOW | os.RTLD_LOCAL)
        self.far_fns = {}
        for dtype, (name, real) in self._FAR.items():
            fn = getattr(lib, name)
            fn.restype = ctypes.c_int
            fn.argtypes = [
                ctypes.c_void_p,
                ctypes.c_void_p,
                ctypes.c_size_t,
                real,
                real,
                ctypes.c_void_p,
            ]
            self.far_fns[dtype] = fn
        self.differ_fn = lib.eat_differ
        self.differ_fn.restype = ctypes.c_int
        self.differ_fn.argtypes = [
            ctypes.c_void_p,
            ctypes.c_void_p,
            ctypes.c_size_t,
            ctypes.c_void_p,
        ]
        self.counter = rt.malloc(8)
        self.count = np.zeros(1, np.uint64)

    def _count(self, fn, *args) -> int:
        self.rt.memset(self.counter, 0, 8)
        fn(*args, self.counter)
        self.rt.check_last_error()
        self.rt.to_host(self.count, self.counter)  # waits for the kernel (same stream)
        return int(self.count[0])

    def far(self, out: int, ref: int, n: int, dtype, rtol: float, slack: float) -> int | None:
        """Elements of `out` off `ref`, as verify.py's _close_fast judges; None: not a float
        type these kernels compare."""
        fn = self.far_fns.get(np.dtype(dtype))
        return None if fn is None else self._count(fn, out, ref, n, rtol, slack)

    def differ(self, a: int, b: int, nbytes: int) -> int:
        """32-bit words (and tail bytes) in which two device buffers differ."""
        return self._count(self.differ_fn, a, b, nbytes)


class DeviceWorkload(Workload):
    """A Workload whose call buffers live on the device, and so do its sets: each set is
    uploaded the first time it is used and then copied into the call buffers on the device.
    With DeviceChecks, inputs and outputs are checked there too, and copied to the host only
    to explain a failure; the host arrays stage those copies."""

    def __init__(
        self, job: NativeJob, index: int, rt: Runtime, checks: DeviceChecks | None, ref_mod=None
    ):
        super().__init__(job, index, ref_mod)
        self.rt, self.checks, self.tol = rt, checks, job["tolerance"]
        host = {k: v for k, v in self.values.items() if isinstance(v, np.ndarray)}
        self.device = {k: rt.malloc(v.nbytes) for k, v in host.items()}
        self.c_args = call_args(job["args"], self.values | self.device)
        self._vendor_args = self.values | {
            k: DeviceArray(self.device[k], v) for k, v in host.items()
        }
        self._on_device: dict[int, dict] = {}
        self._snapshot: dict[str, int] = {}

    def _set(self, i: int) -> dict:
        """Set `i` on the device: its inputs and expected outputs, and each float output's
        tolerance slack (atol + rtol * mean|expected|; None where that is not finite)."""
        if i not in self._on_device:
            s = self.sets[i]
            made: dict[str, dict[str, Any]] = {"inputs": {}, "expected": {}, "slack": {}}
            for part in ("inputs", "expected"):
                for k, arr in s[part].items():
                    made[part][k] = ptr = self.rt.malloc(arr.nbytes)
                    self.rt.to_device(ptr, np.ascontiguousarray(arr))
            for k, arr in s["expected"].items():
                scale = (
                    float(np.abs(arr).mean(dtype=np.float64))
                    if arr.dtype.kind == "f"
                    else float("nan")
                )
                slack = self.tol["atol"] + self.tol["rtol"] * scale
                made["slack"][k] = slack if np.isfinite(slack) else None
            self._on_device[i] = made
        return self._on_device[i]

    def load(self, i: int) -> None:
        s = self._set(i)
        for k, buf in self.inputs.items():
            self.rt.copy_on_device(self.device[k], s["inputs"][k], buf.nbytes)
        for k, out in self.outputs.items():
            self.rt.memset(self.device[k], poison_byte(out.dtype), out.nbytes)
        # A candidate working on a non-blocking stream would not wait for these on its own.
        self.rt.synchronize()

    def call(self, fn) -> float:
        t0 = time.perf_counter()
        fn(*self.c_args)
        self.rt.synchronize()
        took = time.perf_counter() - t0
        self.rt.check_last_error()
        return took

    def read_outputs(self) -> dict[str, np.ndarray]:
        # Waits for anything launched since the call (by a thread it left behind) first.
        self.rt.synchronize()
        self._fetch(self.outputs)
        return super().read_outputs()

    def snapshot(self):
        if self.checks is None:
            return super().snapshot()
        self.rt.synchronize()
        for k, out in self.outputs.items():
            if k not in self._snapshot:
                self._snapshot[k] = self.rt.malloc(out.nbytes)
            self.rt.copy_on_device(self._snapshot[k], self.device[k], out.nbytes)
        return self._snapshot

    def changed(self, snapshot) -> str | None:
        if self.checks is None:
            return super().changed(snapshot)
        self.rt.synchronize()  # whatever a thread left behind has launched, finished
        for k, out in self.outputs.items():
            if self.checks.differ(self.device[k], snapshot[k], out.nbytes):
                return k
        return None

    def check_inputs(self, i: int, when: str) -> None:
        if self.checks is not None and not any(
            self.checks.differ(self.device[k], self._set(i)["inputs"][k], buf.nbytes)
            for k, buf in self.inputs.items()
        ):
            return
        self._fetch(self.inputs)
        super().check_inputs(i, when)

    def check_outputs(self, i: int, tol: dict, when: str, keys=None) -> None:
        s, doubtful = self._set(i), []
        for k in keys or self.outputs:
            out, slack = self.outputs[k], s["slack"][k]
            if (
                self.checks is None
                or slack is None
                or self.checks.far(
                    self.device[k], s["expected"][k], out.size, out.dtype, tol["rtol"], slack
                )
                != 0
            ):
                doubtful.append(k)
        if doubtful:
            self._fetch({k: self.outputs[k] for k in doubtful})
            super().check_outputs(i, tol, when, doubtful)

    @property
    def vendor_args(self) -> dict:
        return self._vendor_args

    def _fetch(self, arrays: dict[str, np.ndarray]) -> None:
        for k, host in arrays.items():
            self.rt.to_host(host, self.device[k])


class DeviceTimer:
    """Device time of one call: events around the call and a device-wide synchronize, so work
    the call leaves on a side stream is inside the interval; L2 flushed before each call."""

    def __init__(self, rt: Runtime, flush_bytes: int):
        self.rt, self.flush_bytes, self.byte = rt, flush_bytes, 0
        self.flush_ptr = rt.malloc(flush_bytes) if flush_bytes else None
        self.start, self.end = rt.event(), rt.event()
        rt.reset_persisting_l2()

    def flush(self) -> None:
        if self.flush_ptr:
            self.byte ^= 1
            self.rt.memset(self.flush_ptr, self.byte, self.flush_bytes)
        # The device is idle when the clock starts: nothing of the flush (or the input copies)
        # runs inside the interval, and nothing the call launches can start before it.
        self.rt.synchronize()

    def time(self, call) -> float:
        self.rt.record(self.start)
        call()
        self.rt.synchronize()
        self.rt.record(self.end)
        return self.rt.elapsed_s(self.start, self.end)


def _setup(job: NativeJob) -> tuple:
    rt = Runtime(job["gpu"], job["runtime"])
    rt.set_device(0)  # the runner made the chosen GPU this process's only visible one
    checks = DeviceChecks(job["check_lib"], rt) if job.get("check_lib") else None
    ref_mod = load_py(job["reference"]["file"], "reference") if generates(job) else None
    workloads = [DeviceWorkload(job, i, rt, checks, ref_mod) for i in range(len(job["workloads"]))]
    base_fn = vendor = timer = None
    if job["mode"] == "time":
        timer = DeviceTimer(rt, job["flush_bytes"])
        if lib := job.get("baseline_lib"):
            base_fn = bind_entry(lib, job)
        if call := job.get("vendor"):
            vendor = load_vendor(call)
    rt.synchronize()
    return rt, workloads, base_fn, vendor, timer


def _check(job: NativeJob, state: tuple) -> dict:
    rt, workloads, base_fn, vendor, timer = state
    fn = bind_entry(job["candidate_lib"], job)
    gc.disable()
    try:
        if job["mode"] == "verify":
            return verify(job, workloads, fn)
        return time_native(job, workloads, fn, base_fn, vendor, timer)
    except GpuError as e:
        # Raised after candidate code ran (a fault is sticky: every later call reports it).
        raise Outcome("crash", f"{rt.api} error after the candidate's call: {e}") from None


def main() -> None:
    serve(_setup, _check)


if __name__ == "__main__":
    main()
