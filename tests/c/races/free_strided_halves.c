/* free_strided_halves.c: node 0 sums the even elements of an array while node 1 writes its odd
 * ones, in the same epoch: no byte is touched by both. A vectorised loop loads the odd elements
 * with the even ones (clang's 16-byte vector reads), which the checker must not take for the
 * program's own reads. */
#include "jia.h"

#define N 4096

static int *a;

int main(int argc, char **argv)
{
    int i;
    long s = 0;

    jia_init(argc, argv);
    a = (int *)jia_alloc1(N * sizeof(int));
    jia_barrier();

    if (jiapid == 0)
        for (i = 0; i < N / 2; i++)
            s += a[2 * i];
    else if (jiapid == 1)
        for (i = 0; i < N / 2; i++)
            a[2 * i + 1] = i;

    jia_barrier();
    if (s == 12345)
        jia_error("unexpected sum");
    jia_barrier();
    jia_exit();
    return 0;
}
