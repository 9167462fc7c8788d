/* free_private_atomic_flag.c (race-free): two threads of each node; one writes the node's
 * element of shared memory and publishes it with a release store to a flag in the program's own
 * memory (a static atomic, not shared), the other waits for the flag with acquire loads and
 * reads the element. Atomics order a node's threads wherever they are. */
#include <pthread.h>
#include <stdatomic.h>
#include "jia.h"

static long *a;
static atomic_int flag;

static void *producer(void *arg)
{
    (void)arg;
    a[jiapid * 8] = 42;
    atomic_store_explicit(&flag, 1, memory_order_release);
    return NULL;
}

static void *consumer(void *arg)
{
    (void)arg;
    while (!atomic_load_explicit(&flag, memory_order_acquire))
        ;
    if (a[jiapid * 8] != 42)
        jia_error("free_private_atomic_flag: node %d read %ld", jiapid, a[jiapid * 8]);
    return NULL;
}

int main(int argc, char **argv)
{
    pthread_t p, c;

    jia_init(argc, argv);
    a = (long *)jia_alloc(jiahosts * 8 * sizeof(long));
    jia_barrier();

    pthread_create(&c, NULL, consumer, NULL);
    pthread_create(&p, NULL, producer, NULL);
    pthread_join(p, NULL);
    pthread_join(c, NULL);

    jia_barrier();
    jia_exit();
    return 0;
}
