"""Reference for cuda_matmul (computed on the host from the same inputs)."""

import numpy as np


def reference(A, B, M, N, K):
    """C = A·B, accumulated in float64 so the reference itself adds no float32 rounding."""
    return A.astype(np.float64) @ B.astype(np.float64)
