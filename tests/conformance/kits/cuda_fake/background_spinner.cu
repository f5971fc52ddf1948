/* Correct and synchronous, but leaves a thread spinning (a helper pool that never sleeps): it
 * passes verification, and its CPU use while the baseline is timed must get it rejected. */
#include <atomic>
#include <cstddef>
#include <thread>

static std::atomic<unsigned long> sink;

extern "C" void matmul(const float *A, const float *B, float *C, int M, int N, int K)
{
    static bool started = [] {
        std::thread([] { for (;;) sink.fetch_add(1, std::memory_order_relaxed); }).detach();
        return true;
    }();
    (void)started;
    for (int i = 0; i < M; i++)
        for (int j = 0; j < N; j++) {
            float acc = 0.0f;
            for (int k = 0; k < K; k++)
                acc += A[(size_t)i * K + k] * B[(size_t)k * N + j];
            C[(size_t)i * N + j] = acc;
        }
}
