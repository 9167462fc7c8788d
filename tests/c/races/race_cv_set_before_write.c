/* race_cv_set_before_write.c: node 0 sets condition variable 0 and only then writes a[4];
 * node 1 waits on it and reads a[4]. The setcv releases what came before it (a[5], read by
 * node 1 without a race), not the write after it (read-write). */
#include "jia.h"

#define N 1024

static int *a;
static volatile int sink;

int main(int argc, char **argv)
{
    jia_init(argc, argv);
    a = (int *)jia_alloc1(N * sizeof(int));
    jia_barrier();

    if (jiapid == 0) {
        a[5] = 8;
        jia_setcv(0);
        a[4] = 9; /* race */
    } else {
        jia_waitcv(0);
        sink = a[5];
        sink = a[4]; /* race */
    }

    jia_barrier();
    jia_exit();
    return 0;
}
