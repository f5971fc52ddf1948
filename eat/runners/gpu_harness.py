"""The in-process half of the GPU harness: `python -m eat.runners.gpu_harness` in a contained child.

The CPU harness's protocol and pieces (harness.py): the job on stdin, inputs and expected
outputs made on the host by the reference in a process of their own (inputs.py), the lock-down,
verify and time_all, one nonce-tagged result line. What differs is where the buffers live and
how a call is waited for and timed:

- the candidate is called with device pointers: inputs copied in, outputs poisoned with a memset
  (0xFF, a NaN in every float), results copied back and compared on the host;
- every call is followed by a device-wide synchronize, so work launched on any stream counts,
  and the outputs are read again after a delay to catch work launched after the call returned;
- timing: L2 reset of persisting lines once, then before every timed call a memset of a buffer
  twice the L2 size; events recorded around call + device-wide synchronize.
"""

from __future__ import annotations

import gc
import time

import numpy as np

from eat.runners.gpurt import GpuError, Runtime
from eat.runners.harness import (Outcome, Workload, _bind, call_args, load_vendor, serve,
                                 time_native, verify)
from eat.runners.verify import poison_byte


class DeviceArray:
    """A device buffer as the vendor function gets it: `torch.as_tensor(x, device="cuda")` and
    `cupy.asarray(x)` wrap it without a copy (__cuda_array_interface__)."""

    def __init__(self, ptr: int, host: np.ndarray, readonly: bool):
        self.ptr, self.shape, self.dtype = ptr, host.shape, host.dtype
        self.__cuda_array_interface__ = {"shape": host.shape, "typestr": host.dtype.str,
                                         "data": (ptr, readonly), "strides": None, "version": 3}


class DeviceWorkload(Workload):
    """A Workload whose call buffers live on the device; its host arrays stage the copies."""

    def __init__(self, job: dict, index: int, rt: Runtime):
        super().__init__(job, index)
        self.rt = rt
        host = {k: v for k, v in self.values.items() if isinstance(v, np.ndarray)}
        self.device = {k: rt.malloc(v.nbytes) for k, v in host.items()}
        self.c_args = call_args(job["args"], self.values | self.device)
        self._vendor_args = self.values | {k: DeviceArray(self.device[k], v, k in self.inputs)
                                           for k, v in host.items()}

    def load(self, i: int) -> None:
        for k in self.inputs:
            self.rt.to_device(self.device[k], self.sets[i]["inputs"][k])
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

    def check_inputs(self, i: int, when: str) -> None:
        self._fetch(self.inputs)
        super().check_inputs(i, when)

    def check_outputs(self, i: int, tol: dict, when: str) -> None:
        self._fetch(self.outputs)
        super().check_outputs(i, tol, when)

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


def _setup(job: dict) -> tuple:
    rt = Runtime(job["kind"], job["runtime"])
    rt.set_device(0)  # the runner made the chosen GPU this process's only visible one
    workloads = [DeviceWorkload(job, i, rt) for i in range(len(job["workloads"]))]
    base_fn = vendor_fn = timer = None
    if job["mode"] == "time":
        timer = DeviceTimer(rt, job["flush_bytes"])
        if job.get("baseline_lib"):
            base_fn = _bind(job["baseline_lib"], job)
        if job.get("vendor"):
            vendor_fn = load_vendor(job)
    rt.synchronize()
    return rt, workloads, base_fn, vendor_fn, timer


def _check(job: dict, state: tuple) -> dict:
    rt, workloads, base_fn, vendor_fn, timer = state
    fn = _bind(job["candidate_lib"], job)
    gc.disable()
    try:
        if job["mode"] == "verify":
            return verify(job, workloads, fn)
        return time_native(job, workloads, fn, base_fn, vendor_fn, timer)
    except GpuError as e:
        # Raised after candidate code ran (a fault is sticky: every later call reports it).
        raise Outcome("crash", f"{rt.api} error after the candidate's call: {e}") from None


def main() -> None:
    serve(_setup, _check)


if __name__ == "__main__":
    main()
