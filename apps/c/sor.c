/* sor.c: red-black SOR on JIAJIA's interface; node 0 recomputes sequentially and compares bit
 * for bit. Usage: sor [N] [ITERATIONS] */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "jia.h"

#define OMEGA 1.25

static double initial(int i, int j, int n)
{
    return (i == 0 || j == 0 || i == n + 1 || j == n + 1) ? (double)((i * 3 + j * 7) % 11) : 0.0;
}

static void sweep(double *g, int w, int n, int lo, int hi, int colour)
{
    int i, j;
    if (lo < 1) lo = 1;
    if (hi > n + 1) hi = n + 1;
    for (i = lo; i < hi; i++)
        for (j = 1; j <= n; j++)
            if ((i + j) % 2 == colour)
                g[i * w + j] = g[i * w + j] + OMEGA * ((g[(i - 1) * w + j] + g[(i + 1) * w + j] +
                               g[i * w + j - 1] + g[i * w + j + 1]) / 4.0 - g[i * w + j]);
}

int main(int argc, char **argv)
{
    int n = argc > 1 ? atoi(argv[1]) : 256;
    int iters = argc > 2 ? atoi(argv[2]) : 10;
    int w, i, j, t, c, lo, hi;
    double *g, t0, t1;

    jia_init(argc, argv);
    if (n <= 0 || iters < 0) jia_error("usage: sor [N>0] [ITERATIONS>=0]");
    w = n + 2;
    g = (double *)jia_alloc3(w * w * sizeof(double), ((w + jiahosts - 1) / jiahosts) * w * sizeof(double), 0);
    lo = w * jiapid / jiahosts;
    hi = w * (jiapid + 1) / jiahosts;
    for (i = lo; i < hi; i++)
        for (j = 0; j < w; j++) g[i * w + j] = initial(i, j, n);
    jia_barrier();
    t0 = jia_clock();
    for (t = 0; t < iters; t++)
        for (c = 0; c < 2; c++) {
            sweep(g, w, n, lo, hi, c);
            jia_barrier();
        }
    t1 = jia_clock();
    if (jiapid == 0) {
        double *s = malloc(sizeof(double) * w * w);
        int same = 1;
        for (i = 0; i < w; i++)
            for (j = 0; j < w; j++) s[i * w + j] = initial(i, j, n);
        for (t = 0; t < iters; t++)
            for (c = 0; c < 2; c++) sweep(s, w, n, 0, w, c);
        for (i = 0; i < w * w; i++)
            if (memcmp(&s[i], &g[i], sizeof(double)) != 0) same = 0;
        printf("c-sor %s n=%d iterations=%d nodes=%d time=%.3fs\n", same ? "OK" : "FAILED", n, iters, jiahosts, t1 - t0);
        free(s);
        if (!same) jia_error("c-sor: result differs from the sequential one");
    }
    jia_barrier();
    jia_exit();
    return 0;
}
