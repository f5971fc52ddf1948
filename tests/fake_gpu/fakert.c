/* A FAKE GPU runtime, for tests only: the machines that run eat's tests have no GPU.
 *
 * It implements the runtime calls eat/runners/gpurt.py binds (cudaMalloc, cudaMemcpy,
 * cudaEventRecord ...) on host memory, so the GPU runner's whole pipeline (compile, verify,
 * time, speedup) can run here with candidates that are plain C++ loops over the "device"
 * pointers. Events read CLOCK_MONOTONIC. cudaLaunchHostFunc runs its function on a new thread
 * and cudaDeviceSynchronize waits for every such thread, which models work a candidate leaves
 * running on a stream after its call returns. Nothing here says anything about real GPUs.
 *
 * Built with -DFAKE_HIP the same calls are named hip*; with -DFAKE_NO_DEVICE it reports no
 * device, as a machine with a runtime but no usable GPU does.
 */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#ifdef FAKE_HIP
#define API(name) hip##name
#define NAME "eat fake GPU (HIP names, host memory)"
#else
#define API(name) cuda##name
#define NAME "eat fake GPU (host memory)"
#endif
/* What it claims to be, so the runner picks an arch as it would for a real GPU: compute
 * capability 9.0 (an H100 or H200) under CUDA names, an MI300X's gfx name under HIP names. */
#define CC_MAJOR 9
#define CC_MINOR 0
#define GCN_ARCH "gfx942:sramecc+:xnack-"
#define GCN_ARCH_OFFSET 1160 /* somewhere past name[256], as in the real struct */

enum { OK = 0, INVALID_VALUE = 1, NO_MEMORY = 2, NO_DEVICE = 100, INVALID_DEVICE = 101 };

const char *API(GetErrorString)(int code)
{
    switch (code) {
    case OK: return "no error";
    case INVALID_VALUE: return "invalid argument";
    case NO_MEMORY: return "out of memory";
    case NO_DEVICE: return "no CUDA-capable device is detected";
    case INVALID_DEVICE: return "invalid device ordinal";
    default: return "unknown error";
    }
}

int API(GetDeviceCount)(int *count)
{
#ifdef FAKE_NO_DEVICE
    *count = 0;
    return NO_DEVICE;
#else
    *count = 1;
    return OK;
#endif
}

int API(SetDevice)(int device) { return device == 0 ? OK : INVALID_DEVICE; }

int API(GetDeviceProperties)(char *props, int device)
{
    if (device != 0)
        return INVALID_DEVICE;
    strcpy(props, NAME); /* name[256] is the first field of the real struct */
#ifdef FAKE_HIP
    strcpy(props + GCN_ARCH_OFFSET, GCN_ARCH);
#endif
    return OK;
}

int API(DeviceGetAttribute)(int *value, int attribute, int device)
{
    if (device != 0)
        return INVALID_DEVICE;
    switch (attribute) {
#ifdef FAKE_HIP
    case 19: *value = 1 << 20; break; /* hipDeviceAttributeL2CacheSize: 1 MiB */
#else
    case 89: *value = 1 << 20; break; /* cudaDevAttrL2CacheSize: 1 MiB */
    case 75: *value = CC_MAJOR; break; /* cudaDevAttrComputeCapabilityMajor */
    case 76: *value = CC_MINOR; break; /* cudaDevAttrComputeCapabilityMinor */
#endif
    default: *value = 0;
    }
    return OK;
}

int API(DriverGetVersion)(int *v) { *v = 13000; return OK; }
int API(RuntimeGetVersion)(int *v) { *v = 13000; return OK; }
int API(CtxResetPersistingL2Cache)(void) { return OK; }
int API(GetLastError)(void) { return OK; }

int API(Malloc)(void **ptr, size_t bytes)
{
    *ptr = aligned_alloc(256, (bytes + 255) / 256 * 256);
    return *ptr ? OK : NO_MEMORY;
}

int API(Free)(void *ptr) { free(ptr); return OK; }

int API(Memcpy)(void *dst, const void *src, size_t bytes, int kind)
{
    (void)kind;
    memmove(dst, src, bytes);
    return OK;
}

int API(Memset)(void *ptr, int value, size_t bytes)
{
    memset(ptr, value, bytes);
    return OK;
}

/* Work "on a stream": one thread per launch, joined by DeviceSynchronize. */
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_t pending[256];
static int npending;

struct host_fn { void (*fn)(void *); void *arg; };

static void *run_host_fn(void *p)
{
    struct host_fn job = *(struct host_fn *)p;
    free(p);
    job.fn(job.arg);
    return NULL;
}

int API(LaunchHostFunc)(void *stream, void (*fn)(void *), void *arg)
{
    (void)stream;
    struct host_fn *job = malloc(sizeof *job);
    if (!job)
        return NO_MEMORY;
    *job = (struct host_fn){fn, arg};
    pthread_mutex_lock(&lock);
    int ok = npending < 256 && pthread_create(&pending[npending], NULL, run_host_fn, job) == 0;
    if (ok)
        npending++;
    pthread_mutex_unlock(&lock);
    if (!ok)
        free(job);
    return ok ? OK : NO_MEMORY;
}

int API(DeviceSynchronize)(void)
{
    pthread_t joining[256];
    pthread_mutex_lock(&lock);
    int n = npending;
    memcpy(joining, pending, sizeof(pthread_t) * n);
    npending = 0;
    pthread_mutex_unlock(&lock);
    for (int i = 0; i < n; i++)
        pthread_join(joining[i], NULL);
    return OK;
}

int API(EventCreate)(struct timespec **event)
{
    *event = calloc(1, sizeof **event);
    return *event ? OK : NO_MEMORY;
}

int API(EventDestroy)(struct timespec *event) { free(event); return OK; }

int API(EventRecord)(struct timespec *event, void *stream)
{
    (void)stream;
    clock_gettime(CLOCK_MONOTONIC, event);
    return OK;
}

int API(EventSynchronize)(struct timespec *event) { (void)event; return OK; }

int API(EventElapsedTime)(float *ms, struct timespec *start, struct timespec *end)
{
    *ms = (float)((end->tv_sec - start->tv_sec) * 1e3 + (end->tv_nsec - start->tv_nsec) / 1e6);
    return OK;
}
