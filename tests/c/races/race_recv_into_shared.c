/* race_recv_into_shared.c: node 1 receives a letter straight into shared memory while node 0
 * reads that memory; the letter is node 0's own, sent before its read, but a letter carries
 * bytes, not coherence, and orders nothing (read-write). */
#include "jia.h"

static long *mail;

int main(int argc, char **argv)
{
    long v = 5, seen;

    jia_init(argc, argv);
    mail = (long *)jia_alloc1(Pagesize);
    jia_barrier();

    if (jiapid == 0) {
        jia_send((char *)&v, sizeof v, 1, 3);
        seen = mail[2]; /* race */
        mail[100] = seen;
    } else {
        jia_recv((char *)&mail[2], sizeof(long), 0, 3); /* race */
    }

    jia_barrier();
    jia_exit();
    return 0;
}
