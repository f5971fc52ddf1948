import mlx.core as mx
import numpy as np


def matmul(A, B):
    C = A @ B
    mx.eval(C)
    np.asarray(A)[0, 0] = 7.0  # MLX arrays are immutable, their buffers are not
    return C
