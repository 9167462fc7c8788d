/* race_rwlock_writes_under_read_lock.c: two threads of each node write the node's element of
 * shared memory, each holding the same read-write lock for reading only. Readers exclude no
 * reader and order nothing among themselves: the writes race, however far apart in time (the
 * second thread starts after the first has unlocked). */
#include <pthread.h>
#include <unistd.h>
#include "jia.h"

static long *a;
static pthread_rwlock_t rw = PTHREAD_RWLOCK_INITIALIZER;

static void *writer(void *arg)
{
    (void)arg;
    pthread_rwlock_rdlock(&rw);
    a[jiapid * 8] += 1; /* race */
    pthread_rwlock_unlock(&rw);
    return NULL;
}

int main(int argc, char **argv)
{
    pthread_t t[2];

    jia_init(argc, argv);
    a = (long *)jia_alloc(jiahosts * 8 * sizeof(long));
    jia_barrier();

    pthread_create(&t[0], NULL, writer, NULL);
    usleep(50000);
    pthread_create(&t[1], NULL, writer, NULL);
    pthread_join(t[0], NULL);
    pthread_join(t[1], NULL);

    jia_barrier();
    jia_exit();
    return 0;
}
