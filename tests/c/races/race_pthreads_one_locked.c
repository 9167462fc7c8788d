/* race_pthreads_one_locked.c: two pthreads of node 0 write a[7], one inside jia_lock(2), the
 * other without the lock; node 1 only passes the barriers (write-write between threads). */
#include <pthread.h>
#include "jia.h"

#define N 1024

static int *a;

static void *locked_writer(void *arg)
{
    (void)arg;
    jia_lock(2);
    a[7] = 1; /* race */
    jia_unlock(2);
    return NULL;
}

static void *plain_writer(void *arg)
{
    (void)arg;
    a[7] = 2; /* race */
    return NULL;
}

int main(int argc, char **argv)
{
    pthread_t t0, t1;

    jia_init(argc, argv);
    a = (int *)jia_alloc(N * sizeof(int));
    jia_barrier();

    if (jiapid == 0) {
        if (pthread_create(&t0, NULL, locked_writer, NULL) != 0 ||
            pthread_create(&t1, NULL, plain_writer, NULL) != 0)
            jia_error("pthread_create failed");
        pthread_join(t0, NULL);
        pthread_join(t1, NULL);
    }

    jia_barrier();
    jia_exit();
    return 0;
}
