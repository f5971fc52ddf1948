/* Forks in a loop; every child lingers. Growth is linear, not exponential, so a runner that
 * fails to contain it still cannot take the machine down before its wall-clock kill. */
#include <unistd.h>

void matmul(const float *A, const float *B, float *C, int M, int N, int K)
{
    (void)A; (void)B; (void)C; (void)M; (void)N; (void)K;
    for (;;) {
        if (fork() == 0)
            for (;;)
                pause();
    }
}
