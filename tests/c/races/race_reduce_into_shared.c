/* race_reduce_into_shared.c: the root of a reduction writes its result straight into shared
 * memory that node 1 reads after its own part of the reduction; the reduction orders nothing
 * between them (read-write). */
#include "jia.h"

static long *box;

int main(int argc, char **argv)
{
    int mine;
    long seen;

    jia_init(argc, argv);
    box = (long *)jia_alloc1(Pagesize);
    jia_barrier();

    mine = jiapid + 1;
    if (jiapid == 0) {
        jia_reduce((char *)&mine, (char *)&box[6], 1, SUM_INT, 0); /* race */
    } else {
        jia_reduce((char *)&mine, NULL, 1, SUM_INT, 0);
        seen = box[6]; /* race */
        box[200] = seen;
    }

    jia_barrier();
    jia_exit();
    return 0;
}
