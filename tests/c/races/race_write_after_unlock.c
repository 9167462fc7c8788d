/* race_write_after_unlock.c: node 0 writes a[8] under lock 1, unlocks, then writes a[7]
 * outside; node 1 takes lock 1 after that release (a letter makes it wait for it; the letter
 * itself orders nothing) and reads both. The release covers a[8] but not a[7], written after
 * it (read-write). */
#include "jia.h"

#define N 1024

static int *a;
static volatile int sink;

int main(int argc, char **argv)
{
    char go[4] = "go";

    jia_init(argc, argv);
    a = (int *)jia_alloc1(N * sizeof(int));
    jia_barrier();

    if (jiapid == 0) {
        jia_lock(1);
        a[8] = 1;
        jia_unlock(1);
        a[7] = 7; /* race */
        jia_send(go, sizeof go, 1, 3);
    } else {
        jia_recv(go, sizeof go, 0, 3);
        jia_lock(1);
        sink = a[8];
        sink = a[7]; /* race */
        jia_unlock(1);
    }

    jia_barrier();
    jia_exit();
    return 0;
}
