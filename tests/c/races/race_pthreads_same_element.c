/* race_pthreads_same_element.c: two pthreads of node 0 write the same element; node 1 only
 * passes the barriers. A write-write race between threads of one node, on one source line. */
#include <pthread.h>
#include "jia.h"

#define N 1024

static int *a;

static void *writer(void *arg)
{
    a[6] = (int)(long)arg; /* race */
    return NULL;
}

int main(int argc, char **argv)
{
    pthread_t t[2];
    long k;

    jia_init(argc, argv);
    a = (int *)jia_alloc(N * sizeof(int));
    jia_barrier();

    if (jiapid == 0) {
        for (k = 0; k < 2; k++)
            if (pthread_create(&t[k], NULL, writer, (void *)(k + 1)) != 0)
                jia_error("pthread_create failed");
        for (k = 0; k < 2; k++)
            pthread_join(t[k], NULL);
    }

    jia_barrier();
    jia_exit();
    return 0;
}
