def matmul(A, B):
    C = A @ B
    A.mul_(2)  # scribbles on an input
    return C
