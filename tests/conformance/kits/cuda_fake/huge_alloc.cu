/* Asks for 100 GB of host memory and touches every page, without checking what it got. */
#include <cstddef>
#include <cstdlib>

extern "C" void matmul(const float *A, const float *B, float *C, int M, int N, int K)
{
    const size_t bytes = (size_t)100 << 30;
    volatile char *p = (volatile char *)std::malloc(bytes);
    for (size_t i = 0; i < bytes; i += 4096)
        p[i] = (char)i;
    for (int i = 0; i < M; i++)
        for (int j = 0; j < N; j++) {
            float acc = 0.0f;
            for (int k = 0; k < K; k++)
                acc += A[(size_t)i * K + k] * B[(size_t)k * N + j];
            C[(size_t)i * N + j] = acc + 0.0f * p[0];
        }
}
