/* free_same_lock.c (race-free): both nodes increment a shared counter, each time inside lock
 * 1: the release of one critical section orders it before the next acquire of the same lock.
 * Node 0 checks the total after a barrier. */
#include "jia.h"

#define ROUNDS 10

static int *counter;

int main(int argc, char **argv)
{
    int r;

    jia_init(argc, argv);
    counter = (int *)jia_alloc1(Pagesize);
    if (jiapid == 0)
        counter[0] = 0;
    jia_barrier();

    for (r = 0; r < ROUNDS; r++) {
        jia_lock(1);
        counter[0] += 1;
        jia_unlock(1);
    }

    jia_barrier();
    if (jiapid == 0 && counter[0] != ROUNDS * jiahosts)
        jia_error("free_same_lock: counter is %d, not %d", counter[0], ROUNDS * jiahosts);
    jia_barrier();
    jia_exit();
    return 0;
}
