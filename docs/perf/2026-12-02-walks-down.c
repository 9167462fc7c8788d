/* Walks up and down through remote memory: node 0 writes two arrays of MB megabytes homed on
 * it; node 1 reads one page in every STRIDE of the first from its first page to its last, then
 * of the second from its last page to its first, and prints each walk's MB/s (of the pages
 * read). The other nodes wait at the barriers. Build against a build's libjia:
 *   cc -O2 docs/perf/2026-12-02-walks-down.c -o walks -Ijia/include -LDIR -ljia -lpthread -ldl -lm -Wl,-rpath,DIR
 * Usage: walks [MB] [STRIDE]   (64, 1) */
#include <stdio.h>
#include <stdlib.h>
#include "jia.h"

int main(int argc, char **argv)
{
    long mb = argc > 1 ? atol(argv[1]) : 64, stride = argc > 2 ? atol(argv[2]) : 1;
    long pages, pg = 4096, i, p;
    char *a, *b;
    double t0, t1, t2, read_mb;
    long up = 0, down = 0;

    jia_init(argc, argv);
    if (mb <= 0 || stride <= 0) jia_error("usage: walks [MB > 0] [STRIDE > 0]");
    pages = (mb << 20) / pg;
    a = (char *)jia_alloc3(mb << 20, mb << 20, 0);
    b = (char *)jia_alloc3(mb << 20, mb << 20, 0);
    if (jiapid == 0)
        for (i = 0; i < (mb << 20); i += 64) { a[i] = 1; b[i] = 2; }
    jia_barrier();
    if (jiapid == 1) {
        t0 = jia_clock();
        for (p = 0; p < pages; p += stride) up += a[p * pg] + a[p * pg + pg - 64];
        t1 = jia_clock();
        for (p = pages - 1; p >= 0; p -= stride) down += b[p * pg] + b[p * pg + pg - 64];
        t2 = jia_clock();
        read_mb = (double)((pages + stride - 1) / stride) * pg / (1 << 20);
        printf("walks %s stride=%ld up_mbps=%.0f down_mbps=%.0f\n",
               up == 2 * ((pages + stride - 1) / stride) && down == 4 * ((pages + stride - 1) / stride) ? "OK" : "WRONG",
               stride, read_mb / (t1 - t0), read_mb / (t2 - t1));
    }
    jia_barrier();
    jia_exit();
    return 0;
}
