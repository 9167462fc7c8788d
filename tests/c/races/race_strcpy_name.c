/* race_strcpy_name.c: node 0 writes a name into shared memory with strcpy while node 1 reads
 * its first character, with no barrier between (read-write). */
#include <string.h>
#include "jia.h"

static char *names;

int main(int argc, char **argv)
{
    char first;

    jia_init(argc, argv);
    names = (char *)jia_alloc1(Pagesize);
    jia_barrier();

    if (jiapid == 0) {
        strcpy(names + 64, "relaxation"); /* race */
    } else {
        first = names[64]; /* race */
        names[0] = first;
    }

    jia_barrier();
    jia_exit();
    return 0;
}
