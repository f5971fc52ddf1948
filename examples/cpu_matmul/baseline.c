/* Naive float32 matmul: C = A·B, row-major, C is M×N.
 *
 * Knobs (declared in target.toml): LOOP_ORDER, TILE, UNROLL, and the compiler flags, given as
 * a line `// eat:cflags ...`. Their defaults below make the plain ijk loop nest. */
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

#define PRAGMA_(x) _Pragma(#x)
#define PRAGMA(x) PRAGMA_(x)
#define INNER PRAGMA(GCC unroll UNROLL)
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

static int min_int(int a, int b) { return a < b ? a : b; }

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
