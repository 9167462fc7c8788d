/* races_pthread_modes.c MODE (race-free in every mode; from a review): pthread synchronisation
 * the race checker sees (dsmcc --check-races renames its calls). Two threads of each node
 * and the node's shared counter.
 *   exit      : the thread ends with pthread_exit; main reads after pthread_join
 *   rwlock    : pthread_rwlock_wrlock/unlock around the counter
 *   spin      : pthread_spin_lock/unlock
 *   timedlock : pthread_mutex_timedlock/unlock
 *   semtry    : sem_trywait (spinning) / sem_post hand-over
 *   semtimed  : sem_timedwait / sem_post hand-over
 *   once      : pthread_once initialises the counter, both threads then lock a mutex
 *   cancel    : control for mutex lock/unlock (renamed)
 */
#include <pthread.h>
#include <semaphore.h>
#include <string.h>
#include <stdio.h>
#include <time.h>
#include <errno.h>
#include "jia.h"

#define ROUNDS 100
static long *counters;
static const char *mode;
static pthread_rwlock_t rw = PTHREAD_RWLOCK_INITIALIZER;
static pthread_spinlock_t sp;
static pthread_mutex_t mx = PTHREAD_MUTEX_INITIALIZER;
static sem_t sem;
static pthread_once_t once = PTHREAD_ONCE_INIT;

static void init_counter(void) { counters[jiapid * 8] = 1000; }

static void *worker(void *arg)
{
    long me = (long)arg;
    long *c = &counters[jiapid * 8];
    int i;
    if (!strcmp(mode, "exit")) {
        c[1 + me] = 5;
        pthread_exit(NULL);
    }
    if (!strcmp(mode, "semtry") || !strcmp(mode, "semtimed")) {
        /* thread 0 writes then posts; thread 1 waits then reads and writes */
        if (me == 0) {
            c[0] = 42;
            sem_post(&sem);
        } else {
            if (!strcmp(mode, "semtry")) {
                while (sem_trywait(&sem) != 0)
                    ;
            } else {
                struct timespec t;
                clock_gettime(CLOCK_REALTIME, &t);
                t.tv_sec += 10;
                while (sem_timedwait(&sem, &t) != 0)
                    ;
            }
            c[0] += 1;
        }
        return NULL;
    }
    if (!strcmp(mode, "once")) {
        pthread_once(&once, init_counter);
        pthread_mutex_lock(&mx);
        *c += 1;
        pthread_mutex_unlock(&mx);
        return NULL;
    }
    for (i = 0; i < ROUNDS; i++) {
        if (!strcmp(mode, "rwlock")) {
            pthread_rwlock_wrlock(&rw);
            *c += 1;
            pthread_rwlock_unlock(&rw);
        } else if (!strcmp(mode, "spin")) {
            pthread_spin_lock(&sp);
            *c += 1;
            pthread_spin_unlock(&sp);
        } else if (!strcmp(mode, "timedlock")) {
            struct timespec t;
            clock_gettime(CLOCK_REALTIME, &t);
            t.tv_sec += 10;
            pthread_mutex_timedlock(&mx, &t);
            *c += 1;
            pthread_mutex_unlock(&mx);
        } else {
            pthread_mutex_lock(&mx);
            *c += 1;
            pthread_mutex_unlock(&mx);
        }
    }
    return NULL;
}

int main(int argc, char **argv)
{
    pthread_t t[2];
    long i;

    jia_init(argc, argv);
    mode = argc > 1 ? argv[1] : "exit";
    counters = (long *)jia_alloc(jiahosts * 8 * sizeof(long));
    pthread_spin_init(&sp, 0);
    sem_init(&sem, 0, 0);
    jia_barrier();
    for (i = 0; i < 2; i++)
        pthread_create(&t[i], NULL, worker, (void *)i);
    for (i = 0; i < 2; i++)
        pthread_join(t[i], NULL);
    printf("node %d %s: %ld %ld %ld\n", jiapid, mode, counters[jiapid * 8],
           counters[jiapid * 8 + 1], counters[jiapid * 8 + 2]);
    jia_barrier();
    jia_exit();
    return 0;
}
