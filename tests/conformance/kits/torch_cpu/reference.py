"""Reference for the torch conformance kit: C = A·B, accumulated in float64."""

import torch


def inputs(seed, M, N, K):
    g = torch.Generator().manual_seed(seed)
    return [torch.rand(M, K, generator=g) * 2 - 1, torch.rand(K, N, generator=g) * 2 - 1]


def reference(A, B):
    return (A.double() @ B.double()).float()
