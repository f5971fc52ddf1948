import ctypes


def matmul(A, B):
    ctypes.memset(16, 0, 64)  # writes near address 0
    return A @ B
