/* race_c11_relaxed_flag.c: node 0 writes a[4] and then sets an atomic flag with relaxed order;
 * node 1 waits for the flag with relaxed loads and reads a[4]. Relaxed atomics order nothing
 * else: the write and the read race (libjia makes the flag's operations acquire and release
 * across nodes, so the value read is 9; the checker goes by the order the program asked). */
#include <stdatomic.h>
#include "jia.h"

#define N 1024

static int *a;
static _Atomic long *flag;

int main(int argc, char **argv)
{
    jia_init(argc, argv);
    a = (int *)jia_alloc1(N * sizeof(int));
    flag = (_Atomic long *)jia_alloc1(4096);
    jia_barrier();

    if (jiapid == 0) {
        a[4] = 9; /* race */
        atomic_store_explicit(flag, 1, memory_order_relaxed);
    } else {
        while (atomic_load_explicit(flag, memory_order_relaxed) == 0)
            ;
        if (a[4] != 9) /* race */
            jia_error("race_c11_relaxed_flag: node 1 read %d", a[4]);
    }

    jia_barrier();
    jia_exit();
    return 0;
}
