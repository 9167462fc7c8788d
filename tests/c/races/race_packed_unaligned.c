/* race_packed_unaligned.c: an array of packed structs, so that p[1].value is an int at byte 8
 * + 1 = 9 of the allocation, not aligned. Node 0 writes it, node 1 reads it (read-write); node 1
 * also writes p[1].tag, the byte just before it, which node 0 does not touch. */
#include "jia.h"

#define N 128

struct __attribute__((packed)) item {
    char tag;
    int value;
    char pad[3];
};

static struct item *p;
static volatile int sink;

int main(int argc, char **argv)
{
    jia_init(argc, argv);
    p = (struct item *)jia_alloc(N * sizeof(struct item));
    jia_barrier();

    if (jiapid == 0) {
        p[1].value = 1234; /* race */
    } else {
        p[1].tag = 't';
        sink = p[1].value; /* race */
    }

    jia_barrier();
    jia_exit();
    return 0;
}
