/* race_c11_fence_one_side.c: as free_c11_fences.c, but node 1 makes no acquire fence: its
 * relaxed load orders nothing, and the write and the read race, the writer's release fence
 * notwithstanding. */
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
        atomic_thread_fence(memory_order_release);
        atomic_store_explicit(flag, 1, memory_order_relaxed);
    } else if (jiapid == 1) {
        while (atomic_load_explicit(flag, memory_order_relaxed) == 0)
            ;
        if (a[4] != 9) /* race */
            jia_error("race_c11_fence_one_side: node 1 read %d", a[4]);
    }

    jia_barrier();
    jia_exit();
    return 0;
}
