/* free_memcpy_between_barriers.c (race-free): each node copies its half of a vector into
 * shared memory with memcpy, a barrier orders the copies before the reads, and each node then
 * checks the other half with memcmp. */
#include <string.h>
#include "jia.h"

#define N 1024

static double *vec;

int main(int argc, char **argv)
{
    double mine[N / 2], other[N / 2];
    int i, peer;

    jia_init(argc, argv);
    vec = (double *)jia_alloc2(N * sizeof(double), N / 2 * sizeof(double));
    jia_barrier();

    for (i = 0; i < N / 2; i++)
        mine[i] = jiapid * 1000.0 + i;
    memcpy(&vec[jiapid * (N / 2)], mine, sizeof mine);
    jia_barrier();

    peer = 1 - jiapid;
    for (i = 0; i < N / 2; i++)
        other[i] = peer * 1000.0 + i;
    if (memcmp(&vec[peer * (N / 2)], other, sizeof other) != 0)
        jia_error("free_memcpy_between_barriers: node %d sees the wrong half", jiapid);

    jia_barrier();
    jia_exit();
    return 0;
}
