/* Node 1 alone takes lock 1 (which it manages), adds 1 to a word of a page homed at node 0 and
 * releases the lock, N times; prints the cycles a second. Build: dsmcc -O2 this.c -o own;
 * run: dsmrun -n 2 [--stats] ./own N. */
#include <stdio.h>
#include <stdlib.h>
#include "jia.h"

int main(int argc, char **argv)
{
    jia_init(argc, argv);
    long n = argc > 1 ? atol(argv[1]) : 20000;
    int *x = (int *)jia_alloc(4096 * 4);
    jia_barrier();
    if (jiapid == 1) {
        double t0 = jia_clock();
        for (long i = 0; i < n; i++) {
            jia_lock(1);
            x[0]++;
            jia_unlock(1);
        }
        double t = jia_clock() - t0;
        printf("own-notices: %ld cycles in %.3f s: %.0f a second\n", n, t, n / t);
    }
    jia_barrier();
    if (jiapid == 0 && x[0] != n)
        jia_error("own-notices: x is %d, not %ld", x[0], n);
    jia_exit();
    return 0;
}
