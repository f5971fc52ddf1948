/* Writes through a wild pointer (one the optimizer cannot see is bad): SIGSEGV. */
#include <stdint.h>

void matmul(const float *A, const float *B, float *C, int M, int N, int K)
{
    (void)A; (void)B; (void)C; (void)M; (void)N; (void)K;
    volatile uintptr_t address = 16;
    *(float *)address = 1.0f;
}
