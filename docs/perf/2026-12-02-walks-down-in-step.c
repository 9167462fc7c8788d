/* Walks down in step: node 1 computes y[i] = x[i] + 1 from the last page to the first (x and y
 * homed on node 0: one read walk and one write walk, in turn), then reads z's two halves in
 * step from their ends, one page in every STRIDE. Prints each loop's MB/s (of the pages of x,
 * and of z read). Build against a build's libjia:
 *   cc -O2 docs/perf/2026-12-02-walks-down-in-step.c -o instep -Ijia/include -LDIR -ljia -lpthread -ldl -lm -Wl,-rpath,DIR
 * Usage: instep [MB] [STRIDE]   (32, 1); run with dsmrun --stats for the demand fetches. */
#include <stdio.h>
#include <stdlib.h>
#include "jia.h"

#define PG 4096L

int main(int argc, char **argv)
{
    long mb = argc > 1 ? atol(argv[1]) : 32, stride = argc > 2 ? atol(argv[2]) : 1;
    long n, pages, half, p, bad = 0, read = 0;
    char *x, *y, *z;
    double t0, t1, t2;

    jia_init(argc, argv);
    if (mb <= 0 || stride <= 0) jia_error("usage: instep [MB > 0] [STRIDE > 0]");
    n = mb << 20;
    pages = n / PG;
    half = pages / 2;
    x = (char *)jia_alloc3(n, n, 0);
    y = (char *)jia_alloc3(n, n, 0);
    z = (char *)jia_alloc3(n, n, 0);
    if (jiapid == 0)
        for (p = 0; p < pages; p++) { x[p * PG] = (char)p; z[p * PG] = (char)(3 * p); }
    jia_barrier();
    if (jiapid == 1) {
        t0 = jia_clock();
        for (p = pages - 1; p >= 0; p--) y[p * PG] = (char)(x[p * PG] + 1);
        t1 = jia_clock();
        for (p = half - 1; p >= 0; p -= stride) {
            bad += z[p * PG] != (char)(3 * p);
            bad += z[(half + p) * PG] != (char)(3 * (half + p));
            read += 2;
        }
        t2 = jia_clock();
        printf("instep %s stride=%ld copy_down_mbps=%.0f halves_down_mbps=%.0f\n", bad ? "WRONG" : "OK",
               stride, mb / (t1 - t0), read * PG / 1048576.0 / (t2 - t1));
    }
    jia_barrier();
    if (jiapid == 0)
        for (p = 0; p < pages; p++) bad += y[p * PG] != (char)((char)p + 1);
    if (jiapid == 0 && bad) printf("instep WRONG: y differs on %ld pages\n", bad);
    jia_barrier();
    jia_exit();
    return 0;
}
