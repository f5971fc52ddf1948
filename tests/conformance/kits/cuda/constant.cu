/* Writes every output element (nothing is left poisoned) but with a constant. */
#include <cstddef>

__global__ void fill(float *C, size_t n)
{
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n)
        C[i] = 1.0f;
}

extern "C" void matmul(const float *, const float *, float *C, int M, int N, int)
{
    size_t n = (size_t)M * N;
    fill<<<(unsigned)((n + 255) / 256), 256>>>(C, n);
}
