/* race_fscanf_into_shared.c: node 0 reads a number from a stream straight into shared memory
 * with fscanf while node 1 stores the same word, with nothing between them (write-write). */
#include <stdio.h>
#include "jia.h"

static long *vals;

int main(int argc, char **argv)
{
    jia_init(argc, argv);
    vals = (long *)jia_alloc1(1024);
    jia_barrier();

    if (jiapid == 0) {
        FILE *in = tmpfile();
        if (in == NULL || fputs("4096\n", in) < 0 || fseek(in, 0, SEEK_SET) != 0)
            jia_error("race_fscanf_into_shared: no stream");
        if (fscanf(in, "%ld", &vals[10]) != 1) /* race */
            jia_error("race_fscanf_into_shared: no number");
        fclose(in);
    } else {
        vals[10] = 7; /* race */
    }

    jia_barrier();
    jia_exit();
    return 0;
}
