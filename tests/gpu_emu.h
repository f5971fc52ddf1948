/* Just enough of CUDA and HIP to run the examples' kernels on the CPU, so their index
 * arithmetic, edge handling and reductions can be checked on a machine without a GPU.
 *
 * The GPU threads of a block are coroutines (ucontext) on the calling thread, run in rounds:
 * each runs until its next barrier (__syncthreads, or a shuffle, which waits for the whole
 * block), so no thread passes a barrier before every thread has reached it. Blocks run one after
 * another, so `__shared__` (a static local here) is the current block's. Host and device memory
 * are the same. Launches are rewritten by the tests from `k<<<grid, block>>>(args)` to
 * `emu_launch(grid, block, k, args)`. Not emulated: timing, memory spaces, warps that shuffle
 * while others do not (a round whose threads stop at different kinds of barrier aborts).
 */
#pragma once
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <math.h>
#include <ucontext.h>
#include <vector>

struct dim3 {
    unsigned x, y, z;
    dim3(unsigned x = 1, unsigned y = 1, unsigned z = 1) : x(x), y(y), z(z) {}
};

inline dim3 threadIdx, blockIdx, blockDim, gridDim;

#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
#define __shared__ static
#define __launch_bounds__(...)
#define __restrict__ __restrict

struct EmuThread {
    ucontext_t context;
    std::vector<char> stack;
    bool done;
    const char *waiting_at; /* the kind of barrier it stopped at in this round */
};

inline ucontext_t emu_scheduler;
inline std::vector<EmuThread> emu_threads;
inline int emu_current;
inline std::function<void()> emu_body;
inline float emu_lane_value[1024];

inline void emu_wait(const char *barrier)
{
    emu_threads[emu_current].waiting_at = barrier;
    swapcontext(&emu_threads[emu_current].context, &emu_scheduler);
}

inline void __syncthreads() { emu_wait("__syncthreads"); }

inline float emu_shfl_xor(float v, int offset)
{
    emu_lane_value[emu_current] = v;
    emu_wait("shuffle");
    const float other = emu_lane_value[emu_current ^ offset];
    emu_wait("shuffle"); /* nobody overwrites a value before its partner has read it */
    return other;
}
inline float __shfl_xor_sync(unsigned, float v, int offset) { return emu_shfl_xor(v, offset); }
inline float __shfl_xor(float v, int offset, int = 64) { return emu_shfl_xor(v, offset); }

inline int min(int a, int b) { return a < b ? a : b; }

/* Threads are coroutines on one host thread: nothing runs between a read and its write. */
inline unsigned long long atomicAdd(unsigned long long *p, unsigned long long v)
{
    const unsigned long long was = *p;
    *p += v;
    return was;
}

inline void emu_start()
{
    emu_body();
    emu_threads[emu_current].done = true; /* then uc_link returns to the scheduler */
}

template <class... Params, class... Args>
void emu_launch(dim3 grid, dim3 block, void (*kernel)(Params...), Args... args)
{
    const int n = block.x * block.y * block.z;
    if (n < 1 || n > 1024 || (n > 32 && n % 32)) {
        fprintf(stderr, "emu_launch: unsupported block of %d threads\n", n);
        abort();
    }
    gridDim = grid;
    blockDim = block;
    emu_body = [=] { kernel(args...); };
    emu_threads.resize(n);
    for (unsigned b = 0; b < grid.x * grid.y * grid.z; b++) {
        blockIdx = dim3(b % grid.x, b / grid.x % grid.y, b / (grid.x * grid.y));
        for (auto &t : emu_threads) {
            t.stack.resize(64 << 10);
            t.done = false;
            getcontext(&t.context);
            t.context.uc_stack.ss_sp = t.stack.data();
            t.context.uc_stack.ss_size = t.stack.size();
            t.context.uc_link = &emu_scheduler;
            makecontext(&t.context, emu_start, 0);
        }
        for (bool running = true; running;) { /* one round: every thread to its next barrier */
            running = false;
            const char *barrier = nullptr;
            for (emu_current = 0; emu_current < n; emu_current++) {
                EmuThread &t = emu_threads[emu_current];
                if (t.done)
                    continue;
                threadIdx = dim3(emu_current % block.x, emu_current / block.x % block.y,
                                 emu_current / (block.x * block.y));
                t.waiting_at = nullptr;
                swapcontext(&emu_scheduler, &t.context);
                if (t.done)
                    continue;
                if (barrier && barrier != t.waiting_at) {
                    fprintf(stderr, "emu_launch: threads wait at %s and %s at once\n", barrier,
                            t.waiting_at);
                    abort();
                }
                barrier = t.waiting_at;
                running = true;
            }
        }
    }
}

/* How eat/runners/device_check.cu launches when built for the emulator (tests/fake_gpu's
 * fake-gpucc includes this header for it). */
#define EAT_LAUNCH(kernel, grid, block, ...) emu_launch(dim3(grid), dim3(block), kernel, __VA_ARGS__)
