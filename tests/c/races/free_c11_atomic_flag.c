/* free_c11_atomic_flag.c (race-free): node 0 writes a[4] and then stores 1 into an atomic flag
 * with release order; the other nodes load the flag with acquire order until they see 1, then
 * read a[4]. C11 atomics on shared memory: libjia's hooks make them exact across nodes and the
 * checker orders the read after the write; the counter's fetch-adds never race. */
#include <stdatomic.h>
#include "jia.h"

#define N 1024

static int *a;
static _Atomic long *flags;

int main(int argc, char **argv)
{
    jia_init(argc, argv);
    a = (int *)jia_alloc1(N * sizeof(int));
    flags = (_Atomic long *)jia_alloc1(4096);
    jia_barrier();

    atomic_fetch_add_explicit(&flags[1], 1, memory_order_relaxed);
    if (jiapid == 0) {
        a[4] = 9;
        atomic_store_explicit(&flags[0], 1, memory_order_release);
    } else {
        while (atomic_load_explicit(&flags[0], memory_order_acquire) == 0)
            ;
        if (a[4] != 9)
            jia_error("free_c11_atomic_flag: node %d read %d, not 9", jiapid, a[4]);
    }

    jia_barrier();
    if (flags[1] != jiahosts)
        jia_error("free_c11_atomic_flag: %ld fetch-adds, not %d", (long)flags[1], jiahosts);
    jia_exit();
    return 0;
}
