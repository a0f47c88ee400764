/* Hosts a saved memory image (tests/support/memimage.py): maps every region of IMAGE at the address
 * it had in the process it was read from, fills it, prints "ready", then waits to be killed. The
 * sampler then reads this process as it read that one (tests/unit/test_walk_on_memory_image.py).
 *
 *   memimage_host IMAGE        (run without address randomization: its own mappings stay out of the way)
 *
 * IMAGE: "SDBIMG1\n", then records of uint64 address, uint64 length, length bytes (little endian). */
#define _GNU_SOURCE 1
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

struct region { uint64_t addr, len; uint8_t *bytes; };

static int by_addr(const void *a, const void *b)
{
    uint64_t x = ((const struct region *)a)->addr, y = ((const struct region *)b)->addr;
    return x < y ? -1 : x > y;
}

int main(int argc, char **argv)
{
    FILE *f;
    char magic[8];
    struct region *r = NULL;
    size_t n = 0, cap = 0, i, j;
    uint64_t page = (uint64_t)sysconf(_SC_PAGESIZE), lo, hi;
    if (argc != 2 || (f = fopen(argv[1], "rb")) == NULL) {
        fprintf(stderr, "usage: memimage_host IMAGE (a file written by tests/support/memimage.py)\n");
        return 2;
    }
    if (fread(magic, 1, 8, f) != 8 || memcmp(magic, "SDBIMG1\n", 8) != 0) {
        fprintf(stderr, "memimage_host: %s is not a memory image (no SDBIMG1 header)\n", argv[1]);
        return 2;
    }
    for (;;) {
        uint64_t hdr[2];
        if (fread(hdr, 8, 2, f) != 2)
            break;
        if (n == cap) {
            cap = cap ? 2 * cap : 256;
            r = realloc(r, cap * sizeof *r);
        }
        r[n].addr = hdr[0];
        r[n].len = hdr[1];
        r[n].bytes = malloc(hdr[1]);
        if (r[n].bytes == NULL || fread(r[n].bytes, 1, hdr[1], f) != hdr[1]) {
            fprintf(stderr, "memimage_host: %s is cut short\n", argv[1]);
            return 2;
        }
        n++;
    }
    fclose(f);
    qsort(r, n, sizeof *r, by_addr);
    /* the pages of the regions, merged where they touch, each mapped where it was */
    for (i = 0; i < n; i = j) {
        lo = r[i].addr & ~(page - 1);
        hi = (r[i].addr + r[i].len + page - 1) & ~(page - 1);
        for (j = i + 1; j < n && (r[j].addr & ~(page - 1)) <= hi; j++) {
            uint64_t end = (r[j].addr + r[j].len + page - 1) & ~(page - 1);
            if (end > hi)
                hi = end;
        }
        if (mmap((void *)(uintptr_t)lo, hi - lo, PROT_READ | PROT_WRITE,
                 MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED_NOREPLACE, -1, 0) != (void *)(uintptr_t)lo) {
            fprintf(stderr, "memimage_host: cannot map 0x%llx-0x%llx here (%s): this process uses it\n",
                    (unsigned long long)lo, (unsigned long long)hi, strerror(errno));
            return 3;
        }
    }
    for (i = 0; i < n; i++)
        memcpy((void *)(uintptr_t)r[i].addr, r[i].bytes, r[i].len);
    printf("ready\n");
    fflush(stdout);
    for (;;)
        pause();
}
