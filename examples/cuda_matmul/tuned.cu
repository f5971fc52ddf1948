// A tuned setting of the baseline's knobs: 16×16 threads, each computing 8×8 elements of a
// 128×128 tile of C from 16-deep shared slices. tests/test_gpu_examples.py checks that this
// file is the baseline with these knobs rendered (eat.agents.offline.render).
// eat:cflags -O3
#define TILE 16
#define WPT 8
#define UNROLL 16
/* Naive float32 matmul on an NVIDIA GPU: C = A·B, row-major, A is M×K, B is K×N, C is M×N.
 *
 * `matmul` runs on the host and receives device pointers; it launches one kernel and returns
 * without waiting for it (the harness synchronizes the device).
 *
 * Knobs (declared in target.toml): TILE, WPT, UNROLL, and the nvcc flags, given as a line
 * `// eat:cflags ...`. Their defaults below make the plain kernel: one thread per element of C,
 * reading A and B straight from global memory. Every combination is correct for any M, N, K.
 */

#ifndef TILE
#define TILE 0 /* 0: no shared memory, 16×16 threads; 8, 16, 32: TILE×TILE threads stage BK-deep
                  slices of A and B in shared memory and compute from there */
#endif
#ifndef WPT
#define WPT 1 /* register blocking: each thread computes WPT×WPT elements of C */
#endif
#ifndef UNROLL
#define UNROLL 1 /* unroll factor of the loop over k */
#endif

#define THREADS (TILE ? TILE : 16) /* edge of the thread block */
#define BM (THREADS * WPT)         /* edge of the block's tile of C */
#define BK 16                      /* depth of a shared-memory slice (TILE > 0) */
#define NT (THREADS * THREADS)     /* threads per block */

#define PRAGMA_(x) _Pragma(#x)
#define PRAGMA(x) PRAGMA_(x)

/* Thread (tx, ty) owns rows row0 + i*THREADS and columns col0 + j*THREADS (i, j < WPT), so
 * neighbouring threads own neighbouring columns: loads of B and stores of C are coalesced, and
 * reads of the shared slices are free of bank conflicts. */
__global__ void __launch_bounds__(NT)
matmul_kernel(const float *__restrict__ A, const float *__restrict__ B, float *__restrict__ C,
              int M, int N, int K)
{
    const int tx = threadIdx.x, ty = threadIdx.y;
    const int row0 = blockIdx.y * BM + ty, col0 = blockIdx.x * BM + tx;
    float acc[WPT][WPT] = {};
    float a[WPT], b[WPT];

#if TILE == 0
    PRAGMA(unroll UNROLL)
    for (int k = 0; k < K; k++) {
        /* Indices clamped to the last row and column: threads past an edge read valid memory,
           and their results are never stored. */
#pragma unroll
        for (int i = 0; i < WPT; i++)
            a[i] = A[(size_t)min(row0 + i * THREADS, M - 1) * K + k];
#pragma unroll
        for (int j = 0; j < WPT; j++)
            b[j] = B[(size_t)k * N + min(col0 + j * THREADS, N - 1)];
#pragma unroll
        for (int i = 0; i < WPT; i++)
#pragma unroll
            for (int j = 0; j < WPT; j++)
                acc[i][j] = fmaf(a[i], b[j], acc[i][j]);
    }
#else
    /* The +1 column puts the rows a warp reads at once (ty and its neighbours) in different
       banks. */
    __shared__ float As[BM][BK + 1];
    __shared__ float Bs[BK][BM];
    const int tid = ty * THREADS + tx;
    for (int k0 = 0; k0 < K; k0 += BK) {
        /* The whole block copies both slices; elements past an edge of A or B are zeros, so a
           partial last slice adds nothing. */
#pragma unroll
        for (int l = 0; l < (BM * BK + NT - 1) / NT; l++) {
            const int e = tid + l * NT, r = e / BK, c = e % BK;
            const int gr = blockIdx.y * BM + r, gc = k0 + c;
            if (e < BM * BK)
                As[r][c] = gr < M && gc < K ? A[(size_t)gr * K + gc] : 0.0f;
        }
#pragma unroll
        for (int l = 0; l < (BM * BK + NT - 1) / NT; l++) {
            const int e = tid + l * NT, r = e / BM, c = e % BM;
            const int gr = k0 + r, gc = blockIdx.x * BM + c;
            if (e < BM * BK)
                Bs[r][c] = gr < K && gc < N ? B[(size_t)gr * N + gc] : 0.0f;
        }
        __syncthreads();
        PRAGMA(unroll UNROLL)
        for (int k = 0; k < BK; k++) {
#pragma unroll
            for (int i = 0; i < WPT; i++)
                a[i] = As[ty + i * THREADS][k];
#pragma unroll
            for (int j = 0; j < WPT; j++)
                b[j] = Bs[k][tx + j * THREADS];
#pragma unroll
            for (int i = 0; i < WPT; i++)
#pragma unroll
                for (int j = 0; j < WPT; j++)
                    acc[i][j] = fmaf(a[i], b[j], acc[i][j]);
        }
        __syncthreads(); /* the next slice overwrites As and Bs */
    }
#endif

#pragma unroll
    for (int i = 0; i < WPT; i++)
#pragma unroll
        for (int j = 0; j < WPT; j++) {
            const int r = row0 + i * THREADS, c = col0 + j * THREADS;
            if (r < M && c < N)
                C[(size_t)r * N + c] = acc[i][j];
        }
}

extern "C" void matmul(const float *A, const float *B, float *C, int M, int N, int K)
{
    dim3 block(THREADS, THREADS);
    dim3 grid((N + BM - 1) / BM, (M + BM - 1) / BM);
    matmul_kernel<<<grid, block>>>(A, B, C, M, N, K);
}
