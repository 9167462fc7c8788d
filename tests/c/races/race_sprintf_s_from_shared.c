/* race_sprintf_s_from_shared.c: node 0 formats a name kept in shared memory (a %s argument) into
 * a private buffer with sprintf while node 1 renames it, with nothing between them (read-write).
 * Built with dsmcc --check-races, jia.h's sprintf records what its %s arguments read. */
#include <stdio.h>
#include <string.h>
#include "jia.h"

#define N 1024

static char *name;

int main(int argc, char **argv)
{
    jia_init(argc, argv);
    name = (char *)jia_alloc1(N);
    if (jiapid == 0)
        strcpy(name, "matrix");
    jia_barrier();

    if (jiapid == 0) {
        char line[64];
        sprintf(line, "name=%s rows=%d", name, 8); /* race */
        if (line[0] != 'n')
            jia_error("race_sprintf_s_from_shared: formatted '%s'", line);
    } else {
        name[3] = 'X'; /* race */
    }

    jia_barrier();
    jia_exit();
    return 0;
}
