/* race_qsort_shared.c: node 0 sorts an array in shared memory with qsort (the C library moves
 * its elements) while node 1 reads one of them, with no barrier between (read-write). */
#include <stdlib.h>
#include "jia.h"

#define N 512

static int *a;

static int by_value(const void *x, const void *y)
{
    int p = *(const int *)x, q = *(const int *)y;
    return (p > q) - (p < q);
}

int main(int argc, char **argv)
{
    int seen = 0;

    jia_init(argc, argv);
    a = (int *)jia_alloc1(N * sizeof(int));
    if (jiapid == 0)
        for (int i = 0; i < N; i++)
            a[i] = (i * 7919) % N;
    jia_barrier();

    if (jiapid == 0)
        qsort(a, N, sizeof(int), by_value); /* race */
    else
        seen = a[N / 3]; /* race */

    jia_barrier();
    jia_exit();
    return seen == -1;
}
