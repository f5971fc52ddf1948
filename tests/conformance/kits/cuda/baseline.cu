/* Naive float32 matmul, deliberately slow: one thread per row of C, so only M threads run and
 * each walks N×K products from global memory. The kit's yardstick. */
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
    matmul_rows<<<(M + 63) / 64, 64>>>(A, B, C, M, N, K);
}
