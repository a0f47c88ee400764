/* Reads from the target, batched: the reads of a whole tick are queued, then issued in as few
 * process_vm_readv calls as the kernel allows (SDB_BATCH_IOV iovecs a call). A call costs ~2 us and
 * each remote iovec ~0.35 us on the machines measured (benchmarks/RESULTS.md), so the sampler shares
 * calls between threads and keeps the iovecs few.
 *
 * Each read says where its bytes go (one of the batch's bases, which the caller may move between
 * queueing and running, plus an offset; or an absolute address), what its job's outcome becomes when
 * it fails (0: nothing, a speculative read) and which counter counts it when it succeeds. A read that
 * fails does not stop the others: the batch goes on after it. */
#ifndef SDB_READBATCH_H
#define SDB_READBATCH_H 1

#include <stdint.h>
#include <sys/types.h>
#include <sys/uio.h>

#define SDB_BATCH_IOV 1024          /* UIO_MAXIOV */

enum {
    SDB_BASE_ABS = 0,               /* off is the destination's address */
    SDB_BASES = 4                   /* bases 1..3: the caller's buffers (set before sdb_batch_run) */
};

typedef struct sdb_req {
    uint64_t addr;                  /* in the target */
    uint64_t length;
    uint64_t off;                   /* from bases[base] (SDB_BASE_ABS: the address itself) */
    uint32_t base;
    int fail;                       /* *result becomes this when the read fails and *result is 0 */
    int *result;
    uint32_t *done;                 /* incremented when the read succeeds (NULL: none) */
} sdb_req;

/* Told of every read that succeeded: its address and length (a test records what a tick reads to
 * save a memory image of it: tests/support/memimage.py). */
typedef void (*sdb_read_tap)(void *ctx, uint64_t addr, uint64_t length);

typedef struct sdb_batch {
    sdb_req *reqs;
    uint64_t n, cap;
    uint8_t *bases[SDB_BASES];
    struct iovec *liov, *riov;
    sdb_read_tap tap;               /* NULL: none */
    void *tap_ctx;
} sdb_batch;

int sdb_batch_init(sdb_batch *b);                 /* 0, or -1: no memory */
void sdb_batch_free(sdb_batch *b);
/* Queue a read. 0, or -1: no memory (nothing queued). */
int sdb_batch_add(sdb_batch *b, uint64_t addr, uint64_t length, uint32_t base, uint64_t off,
                  int *result, int fail, uint32_t *done);
/* Issue every queued read (the queue is then empty). 0, or the errno that says the target is gone
 * or not ours to read (ESRCH, EPERM): the rest are then not read. */
int sdb_batch_run(sdb_batch *b, pid_t pid);
/* One read now: the bytes read, or -1 (errno set). */
ssize_t sdb_read_remote(pid_t pid, uint64_t addr, void *dst, size_t n);
/* The same, told to the batch's tap. */
ssize_t sdb_batch_read1(const sdb_batch *b, pid_t pid, uint64_t addr, void *dst, size_t n);

#endif
