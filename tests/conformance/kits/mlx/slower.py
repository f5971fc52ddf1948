import mlx.core as mx


def matmul(A, B):
    rows = []
    for i in range(A.shape[0]):
        row = (A[i, :, None] * B).sum(axis=0)
        mx.eval(row)  # one evaluation per row: no batching at all
        rows.append(row)
    return mx.stack(rows)
