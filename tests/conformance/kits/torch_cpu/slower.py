import torch


def matmul(A, B):
    C = torch.stack([(A[i, :, None] * B).sum(0) for i in range(A.shape[0])])
    for _ in range(2):
        C = torch.stack([(A[i, :, None] * B).sum(0) for i in range(A.shape[0])])
    return C
