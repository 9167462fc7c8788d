/* race_nested_locks.c: node 0 writes a[10] holding locks 1 and 2 (nested), node 1 writes it
 * holding lock 3. No lock is held by both sides, so nothing orders the writes (write-write). */
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
        jia_lock(2);
        a[10] = 1; /* race */
        jia_unlock(2);
        jia_unlock(1);
    } else {
        jia_lock(3);
        a[10] = 2; /* race */
        jia_unlock(3);
    }

    jia_barrier();
    jia_exit();
    return 0;
}
