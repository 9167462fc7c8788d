/* free_barrier_between.c (race-free): node 0 writes a[5], a barrier, node 1 reads it and
 * writes a[6], another barrier, node 0 reads that. A barrier orders everything before it
 * before everything after it. */
#include "jia.h"

#define N 1024

static int *a;

int main(int argc, char **argv)
{
    jia_init(argc, argv);
    a = (int *)jia_alloc(N * sizeof(int));
    jia_barrier();

    if (jiapid == 0)
        a[5] = 5;
    jia_barrier();
    if (jiapid == 1) {
        if (a[5] != 5)
            jia_error("free_barrier_between: node 1 read %d, not 5", a[5]);
        a[6] = a[5] + 1;
    }
    jia_barrier();
    if (jiapid == 0 && a[6] != 6)
        jia_error("free_barrier_between: node 0 read %d, not 6", a[6]);

    jia_barrier();
    jia_exit();
    return 0;
}
