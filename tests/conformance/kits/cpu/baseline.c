/* Naive float32 matmul, C = A·B, row-major, C is M×N: the ijk loop nest at the target's -O2.
 * The same loop nest as examples/cpu_matmul/baseline.c with its knobs at their defaults. */
#include <stddef.h>
#include <string.h>

void matmul(const float *A, const float *B, float *C, int M, int N, int K)
{
    memset(C, 0, sizeof(float) * (size_t)M * N);
    for (int i = 0; i < M; i++)
        for (int j = 0; j < N; j++)
            for (int k = 0; k < K; k++)
                C[(size_t)i * N + j] += A[(size_t)i * K + k] * B[(size_t)k * N + j];
}
