/* Correct and synchronous, but leaves a host thread spinning (a helper pool that never sleeps):
 * it passes verification, and its CPU use while the baseline is timed must get it rejected. */
#include <atomic>
#include <cstddef>
#include <thread>

__global__ void matmul_elems(const float *A, const float *B, float *C, int M, int N, int K)
{
    int i = blockIdx.y * blockDim.y + threadIdx.y, j = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= M || j >= N)
        return;
    float acc = 0.0f;
    for (int k = 0; k < K; k++)
        acc += A[(size_t)i * K + k] * B[(size_t)k * N + j];
    C[(size_t)i * N + j] = acc;
}

static std::atomic<unsigned long> sink;

extern "C" void matmul(const float *A, const float *B, float *C, int M, int N, int K)
{
    static bool started = [] {
        std::thread([] { for (;;) sink.fetch_add(1, std::memory_order_relaxed); }).detach();
        return true;
    }();
    (void)started;
    dim3 block(16, 16), grid((N + 15) / 16, (M + 15) / 16);
    matmul_elems<<<grid, block>>>(A, B, C, M, N, K);
}
