/* race_pthread_pool_worker_waiting.c: node 0 starts a worker of a pool that is never joined: it
 * writes a[3] and then waits for more work until the process ends (`sem_wait`). Node 1 writes
 * a[3] too. Nothing orders the two nodes' writes before the last barrier; the worker's write is
 * checked though its thread still waits at jia_exit. */
#include <pthread.h>
#include <semaphore.h>
#include <unistd.h>
#include "jia.h"

static long *a;
static sem_t more;
static volatile int done; /* the program's own memory: not checked */

static void *worker(void *arg)
{
    (void)arg;
    a[3] = 1; /* race */
    done = 1;
    sem_wait(&more);
    return NULL;
}

int main(int argc, char **argv)
{
    pthread_t t;

    jia_init(argc, argv);
    a = (long *)jia_alloc(4096);
    sem_init(&more, 0, 0);
    jia_barrier();

    if (jiapid == 0) {
        pthread_create(&t, NULL, worker, NULL);
        while (!done)
            usleep(1000);
    } else if (jiapid == 1) {
        a[3] = 2; /* race */
    }

    jia_barrier();
    jia_exit();
    return 0;
}
