/* Correct but slower: the baseline's kernel, launched four times. A runner must time it ("ok",
 * speedup well under 1), not reject it: being slow is not misbehaviour. */
#include <cstddef>

__global__ void matmul_rows(const float *A, const float *B, float *C, int M, int N, int K)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= M)
        return;
    for (int j = 0; j < N; j++) {
        float acc = 0.0f;
        for (int k = 0; k < K; k++)
            acc += A[(size_t)i * K + k] * B[(size_t)k * N + j];
        C[(size_t)i * N + j] = acc;
    }
}

extern "C" void matmul(const float *A, const float *B, float *C, int M, int N, int K)
{
    for (int rep = 0; rep < 4; rep++)
        matmul_rows<<<(M + 63) / 64, 64>>>(A, B, C, M, N, K);
}
