/* race_one_side_locked.c: node 0 writes an element under lock 1, node 1 writes it without
 * taking any lock: a lock orders only the sections of those that take it (write-write). */
#include "jia.h"

#define N 1024

static int *a;

int main(int argc, char **argv)
{
    jia_init(argc, argv);
    a = (int *)jia_alloc1(N * sizeof(int));
    jia_barrier();

    if (jiapid == 0) {
        jia_lock(1);
        a[2] = 1; /* race */
        jia_unlock(1);
    } else {
        a[2] = 2; /* race */
    }

    jia_barrier();
    jia_exit();
    return 0;
}
