/* free_c11_small_atomics.c (race-free): C11 atomics of 1 and 2 bytes on shared memory. Each
 * node takes a spin lock made of an atomic_flag (test-and-set with acquire order, clear with
 * release) 100 times and adds to a plain counter under it; node 0 writes a[4] and publishes it
 * through an _Atomic bool stored with release order, which the other nodes load with acquire;
 * every node adds to an _Atomic unsigned short, and writes a plain byte beside it. */
#include <stdatomic.h>
#include <stdbool.h>
#include "jia.h"

#define N 1024

static int *a;
static unsigned char *words;

int main(int argc, char **argv)
{
    jia_init(argc, argv);
    a = (int *)jia_alloc1(N * sizeof(int));
    words = (unsigned char *)jia_alloc1(4096);
    atomic_flag *lock = (atomic_flag *)&words[0];
    _Atomic bool *ready = (_Atomic bool *)&words[1];
    _Atomic unsigned short *adds = (_Atomic unsigned short *)&words[2];
    long *counter = (long *)&words[64];
    if (jiapid == 0)
        atomic_flag_clear(lock);
    jia_barrier();

    for (int i = 0; i < 100; i++) {
        while (atomic_flag_test_and_set_explicit(lock, memory_order_acquire))
            ;
        *counter += 1;
        atomic_flag_clear_explicit(lock, memory_order_release);
        atomic_fetch_add_explicit(adds, 700, memory_order_relaxed);
    }
    words[4 + jiapid % 4] = (unsigned char)(jiapid + 1);
    if (jiapid == 0) {
        a[4] = 9;
        atomic_store_explicit(ready, true, memory_order_release);
    } else {
        while (!atomic_load_explicit(ready, memory_order_acquire))
            ;
        if (a[4] != 9)
            jia_error("free_c11_small_atomics: node %d read %d, not 9", jiapid, a[4]);
    }

    jia_barrier();
    if (*counter != 100L * jiahosts || *adds != (unsigned short)(70000u * jiahosts))
        jia_error("free_c11_small_atomics: counter %ld, adds %u", *counter, (unsigned)*adds);
    for (int k = 0; k < jiahosts && k < 4; k++)
        if (words[4 + k] != k + 1)
            jia_error("free_c11_small_atomics: byte %d beside the atomics is %d", 4 + k,
                      words[4 + k]);
    jia_exit();
    return 0;
}
