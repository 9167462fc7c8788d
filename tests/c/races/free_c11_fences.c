/* free_c11_fences.c (race-free): node 0 writes a[4], makes a release fence and stores 1 into a
 * flag with relaxed order; node 1 loads the flag with relaxed order until it sees 1, makes an
 * acquire fence and reads a[4]. By C11 the fences order the write before the read (the store
 * after the release fence is read before the acquire fence). */
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
        a[4] = 9;
        atomic_thread_fence(memory_order_release);
        atomic_store_explicit(flag, 1, memory_order_relaxed);
    } else if (jiapid == 1) {
        while (atomic_load_explicit(flag, memory_order_relaxed) == 0)
            ;
        atomic_thread_fence(memory_order_acquire);
        if (a[4] != 9)
            jia_error("free_c11_fences: node 1 read %d, not 9", a[4]);
    }

    jia_barrier();
    jia_exit();
    return 0;
}
