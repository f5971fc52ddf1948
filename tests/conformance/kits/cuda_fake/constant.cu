/* Writes every output element (nothing is left poisoned) but with a constant. */
#include <cstddef>

extern "C" void matmul(const float *, const float *, float *C, int M, int N, int)
{
    for (size_t i = 0; i < (size_t)M * N; i++)
        C[i] = 1.0f;
}
