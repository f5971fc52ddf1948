"""`python -m eat.formats.fit`: the sizes at which an imported PyTorch problem fits the CPU.

Benchmark suites size their problems for a GPU (KernelBench's ReLU takes a 6.4 GB tensor); on
one CPU core such a problem cannot even be held. `eat import ... --runner cpu` (`--sizes fit`)
runs this in a child, where torch is imported, with the target's reference file and its
workload: it keeps the published sizes where inputs, outputs and parameters fit `max_bytes` and a
reference call takes under `max_call_s` on one thread, and otherwise halves the largest size
constant (never one under 16, never one that leaves the model unbuildable or its forward
failing) until they do. Bytes are counted, and a halving checked, on torch's meta device, so a
6 GB problem allocates nothing; a model the meta device cannot build (one that reads a value
from a tensor as it is built) has its halvings checked by real calls. The answer is one
tagged line: {"params", "bytes", "call_s"} or {"error"}.
"""

from __future__ import annotations

import json
import sys
import time

TAG = "EAT-FIT "
SMALLEST = 16  # a size constant under this (a kernel size, a stride) is never halved


def _tensors(value):
    """The tensors in a nest of lists, tuples and dicts."""
    import torch

    if isinstance(value, torch.Tensor):
        yield value
    elif isinstance(value, (list, tuple)):
        for v in value:
            yield from _tensors(v)
    elif isinstance(value, dict):
        for v in value.values():
            yield from _tensors(v)


class ProblemError(Exception):
    """The problem itself fails on the CPU: which part of it, and how."""


def _part(what: str, fn, *args, **kwargs):
    """fn(*args, **kwargs); a failure not of memory as ProblemError, naming `what` failed."""
    try:
        return fn(*args, **kwargs)
    except Exception as e:
        if isinstance(e, MemoryError) or (isinstance(e, RuntimeError) and "allocate" in str(e)):
            raise
        gpu = " (it needs a GPU: import it with --runner cuda)" if "CUDA" in str(e) else ""
        raise ProblemError(f"{what}: {type(e).__name__}: {e}"[:300] + gpu) from None


def fit(reference: str, params: dict, max_bytes: int, max_call_s: float) -> dict:
    import torch

    from eat.runners.inputs import load_py

    torch.set_num_threads(1)  # the CPU runner times on one core
    mod = load_py(reference, "reference")

    def build(p: dict, device: str):
        with torch.device(device):
            init = _part("get_init_inputs() failed", mod.init_inputs, **p)
            model = _part("its Model does not build", mod.Model, *init)
            return model, _part("get_inputs() failed", mod.inputs, 0, **p)

    def held(model, args, out) -> int:
        """Bytes of the inputs, outputs and parameters."""
        tensors = [*_tensors(args), *_tensors(out), *model.parameters(), *model.buffers()]
        return sum(t.numel() * t.element_size() for t in tensors)

    def nbytes(p: dict) -> int:
        """held(), on the meta device; a model whose sizes do not go together raises."""
        model, args = build(p, "meta")
        out = None
        try:
            with torch.no_grad():
                out = model(*args)  # shapes only: a size that breaks the forward shows here
        except NotImplementedError:
            pass  # an op without a meta kernel: the real call below decides
        return held(model, args, out)

    measured: dict[tuple, tuple[float, int]] = {}

    def call_s(p: dict) -> float:
        """One reference call's seconds, after a first one; inf when it cannot be held."""
        return real(p)[0]

    def real(p: dict) -> tuple[float, int]:
        """call_s and held() of a real call at sizes p, measured once per p."""
        key = tuple(sorted(p.items()))
        if key not in measured:
            measured[key] = _real(p)
        return measured[key]

    def _real(p: dict) -> tuple[float, int]:
        try:
            model, args = build(p, "cpu")
            with torch.no_grad():
                out = _part("its forward failed", model, *args)
                t0 = time.perf_counter()
                model(*args)
        except (MemoryError, RuntimeError) as e:
            if isinstance(e, RuntimeError) and "allocate" not in str(e):
                raise
            return float("inf"), 0
        return time.perf_counter() - t0, held(model, args, out)

    try:
        size, meta = nbytes(params), True
    except Exception:  # a model the meta device cannot build: real calls size it
        size, meta = 0, False
    fixed: set[str] = set()

    def halved(p: dict) -> dict | None:
        """p with its largest halvable size halved; None when none is left."""
        while True:
            sizes = [
                k
                for k, v in p.items()
                if isinstance(v, int)
                and not isinstance(v, bool)
                and v >= SMALLEST
                and k not in fixed
            ]
            if not sizes:
                return None
            k = max(sizes, key=lambda k: (p[k], k))
            # Alone, else with every size equal to it (sizes that must match: a loss whose
            # predictions are batch x dim and targets batch, broadcast against each other).
            for keys in ([k], [j for j in sizes if p[j] == p[k]]):
                smaller = p | {j: p[j] // 2 for j in keys}
                try:
                    if meta:
                        nbytes(smaller)
                    else:  # a real call, affordable: the larger sizes before it ran already
                        call_s(smaller)
                    return smaller
                except Exception:
                    pass
            fixed.add(k)  # halving it breaks the model (a divisibility, a fixed layer)

    p = dict(params)
    while size > max_bytes and (smaller := halved(p)) is not None:
        p, size = smaller, nbytes(smaller)
    took = call_s(p)
    while took > max_call_s and (smaller := halved(p)) is not None:
        p = smaller
        took = call_s(p)
    if took == float("inf"):
        raise MemoryError("the reference cannot be held in memory at any size tried")
    if not meta:
        size = real(p)[1]  # counted on the real device, from the call that timed it
    return {"params": p, "bytes": size, "call_s": took}


def main() -> None:
    job = json.loads(sys.stdin.read())
    try:
        answer = fit(**job)
    except ProblemError as e:  # the problem itself fails: its get_inputs, its Model
        answer = {"error": str(e)}
    except ModuleNotFoundError as e:  # KernelBench's Mamba2 problems import einops
        answer = {"error": f"it imports {e.name}, which eat's Python lacks: install it there"}
    except Exception as e:
        answer = {"error": f"{type(e).__name__}: {e}"[:300]}
    print(TAG + json.dumps(answer), flush=True)


if __name__ == "__main__":
    main()
