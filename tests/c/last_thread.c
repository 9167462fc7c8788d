/* last_thread.c: main() starts two workers and calls pthread_exit; the workers add to a shared
 * counter under a lock, pass jia_barrier_threads, and end; node 0's first worker prints the
 * total (buffered: only an exit flushes it). With "jia_exit" that worker calls jia_exit first;
 * without, the workers just return: POSIX ends the process with exit(0) as its last thread ends,
 * which the runtime's own service thread, a thread of the process too, kept from happening (the
 * node hung, its output lost). Usage: last_thread [jia_exit] */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include "jia.h"

static volatile int *counter;
static int calls_exit;

static void *worker(void *arg)
{
    long me = (long)arg;
    for (int i = 0; i < 100; i++) {
        jia_lock(3);
        counter[0] += 1;
        jia_unlock(3);
    }
    jia_barrier_threads(2);
    if (me == 0 && jiapid == 0)
        printf("c-last_thread %s total=%d expected=%d nodes=%d\n", counter[0] == 200 * jiahosts ? "OK" : "WRONG",
               counter[0], 200 * jiahosts, jiahosts);
    jia_barrier_threads(2);
    if (me == 0 && calls_exit) jia_exit();
    return NULL;
}

int main(int argc, char **argv)
{
    pthread_t t[2];
    calls_exit = argc > 1 && strcmp(argv[1], "jia_exit") == 0;
    jia_init(argc, argv);
    counter = (volatile int *)jia_alloc(4096);
    jia_barrier();
    for (long i = 0; i < 2; i++) pthread_create(&t[i], NULL, worker, (void *)i);
    pthread_exit(NULL);
}
