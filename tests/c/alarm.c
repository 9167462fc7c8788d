/* alarm.c: a 1 kHz SIGALRM (setitimer) whose handler reads shared memory while the main thread
 * streams through pages homed on the next node (run with prefetch off: every page a fault), and
 * waits in barriers. The handler reads a word of another node's block on each tick (a page the
 * node often does not hold: its fault comes while the main thread waits in its own page fault,
 * or in a DSM call, or computes) and checks it: the word's index, and a round at most one away
 * from the main thread's. Every round the nodes rewrite their blocks, so the copies read in the
 * last round are gone. Node 0 decides when SECONDS have passed. Before the fix the node was
 * killed by SIGSEGV (a fault in a handler run inside the fault handler, SIGSEGV blocked there).
 * Usage: alarm [PAGES_PER_NODE [SECONDS]] */
#define _GNU_SOURCE
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>
#include "jia.h"

#define STRIDE 1000003L

static long *blocks, *control;
static long words, total;
static volatile long round_no;
static volatile long ticks, bad, bad_value, bad_index, bad_round;

static long value(long r, long i) { return r * STRIDE + i; }

static void on_alarm(int sig)
{
    long k = ticks++, i, v, r;
    (void)sig;
    /* Another node's block, a different page each tick. */
    i = ((jiapid + 1 + k) % jiahosts) * words + (k * 521) % words;
    v = blocks[i];
    r = round_no;
    if (v % STRIDE != i || v / STRIDE < r - 1 || v / STRIDE > r + 1) {
        if (!bad) {
            bad_value = v;
            bad_index = i;
            bad_round = r;
        }
        bad++;
    }
}

int main(int argc, char **argv)
{
    long pages = argc > 1 ? atol(argv[1]) : 64;
    double seconds = argc > 2 ? atof(argv[2]) : 3;
    long r, i, next, go = 1;
    double start;
    struct sigaction act;
    struct itimerval every_ms = {{0, 1000}, {0, 1000}}, off = {{0, 0}, {0, 0}};

    jia_init(argc, argv);
    words = pages * 4096 / (long)sizeof(long);
    total = jiahosts * words;
    blocks = (long *)jia_alloc3(total * sizeof(long), words * sizeof(long), 0);
    control = (long *)jia_alloc2p(4096, 0);
    next = (jiapid + 1) % jiahosts;
    for (i = jiapid * words; i < (jiapid + 1) * words; i++)
        blocks[i] = value(0, i);
    jia_barrier();

    memset(&act, 0, sizeof act);
    act.sa_handler = on_alarm;
    act.sa_flags = SA_RESTART;
    sigemptyset(&act.sa_mask);
    if (sigaction(SIGALRM, &act, NULL) != 0 || setitimer(ITIMER_REAL, &every_ms, NULL) != 0)
        jia_error("installing the timer: %s", strerror(errno));
    start = jia_clock();
    for (r = 1; go; r++) {
        for (i = jiapid * words; i < (jiapid + 1) * words; i++)
            blocks[i] = value(r, i);
        jia_barrier();
        round_no = r;
        for (i = next * words; i < (next + 1) * words; i++)
            if (blocks[i] != value(r, i))
                jia_error("round %ld: word %ld is %ld, not %ld", r, i, blocks[i], value(r, i));
        if (jiapid == 0)
            control[0] = jia_clock() - start < seconds;
        jia_barrier();
        go = control[0];
    }
    if (setitimer(ITIMER_REAL, &off, NULL) != 0)
        jia_error("stopping the timer: %s", strerror(errno));
    if (bad)
        jia_error("the SIGALRM handler read %ld wrong words (first: word %ld was %ld in round %ld)",
                  bad, bad_index, bad_value, bad_round);
    if (ticks < 100)
        jia_error("only %ld SIGALRM ticks in %.1f s", ticks, jia_clock() - start);
    jia_barrier();
    if (jiapid == 0)
        printf("c-alarm OK rounds=%ld nodes=%d\n", r - 1, jiahosts);
    fprintf(stderr, "alarm: node %d: %ld ticks, %ld rounds\n", jiapid, ticks, r - 1);
    jia_exit();
    return 0;
}
