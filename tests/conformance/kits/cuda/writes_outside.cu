/* Computes C as the baseline does. On every call its host code tries to add a line to
 * ../escaped, in the evaluation's folder outside its own (where a cache or a workspace could
 * be), and writes a scratch file in its own folder, which it may: if it cannot, it computes
 * nothing, and C is wrong. */
#include <cstddef>
#include <cstdio>

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
    FILE *out = std::fopen("../escaped", "a");
    if (out) {
        std::fputs("written by a candidate\n", out);
        std::fclose(out);
    }
    FILE *scratch = std::fopen("scratch", "w");
    if (!scratch || std::fputs("x", scratch) < 0 || std::fclose(scratch) != 0)
        return;
    matmul_rows<<<(M + 63) / 64, 64>>>(A, B, C, M, N, K);
}
