/* race_bcast_into_shared.c: node 1 broadcasts node 0's value straight into shared memory while
 * node 0 writes that memory; the broadcast carries bytes, not coherence, and orders nothing
 * (write-write). */
#include "jia.h"

static long *box;

int main(int argc, char **argv)
{
    long v = 5;

    jia_init(argc, argv);
    box = (long *)jia_alloc1(Pagesize);
    jia_barrier();

    if (jiapid == 0) {
        jia_bcast((char *)&v, sizeof v, 0);
        box[4] = 7; /* race */
    } else {
        jia_bcast((char *)&box[4], sizeof(long), 0); /* race */
    }

    jia_barrier();
    jia_exit();
    return 0;
}
