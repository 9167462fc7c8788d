/* free_pthreads_disjoint.c (race-free): two pthreads of node 0 write alternate elements of one
 * page (thread k the elements i with i % 2 == k) and node 1 writes the next page; nobody reads
 * or writes another's elements before the barrier, after which node 1 checks them. */
#include <pthread.h>
#include "jia.h"

#define N 1024

static int *a;

static void *writer(void *arg)
{
    long k = (long)arg, i;
    for (i = k; i < N; i += 2)
        a[i] = (int)(i + 1);
    return NULL;
}

int main(int argc, char **argv)
{
    pthread_t t[2];
    long k;
    int i;

    jia_init(argc, argv);
    a = (int *)jia_alloc(2 * N * sizeof(int));
    jia_barrier();

    if (jiapid == 0) {
        for (k = 0; k < 2; k++)
            if (pthread_create(&t[k], NULL, writer, (void *)k) != 0)
                jia_error("pthread_create failed");
        for (k = 0; k < 2; k++)
            pthread_join(t[k], NULL);
    } else {
        for (i = N; i < 2 * N; i++)
            a[i] = -i;
    }

    jia_barrier();
    if (jiapid == 1)
        for (i = 0; i < N; i++)
            if (a[i] != i + 1)
                jia_error("free_pthreads_disjoint: a[%d] is %d", i, a[i]);
    jia_barrier();
    jia_exit();
    return 0;
}
