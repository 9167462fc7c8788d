/* race_char_byte.c: a char array; node 0 writes bytes 16 and 17, node 1 bytes 17 and 18. Only
 * byte 17 is written by both (write-write); its neighbours are each written by one node. */
#include "jia.h"

#define N 4096

static char *s;

int main(int argc, char **argv)
{
    jia_init(argc, argv);
    s = (char *)jia_alloc(N);
    jia_barrier();

    if (jiapid == 0) {
        s[16] = 'x';
        s[17] = 'a'; /* race */
    } else {
        s[17] = 'b'; /* race */
        s[18] = 'y';
    }

    jia_barrier();
    jia_exit();
    return 0;
}
