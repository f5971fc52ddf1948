/* Computes C as the baseline does. On every call it tries to add a line to ../escaped, in the
 * evaluation's folder outside its own (where a cache or a workspace could be), and writes a
 * scratch file in its own folder, which it may: if it cannot, its answer is off by one. */
#include <cstddef>
#include <cstdio>
#include <cstring>

extern "C" void matmul(const float *A, const float *B, float *C, int M, int N, int K)
{
    FILE *out = fopen("../escaped", "a");
    if (out) {
        fputs("written by a candidate\n", out);
        fclose(out);
    }
    std::memset(C, 0, sizeof(float) * (size_t)M * N);
    for (int i = 0; i < M; i++)
        for (int j = 0; j < N; j++)
            for (int k = 0; k < K; k++)
                C[(size_t)i * N + j] += A[(size_t)i * K + k] * B[(size_t)k * N + j];
    FILE *scratch = fopen("scratch", "w");
    if (!scratch || fputs("x", scratch) < 0 || fclose(scratch) != 0)
        C[0] += 1.0f;
}
