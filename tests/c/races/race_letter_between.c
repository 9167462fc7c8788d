/* race_letter_between.c: node 0 writes a[5] and then sends node 1 a letter; node 1 receives it
 * and reads a[5]. Letters carry bytes, not coherence: they order nothing (read-write). */
#include "jia.h"

#define N 1024

static int *a;
static volatile int sink;

int main(int argc, char **argv)
{
    char go[4] = "go";

    jia_init(argc, argv);
    a = (int *)jia_alloc(N * sizeof(int));
    jia_barrier();

    if (jiapid == 0) {
        a[5] = 5; /* race */
        jia_send(go, sizeof go, 1, 7);
    } else {
        jia_recv(go, sizeof go, 0, 7);
        sink = a[5]; /* race */
    }

    jia_barrier();
    jia_exit();
    return 0;
}
