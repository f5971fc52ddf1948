/* float32 matmul: C = A·B, row-major; A is M×K, B is K×N, C is M×N.
 *
 * Knobs (declared in target.toml; a candidate prepends `#define NAME value` lines, and a line
 * `// eat:cflags ...` for the compiler flags). Their first values, the defaults below, make the
 * plain ijk loop nest this file is timed as.
 *
 *   MR          0: no micro-kernel, C is computed by the loop nest (LOOP_ORDER, TILE, UNROLL).
 *               > 0: a register-blocked micro-kernel computes C in MR×NR blocks held in vector
 *               registers (MR rows, NR columns), one k step at a time.
 *   NR          columns of C per micro-kernel block, a multiple of 8 (one 8-float vector).
 *               MR×NR/8 accumulators must fit the 16 vector registers of AVX2 along with a
 *               row of B and a broadcast of A: 6×16 or 4×24 fit, 8×16 and larger spill.
 *   VEC         micro-kernel only: floats per vector, 8 (256-bit, AVX2) or 16 (512-bit,
 *               AVX-512, whose 32 registers hold 8×32 blocks); an NR that is not a multiple
 *               of VEC keeps 8. On a CPU without AVX-512 the compiler splits each 16-float
 *               vector in two, correct but no faster.
 *   PACK        micro-kernel only. 0: A and B are read where they lie (B's rows are N floats
 *               apart, so a block's column panel touches a new cache line per k step);
 *               1: each k block of B is first copied into contiguous NR-wide panels;
 *               2: A too, into MR-row slivers stored k-major (the kernel's broadcasts are
 *               then consecutive).
 *   TILE        loop nest: edge of the square cache blocks over i, j and k, 0 = no tiling.
 *               micro-kernel: depth of the k blocks (how much of A and B one pass over C
 *               uses), 0 = all of K in one pass.
 *   UNROLL      unroll factor of the innermost loop (the loop nest's, or the micro-kernel's
 *               k loop), by `#pragma GCC unroll`.
 *   LOOP_ORDER  loop nest: order of the three loops (IKJ and KIJ stream rows of B and C).
 *
 * The micro-kernel uses GCC's vector extensions (VEC floats, a 256-bit register with AVX2, a
 * 512-bit one with AVX-512); without -march=native the compiler splits each vector into SSE
 * halves, correct but slow.
 * Blocks at the right and bottom edges (M, N not multiples of MR, NR) go through zero-padded
 * copies, so every combination of values is correct for every shape. */
#include <stdlib.h>
#include <string.h>

#define IJK 0
#define IKJ 1
#define JIK 2
#define JKI 3
#define KIJ 4
#define KJI 5

#ifndef LOOP_ORDER
#define LOOP_ORDER IJK
#endif
#ifndef TILE
#define TILE 0
#endif
#ifndef UNROLL
#define UNROLL 1
#endif
#ifndef MR
#define MR 0
#endif
#ifndef NR
#define NR 8
#endif
#ifndef PACK
#define PACK 0
#endif
#ifndef VEC
#define VEC 8
#endif

#define PRAGMA_(x) _Pragma(#x)
#define PRAGMA(x) PRAGMA_(x)
#define INNER PRAGMA(GCC unroll UNROLL)

static inline int min_int(int a, int b) { return a < b ? a : b; }

#if MR == 0
/* ---- The loop nest ------------------------------------------------------------------------ */

#define MAC C[(size_t)i * N + j] += A[(size_t)i * K + k] * B[(size_t)k * N + j]

static void block(const float *A, const float *B, float *C, int N, int K,
                  int i0, int i1, int j0, int j1, int k0, int k1)
{
#if LOOP_ORDER == IJK
    for (int i = i0; i < i1; i++) for (int j = j0; j < j1; j++) INNER for (int k = k0; k < k1; k++) MAC;
#elif LOOP_ORDER == IKJ
    for (int i = i0; i < i1; i++) for (int k = k0; k < k1; k++) INNER for (int j = j0; j < j1; j++) MAC;
#elif LOOP_ORDER == JIK
    for (int j = j0; j < j1; j++) for (int i = i0; i < i1; i++) INNER for (int k = k0; k < k1; k++) MAC;
#elif LOOP_ORDER == JKI
    for (int j = j0; j < j1; j++) for (int k = k0; k < k1; k++) INNER for (int i = i0; i < i1; i++) MAC;
#elif LOOP_ORDER == KIJ
    for (int k = k0; k < k1; k++) for (int i = i0; i < i1; i++) INNER for (int j = j0; j < j1; j++) MAC;
#else
    for (int k = k0; k < k1; k++) for (int j = j0; j < j1; j++) INNER for (int i = i0; i < i1; i++) MAC;
#endif
}

void matmul(const float *A, const float *B, float *C, int M, int N, int K)
{
    memset(C, 0, sizeof(float) * (size_t)M * N);
#if TILE == 0
    block(A, B, C, N, K, 0, M, 0, N, 0, K);
#else
    for (int i0 = 0; i0 < M; i0 += TILE)
        for (int k0 = 0; k0 < K; k0 += TILE)
            for (int j0 = 0; j0 < N; j0 += TILE)
                block(A, B, C, N, K, i0, min_int(i0 + TILE, M), j0, min_int(j0 + TILE, N),
                      k0, min_int(k0 + TILE, K));
#endif
}

#else
/* ---- The register-blocked micro-kernel ---------------------------------------------------- */

#if NR % 8 != 0
#error "NR must be a multiple of 8"
#endif
#if NR % VEC == 0
#define VL VEC /* floats per vector */
#else
#define VL 8
#endif
#define NV (NR / VL) /* vectors per row of a block */

typedef float vec __attribute__((vector_size(VL * 4)));
typedef float vec_u __attribute__((vector_size(VL * 4), aligned(4))); /* for unaligned access */

/* C[0:m, 0:n] (+)= the MR×NR block product over kc steps of k: `first` stores, otherwise adds
 * to C (the k blocks after the first). B's rows are `ldb` floats apart, NR of them valid
 * (padded with zeros at the right edge). A is a k-major sliver (PACK == 2: element (r, k) at
 * a[k * MR + r], rows past m zero) or, in place, rows `lda` floats apart (rows past m repeat
 * row m-1; their results are dropped). */
static inline void kernel(int kc, const float *a, size_t lda, const float *b, size_t ldb,
                          float *C, size_t ldc, int m, int n, int first)
{
    vec acc[MR][NV];
    PRAGMA(GCC unroll 16)
    for (int r = 0; r < MR; r++)
        PRAGMA(GCC unroll 8)
        for (int v = 0; v < NV; v++)
            acc[r][v] = (vec){0};
#if PACK < 2
    const float *row[MR];
    PRAGMA(GCC unroll 16)
    for (int r = 0; r < MR; r++)
        row[r] = a + (size_t)min_int(r, m - 1) * lda;
#define A_AT(r, k) row[r][k]
#else
    (void)lda;
#define A_AT(r, k) a[(size_t)(k) * MR + (r)]
#endif
    INNER
    for (int k = 0; k < kc; k++) {
        vec bk[NV];
        PRAGMA(GCC unroll 8)
        for (int v = 0; v < NV; v++)
            bk[v] = *(const vec_u *)(b + (size_t)k * ldb + VL * v);
        PRAGMA(GCC unroll 16)
        for (int r = 0; r < MR; r++) {
            const float s = A_AT(r, k);
            PRAGMA(GCC unroll 8)
            for (int v = 0; v < NV; v++)
                acc[r][v] += s * bk[v]; /* s broadcast to every lane */
        }
    }
#undef A_AT
    if (m == MR && n == NR) {
        PRAGMA(GCC unroll 16)
        for (int r = 0; r < MR; r++)
            PRAGMA(GCC unroll 8)
            for (int v = 0; v < NV; v++) {
                vec_u *c = (vec_u *)(C + r * ldc + VL * v);
                *c = first ? acc[r][v] : *c + acc[r][v];
            }
    } else { /* an edge block: only m rows and n columns of it are C's */
        float tile[MR][NR];
        PRAGMA(GCC unroll 16)
        for (int r = 0; r < MR; r++)
            PRAGMA(GCC unroll 8)
            for (int v = 0; v < NV; v++)
                *(vec_u *)&tile[r][VL * v] = acc[r][v];
        for (int r = 0; r < m; r++)
            for (int j = 0; j < n; j++)
                C[r * ldc + j] = first ? tile[r][j] : C[r * ldc + j] + tile[r][j];
    }
}

/* B[0:kc, 0:n] (rows ldb apart) into one kc×NR panel, columns n..NR-1 zero. */
static void pack_b(int kc, int n, const float *B, size_t ldb, float *panel)
{
    for (int k = 0; k < kc; k++) {
        memcpy(panel + (size_t)k * NR, B + k * ldb, sizeof(float) * n);
        memset(panel + (size_t)k * NR + n, 0, sizeof(float) * (NR - n));
    }
}

#if PACK == 2
/* A[0:m, 0:kc] (rows lda apart) into one k-major MR×kc sliver, rows m..MR-1 zero. */
static void pack_a(int kc, int m, const float *A, size_t lda, float *sliver)
{
    for (int k = 0; k < kc; k++)
        for (int r = 0; r < MR; r++)
            sliver[(size_t)k * MR + r] = r < m ? A[r * lda + k] : 0.0f;
}
#endif

/* Scratch for the packed copies, kept between calls and grown when a call needs more (so one
 * call at a time: matmul is not thread-safe with MR > 0). */
static float *scratch;
static size_t scratch_floats;

static float *scratch_for(size_t floats)
{
    if (floats > scratch_floats) {
        free(scratch);
        scratch = aligned_alloc(64, (floats * sizeof(float) + 63) / 64 * 64);
        scratch_floats = scratch ? floats : 0;
    }
    return scratch;
}

void matmul(const float *A, const float *B, float *C, int M, int N, int K)
{
    if (K <= 0) { /* no k step at all: C is zero */
        memset(C, 0, sizeof(float) * (size_t)M * N);
        return;
    }
    const int kb = TILE > 0 && TILE < K ? TILE : K; /* depth of a k block */
    const int panels = (N + NR - 1) / NR, slivers = (M + MR - 1) / MR;
    /* B's panels of one k block (or one edge panel), then A's slivers of one k block. */
    const size_t b_floats = (size_t)kb * NR * (PACK >= 1 ? panels : 1);
    const size_t a_floats = PACK == 2 ? (size_t)kb * MR * slivers : 0;
    float *bp = scratch_for(b_floats + a_floats);
    if (!bp && b_floats + a_floats > 0)
        abort(); /* out of memory */

    for (int k0 = 0; k0 < K; k0 += kb) {
        const int kc = min_int(kb, K - k0);
#if PACK >= 1
        for (int p = 0; p < panels; p++)
            pack_b(kc, min_int(NR, N - p * NR), B + (size_t)k0 * N + p * NR, N,
                   bp + (size_t)p * kc * NR);
#endif
#if PACK == 2
        float *ap = bp + b_floats;
        for (int s = 0; s < slivers; s++)
            pack_a(kc, min_int(MR, M - s * MR), A + (size_t)s * MR * K + k0, K,
                   ap + (size_t)s * kc * MR);
#endif
        for (int j0 = 0; j0 < N; j0 += NR) {
            const int n = min_int(NR, N - j0);
            const float *b = B + (size_t)k0 * N + j0;
            size_t ldb = N;
#if PACK >= 1
            b = bp + (size_t)(j0 / NR) * kc * NR, ldb = NR;
#else
            if (n < NR) { /* the right edge: a padded copy, so full vectors can be read */
                pack_b(kc, n, b, N, bp);
                b = bp, ldb = NR;
            }
#endif
            for (int i0 = 0; i0 < M; i0 += MR) {
                const int m = min_int(MR, M - i0);
#if PACK == 2
                const float *a = ap + (size_t)(i0 / MR) * kc * MR;
#else
                const float *a = A + (size_t)i0 * K + k0;
#endif
                kernel(kc, a, K, b, ldb, C + (size_t)i0 * N + j0, N, m, n, k0 == 0);
            }
        }
    }
}
#endif
