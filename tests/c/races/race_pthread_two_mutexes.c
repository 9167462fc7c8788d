/* race_pthread_two_mutexes.c: two pthreads of node 0 add to one shared counter, each under a
 * pthread mutex of its own: the mutexes order nothing between them (read-write and
 * write-write on one line). */
#include <pthread.h>
#include "jia.h"

static long *counter;
static pthread_mutex_t first = PTHREAD_MUTEX_INITIALIZER, second = PTHREAD_MUTEX_INITIALIZER;

static void *add(void *arg)
{
    pthread_mutex_t *mine = arg;
    pthread_mutex_lock(mine);
    counter[3] += 1; /* race */
    pthread_mutex_unlock(mine);
    return NULL;
}

int main(int argc, char **argv)
{
    pthread_t a, b;

    jia_init(argc, argv);
    counter = (long *)jia_alloc1(Pagesize);
    jia_barrier();

    if (jiapid == 0) {
        pthread_create(&a, NULL, add, &first);
        pthread_create(&b, NULL, add, &second);
        pthread_join(a, NULL);
        pthread_join(b, NULL);
    }

    jia_barrier();
    jia_exit();
    return 0;
}
