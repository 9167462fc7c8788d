/* race_ww_same_element.c: both nodes write the same int between the same two barriers: a
 * write-write race, both sides on one source line. The other elements are left alone. */
#include "jia.h"

#define N 1024

static int *a;

int main(int argc, char **argv)
{
    jia_init(argc, argv);
    a = (int *)jia_alloc(N * sizeof(int));
    jia_barrier();

    a[0] = jiapid + 1; /* race */

    jia_barrier();
    jia_exit();
    return 0;
}
