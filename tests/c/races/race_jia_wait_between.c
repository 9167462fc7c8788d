/* race_jia_wait_between.c: node 0 writes a[6], both nodes call jia_wait, then node 1 reads
 * a[6]. jia_wait is a barrier without coherence: it orders nothing (read-write). */
#include "jia.h"

#define N 1024

static int *a;
static volatile int sink;

int main(int argc, char **argv)
{
    jia_init(argc, argv);
    a = (int *)jia_alloc2p(N * sizeof(int), 1);
    jia_barrier();

    if (jiapid == 0)
        a[6] = 6; /* race */
    jia_wait();
    if (jiapid == 1)
        sink = a[6]; /* race */

    jia_barrier();
    jia_exit();
    return 0;
}
