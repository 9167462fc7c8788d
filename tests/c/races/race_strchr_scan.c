/* race_strchr_scan.c: node 0 scans a string in shared memory with strchr while node 1 writes one
 * of the characters it scans, with no barrier between (read-write). */
#include <string.h>
#include "jia.h"

static char *text;

int main(int argc, char **argv)
{
    int found = 0;

    jia_init(argc, argv);
    text = (char *)jia_alloc1(Pagesize);
    if (jiapid == 0)
        strcpy(text, "a line of text without the letter sought");
    jia_barrier();

    if (jiapid == 0)
        found = strchr(text, 'z') != 0; /* race */
    else
        text[10] = 'X'; /* race */

    jia_barrier();
    jia_exit();
    return found;
}
