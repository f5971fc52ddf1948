// The GPU harness's checks, run on the device so a verified or timed call's outputs need not be
// copied to the host: outputs against expected outputs (within tolerance), inputs against the
// set they were loaded from (bit for bit). Each launcher counts what is off into *bad (a device
// counter the harness zeroes before and reads after); a count of zero is a pass, anything else
// sends the harness to its host comparison, which says what is wrong. Built once per arch by
// the GPU runner with the candidates' compiler (nvcc or hipcc), with -fmad=false under nvcc so
// the tolerance bound rounds as numpy's does. Launches go on the legacy default stream.
#ifdef __HIPCC__
#include <hip/hip_runtime.h>
#endif
#include <cstddef>

#ifndef EAT_LAUNCH // tests/gpu_emu.h defines it to run kernels on the CPU
#define EAT_LAUNCH(kernel, grid, block, ...) kernel<<<grid, block>>>(__VA_ARGS__)
#endif

namespace {

constexpr int kThreads = 256;

unsigned blocks_for(size_t n)
{
    const size_t b = (n + kThreads - 1) / kThreads;
    return b < 1 ? 1 : b > 2048 ? 2048 : (unsigned)b;
}

// Off where |out - ref| > |ref| * rtol + slack (slack = atol + rtol * mean|ref|), or where either
// is not finite (a comparison with NaN is false): verify.py's _close_fast, element for element.
template <class T>
__global__ void far_count(const T *out, const T *ref, size_t n, T rtol, T slack,
                          unsigned long long *bad)
{
    unsigned long long mine = 0;
    const size_t stride = (size_t)gridDim.x * blockDim.x;
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) {
        const T r = ref[i];
        const T d = out[i] - r;
        const T mag = r < 0 ? -r : r;
        T bound = mag * rtol;
        bound += slack;
        if (!((d < 0 ? -d : d) <= bound))
            mine++;
    }
    if (mine)
        atomicAdd(bad, mine);
}

__global__ void differ_count(const unsigned *a, const unsigned *b, size_t words,
                             const unsigned char *ta, const unsigned char *tb, size_t tail,
                             unsigned long long *bad)
{
    unsigned long long mine = 0;
    const size_t stride = (size_t)gridDim.x * blockDim.x;
    const size_t first = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    for (size_t i = first; i < words; i += stride)
        mine += a[i] != b[i];
    if (first == 0)
        for (size_t i = 0; i < tail; i++)
            mine += ta[i] != tb[i];
    if (mine)
        atomicAdd(bad, mine);
}

} // namespace

extern "C" {

int eat_far_f32(const float *out, const float *ref, size_t n, float rtol, float slack,
                unsigned long long *bad)
{
    EAT_LAUNCH(far_count<float>, blocks_for(n), kThreads, out, ref, n, rtol, slack, bad);
    return 0;
}

int eat_far_f64(const double *out, const double *ref, size_t n, double rtol, double slack,
                unsigned long long *bad)
{
    EAT_LAUNCH(far_count<double>, blocks_for(n), kThreads, out, ref, n, rtol, slack, bad);
    return 0;
}

// Bytes of a and b compared as 32-bit words, the last nbytes % 4 one by one (device buffers
// start 256-byte aligned).
int eat_differ(const void *a, const void *b, size_t nbytes, unsigned long long *bad)
{
    const size_t words = nbytes / 4, tail = nbytes % 4;
    const unsigned char *ta = (const unsigned char *)a + 4 * words;
    const unsigned char *tb = (const unsigned char *)b + 4 * words;
    EAT_LAUNCH(differ_count, blocks_for(words), kThreads, (const unsigned *)a,
               (const unsigned *)b, words, ta, tb, tail, bad);
    return 0;
}
}
