// eat:cflags -O2 -pthread
/* Correct and synchronous, but leaves a thread spinning (a helper pool that never sleeps): it
 * passes verification, and its CPU use while the baseline is timed must get it rejected. */
#include <pthread.h>
#include <stddef.h>

static volatile unsigned long sink;
static void *spin(void *arg) { (void)arg; for (;;) sink++; return NULL; }

void matmul(const float *A, const float *B, float *C, int M, int N, int K)
{
    static int started;
    if (!started) {
        pthread_t t;
        started = pthread_create(&t, NULL, spin, NULL) == 0;
        if (started) pthread_detach(t);
    }
    for (int i = 0; i < M; i++)
        for (int j = 0; j < N; j++) {
            float acc = 0.0f;
            for (int k = 0; k < K; k++)
                acc += A[(size_t)i * K + k] * B[(size_t)k * N + j];
            C[(size_t)i * N + j] = acc;
        }
}
