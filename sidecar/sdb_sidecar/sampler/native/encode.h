/* The trace's samples record, encoded in C (no Python object per sample): msgpack, each value in
 * its smallest form, as msgpack.Packer writes the dict TraceWriter.samples builds, so the bytes
 * are the ones TraceWriter would write (docs/trace-format.md, "samples"). */
#ifndef SDB_ENCODE_H
#define SDB_ENCODE_H 1

#include <stddef.h>
#include <stdint.h>

typedef struct sdb_sample {
    uint64_t t_ns;
    uint64_t serial;
    uint64_t span;          /* the unit of work (request, job, label) it was in, 0: none or not proven */
    uint64_t tick;          /* the tick that took it (the samples of one tick were read together) */
    uint32_t stack;
    uint32_t state;
    uint32_t win_us;        /* its frames were copied within [t_ns - win_us * 1000, t_ns] (rounded up) */
    uint32_t pad;
} sdb_sample;

/* Bytes sdb_encode_samples may write for n samples. */
size_t sdb_encode_samples_bound(uint64_t n);
/* {"t": "samples", "base_ns", "dt_ns", "thread", "stack", "state", "win_us", "span", "tick"} for
 * smp[0:n] (n > 0) into buf (sdb_encode_samples_bound(n) bytes); returns the bytes written. */
size_t sdb_encode_samples(const sdb_sample *smp, uint64_t n, uint8_t *buf);

#endif
