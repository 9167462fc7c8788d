/* race_atoi_from_shared.c: node 0 parses a number kept in shared memory with atoi while node 1
 * rewrites its first digit, with nothing between them (read-write). */
#include <stdlib.h>
#include <string.h>
#include "jia.h"

static char *text;

int main(int argc, char **argv)
{
    jia_init(argc, argv);
    text = (char *)jia_alloc1(1024);
    if (jiapid == 0)
        strcpy(text, "  4096 pages");
    jia_barrier();

    if (jiapid == 0) {
        if (atoi(text) <= 0) /* race */
            jia_error("race_atoi_from_shared: no number");
    } else {
        text[2] = '8'; /* race */
    }

    jia_barrier();
    jia_exit();
    return 0;
}
