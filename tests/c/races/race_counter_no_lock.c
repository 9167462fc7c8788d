/* race_counter_no_lock.c: both nodes increment a shared counter without a lock: a read and a
 * write on one source line, run by both nodes (read-write and write-write on the same bytes). */
#include "jia.h"

static int *counter;

int main(int argc, char **argv)
{
    jia_init(argc, argv);
    counter = (int *)jia_alloc1(Pagesize);
    if (jiapid == 0)
        counter[0] = 0;
    jia_barrier();

    counter[0] += 1; /* race */

    jia_barrier();
    jia_exit();
    return 0;
}
