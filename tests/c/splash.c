/* splash.c: a program in SPLASH-2 style on the ANL macros of jia.h, as JIAJIA programs ported
 * from SPLASH are written: a global structure from G_MALLOC holding locks, a barrier, a
 * subscript counter and a pause flag; dynamic scheduling with GETSUB; a histogram under an
 * array of locks; a value handed over with PAUSE_SET/PAUSE_ACCEPT; CLOCK before jia_init.
 * Every result is checked exactly at node 0. Usage: splash [TASKS] */
#include <stdio.h>
#include <stdlib.h>
#include "setting.h"   /* JIAJIA 3.0 programs include its internal headers: here jia.h */

#define BINS 16

EXTERN_ENV

struct GlobalMemory {
    LOCKDEC(sum_lock)
    ALOCKDEC(bin_locks, BINS)
    BARDEC(start)
    GSDEC(next_task)
    PAUSEDEC(ready)
    long sum;            /* sum over every task of its value */
    long done;           /* tasks done, all nodes together */
    long bins[BINS];     /* tasks per bin */
    long handed;         /* written by node 0 before PAUSE_SET */
};

MAIN_ENV

static long value(long task) { return task * task % 1009 + 1; }

int main(int argc, char **argv)
{
    double t_before_init, t0, t1;
    struct GlobalMemory *Global;
    long tasks = argc > 1 ? atol(argv[1]) : 2000, t, sum, mine = 0;
    int i;

    CLOCK(t_before_init)           /* before jia_init, as SPLASH programs often do */
    MAIN_INITENV(, 0)
    jia_init(argc, argv);
    jia_config(ADWD, ON);
    jia_config(WVEC, OFF);

    Global = (struct GlobalMemory *)G_MALLOC(sizeof(struct GlobalMemory))
    /* Every node hands out the same lock and flag numbers (the calls are the same), node 0
     * initialises the shared structure. */
    {
        LOCKDEC(sum_lock)
        ALOCKDEC(bin_locks, BINS)
        PAUSEDEC(ready)
        LOCKINIT(sum_lock)
        ALOCKINIT(bin_locks, BINS)
        PAUSEINIT(ready)
        if (jiapid == 0) {
            Global->sum_lock = sum_lock;
            for (i = 0; i < BINS; i++) Global->bin_locks[i] = bin_locks[i];
            Global->ready = ready;
            BARINIT(Global->start)
            GSINIT(Global->next_task)
            Global->sum = Global->done = Global->handed = 0;
            for (i = 0; i < BINS; i++) Global->bins[i] = 0;
        }
    }
    BARRIER(Global->start, jiahosts)
    CLOCK(t0)

    /* Dynamic scheduling: take task numbers until the counter passes the last one. */
    for (;;) {
        long b;
        GETSUB(Global->next_task, t, tasks - 1, jiahosts)
        if (t < 0) break;
        b = value(t) % BINS;
        ALOCK(Global->bin_locks, b)
        Global->bins[b]++;
        AULOCK(Global->bin_locks, b)
        mine += value(t);
        jia_wtnt(&Global->bins[b], 1);
        jia_wtntw(&Global->bins[b]);
        jia_wtntd(&Global->bins[b]);
    }
    LOCK(Global->sum_lock)
    Global->sum += mine;
    Global->done++;
    UNLOCK(Global->sum_lock)

    /* A value handed from node 0 to everyone through a pause flag (a condition variable). */
    if (jiapid == 0) {
        Global->handed = 4242;
        PAUSE_SET(Global->ready, 1)
    } else {
        PAUSE_ACCEPT(Global->ready)
        if (Global->handed != 4242)
            jia_error("node %d: the value handed over is %ld, not 4242", jiapid, Global->handed);
        PAUSE_POLL(Global->ready)
    }
    WAIT_FOR_END(jiahosts)
    CLOCK(t1)

    if (jiapid == 0) {
        long want = 0, want_bins[BINS] = {0}, counted = 0;
        int ok = 1;
        PAUSE_RESET(Global->ready)
        for (t = 0; t < tasks; t++) {
            want += value(t);
            want_bins[value(t) % BINS]++;
        }
        for (i = 0; i < BINS; i++) {
            counted += Global->bins[i];
            if (Global->bins[i] != want_bins[i]) ok = 0;
        }
        sum = Global->sum;
        if (sum != want || counted != tasks || Global->done != jiahosts) ok = 0;
        if (t_before_init < 0 || t1 < t0) ok = 0;
        printf("c-splash %s tasks=%ld sum=%ld nodes=%d time=%.3fs\n", ok ? "OK" : "FAILED", tasks,
               sum, jiahosts, t1 - t0);
        if (!ok) jia_error("splash: sum %ld (want %ld), %ld tasks counted", sum, want, counted);
    }
    MAIN_END
    jia_exit();
    return 0;
}
