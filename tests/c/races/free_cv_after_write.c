/* free_cv_after_write.c (race-free): node 0 writes a[4] and then sets condition variable 0;
 * node 1 waits on it and then reads a[4]. The setcv releases the write, the waitcv it ends
 * acquires it. */
#include "jia.h"

#define N 1024

static int *a;

int main(int argc, char **argv)
{
    jia_init(argc, argv);
    a = (int *)jia_alloc1(N * sizeof(int));
    jia_barrier();

    if (jiapid == 0) {
        a[4] = 9;
        jia_setcv(0);
    } else {
        jia_waitcv(0);
        if (a[4] != 9)
            jia_error("free_cv_after_write: node 1 read %d, not 9", a[4]);
    }

    jia_barrier();
    jia_exit();
    return 0;
}
