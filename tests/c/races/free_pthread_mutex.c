/* free_pthread_mutex.c (race-free): two pthreads of each node add to their node's counter in
 * shared memory under a pthread mutex; the main thread reads the counter after joining them,
 * and node 0 reads every node's after a barrier. */
#include <pthread.h>
#include "jia.h"

#define ROUNDS 200

static long *counters;
static pthread_mutex_t guard = PTHREAD_MUTEX_INITIALIZER;

static void *add(void *arg)
{
    int i;
    (void)arg;
    for (i = 0; i < ROUNDS; i++) {
        pthread_mutex_lock(&guard);
        counters[jiapid * 8] += 1;
        pthread_mutex_unlock(&guard);
    }
    return NULL;
}

int main(int argc, char **argv)
{
    pthread_t t[2];
    int i;

    jia_init(argc, argv);
    counters = (long *)jia_alloc(jiahosts * 8 * sizeof(long));
    jia_barrier();

    for (i = 0; i < 2; i++)
        pthread_create(&t[i], NULL, add, NULL);
    for (i = 0; i < 2; i++)
        pthread_join(t[i], NULL);
    if (counters[jiapid * 8] != 2 * ROUNDS)
        jia_error("free_pthread_mutex: node %d counted %ld", jiapid, counters[jiapid * 8]);
    jia_barrier();
    if (jiapid == 0)
        for (i = 0; i < jiahosts; i++)
            if (counters[i * 8] != 2 * ROUNDS)
                jia_error("free_pthread_mutex: node %d's counter is %ld", i, counters[i * 8]);

    jia_barrier();
    jia_exit();
    return 0;
}
