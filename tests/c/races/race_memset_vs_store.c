/* race_memset_vs_store.c: node 0 clears a block of shared memory with memset while node 1
 * stores one of its words, with no barrier between (write-write). */
#include <string.h>
#include "jia.h"

#define N 1024

static long *block;

int main(int argc, char **argv)
{
    jia_init(argc, argv);
    block = (long *)jia_alloc1(N * sizeof(long));
    jia_barrier();

    if (jiapid == 0)
        memset(block, 0, N * sizeof(long)); /* race */
    else
        block[300] = 42; /* race */

    jia_barrier();
    jia_exit();
    return 0;
}
