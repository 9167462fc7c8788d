/* handler_malloc.c: a 10 kHz SIGALRM whose handler reads a word of a different shared page at
 * each tick and counts its ticks in a C11 atomic of the program's own memory (with a fence),
 * while the main thread allocates and frees memory without pause, for SECONDS. The
 * pages are read before the timer starts and nothing invalidates them meanwhile, so the handler
 * never faults (a fault served inside a handler that interrupted malloc may allocate: the DSM's
 * own limit). Under the race checker, a handler's access recorded with memory allocation
 * deadlocked when the signal landed inside the main thread's malloc. Node 0 writes a word after
 * the run, outside any barrier's order with the other node's reads of it, in its handler and
 * before the timer: two read-write races, both reported. With `early`, the handler is
 * installed before jia_init. Usage: handler_malloc [SECONDS [early]] */
#define _GNU_SOURCE
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>
#include "jia.h"

#define PAGES 256

static long *words;
static volatile long ticks, sum;
static atomic_long counted;

static void on_alarm(int sig)
{
    (void)sig;
    if (!words)
        return;
    sum += words[(ticks++ % PAGES) * (Pagesize / sizeof(long))]; /* handler read */
    /* Atomics in a handler are the CPU's: the checker's work for them (allocations, its locks)
     * deadlocked in the interrupted malloc. */
    atomic_fetch_add(&counted, 1);
    atomic_thread_fence(memory_order_seq_cst);
}

int main(int argc, char **argv)
{
    double seconds = argc > 1 ? atof(argv[1]) : 2, t0;
    struct itimerval every = {{0, 100}, {0, 100}}, off = {{0, 0}, {0, 0}};
    long rounds = 0, i;

    if (argc > 2 && strcmp(argv[2], "early") == 0)
        signal(SIGALRM, on_alarm);
    jia_init(argc, argv);
    words = (long *)jia_alloc(PAGES * Pagesize);
    if (jiapid == 0)
        for (i = 0; i < PAGES; i++)
            words[i * (Pagesize / sizeof(long))] = i;
    jia_barrier();
    for (i = 0; i < PAGES; i++)
        sum += words[i * (Pagesize / sizeof(long))];

    if (argc <= 2)
        signal(SIGALRM, on_alarm);
    setitimer(ITIMER_REAL, &every, NULL);
    t0 = jia_clock();
    while (jia_clock() - t0 < seconds) {
        char *p[64];
        for (i = 0; i < 64; i++) {
            p[i] = malloc(16 + (rounds * 37 + i * 101) % 4000);
            p[i][0] = (char)i;
        }
        for (i = 0; i < 64; i++)
            free(p[i]);
        rounds++;
    }
    setitimer(ITIMER_REAL, &off, NULL);
    if (jiapid == 0)
        words[0] = -1; /* late write */
    jia_barrier();
    if (jiapid == 0)
        printf("handler_malloc OK ticks=%ld counted=%ld rounds=%ld\n", ticks,
               (long)atomic_load(&counted), rounds);
    jia_exit();
    return 0;
}
