/* race_overlap_ranges.c: node 0 writes a[0..9], node 1 writes a[9..19]: the two ranges share
 * one element, a[9] (write-write, one line of each loop). */
#include "jia.h"

#define N 1024

static int *a;

int main(int argc, char **argv)
{
    int i;

    jia_init(argc, argv);
    a = (int *)jia_alloc(N * sizeof(int));
    jia_barrier();

    if (jiapid == 0) {
        for (i = 0; i < 10; i++)
            a[i] = i + 100; /* race */
    } else {
        for (i = 9; i < 20; i++)
            a[i] = i + 200; /* race */
    }

    jia_barrier();
    jia_exit();
    return 0;
}
