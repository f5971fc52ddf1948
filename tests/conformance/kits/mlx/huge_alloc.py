import mlx.core as mx


def matmul(A, B):
    big = mx.ones((1 << 40,))  # 4 TiB
    mx.eval(big)
    return (A @ B) + big[0] - 1
