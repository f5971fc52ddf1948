import mlx.core as mx


def matmul(A, B):
    # Four times the baseline's work (each row computed at four exact power-of-two scales),
    # and one evaluation per row: clearly slower however the machine is loaded.
    rows = []
    for i in range(A.shape[0]):
        parts = [((A[i, :, None] * s) * B).sum(axis=0) / s for s in (1.0, 2.0, 4.0, 8.0)]
        row = (parts[0] + parts[1] + parts[2] + parts[3]) / 4.0
        mx.eval(row)
        rows.append(row)
    return mx.stack(rows)
