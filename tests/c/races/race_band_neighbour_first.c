/* race_band_neighbour_first.c: rows split in bands, one per node. Each node writes its band;
 * node 0 also clears the first element past its band, which is node 1's first element
 * (write-write). */
#include "jia.h"

#define N 2048

static int *b;

int main(int argc, char **argv)
{
    int i, lo, hi, band;

    jia_init(argc, argv);
    band = N / jiahosts;
    b = (int *)jia_alloc3(N * sizeof(int), band * sizeof(int), 0);
    jia_barrier();

    lo = jiapid * band;
    hi = lo + band;
    for (i = lo; i < hi; i++)
        b[i] = i * 3 + 1; /* race */
    if (jiapid == 0 && hi < N)
        b[hi] = 0; /* race */

    jia_barrier();
    jia_exit();
    return 0;
}
