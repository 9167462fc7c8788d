/* lu.c: blocked LU without pivoting on JIAJIA's interface; block rows dealt cyclically. Node 0
 * recomputes sequentially and compares (relative 1e-9). Usage: lu [N] [BLOCK] */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include "jia.h"

static double *mat(int n)
{
    double *a = malloc(sizeof(double) * n * n);
    unsigned long long x = 88172645463325252ULL ^ (unsigned long long)n;
    int i;
    for (i = 0; i < n * n; i++) {
        x ^= x << 13; x ^= x >> 7; x ^= x << 17;
        a[i] = (double)(x % 1000) / 1000.0 - 0.5;
    }
    for (i = 0; i < n; i++) a[i * n + i] += n;
    return a;
}

/* Eliminate with pivots k0..k1-1 in rows [r0, r1) of a, only rows owned (owner(row) == who, or
 * who < 0 for all). */
static void eliminate(double *a, int n, int k0, int k1, int r0, int r1, int b, int hosts, int who)
{
    int i, p, j;
    for (i = r0; i < r1; i++) {
        if (who >= 0 && (i / b) % hosts != who) continue;
        for (p = k0; p < k1 && p < i; p++) {
            double l = a[i * n + p] / a[p * n + p];
            a[i * n + p] = l;
            for (j = p + 1; j < n; j++) a[i * n + j] -= l * a[p * n + j];
        }
    }
}

int main(int argc, char **argv)
{
    int n = argc > 1 ? atoi(argv[1]) : 256;
    int b = argc > 2 ? atoi(argv[2]) : 16;
    int i, k, blocks;
    double *a, *init, t0, t1;

    jia_init(argc, argv);
    if (n <= 0 || b <= 0) jia_error("usage: lu [N>0] [BLOCK>0]");
    a = (double *)jia_alloc3(n * n * sizeof(double), b * n * sizeof(double), 0);
    init = mat(n);
    for (i = 0; i < n; i++)
        if ((i / b) % jiahosts == jiapid)
            for (k = 0; k < n; k++) a[i * n + k] = init[i * n + k];
    jia_barrier();
    t0 = jia_clock();
    blocks = (n + b - 1) / b;
    for (k = 0; k < blocks; k++) {
        int k0 = k * b, k1 = k0 + b < n ? k0 + b : n;
        /* The owner of block row k factors it (rows k0..k1, pivots k0..k1). */
        eliminate(a, n, k0, k1, k0, k1, b, jiahosts, jiapid);
        jia_barrier();
        /* Every node eliminates pivots k0..k1 from its rows below. */
        eliminate(a, n, k0, k1, k1, n, b, jiahosts, jiapid);
        jia_barrier();
    }
    t1 = jia_clock();
    if (jiapid == 0) {
        double worst = 0.0;
        for (k = 0; k < blocks; k++) {
            int k0 = k * b, k1 = k0 + b < n ? k0 + b : n;
            eliminate(init, n, k0, k1, k0, k1, b, 1, -1);
            eliminate(init, n, k0, k1, k1, n, b, 1, -1);
        }
        for (i = 0; i < n * n; i++) {
            double d = fabs(a[i] - init[i]) / (fabs(init[i]) > 1.0 ? fabs(init[i]) : 1.0);
            if (d > worst) worst = d;
        }
        printf("c-lu %s n=%d block=%d nodes=%d time=%.3fs\n", worst <= 1e-9 ? "OK" : "FAILED", n, b, jiahosts, t1 - t0);
        if (worst > 1e-9) jia_error("c-lu: differs from the sequential factorisation by %g", worst);
    }
    free(init);
    jia_barrier();
    jia_exit();
    return 0;
}
