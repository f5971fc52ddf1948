def matmul(A, B):
    return (A @ B) * 1.01
