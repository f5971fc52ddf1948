"""A small ctypes binding of the CUDA runtime (libcudart) and of HIP (libamdhip64).

The two APIs mirror each other call for call (cudaMalloc / hipMalloc, same arguments, same
memcpy kinds), so one class serves both through a name prefix. Only what the GPU harness needs is
bound. `EAT_GPU_RUNTIME` (a library path) overrides which library is loaded: tests point it at
a fake runtime that works on host memory. Dependency-free and without side effects at import:
the contained harness imports it.

`python -m eat.runners.gpurt KIND [LIBRARY]` prints one tagged JSON line describing device 0:
the GPU runner's probe, run in a child because a broken driver can hang or crash its caller.
"""

from __future__ import annotations

import ctypes
import json
import os
import re
import sys

ENV = "EAT_GPU_RUNTIME"
PREFIX = {"cuda": "cuda", "rocm": "hip"}
API = {"cuda": "CUDA", "rocm": "HIP"}
LIBRARIES = {
    "cuda": (
        "libcudart.so",
        "libcudart.so.13",
        "libcudart.so.12",
        "libcudart.so.11.0",
        "/usr/local/cuda/lib64/libcudart.so",
    ),
    "rocm": (
        "libamdhip64.so",
        "libamdhip64.so.6",
        "libamdhip64.so.5",
        "/opt/rocm/lib/libamdhip64.so",
    ),
}
# cudaDevAttrL2CacheSize and hipDeviceAttributeL2CacheSize: the one attribute whose number differs.
_L2_ATTRIBUTE = {"cuda": 89, "rocm": 19}
# cudaDevAttrComputeCapabilityMajor and Minor (CUDA's numbering; HIP names AMD GPUs by gfx name).
_CC_ATTRIBUTES = (75, 76)
# The properties struct grew over releases: only its first field (char name[256]) is read at a
# fixed place; HIP's gcnArchName ("gfx942:sramecc+:xnack-") is found by its form.
_PROPERTIES = ("GetDeviceProperties_v2", "GetDevicePropertiesR0600", "GetDeviceProperties")
_GCN_ARCH = re.compile(rb"(?<![!-~])(gfx[0-9a-f]{3,4})((?::[A-Za-z0-9+-]+)*)\0")
# cudaMemcpyHostToDevice, DeviceToHost, DeviceToDevice (hip's are the same)
_H2D, _D2H, _D2D = 1, 2, 3
PROBE_TAG = "EAT-GPU-PROBE "

_P, _I, _S = ctypes.c_void_p, ctypes.c_int, ctypes.c_size_t
_ARGTYPES = {
    "GetDeviceCount": [_P],
    "SetDevice": [_I],
    "Malloc": [_P, _S],
    "Free": [_P],
    "Memcpy": [_P, _P, _S, _I],
    "Memset": [_P, _I, _S],
    "DeviceSynchronize": [],
    "GetLastError": [],
    "EventCreate": [_P],
    "EventDestroy": [_P],
    "EventRecord": [_P, _P],
    "EventSynchronize": [_P],
    "EventElapsedTime": [_P, _P, _P],
    "DeviceGetAttribute": [_P, _I, _I],
    "DriverGetVersion": [_P],
    "RuntimeGetVersion": [_P],
    "CtxResetPersistingL2Cache": [],
}


class GpuError(RuntimeError):
    """A runtime call failed; the message carries the runtime's own error string."""

    def __init__(self, message: str, code: int | None = None):
        super().__init__(message)
        self.code = code


class Runtime:
    """The CUDA or HIP runtime of this process, loaded from `library` (else $EAT_GPU_RUNTIME,
    else the usual names)."""

    def __init__(self, kind: str, library: str | None = None):
        self.kind, self.prefix, self.api = kind, PREFIX[kind], API[kind]
        self.lib = _open(kind, library or os.environ.get(ENV))
        err = self._symbol("GetErrorString")
        if err is None:
            raise GpuError(
                f"{self.lib._name} is not a {self.api} runtime (no {self.prefix}GetErrorString)"
            )
        err.restype, err.argtypes = ctypes.c_char_p, [_I]
        self._error_string = err
        self.path = _library_path(err) or self.lib._name

    def _symbol(self, name: str):
        fn = getattr(self.lib, self.prefix + name, None)
        if fn is not None and name in _ARGTYPES:
            fn.restype, fn.argtypes = _I, _ARGTYPES[name]
        return fn

    def call(self, name: str, *args) -> None:
        fn = self._symbol(name)
        if fn is None:
            raise GpuError(f"{self.prefix}{name} is missing from {self.path}")
        code = fn(*args)
        if code:
            raise GpuError(f"{self.prefix}{name} failed: {self.error_string(code)}", code)

    def error_string(self, code: int) -> str:
        text = self._error_string(code)
        return f"{text.decode(errors='replace') if text else 'unknown error'} (error {code})"

    # -- devices -----------------------------------------------------------------------------

    def device_count(self) -> int:
        n = _I()
        self.call("GetDeviceCount", ctypes.byref(n))
        return n.value

    def set_device(self, index: int) -> None:
        self.call("SetDevice", index)

    def attribute(self, attribute: int, device: int = 0) -> int:
        value = _I()
        self.call("DeviceGetAttribute", ctypes.byref(value), attribute, device)
        return value.value

    def l2_bytes(self, device: int = 0) -> int:
        return self.attribute(_L2_ATTRIBUTE[self.kind], device)

    def _properties(self, device: int) -> bytes | None:
        """The device's properties struct as raw bytes (None: the runtime has no such call)."""
        props = ctypes.create_string_buffer(16 << 10)  # larger than any release's struct
        for variant in _PROPERTIES:
            fn = getattr(self.lib, self.prefix + variant, None)
            if fn is not None:
                fn.restype, fn.argtypes = _I, [_P, _I]
                code = fn(props, device)
                if code:
                    raise GpuError(
                        f"{self.prefix}{variant} failed: {self.error_string(code)}", code
                    )
                return props.raw
        return None

    def name(self, device: int = 0) -> str:
        raw = self._properties(device)
        return raw.split(b"\0", 1)[0].decode(errors="replace").strip() if raw else "unknown"

    def compute_capability(self, device: int = 0) -> tuple[int, int]:
        """(major, minor) of a CUDA device, e.g. (9, 0) for an H100 or H200."""
        major, minor = (self.attribute(a, device) for a in _CC_ATTRIBUTES)
        return major, minor

    def gcn_arch(self, device: int = 0) -> str | None:
        """A HIP device's gfx name with its target features, e.g. 'gfx942:sramecc+:xnack-'."""
        raw = self._properties(device)
        found = _GCN_ARCH.search(raw) if raw else None
        return found and (found[1] + (found[2] or b"")).decode()

    def versions(self) -> tuple[int, int]:
        """(driver, runtime) versions, e.g. 13000 for CUDA 13.0."""
        driver, runtime = _I(), _I()
        self.call("DriverGetVersion", ctypes.byref(driver))
        self.call("RuntimeGetVersion", ctypes.byref(runtime))
        return driver.value, runtime.value

    # -- memory ------------------------------------------------------------------------------

    def malloc(self, nbytes: int) -> int:
        ptr = _P()
        self.call("Malloc", ctypes.byref(ptr), max(1, nbytes))
        assert ptr.value is not None  # a Malloc that succeeded set a non-NULL pointer
        return ptr.value

    def free(self, ptr: int) -> None:
        self.call("Free", ptr)

    def to_device(self, ptr: int, host) -> None:
        """Copy a C-contiguous numpy array into device memory at `ptr`."""
        self.call("Memcpy", ptr, host.ctypes.data, host.nbytes, _H2D)

    def to_host(self, host, ptr: int) -> None:
        self.call("Memcpy", host.ctypes.data, ptr, host.nbytes, _D2H)

    def copy_on_device(self, dst: int, src: int, nbytes: int) -> None:
        self.call("Memcpy", dst, src, nbytes, _D2D)

    def memset(self, ptr: int, byte: int, nbytes: int) -> None:
        self.call("Memset", ptr, byte, nbytes)

    # -- ordering and time -------------------------------------------------------------------

    def synchronize(self) -> None:
        """Wait for all work on the device, from any stream (and any thread of this process)."""
        self.call("DeviceSynchronize")

    def check_last_error(self) -> None:
        """Raise the error a failed launch left behind (and clear it)."""
        fn = self._symbol("GetLastError")
        code = fn() if fn is not None else 0
        if code:
            raise GpuError(f"a launch failed: {self.error_string(code)}", code)

    def event(self) -> int:
        ev = _P()
        self.call("EventCreate", ctypes.byref(ev))
        assert ev.value is not None  # an EventCreate that succeeded set a non-NULL handle
        return ev.value

    def record(self, event: int) -> None:
        self.call("EventRecord", event, None)  # on the legacy default stream

    def elapsed_s(self, start: int, end: int) -> float:
        """Seconds between two recorded events, once `end` has happened."""
        self.call("EventSynchronize", end)
        ms = ctypes.c_float()
        self.call("EventElapsedTime", ctypes.byref(ms), start, end)
        return ms.value / 1e3

    def reset_persisting_l2(self) -> None:
        """Drop lines pinned in L2 by an access policy, where the runtime can (CUDA 11+)."""
        if self._symbol("CtxResetPersistingL2Cache") is not None:
            self.call("CtxResetPersistingL2Cache")


def _open(kind: str, library: str | None) -> ctypes.CDLL:
    # RTLD_LOCAL: candidates built by nvcc carry their own (static) runtime; ours must not
    # interpose on its symbols.
    names = (library,) if library else LIBRARIES[kind]
    errors = []
    for name in names:
        try:
            return ctypes.CDLL(name, mode=os.RTLD_NOW | os.RTLD_LOCAL)
        except OSError as e:
            errors.append(str(e))
    raise GpuError(f"cannot load the {API[kind]} runtime: {errors[0]}")


def _library_path(fn) -> str | None:
    """The file a loaded symbol comes from (dladdr), so children load the very same library."""

    class DlInfo(ctypes.Structure):
        _fields_ = [
            ("fname", ctypes.c_char_p),
            ("fbase", _P),
            ("sname", ctypes.c_char_p),
            ("saddr", _P),
        ]

    info = DlInfo()
    for lib in (None, "libdl.so.2"):
        try:
            dladdr = ctypes.CDLL(lib).dladdr
        except (OSError, AttributeError):
            continue
        dladdr.restype, dladdr.argtypes = _I, [_P, _P]
        if dladdr(ctypes.cast(fn, _P), ctypes.byref(info)) and info.fname:
            return os.path.realpath(info.fname.decode())
    return None


def describe(kind: str, library: str | None = None) -> dict:
    """What the runner needs to know about device 0, or why there is none to use."""
    try:
        rt = Runtime(kind, library)
    except GpuError as e:
        return {"reason": str(e)}
    try:
        count = rt.device_count()
        if count < 1:
            return {"reason": f"no {rt.api} device: {rt.prefix}GetDeviceCount found none"}
        rt.set_device(0)
        driver, runtime = rt.versions()
        info = {
            "library": rt.path,
            "devices": count,
            "name": rt.name(0),
            "l2_bytes": rt.l2_bytes(0),
            "driver": driver,
            "runtime": runtime,
        }
    except GpuError as e:
        return {"reason": f"no {rt.api} device: {e}"}
    # What the GPU runner builds for; a runtime that cannot say leaves the compiler's default.
    try:
        if kind == "cuda":
            info["compute_capability"] = list(rt.compute_capability(0))
        elif gcn := rt.gcn_arch(0):
            info["gcn_arch"] = gcn
    except GpuError as e:
        info["arch_note"] = str(e)
    return info


if __name__ == "__main__":
    kind, library = sys.argv[1], (sys.argv[2] if len(sys.argv) > 2 else None)
    print(PROBE_TAG + json.dumps(describe(kind, library)), flush=True)
