/* Batched remote reads (readbatch.h). */
#define _GNU_SOURCE 1
#include "readbatch.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

int sdb_batch_init(sdb_batch *b)
{
    memset(b, 0, sizeof *b);
    b->liov = malloc(SDB_BATCH_IOV * sizeof(struct iovec));
    b->riov = malloc(SDB_BATCH_IOV * sizeof(struct iovec));
    if (b->liov == NULL || b->riov == NULL) {
        sdb_batch_free(b);
        return -1;
    }
    return 0;
}

void sdb_batch_free(sdb_batch *b)
{
    free(b->reqs);
    free(b->liov);
    free(b->riov);
    memset(b, 0, sizeof *b);
}

int sdb_batch_add(sdb_batch *b, uint64_t addr, uint64_t length, uint32_t base, uint64_t off,
                  int *result, int fail, uint32_t *done)
{
    sdb_req *r;
    if (b->n == b->cap) {
        uint64_t cap = b->cap ? b->cap * 2 : 256;
        sdb_req *p = realloc(b->reqs, cap * sizeof(sdb_req));
        if (p == NULL)
            return -1;
        b->reqs = p;
        b->cap = cap;
    }
    r = &b->reqs[b->n++];
    r->addr = addr;
    r->length = length;
    r->base = base < SDB_BASES ? base : SDB_BASE_ABS;
    r->off = off;
    r->result = result;
    r->fail = fail;
    r->done = done;
    return 0;
}

static void *dst_of(const sdb_batch *b, const sdb_req *r)
{
    if (r->base == SDB_BASE_ABS)
        return (void *)(uintptr_t)r->off;
    return b->bases[r->base] + r->off;
}

int sdb_batch_run(sdb_batch *b, pid_t pid)
{
    uint64_t i = 0, n = b->n, cnt, k;
    ssize_t got;
    int e;
    sdb_req *r;
    while (i < n) {
        cnt = n - i < SDB_BATCH_IOV ? n - i : SDB_BATCH_IOV;
        for (k = 0; k < cnt; k++) {
            r = &b->reqs[i + k];
            b->liov[k].iov_base = dst_of(b, r);
            b->liov[k].iov_len = r->length;
            b->riov[k].iov_base = (void *)(uintptr_t)r->addr;
            b->riov[k].iov_len = r->length;
        }
        got = process_vm_readv(pid, b->liov, cnt, b->riov, cnt, 0);
        if (got < 0) {
            e = errno;
            if (e == ESRCH || e == EPERM) {
                b->n = 0;
                return e;
            }
            got = 0;
        }
        /* the kernel stops at the first remote iovec it cannot read: those before it are whole */
        k = 0;
        while (k < cnt && (uint64_t)got >= b->reqs[i + k].length) {
            got -= (ssize_t)b->reqs[i + k].length;
            if (b->reqs[i + k].done != NULL)
                (*b->reqs[i + k].done)++;
            if (b->tap != NULL)
                b->tap(b->tap_ctx, b->reqs[i + k].addr, b->reqs[i + k].length);
            k++;
        }
        if (k < cnt) {                  /* request i+k failed: skip it, go on after it */
            r = &b->reqs[i + k];
            if (r->fail != 0 && r->result != NULL && *r->result == 0)
                *r->result = r->fail;
            i += k + 1;
        } else {
            i += cnt;
        }
    }
    b->n = 0;
    return 0;
}

ssize_t sdb_read_remote(pid_t pid, uint64_t addr, void *dst, size_t n)
{
    struct iovec l = {dst, n}, r = {(void *)(uintptr_t)addr, n};
    return process_vm_readv(pid, &l, 1, &r, 1, 0);
}

ssize_t sdb_batch_read1(const sdb_batch *b, pid_t pid, uint64_t addr, void *dst, size_t n)
{
    ssize_t got = sdb_read_remote(pid, addr, dst, n);
    if (got > 0 && b->tap != NULL)
        b->tap(b->tap_ctx, addr, (uint64_t)got);
    return got;
}
