/* Computes C right, then scribbles into its const input A through a cast. */
#include <cstddef>

extern "C" void matmul(const float *A, const float *B, float *C, int M, int N, int K)
{
    for (int i = 0; i < M; i++)
        for (int j = 0; j < N; j++) {
            float acc = 0.0f;
            for (int k = 0; k < K; k++)
                acc += A[(size_t)i * K + k] * B[(size_t)k * N + j];
            C[(size_t)i * N + j] = acc;
        }
    ((float *)A)[0] += 1.0f;
}
