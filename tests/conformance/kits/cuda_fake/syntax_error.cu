/* Does not compile: a missing semicolon and an undeclared name. */
#include <cstddef>

extern "C" void matmul(const float *A, const float *B, float *C, int M, int N, int K)
{
    for (int i = 0; i < M; i++)
        for (int j = 0; j < N; j++)
            C[(size_t)i * N + j] = accumulator   /* never declared, and no ';' */
}
