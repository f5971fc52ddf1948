/* Writes every output element (nothing is left poisoned) but with a constant. */
#include <stddef.h>

void matmul(const float *A, const float *B, float *C, int M, int N, int K)
{
    (void)A; (void)B; (void)K;
    for (size_t i = 0; i < (size_t)M * N; i++)
        C[i] = 1.0f;
}
