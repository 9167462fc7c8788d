/* threads.c: threads a C program starts itself (pthreads, never seen by the runtime before they
 * fault) read pages homed on other nodes and write pages of their own, with errno set by a
 * failing system call just before each access: every access must leave errno as it was (the
 * fault handler's own system calls must not show through), and every thread must have an
 * alternate signal stack after its first fault (each thread also writes a page of its own homed
 * on the next node, which always faults). Node 0 checks every value after the barrier.
 * Usage: threads [PAGES_PER_NODE] */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>
#include "jia.h"

#define THREADS 4
/* Keeps the compiler from moving the errno accesses across the shared-memory access. */
#define COMPILER_FENCE() __asm__ volatile("" ::: "memory")
#define WORDS_PER_PAGE (4096 / sizeof(long))

static long *src, *dst, *scratch;
static long words_per_node, pages;

static long value(long i) { return i * 7 + 3; }

struct job { int t; const char *err; long sum; };

static void *work(void *arg)
{
    struct job *j = arg;
    int next = (jiapid + 1) % jiahosts, i;
    long first = next * words_per_node, w, p;
    stack_t ss;
    /* Each thread its own pages (other threads or a prefetch may have opened some). */
    for (p = j->t; p < pages; p += THREADS) for (w = p * WORDS_PER_PAGE; w < (p + 1) * (long)WORDS_PER_PAGE; w++) {
        long x;
        /* errno = ENOENT, then an access that faults (the first word of each page). */
        if (open("/nonexistent/dsm-threads", O_RDONLY) >= 0 || errno != ENOENT) {
            j->err = "open of a missing file did not fail with ENOENT";
            return NULL;
        }
        COMPILER_FENCE();
        x = src[first + w];
        COMPILER_FENCE();
        if (errno != ENOENT) {
            j->err = "errno changed across a read fault";
            return NULL;
        }
        j->sum += x;
        errno = EDOM;
        COMPILER_FENCE();
        dst[jiapid * words_per_node + w] = x + 1;
        COMPILER_FENCE();
        if (errno != EDOM) {
            j->err = "errno changed across a write fault";
            return NULL;
        }
    }
    /* A write to a page of its own homed on the next node: always a fault (a copy is at best
     * read-only here), so this thread has met the handler at least once. */
    COMPILER_FENCE();
    scratch[(next * THREADS + j->t) * (long)WORDS_PER_PAGE] = j->t + 1;
    COMPILER_FENCE();
    i = sigaltstack(NULL, &ss);
    if (jiahosts > 1 && (i != 0 || (ss.ss_flags & SS_DISABLE)))
        j->err = "no alternate signal stack after faulting";
    return NULL;
}

int main(int argc, char **argv)
{
    long i, total = 0, want = 0;
    pthread_t tid[THREADS];
    struct job jobs[THREADS];
    int t;

    jia_init(argc, argv);
    pages = argc > 1 ? atol(argv[1]) : 16;
    if (pages < 1 || pages > 4096) jia_error("usage: threads [PAGES_PER_NODE 1..4096]");
    words_per_node = pages * WORDS_PER_PAGE;
    src = (long *)jia_alloc3(jiahosts * words_per_node * sizeof(long), words_per_node * sizeof(long), 0);
    dst = (long *)jia_alloc3(jiahosts * words_per_node * sizeof(long), words_per_node * sizeof(long), 0);
    scratch = (long *)jia_alloc3(jiahosts * THREADS * 4096, THREADS * 4096, 0);
    for (i = 0; i < words_per_node; i++) src[jiapid * words_per_node + i] = value(jiapid * words_per_node + i);
    jia_barrier();
    for (t = 0; t < THREADS; t++) {
        jobs[t].t = t;
        jobs[t].err = NULL;
        jobs[t].sum = 0;
        if (pthread_create(&tid[t], NULL, work, &jobs[t]) != 0) jia_error("pthread_create failed");
    }
    for (t = 0; t < THREADS; t++) {
        pthread_join(tid[t], NULL);
        if (jobs[t].err) jia_error("thread %d: %s", t, jobs[t].err);
        total += jobs[t].sum;
    }
    for (i = 0; i < words_per_node; i++) want += value(((jiapid + 1) % jiahosts) * words_per_node + i);
    if (total != want) jia_error("node %d: threads summed %ld, want %ld", jiapid, total, want);
    jia_barrier();
    if (jiapid == 0) {
        for (i = 0; i < jiahosts * words_per_node; i++) {
            long from = (i / words_per_node + 1) % jiahosts;
            long expect = value(from * words_per_node + i % words_per_node) + 1;
            if (dst[i] != expect) jia_error("dst[%ld] = %ld, want %ld", i, dst[i], expect);
        }
        printf("c-threads OK pages=%ld threads=%d nodes=%d\n", pages, THREADS, jiahosts);
    }
    jia_exit();
    return 0;
}
