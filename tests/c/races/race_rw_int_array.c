/* race_rw_int_array.c: node 0 writes an element of an int array that node 1 reads, nothing
 * ordering the two (read-write). Node 0 filled the array before the barrier, which orders that
 * first write before everything after it. */
#include "jia.h"

#define N 256

static int *a;
static volatile int sink;

int main(int argc, char **argv)
{
    int i;

    jia_init(argc, argv);
    a = (int *)jia_alloc(N * sizeof(int));
    if (jiapid == 0)
        for (i = 0; i < N; i++)
            a[i] = i;
    jia_barrier();

    if (jiapid == 0)
        a[5] = 42; /* race */
    else
        sink = a[5]; /* race */

    jia_barrier();
    jia_exit();
    return 0;
}
