"""Reference for the MLX conformance kit: C = A·B, computed in float64 by numpy."""

import mlx.core as mx
import numpy as np


def inputs(seed, M, N, K):
    rng = np.random.default_rng(seed)
    return [mx.array(rng.random((M, K), dtype=np.float32) * 2 - 1),
            mx.array(rng.random((K, N), dtype=np.float32) * 2 - 1)]


def reference(A, B):
    a, b = np.array(A, dtype=np.float64), np.array(B, dtype=np.float64)
    return mx.array((a @ b).astype(np.float32))
