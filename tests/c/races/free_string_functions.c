/* free_string_functions.c (race-free): every C library function the checker sees on shared
 * memory (memcpy, memmove, memset, strcpy, strncpy, strcat, strlen, strcmp, strncmp, memcmp
 * and the compiler's bcmp), each node on its own page between two barriers, then reading the
 * other node's page after them. */
#include <string.h>
#include "jia.h"

static char *pages;

int main(int argc, char **argv)
{
    char *mine, *other, want[64];
    int peer;

    jia_init(argc, argv);
    pages = (char *)jia_alloc2(2 * Pagesize, Pagesize);
    jia_barrier();

    mine = pages + jiapid * Pagesize;
    memset(mine, 0, 256);
    strcpy(mine, "node ");
    strcat(mine, jiapid == 0 ? "zero" : "one");
    strncpy(mine + 64, mine, 32);
    memcpy(mine + 128, mine + 64, 32);
    memmove(mine + 130, mine + 128, 16);
    jia_barrier();

    peer = 1 - jiapid;
    other = pages + peer * Pagesize;
    strcpy(want, peer == 0 ? "node zero" : "node one");
    if (strlen(other) != strlen(want) || strcmp(other, want) != 0 ||
        strncmp(other + 64, want, 32) != 0 || memcmp(other + 128, want, 2) != 0 ||
        (memcmp(other, want, 4) == 0) != 1)
        jia_error("free_string_functions: node %d read \"%s\" from node %d", jiapid, other, peer);

    jia_barrier();
    jia_exit();
    return 0;
}
