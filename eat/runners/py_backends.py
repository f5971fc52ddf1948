"""The frameworks the Python runner's child works in (torch on a CPU or GPU, MLX), behind one
backend interface: moving arrays to the device and back, copying, poisoning, comparing where the
arrays are, synchronizing and timing. Imported only in that child (py_harness.py)."""

from __future__ import annotations

import time

import numpy as np

from eat.runners.job import MakeSets, PythonJob
from eat.runners.verify import poison


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
            "torch.float8"
        ):
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
        self.mx.eval([a for _, a in arrays_in(out, self.is_array)])

    def time(self, call) -> float:
        t0 = time.perf_counter_ns()
        call()  # Case.run: the call and the evaluation of its outputs
        self.mx.synchronize()
        return (time.perf_counter_ns() - t0) / 1e9


def backend(job: MakeSets | PythonJob):
    """The job's framework on its device."""
    return (MlxBackend if job["framework"] == "mlx" else TorchBackend)(job["device"])


def arrays_in(value, is_array, label: str = "output") -> list[tuple[str, object]]:
    """(label, array) for every array in a nest of tuples, lists and dicts."""
    if is_array(value):
        return [(label, value)]
    if isinstance(value, (tuple, list)):
        return [
            leaf for i, v in enumerate(value) for leaf in arrays_in(v, is_array, f"{label}[{i}]")
        ]
    if isinstance(value, dict):
        return [
            leaf for k, v in value.items() for leaf in arrays_in(v, is_array, f"{label}[{k!r}]")
        ]
    return []
