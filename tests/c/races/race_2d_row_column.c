/* race_2d_row_column.c: a 16 x 16 int matrix; node 0 writes row 5, node 1 writes column 7. They
 * meet in one element, m[5][7] (write-write, one line of each loop). */
#include "jia.h"

#define N 16

static int (*m)[N];

int main(int argc, char **argv)
{
    int i, j;

    jia_init(argc, argv);
    m = (int (*)[N])jia_alloc(N * N * sizeof(int));
    jia_barrier();

    if (jiapid == 0) {
        for (j = 0; j < N; j++)
            m[5][j] = 1000 + j; /* race */
    } else {
        for (i = 0; i < N; i++)
            m[i][7] = 2000 + i; /* race */
    }

    jia_barrier();
    jia_exit();
    return 0;
}
