"""The vendor for cuda_matmul: torch.matmul in full FP32 (cuBLAS SGEMM, TF32 off), what a user
would call.

Only the GPU harness loads this file, when it times (verification uses reference.py, numpy
only). It needs torch built for CUDA and imports it here, at load: before the harness locks
itself down and outside every timed window. The harness hands over its device buffers as
objects with `__cuda_array_interface__`; torch wraps them without a copy. TF32 is off: the
target's tolerance (rtol 1e-4) rules TF32 out for candidates, so the vendor plays by the same
rules.
"""

import torch

torch.backends.cuda.matmul.allow_tf32 = False  # FP32 FMA products and sums, as candidates must

DEVICE = "cuda"  # where the harness's buffers live (tests hand CPU arrays with DEVICE = "cpu")
_tensors: dict[int, tuple] = {}


def _tensor(buffer) -> torch.Tensor:
    """A tensor viewing one of the harness's buffers, made once per buffer (the harness keeps
    its buffers for the whole process): wrapping costs host time the timed call need not pay."""
    if id(buffer) not in _tensors:  # the buffer is kept with its tensor: its id stays unique
        _tensors[id(buffer)] = (buffer, torch.as_tensor(buffer, device=DEVICE))
    return _tensors[id(buffer)][1]


def vendor(A, B, C, M, N, K):
    """C = A·B, written into C."""
    torch.matmul(_tensor(A), _tensor(B), out=_tensor(C))
