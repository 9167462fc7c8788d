/* race_strtok_r_in_shared.c: node 0 splits a line kept in shared memory with strtok_r, which
 * writes a NUL in place of each comma, while node 1 reads the first comma, with nothing between
 * them (write-read). */
#include <string.h>
#include "jia.h"

static char *line;

int main(int argc, char **argv)
{
    jia_init(argc, argv);
    line = (char *)jia_alloc1(1024);
    if (jiapid == 0)
        strcpy(line, "alpha,beta,gamma");
    jia_barrier();

    if (jiapid == 0) {
        char *save = NULL;
        if (strtok_r(line, ",", &save) == NULL) /* race */
            jia_error("race_strtok_r_in_shared: no token");
    } else {
        volatile char c = line[5]; /* race */
        (void)c;
    }

    jia_barrier();
    jia_exit();
    return 0;
}
