/* free_rwlock_readers_and_writers.c (race-free): two threads of each node, in whatever order
 * they run: one writes element 1 under a read-write lock's write lock while the other reads it
 * under its read lock, and the other way round for element 2. A writer is ordered after every
 * earlier reader and a reader after every earlier writer. */
#include <pthread.h>
#include "jia.h"

#define ROUNDS 100

static long *a;
static pthread_rwlock_t rw = PTHREAD_RWLOCK_INITIALIZER;

static void *work(void *arg)
{
    long me = (long)arg, sum = 0;
    int i;
    for (i = 0; i < ROUNDS; i++) {
        pthread_rwlock_wrlock(&rw);
        a[jiapid * 8 + 1 + me] += 1;
        pthread_rwlock_unlock(&rw);
        pthread_rwlock_rdlock(&rw);
        sum += a[jiapid * 8 + 2 - me];
        pthread_rwlock_unlock(&rw);
    }
    return (void *)sum;
}

int main(int argc, char **argv)
{
    pthread_t t[2];
    int i;

    jia_init(argc, argv);
    a = (long *)jia_alloc(jiahosts * 8 * sizeof(long));
    jia_barrier();

    for (i = 0; i < 2; i++)
        pthread_create(&t[i], NULL, work, (void *)(long)i);
    for (i = 0; i < 2; i++)
        pthread_join(t[i], NULL);
    if (a[jiapid * 8 + 1] != ROUNDS || a[jiapid * 8 + 2] != ROUNDS)
        jia_error("free_rwlock_readers_and_writers: node %d counted wrong", jiapid);

    jia_barrier();
    jia_exit();
    return 0;
}
