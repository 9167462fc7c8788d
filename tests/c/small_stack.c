/* small_stack.c: a thread with the smallest stack POSIX allows (PTHREAD_STACK_MIN) starts, faults
 * on shared pages homed on other nodes (a read and a write) and takes a lock. libjia's
 * thread-local storage, which every thread's stack holds, was 13.9 KiB (the race checker's
 * per-thread state, there even when the checker is off): pthread_create failed with EINVAL once
 * libjia was linked. Node 0 checks the counter each node's thread added to. */
#define _GNU_SOURCE
#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include "jia.h"

#define CHECK(cond, ...) do { if (!(cond)) jia_error(__VA_ARGS__); } while (0)
static volatile int *shared;

static void *small(void *arg)
{
    int next = (jiapid + 1) % jiahosts;
    (void)arg;
    int seen = shared[next * 1024];             /* a read fault on the next node's page */
    shared[next * 1024 + 1 + jiapid] = seen + 1; /* and a write */
    jia_lock(0);
    shared[jiahosts * 1024] += 1;
    jia_unlock(0);
    return NULL;
}

int main(int argc, char **argv)
{
    pthread_attr_t attr;
    pthread_t t;
    jia_init(argc, argv);
    shared = (volatile int *)jia_alloc3((jiahosts + 1) * 4096, 4096, 0);
    jia_barrier();
    CHECK(pthread_attr_init(&attr) == 0, "pthread_attr_init");
    CHECK(pthread_attr_setstacksize(&attr, PTHREAD_STACK_MIN) == 0, "pthread_attr_setstacksize");
    int e = pthread_create(&t, &attr, small, NULL);
    CHECK(e == 0, "node %d: a thread of PTHREAD_STACK_MIN (%d) bytes of stack: pthread_create: %s",
          jiapid, (int)PTHREAD_STACK_MIN, strerror(e));
    CHECK(pthread_join(t, NULL) == 0, "pthread_join");
    jia_barrier();
    if (jiapid == 0) {
        CHECK(shared[jiahosts * 1024] == jiahosts, "counter %d, expected %d", shared[jiahosts * 1024], jiahosts);
        printf("c-small_stack OK stack=%d nodes=%d\n", (int)PTHREAD_STACK_MIN, jiahosts);
    }
    jia_exit();
    return 0;
}
