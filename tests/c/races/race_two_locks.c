/* race_two_locks.c: each node writes the same element inside a critical section, but node 0
 * holds lock 1 and node 1 lock 2: different locks order nothing (write-write). */
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
        a[3] = 10; /* race */
        jia_unlock(1);
    } else {
        jia_lock(2);
        a[3] = 20; /* race */
        jia_unlock(2);
    }

    jia_barrier();
    jia_exit();
    return 0;
}
