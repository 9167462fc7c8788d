/* race_private_relaxed_flag.c: as free_private_atomic_flag.c, with the flag in the program's
 * own memory stored and loaded with relaxed order: it orders nothing, and the producer's write
 * and the consumer's read race (on every node: the same two lines). */
#include <pthread.h>
#include <stdatomic.h>
#include "jia.h"

static long *a;
static atomic_int flag;

static void *producer(void *arg)
{
    (void)arg;
    a[jiapid * 8] = 42; /* race */
    atomic_store_explicit(&flag, 1, memory_order_relaxed);
    return NULL;
}

static void *consumer(void *arg)
{
    (void)arg;
    while (!atomic_load_explicit(&flag, memory_order_relaxed))
        ;
    if (a[jiapid * 8] != 42) /* race */
        jia_error("race_private_relaxed_flag: node %d read %ld", jiapid, a[jiapid * 8]);
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
