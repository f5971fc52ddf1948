/* Correct but slower: the baseline's loop nest, run four times. Timed ("ok"), never rejected. */
#include <cstddef>
#include <cstring>

extern "C" void matmul(const float *A, const float *B, float *C, int M, int N, int K)
{
    for (int rep = 0; rep < 4; rep++) {
        std::memset(C, 0, sizeof(float) * (size_t)M * N);
        for (int i = 0; i < M; i++)
            for (int j = 0; j < N; j++)
                for (int k = 0; k < K; k++)
                    C[(size_t)i * N + j] += A[(size_t)i * K + k] * B[(size_t)k * N + j];
    }
}
