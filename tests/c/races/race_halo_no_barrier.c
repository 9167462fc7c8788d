/* race_halo_no_barrier.c: a 1-D three-point stencil, one half of the line per node. Each node
 * writes its half of u, then reads its halo cell (the neighbour's cell next to its half)
 * without the barrier that would order the neighbour's write before the read (read-write). */
#include "jia.h"

#define N 1024

static double *u, *v;

int main(int argc, char **argv)
{
    int i, lo, hi;
    double halo;

    jia_init(argc, argv);
    u = (double *)jia_alloc2(N * sizeof(double), N / 2 * sizeof(double));
    v = (double *)jia_alloc2(N * sizeof(double), N / 2 * sizeof(double));
    jia_barrier();

    lo = jiapid * (N / 2);
    hi = lo + N / 2;
    for (i = lo; i < hi; i++)
        u[i] = i * 0.5; /* race */
    /* Missing here: jia_barrier(); */
    halo = u[jiapid == 0 ? hi : lo - 1]; /* race */
    for (i = lo + 1; i < hi - 1; i++)
        v[i] = (u[i - 1] + u[i] + u[i + 1]) / 3;
    if (jiapid == 0)
        v[hi - 1] = (u[hi - 2] + u[hi - 1] + halo) / 3;
    else
        v[lo] = (halo + u[lo] + u[lo + 1]) / 3;

    jia_barrier();
    jia_exit();
    return 0;
}
