/* race_stpcpy_path.c: node 0 builds a path in shared memory with stpcpy (which gcc expands
 * after the instrumentation pass unless told not to) while node 1 reads its first character,
 * with no barrier between (read-write). */
#include <string.h>
#include "jia.h"

static char *path;

int main(int argc, char **argv)
{
    char first;

    jia_init(argc, argv);
    path = (char *)jia_alloc1(Pagesize);
    jia_barrier();

    if (jiapid == 0) {
        char *end = stpcpy(path + 128, "dir/"); /* race */
        end[0] = 0;
    } else {
        first = path[128]; /* race */
        path[0] = first;
    }

    jia_barrier();
    jia_exit();
    return 0;
}
