import torch


def matmul(A, B):
    big = torch.ones(1 << 40)  # 4 TiB
    return (A @ B) + big[0] - 1
