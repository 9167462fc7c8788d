/* race_c11_relaxed_bool.c: as race_c11_relaxed_flag.c with a 1-byte flag: node 0 writes a[4]
 * and then stores true into an _Atomic bool with relaxed order; node 1 waits for it with
 * relaxed loads and reads a[4]. Relaxed atomics order nothing else: the write and the read
 * race (libjia makes the flag's operations acquire and release across nodes, so the value read
 * is 9; the checker goes by the order the program asked). */
#include <stdatomic.h>
#include <stdbool.h>
#include "jia.h"

#define N 1024

static int *a;
static _Atomic bool *flag;

int main(int argc, char **argv)
{
    jia_init(argc, argv);
    a = (int *)jia_alloc1(N * sizeof(int));
    flag = (_Atomic bool *)jia_alloc1(4096);
    jia_barrier();

    if (jiapid == 0) {
        a[4] = 9; /* race */
        atomic_store_explicit(flag, true, memory_order_relaxed);
    } else {
        while (!atomic_load_explicit(flag, memory_order_relaxed))
            ;
        if (a[4] != 9) /* race */
            jia_error("race_c11_relaxed_bool: node 1 read %d", a[4]);
    }

    jia_barrier();
    jia_exit();
    return 0;
}
