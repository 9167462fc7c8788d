/* free_pthread_other_joins.c (race-free): a thread of each node writes its node's element of a
 * shared array, and the node's main thread writes it after joining that thread with each of
 * glibc's other joins in turn: pthread_tryjoin_np (retried until the thread has ended),
 * pthread_timedjoin_np and pthread_clockjoin_np (each with a deadline that does not come). */
#define _GNU_SOURCE
#include <pthread.h>
#include <time.h>
#include "jia.h"

static int *a;

static void *work(void *arg)
{
    a[jiapid * 3 + (int)(long)arg] = 1;
    return NULL;
}

static struct timespec in_10s(clockid_t clock)
{
    struct timespec t;
    clock_gettime(clock, &t);
    t.tv_sec += 10;
    return t;
}

int main(int argc, char **argv)
{
    pthread_t t;
    struct timespec ts;

    jia_init(argc, argv);
    a = (int *)jia_alloc1(4096);
    jia_barrier();

    pthread_create(&t, NULL, work, (void *)0L);
    while (pthread_tryjoin_np(t, NULL) != 0)
        ;
    a[jiapid * 3] = 2;

    pthread_create(&t, NULL, work, (void *)1L);
    ts = in_10s(CLOCK_REALTIME);
    pthread_timedjoin_np(t, NULL, &ts);
    a[jiapid * 3 + 1] = 2;

    pthread_create(&t, NULL, work, (void *)2L);
    ts = in_10s(CLOCK_MONOTONIC);
    pthread_clockjoin_np(t, NULL, CLOCK_MONOTONIC, &ts);
    a[jiapid * 3 + 2] = 2;

    jia_barrier();
    jia_exit();
    return 0;
}
