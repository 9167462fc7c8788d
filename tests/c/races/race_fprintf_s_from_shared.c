/* race_fprintf_s_from_shared.c: node 0 writes a name kept in shared memory (a %s argument) to a
 * stream with fprintf while node 1 renames it, with nothing between them (read-write). */
#include <stdio.h>
#include <string.h>
#include "jia.h"

static char *name;

int main(int argc, char **argv)
{
    jia_init(argc, argv);
    name = (char *)jia_alloc1(1024);
    if (jiapid == 0)
        strcpy(name, "matrix");
    jia_barrier();

    if (jiapid == 0) {
        FILE *out = fopen("/dev/null", "w");
        if (out == NULL || fprintf(out, "name=%s\n", name) < 0) /* race */
            jia_error("race_fprintf_s_from_shared: cannot write");
        fclose(out);
    } else {
        name[2] = 'X'; /* race */
    }

    jia_barrier();
    jia_exit();
    return 0;
}
