// A tuned setting of the baseline's knobs: 128 threads per row reading float4s; a row of up to
// 4096 floats kept in registers (32 per thread), so it is read once and written once; longer
// rows take one online max/sum pass and the write pass; fast exp. tests/test_gpu_examples.py
// checks that this file is the baseline with these knobs rendered (eat.agents.offline.render).
// eat:cflags -O3 -use_fast_math
#define ROW_THREADS 128
#define BLOCK 256
#define VEC 4
#define ONLINE 1
#define ROW_REGS 32
/* Naive float32 row softmax on an NVIDIA GPU: Y[r,:] = exp(X[r,:] - max) / sum, row-major,
 * rows×cols.
 *
 * `softmax` runs on the host and receives device pointers; it launches one kernel and returns
 * without waiting for it (the harness synchronizes the device).
 *
 * Knobs (declared in target.toml): ROW_THREADS, BLOCK, VEC, ONLINE, ROW_REGS, and the nvcc flags,
 * given as a line `// eat:cflags ...`. Their defaults below make the plain kernel: one thread
 * per row, three passes over it (max, exp and sum, scale). Every combination is correct for any
 * shape.
 */
#include <math.h>
#include <stdint.h>

#ifndef ROW_THREADS
#define ROW_THREADS 1 /* threads sharing a row: 1; 2..32 (lanes of one warp, reduced with
                         shuffles); 64..1024 (several warps, reduced through shared memory) */
#endif
#ifndef BLOCK
#define BLOCK 256 /* threads per block (raised to ROW_THREADS if smaller) */
#endif
#ifndef VEC
#define VEC 1 /* floats per load and store (1, 2, 4), on rows whose start is aligned to it */
#endif
#ifndef ONLINE
#define ONLINE 0 /* 0: max pass, sum pass, write pass; 1: one pass keeping a running max and a
                    sum rescaled when the max grows, then the write pass */
#endif
#ifndef ROW_REGS
#define ROW_REGS 0 /* floats of its row each thread keeps in registers (a multiple of VEC): rows
                      of up to ROW_REGS * ROW_THREADS floats are read once and written once;
                      longer rows, and 0, take the passes above */
#endif

#define THREADS (BLOCK > ROW_THREADS ? BLOCK : ROW_THREADS)
#define ROWS_PER_BLOCK (THREADS / ROW_THREADS)
#define LANES (ROW_THREADS < 32 ? ROW_THREADS : 32) /* a row's lanes within one warp */
#define WARPS_PER_ROW (ROW_THREADS / LANES)

struct alignas(4 * VEC) Vec {
    float v[VEC];
};

/* v reduced (max or sum) over the ROW_THREADS threads of this thread's row, in every one of
 * them. Every thread of the block must call it, as it holds shuffles and barriers. */
__device__ float row_reduce(float v, bool is_max)
{
#pragma unroll
    for (int o = LANES / 2; o > 0; o /= 2) {
        const float w = __shfl_xor_sync(0xffffffffu, v, o);
        v = is_max ? fmaxf(v, w) : v + w;
    }
#if WARPS_PER_ROW > 1
    __shared__ float partial[THREADS / 32];
    const int warp = threadIdx.x / 32, first = warp - warp % WARPS_PER_ROW;
    if (threadIdx.x % 32 == 0)
        partial[warp] = v;
    __syncthreads();
    v = partial[first];
#pragma unroll
    for (int w = 1; w < WARPS_PER_ROW; w++)
        v = is_max ? fmaxf(v, partial[first + w]) : v + partial[first + w];
    __syncthreads(); /* the next reduction overwrites partial */
#endif
    return v;
}

/* f(value) for each element of the row this thread reads: n elements from x, in vectors when
 * `vec`, thread `lane` of ROW_THREADS taking every ROW_THREADS-th one. */
template <class F>
__device__ void for_each(const float *x, int n, int lane, bool vec, F f)
{
    if (vec) {
        for (int c = lane; c < n / VEC; c += ROW_THREADS) {
            const Vec v = reinterpret_cast<const Vec *>(x)[c];
#pragma unroll
            for (int k = 0; k < VEC; k++)
                f(v.v[k]);
        }
    } else {
        for (int c = lane; c < n; c += ROW_THREADS)
            f(x[c]);
    }
}

#if ROW_REGS > 0
static_assert(ROW_REGS % VEC == 0, "ROW_REGS is a whole number of vectors");

/* The row in registers: this thread's ROW_REGS floats of it (ROW_REGS / VEC vectors, or single
 * floats), read once, turned into exponentials in place, scaled and written once. Every loop is
 * unrolled, so the array's indices are constants and it stays in registers. Entries past the
 * row's end hold -inf: they add nothing to the max, and exp(-inf) = 0 to the sum. */
__device__ void softmax_in_registers(const float *x, float *y, int n, int lane, bool vec)
{
    float v[ROW_REGS];
    if (vec) {
#pragma unroll
        for (int i = 0; i < ROW_REGS / VEC; i++) {
            const int c = lane + i * ROW_THREADS;
            Vec t;
#pragma unroll
            for (int k = 0; k < VEC; k++)
                t.v[k] = -INFINITY;
            if (c < n / VEC)
                t = reinterpret_cast<const Vec *>(x)[c];
#pragma unroll
            for (int k = 0; k < VEC; k++)
                v[i * VEC + k] = t.v[k];
        }
    } else {
#pragma unroll
        for (int i = 0; i < ROW_REGS; i++) {
            const int c = lane + i * ROW_THREADS;
            v[i] = c < n ? x[c] : -INFINITY;
        }
    }
    float m = -INFINITY;
#pragma unroll
    for (int i = 0; i < ROW_REGS; i++)
        m = fmaxf(m, v[i]);
    const float mx = row_reduce(m, true);
    float s = 0.0f;
#pragma unroll
    for (int i = 0; i < ROW_REGS; i++) {
        v[i] = expf(v[i] - mx);
        s += v[i];
    }
    const float inv = 1.0f / row_reduce(s, false);
    if (vec) {
#pragma unroll
        for (int i = 0; i < ROW_REGS / VEC; i++) {
            const int c = lane + i * ROW_THREADS;
            if (c < n / VEC) {
                Vec t;
#pragma unroll
                for (int k = 0; k < VEC; k++)
                    t.v[k] = v[i * VEC + k] * inv;
                reinterpret_cast<Vec *>(y)[c] = t;
            }
        }
    } else {
#pragma unroll
        for (int i = 0; i < ROW_REGS; i++) {
            const int c = lane + i * ROW_THREADS;
            if (c < n)
                y[c] = v[i] * inv;
        }
    }
}
#endif

/* IN_REGISTERS: the row fits in the threads' registers (ROW_REGS); a kernel of its own, so the
 * passes over longer rows are not held to the registers that one needs. */
template <bool IN_REGISTERS>
__global__ void __launch_bounds__(THREADS)
softmax_kernel(const float *__restrict__ X, float *__restrict__ Y, int rows, int cols)
{
    const int row = blockIdx.x * ROWS_PER_BLOCK + threadIdx.x / ROW_THREADS;
    const int lane = threadIdx.x % ROW_THREADS;
    /* Threads past the last row work on an empty row: they still take part in the
       reductions. */
    const int n = row < rows ? cols : 0;
    const float *x = X + (size_t)(row < rows ? row : 0) * cols;
    float *y = Y + (size_t)(row < rows ? row : 0) * cols;
    const bool vec = VEC > 1 && cols % VEC == 0 && (uintptr_t)x % (4 * VEC) == 0 &&
                     (uintptr_t)y % (4 * VEC) == 0;

#if ROW_REGS > 0
    if (IN_REGISTERS) {
        softmax_in_registers(x, y, n, lane, vec);
        return;
    }
#endif
    float m = -INFINITY, s = 0.0f;
#if ONLINE
    for_each(x, n, lane, vec, [&](float v) {
        if (v > m) {
            s *= expf(m - v);
            m = v;
        }
        s += expf(v - m);
    });
    const float mx = row_reduce(m, true);
    /* A thread that saw no element has m = -inf and s = 0, and adds 0 * 0. */
    const float sum = row_reduce(s * expf(m - mx), false);
#else
    for_each(x, n, lane, vec, [&](float v) { m = fmaxf(m, v); });
    const float mx = row_reduce(m, true);
    for_each(x, n, lane, vec, [&](float v) { s += expf(v - mx); });
    const float sum = row_reduce(s, false);
#endif

    const float inv = 1.0f / sum;
    if (vec) {
        for (int c = lane; c < n / VEC; c += ROW_THREADS) {
            Vec v = reinterpret_cast<const Vec *>(x)[c];
#pragma unroll
            for (int k = 0; k < VEC; k++)
                v.v[k] = expf(v.v[k] - mx) * inv;
            reinterpret_cast<Vec *>(y)[c] = v;
        }
    } else {
        for (int c = lane; c < n; c += ROW_THREADS)
            y[c] = expf(x[c] - mx) * inv;
    }
}

extern "C" void softmax(const float *X, float *Y, int rows, int cols)
{
    const int blocks = (rows + ROWS_PER_BLOCK - 1) / ROWS_PER_BLOCK;
    void (*kernel)(const float *, float *, int, int) = softmax_kernel<false>;
#if ROW_REGS > 0
    if (cols <= ROW_REGS * ROW_THREADS)
        kernel = softmax_kernel<true>;
#endif
    kernel<<<blocks, THREADS>>>(X, Y, rows, cols);
}
