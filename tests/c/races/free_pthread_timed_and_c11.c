/* free_pthread_timed_and_c11.c (race-free): two threads of each node take turns on the node's
 * counter in shared memory under every other kind of lock and wait: a read-write lock's timed
 * and clock write locks (readers read under its timed and clock read locks), a mutex's clock
 * lock, a hand-over by a condition variable's clock wait and by a semaphore's clock wait, and
 * C11's threads (mtx_lock, cnd_wait, thrd_create, thrd_join, call_once). */
#define _GNU_SOURCE
#include <pthread.h>
#include <semaphore.h>
#include <threads.h>
#include <time.h>
#include <unistd.h>
#include "jia.h"

#define ROUNDS 50

static long *c;
static pthread_rwlock_t rw = PTHREAD_RWLOCK_INITIALIZER;
static pthread_mutex_t mx = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t cv = PTHREAD_COND_INITIALIZER;
static int ready;
static sem_t sem;
static mtx_t cm;
static cnd_t ccv;
static int cready;
static once_flag once = ONCE_FLAG_INIT;

static struct timespec in_10s(clockid_t clock)
{
    struct timespec t;
    clock_gettime(clock, &t);
    t.tv_sec += 10;
    return t;
}

static void first(void) { c[jiapid * 8 + 5] = 7; }

static void *locks(void *arg)
{
    long me = (long)arg, seen = 0;
    long *n = &c[jiapid * 8];
    int i;
    for (i = 0; i < ROUNDS; i++) {
        struct timespec rt = in_10s(CLOCK_REALTIME), mono = in_10s(CLOCK_MONOTONIC);
        pthread_rwlock_timedwrlock(&rw, &rt);
        n[0] += 1;
        pthread_rwlock_unlock(&rw);
        pthread_rwlock_clockwrlock(&rw, CLOCK_MONOTONIC, &mono);
        n[0] += 1;
        pthread_rwlock_unlock(&rw);
        pthread_rwlock_timedrdlock(&rw, &rt);
        seen += n[0];
        pthread_rwlock_unlock(&rw);
        pthread_rwlock_clockrdlock(&rw, CLOCK_MONOTONIC, &mono);
        seen += n[0];
        pthread_rwlock_unlock(&rw);
        pthread_mutex_clocklock(&mx, CLOCK_MONOTONIC, &mono);
        n[1] += 1;
        pthread_mutex_unlock(&mx);
        mtx_lock(&cm);
        n[2] += 1;
        mtx_unlock(&cm);
    }
    call_once(&once, first);
    if (n[5] != 7)
        jia_error("free_pthread_timed_and_c11: call_once's write not seen");
    /* Hand-overs: thread 0 writes, thread 1 waits (it waits first: thread 0 sleeps). */
    if (me == 0) {
        usleep(20000);
        n[3] = 42;
        pthread_mutex_lock(&mx);
        ready = 1;
        pthread_cond_signal(&cv);
        pthread_mutex_unlock(&mx);
        n[4] = 43;
        sem_post(&sem);
        n[6] = 44;
        mtx_lock(&cm);
        cready = 1;
        cnd_signal(&ccv);
        mtx_unlock(&cm);
    } else {
        struct timespec mono = in_10s(CLOCK_MONOTONIC), rt = in_10s(CLOCK_REALTIME);
        pthread_mutex_lock(&mx);
        while (!ready)
            pthread_cond_clockwait(&cv, &mx, CLOCK_MONOTONIC, &mono);
        pthread_mutex_unlock(&mx);
        n[3] += 1;
        while (sem_clockwait(&sem, CLOCK_MONOTONIC, &mono) != 0)
            ;
        n[4] += 1;
        mtx_lock(&cm);
        while (!cready)
            cnd_timedwait(&ccv, &cm, &rt);
        mtx_unlock(&cm);
        n[6] += 1;
    }
    return (void *)seen;
}

static int c11_worker(void *arg)
{
    mtx_lock(&cm);
    c[jiapid * 8 + 7] += (long)arg;
    mtx_unlock(&cm);
    return 0;
}

int main(int argc, char **argv)
{
    pthread_t t[2];
    thrd_t ct[2];
    int i;

    jia_init(argc, argv);
    sem_init(&sem, 0, 0);
    mtx_init(&cm, mtx_plain);
    cnd_init(&ccv);
    c = (long *)jia_alloc(jiahosts * 8 * sizeof(long));
    jia_barrier();

    for (i = 0; i < 2; i++)
        pthread_create(&t[i], NULL, locks, (void *)(long)i);
    for (i = 0; i < 2; i++)
        pthread_join(t[i], NULL);
    for (i = 0; i < 2; i++)
        thrd_create(&ct[i], c11_worker, (void *)(long)(i + 1));
    for (i = 0; i < 2; i++)
        thrd_join(ct[i], NULL);
    if (c[jiapid * 8] != 4 * ROUNDS || c[jiapid * 8 + 1] != 2 * ROUNDS
        || c[jiapid * 8 + 2] != 2 * ROUNDS || c[jiapid * 8 + 3] != 43 || c[jiapid * 8 + 4] != 44
        || c[jiapid * 8 + 6] != 45 || c[jiapid * 8 + 7] != 3)
        jia_error("free_pthread_timed_and_c11: node %d's counts are wrong", jiapid);

    jia_barrier();
    jia_exit();
    return 0;
}
