/* jia21.c: a program written against JIAJIA 2.1's interface: jia_pid and hostc (and the
 * jiapid/jiahosts macros), a float jia_clock declared by the program itself (compile with
 * -DJIA_FLOAT_CLOCK), jia_alloc1, jia_divtask and jia_loadcheck, every jia_config switch, the
 * write-notice hints, jia_errexit, and the library's two-argument assert(cond, msg) (no
 * <assert.h> here, as in 2.1's water). It sums a vector split by jia_divtask and checks every
 * node's share and the total exactly. Usage: jia21 [N] [ROUNDS] */
#include <stdio.h>
#include <stdlib.h>
#include "jia.h"

float jia_clock();   /* as 2.1 programs declare it */

int main(int argc, char **argv)
{
    int n = argc > 1 ? atoi(argv[1]) : 100000;
    int rounds = argc > 2 ? atoi(argv[2]) : 3;
    int *v, i, r, begin, end;
    long *partial;
    float t0, t1;

    jia_init(argc, argv);
    assert(1, "never");
    assert(n >= 1 && rounds >= 1, "usage: jia21 [N>0] [ROUNDS>0]");
    jia_config(HMIG, ON);
    jia_config(LOADBAL, ON);
    jia_config(BROADCAST, ON);
    jia_config(WVEC, ON);
    jia_config(LOADBAL, ON);   /* said once only */

    v = (int *)jia_alloc1(n * sizeof(int));
    partial = (long *)jia_alloc1(hostc * sizeof(long));
    t0 = jia_clock();

    begin = 0;
    end = n - 1;
    jia_divtask(&begin, &end);
    /* The share: contiguous, equal but for the last node's remainder. */
    if (begin != jia_pid * (n / hostc) || (jia_pid < hostc - 1 && end - begin + 1 != n / hostc) ||
        (jia_pid == hostc - 1 && end != n - 1))
        jia_errexit("node %d: jia_divtask gave [%d, %d] of [0, %d]", jia_pid, begin, end, n - 1);
    for (i = begin; i <= end; i++) {
        v[i] = i % 1000;
        jia_wtntw(&v[i]);
    }
    jia_barrier();
    for (r = 0; r < rounds; r++) {
        long s = 0;
        jia_loadcheck();
        begin = 0;
        end = n - 1;
        jia_divtask(&begin, &end);
        for (i = begin; i <= end; i++) {
            s += v[i];
            v[i] += 1;
        }
        assert(s >= 0, "a negative partial sum");
        partial[jia_pid] = s;
        jia_barrier();
        if (jiapid == 0) {
            long total = 0, want = 0;
            for (i = 0; i < hostc; i++) total += partial[i];
            for (i = 0; i < n; i++) want += i % 1000 + r;
            if (total != want) jia_errexit("round %d: sum %ld, want %ld", r, total, want);
        }
        jia_barrier();
    }
    t1 = jia_clock();
    if (jia_pid == 0)
        printf("c-jia21 OK n=%d rounds=%d nodes=%d time=%.3fs\n", n, rounds, hostc, t1 - t0);
    jia_exit();
    return 0;
}
