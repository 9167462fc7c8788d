/* race_memcpy_row.c: node 0 copies a row into shared memory with memcpy while node 1 reads an
 * element of that row, with no barrier between (read-write). The write is the memcpy call:
 * the checker sees the C library's memory and string functions on shared memory. */
#include <string.h>
#include "jia.h"

#define N 512

static double *grid;

int main(int argc, char **argv)
{
    double row[N], seen;
    int i;

    jia_init(argc, argv);
    grid = (double *)jia_alloc1(2 * N * sizeof(double));
    jia_barrier();

    if (jiapid == 0) {
        for (i = 0; i < N; i++)
            row[i] = i * 0.25;
        memcpy(&grid[N], row, sizeof row); /* race */
    } else {
        seen = grid[N + 7]; /* race */
        grid[0] = seen;
    }

    jia_barrier();
    jia_exit();
    return 0;
}
