/* Never returns (the volatile keeps the compiler from reasoning the loop away). */
void matmul(const float *A, const float *B, float *C, int M, int N, int K)
{
    (void)A; (void)B; (void)C; (void)M; (void)N; (void)K;
    volatile int spin = 1;
    while (spin) {
    }
}
