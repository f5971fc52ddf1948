/* Naive float32 row softmax: Y[r,:] = exp(X[r,:] - max) / sum, row-major, rows×cols.
 *
 * Knobs (declared in target.toml): ONLINE, RECIP, and the compiler flags, given as a line
 * `// eat:cflags ...`. Their defaults below make the plain three-pass loop per row. */
#include <math.h>
#include <stddef.h>

#ifndef ONLINE
#define ONLINE 0 /* 0: max pass, exp+sum pass, scale pass; 1: online max+sum pass, write pass */
#endif
#ifndef RECIP
#define RECIP 0 /* 0: divide every element by the sum; 1: multiply by its reciprocal */
#endif

#if RECIP
#define SCALE(v, s) ((v) * (1.0f / (s)))
#else
#define SCALE(v, s) ((v) / (s))
#endif

void softmax(const float *X, float *Y, int rows, int cols)
{
    for (int r = 0; r < rows; r++) {
        const float *x = X + (size_t)r * cols;
        float *y = Y + (size_t)r * cols;
        float m = x[0], s = 0.0f;
#if ONLINE
        /* One pass keeps a running max and a sum rescaled whenever the max grows. */
        for (int c = 0; c < cols; c++) {
            if (x[c] > m) {
                s *= expf(m - x[c]);
                m = x[c];
            }
            s += expf(x[c] - m);
        }
        for (int c = 0; c < cols; c++)
            y[c] = SCALE(expf(x[c] - m), s);
#else
        for (int c = 1; c < cols; c++)
            m = x[c] > m ? x[c] : m;
        for (int c = 0; c < cols; c++) {
            y[c] = expf(x[c] - m);
            s += y[c];
        }
        for (int c = 0; c < cols; c++)
            y[c] = SCALE(y[c], s);
#endif
    }
}
