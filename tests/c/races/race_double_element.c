/* race_double_element.c: node 0 writes d[3] of a double array, node 1 reads d[2], d[3] and
 * d[4]: only d[3] (8 bytes) is written by the other node (read-write). */
#include "jia.h"

#define N 512

static double *d;
static volatile double sink;

int main(int argc, char **argv)
{
    jia_init(argc, argv);
    d = (double *)jia_alloc2p(N * sizeof(double), 0);
    jia_barrier();

    if (jiapid == 0) {
        d[3] = 2.5; /* race */
    } else {
        sink = d[2];
        sink = d[3]; /* race */
        sink = d[4];
    }

    jia_barrier();
    jia_exit();
    return 0;
}
