/* free_pthread_barrier_new_threads.c (race-free): a pthread barrier's rounds are the barrier's,
 * whichever threads wait at it. (1) One barrier of 2 lives on while a new worker meets the main
 * thread at it in each phase: the worker writes the phase's element before it, main reads it
 * after. (2) A function makes a barrier on its stack, meets a worker at it and destroys it;
 * called twice, the second barrier is at the first one's address. */
#include <pthread.h>
#include "jia.h"

static long *a;
static pthread_barrier_t b;

static void *worker(void *arg)
{
    long p = (long)arg;
    a[jiapid * 16 + p] = p + 1;
    pthread_barrier_wait(&b);
    return NULL;
}

static void *stack_worker(void *arg)
{
    pthread_barrier_t *sb = (pthread_barrier_t *)arg;
    a[jiapid * 16 + 8] += 1;
    pthread_barrier_wait(sb);
    return NULL;
}

static void once_on_the_stack(long want)
{
    pthread_barrier_t sb;
    pthread_t t;
    pthread_barrier_init(&sb, NULL, 2);
    pthread_create(&t, NULL, stack_worker, &sb);
    pthread_barrier_wait(&sb);
    if (a[jiapid * 16 + 8] != want)
        jia_error("free_pthread_barrier_new_threads: node %d read %ld", jiapid, a[jiapid * 16 + 8]);
    pthread_join(t, NULL);
    pthread_barrier_destroy(&sb);
}

int main(int argc, char **argv)
{
    pthread_t t;
    long p;

    jia_init(argc, argv);
    a = (long *)jia_alloc(jiahosts * 16 * sizeof(long));
    pthread_barrier_init(&b, NULL, 2);
    jia_barrier();

    for (p = 0; p < 3; p++) {
        pthread_create(&t, NULL, worker, (void *)p);
        pthread_barrier_wait(&b);
        if (a[jiapid * 16 + p] != p + 1)
            jia_error("free_pthread_barrier_new_threads: node %d phase %ld", jiapid, p);
        pthread_join(t, NULL);
    }
    once_on_the_stack(1);
    once_on_the_stack(2);

    jia_barrier();
    jia_exit();
    return 0;
}
