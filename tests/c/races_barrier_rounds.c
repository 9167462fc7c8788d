/* races_barrier_rounds.c pt|omp ROUNDS (racy; from a review): two threads of each node meet at
 * a barrier (a pthread barrier, or `omp barrier` with argument omp), then BOTH write the node's
 * element x, then meet again. The writes after the first barrier race (write-write, line 27 / 52).
 * Thread 0 arrives last at the first barrier (it sleeps first), so it runs on at once while
 * thread 1 is still waking up; thread 0's release at the second barrier is joined into the
 * barrier's clock before thread 1 acquires the first one. */
#include <pthread.h>
#include <omp.h>
#include <string.h>
#include <stdio.h>
#include <unistd.h>
#include <stdlib.h>
#include "jia.h"

static long *x;
static pthread_barrier_t b;
static int rounds = 5;

static void *worker(void *arg)
{
    long me = (long)arg;
    int r;
    for (r = 0; r < rounds; r++) {
        if (me == 0)
            usleep(20000);
        pthread_barrier_wait(&b);
        x[jiapid * 8 + r] = me;
        pthread_barrier_wait(&b);
    }
    return NULL;
}

int main(int argc, char **argv)
{
    pthread_t t[2];
    long i;

    jia_init(argc, argv);
    x = (long *)jia_alloc(jiahosts * 8 * sizeof(long));
    pthread_barrier_init(&b, NULL, 2);
    if (argc > 2)
        rounds = atoi(argv[2]);
    jia_barrier();
    if (argc > 1 && !strcmp(argv[1], "omp")) {
#pragma omp parallel num_threads(2)
        {
            int r;
            for (r = 0; r < rounds; r++) {
                if (omp_get_thread_num() == 0)
                    usleep(20000);
#pragma omp barrier
                x[jiapid * 8 + r] = omp_get_thread_num();
#pragma omp barrier
            }
        }
    } else {
        for (i = 0; i < 2; i++)
            pthread_create(&t[i], NULL, worker, (void *)i);
        for (i = 0; i < 2; i++)
            pthread_join(t[i], NULL);
    }
    jia_barrier();
    jia_exit();
    return 0;
}
