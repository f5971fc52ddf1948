/* Does not compile: a missing semicolon and an undeclared name. */
#include <cstddef>

__global__ void matmul_elems(const float *A, const float *B, float *C, int M, int N, int K)
{
    int i = blockIdx.y, j = threadIdx.x;
    C[(size_t)i * N + j] = accumulator   /* never declared, and no ';' */
}

extern "C" void matmul(const float *A, const float *B, float *C, int M, int N, int K)
{
    matmul_elems<<<M, N>>>(A, B, C, M, N, K);
}
