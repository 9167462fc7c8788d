/* race_struct_field.c: an array of structs; both nodes write the count field of rec[1]
 * (write-write). Node 1 also reads rec[1].id, which nobody writes after the barrier, and the
 * other fields are left alone. */
#include "jia.h"

#define N 64

struct rec {
    int id;
    int count;
    double weight;
    char tag[8];
};

static struct rec *rec;
static volatile int sink;

int main(int argc, char **argv)
{
    int i;

    jia_init(argc, argv);
    rec = (struct rec *)jia_alloc(N * sizeof(struct rec));
    if (jiapid == 0)
        for (i = 0; i < N; i++)
            rec[i].id = i;
    jia_barrier();

    if (jiapid == 0) {
        rec[1].count = 5; /* race */
    } else {
        sink = rec[1].id;
        rec[1].count = 6; /* race */
    }

    jia_barrier();
    jia_exit();
    return 0;
}
