"""Output checks shared by every runner: poisoning before a call, comparison after it."""

from __future__ import annotations

from dataclasses import asdict, dataclass

import numpy as np

_INT_POISON = 0x5A


def poison(out: np.ndarray) -> None:
    """Fill an output so that an element the candidate never writes cannot pass as correct."""
    if out.dtype.kind in "fc":
        out.fill(np.nan)
    else:
        out.view(np.uint8).fill(_INT_POISON)


def poison_byte(dtype) -> int:
    """The byte a device output is filled with (a memset): all ones is a NaN in every float."""
    return 0xFF if np.dtype(dtype).kind in "fc" else _INT_POISON


@dataclass
class Mismatch:
    """Why an output failed, small enough for a log line and a prompt."""

    bad: int
    total: int
    unwritten: int
    max_abs_err: float | None
    first_index: list[int]
    got: float
    want: float

    @property
    def summary(self) -> str:
        idx = ",".join(map(str, self.first_index))
        err = "n/a" if self.max_abs_err is None else f"{self.max_abs_err:.3g}"
        text = (
            f"{self.bad} of {self.total} elements off, max abs error {err}, "
            f"first at [{idx}]: got {self.got:.6g}, want {self.want:.6g}"
        )
        if self.unwritten:
            text += f"; {self.unwritten} never written"
        return text

    def as_dict(self) -> dict:
        return asdict(self)


def _close_fast(out: np.ndarray, ref: np.ndarray, rtol: float, atol: float) -> bool:
    """True when every element is finite and within tolerance, in the arrays' own float type:
    the common case of a timed call's check, at a fraction of compare()'s float64 cost (its
    rounding, ~1e-7 relative, is far inside any rtol). False sends compare() the slow way."""
    if out.dtype != ref.dtype or out.dtype.kind != "f":
        return False
    with np.errstate(invalid="ignore", over="ignore"):
        mag = np.abs(ref)
        scale = mag.mean(dtype=np.float64)
        if not np.isfinite(scale):
            return False
        bound = mag * ref.dtype.type(rtol)
        bound += ref.dtype.type(atol + rtol * scale)
        return bool((np.abs(out - ref) <= bound).all())


def compare(out: np.ndarray, ref: np.ndarray, rtol: float, atol: float) -> Mismatch | None:
    """None when `out` matches `ref` (same NaN/Inf positions, finite values within tolerance).

    Finite values pass where |out - ref| <= atol + rtol * (|ref| + mean|ref|).
    """
    if out.shape != ref.shape:
        raise ValueError(f"shape {out.shape} != {ref.shape}")
    if _close_fast(out, ref, rtol, atol):
        return None
    if out.dtype.kind not in "fc":
        ok = out == ref
        unwritten = 0
        err = np.abs(out.astype(np.float64) - ref.astype(np.float64))
    else:
        o, r = out.astype(np.float64), ref.astype(np.float64)
        fin = np.isfinite(r)
        scale = float(np.abs(r[fin]).mean()) if fin.any() else 0.0
        with np.errstate(invalid="ignore"):
            err = np.abs(o - r)
            ok = np.where(
                fin,
                err <= atol + rtol * (np.abs(r) + scale),
                (np.isnan(r) & np.isnan(o)) | (r == o),
            )
        unwritten = int((np.isnan(o) & ~np.isnan(r)).sum())
    if ok.all():
        return None
    bad_idx = np.argwhere(~ok)
    first = tuple(bad_idx[0])
    finite_err = err[~ok & np.isfinite(err)]
    return Mismatch(
        bad=len(bad_idx),
        total=out.size,
        unwritten=unwritten,
        max_abs_err=float(finite_err.max()) if finite_err.size else None,
        first_index=[int(i) for i in first],
        got=float(out[first]),
        want=float(ref[first]),
    )
