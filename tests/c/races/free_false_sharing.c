/* free_false_sharing.c (race-free): both nodes write one page of chars, node 0 the even bytes
 * and node 1 the odd ones, and read back only their own: the same page, never the same byte. */
#include "jia.h"

#define N 4096

static char *s;

int main(int argc, char **argv)
{
    int i, bad = 0;

    jia_init(argc, argv);
    s = (char *)jia_alloc(N);
    jia_barrier();

    for (i = jiapid; i < N; i += 2)
        s[i] = (char)(i * 7 + jiapid);
    for (i = jiapid; i < N; i += 2)
        if (s[i] != (char)(i * 7 + jiapid))
            bad++;
    if (bad)
        jia_error("free_false_sharing: node %d lost %d of its own bytes", jiapid, bad);

    jia_barrier();
    jia_exit();
    return 0;
}
