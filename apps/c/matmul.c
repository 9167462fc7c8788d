/* matmul.c: C = A x B on JIAJIA's interface, rows banded over the hosts; verifies every entry
 * of its band exactly (the matrices hold small integers). Usage: matmul [N] */
#include <stdio.h>
#include <stdlib.h>
#include "jia.h"

static double aval(int i, int k) { return (double)((i * 7 + k * 3) % 7 - 3); }
static double bval(int k, int j) { return (double)((k * 3 + j * 5) % 5 - 2); }

int main(int argc, char **argv)
{
    int n = argc > 1 ? atoi(argv[1]) : 256;
    double *a, *b, *c;
    int *bad;
    int i, j, k, lo, hi, wrong = 0;
    double t0, t1;

    jia_init(argc, argv);
    if (n <= 0) jia_error("matrix size must be positive, got %s", argv[1]);
    a = (double *)jia_alloc3(n * n * sizeof(double), ((n + jiahosts - 1) / jiahosts) * n * sizeof(double), 0);
    b = (double *)jia_alloc3(n * n * sizeof(double), ((n + jiahosts - 1) / jiahosts) * n * sizeof(double), 0);
    c = (double *)jia_alloc3(n * n * sizeof(double), ((n + jiahosts - 1) / jiahosts) * n * sizeof(double), 0);
    bad = (int *)jia_alloc2p(jiahosts * sizeof(int), 0);
    lo = n * jiapid / jiahosts;
    hi = n * (jiapid + 1) / jiahosts;
    for (i = lo; i < hi; i++)
        for (k = 0; k < n; k++) {
            a[i * n + k] = aval(i, k);
            b[i * n + k] = bval(i, k);
        }
    jia_barrier();
    t0 = jia_clock();
    for (i = lo; i < hi; i++) {
        for (j = 0; j < n; j++) c[i * n + j] = 0.0;
        for (k = 0; k < n; k++) {
            double aik = a[i * n + k];
            for (j = 0; j < n; j++) c[i * n + j] += aik * b[k * n + j];
        }
    }
    jia_barrier();
    t1 = jia_clock();
    for (i = lo; i < hi; i++)
        for (j = 0; j < n; j++) {
            double s = 0.0;
            for (k = 0; k < n; k++) s += aval(i, k) * bval(k, j);
            if (s != c[i * n + j]) wrong++;
        }
    bad[jiapid] = wrong;
    jia_barrier();
    if (jiapid == 0) {
        int total = 0;
        for (i = 0; i < jiahosts; i++) total += bad[i];
        printf("c-matmul %s n=%d nodes=%d time=%.3fs\n", total ? "FAILED" : "OK", n, jiahosts, t1 - t0);
        if (total) jia_error("c-matmul: %d wrong entries", total);
    }
    jia_exit();
    return 0;
}
