/* free_collectives_between_barriers.c: a broadcast and a reduction land in shared memory, and
 * the other nodes read them only after the next barrier. */
#include "jia.h"

static long *box;

int main(int argc, char **argv)
{
    long v = 9, seen;
    int mine;

    jia_init(argc, argv);
    box = (long *)jia_alloc1(Pagesize);
    jia_barrier();

    if (jiapid == 0) jia_bcast((char *)&v, sizeof v, 0);
    else jia_bcast((char *)&box[8 * jiapid], sizeof(long), 0); /* node 1: box[8] */
    mine = jiapid + 1;
    jia_reduce((char *)&mine, jiapid == 0 ? (char *)&box[0] : NULL, 1, SUM_INT, 0);
    jia_barrier();

    /* box[0]'s low int is the sum, 1 + 2 + ... (its high bytes stay zero). */
    seen = box[8] + box[0];
    if (seen != 9 + (jiahosts * (jiahosts + 1)) / 2) jia_error("wrong collective");
    box[300 + jiapid] = seen;

    jia_barrier();
    jia_exit();
    return 0;
}
