def matmul(A, B):
    while True:
        pass
