/* race_read_outside_lock.c: node 0 writes a[9] inside lock 3; node 1 reads it without taking
 * the lock, so no acquire follows node 0's release on its side (read-write). */
#include "jia.h"

#define N 1024

static int *a;
static volatile int sink;

int main(int argc, char **argv)
{
    jia_init(argc, argv);
    a = (int *)jia_alloc(N * sizeof(int));
    jia_barrier();

    if (jiapid == 0) {
        jia_lock(3);
        a[9] = 9; /* race */
        jia_unlock(3);
    } else {
        sink = a[9]; /* race */
    }

    jia_barrier();
    jia_exit();
    return 0;
}
