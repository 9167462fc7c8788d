/* race_missing_init_barrier.c: node 0 initialises an array after the allocation's barrier and
 * node 1 sums it without a barrier between the two (read-write). */
#include "jia.h"

#define N 1024

static long *a;
static volatile long sink;

int main(int argc, char **argv)
{
    long sum = 0;
    int i;

    jia_init(argc, argv);
    a = (long *)jia_alloc1(N * sizeof(long));
    jia_barrier();

    if (jiapid == 0)
        for (i = 0; i < N; i++)
            a[i] = (long)i * i; /* race */
    /* Missing here: jia_barrier(); */
    if (jiapid == 1) {
        for (i = 0; i < N; i++)
            sum += a[i]; /* race */
        sink = sum;
    }

    jia_barrier();
    jia_exit();
    return 0;
}
