/* race_memcpy_tailcall.c: node 0 copies a row into shared memory with memcpy in a helper whose
 * last statement it is (one gcc -O2 would make a tail call, `jmp`, leaving the helper's
 * caller's address where libjia's entry reads its caller's line; dsmcc --check-races turns
 * tail calls off), while node 1 reads the row's first element, with no barrier between
 * (read-write; from a review). */
#include <string.h>
#include "jia.h"

static double *rows;

__attribute__((noinline)) void put_row(double *dst, const double *src, int n)
{
    memcpy(dst, src, n * sizeof(double)); /* race */
}

int main(int argc, char **argv)
{
    double mine[64];
    volatile double first;
    int i;

    jia_init(argc, argv);
    rows = (double *)jia_alloc(Pagesize);
    for (i = 0; i < 64; i++)
        mine[i] = i;
    jia_barrier();

    if (jiapid == 0)
        put_row(rows, mine, 64); /* the line reported instead */
    else
        first = rows[0]; /* race */

    jia_barrier();
    (void)first;
    jia_exit();
    return 0;
}
