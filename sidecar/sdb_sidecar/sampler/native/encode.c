/* The samples record's encoder (encode.h): msgpack, the few forms a sample batch needs. */
#include "encode.h"

#include <string.h>

static uint8_t *be(uint8_t *p, uint64_t v, int bytes)
{
    for (int i = bytes - 1; i >= 0; i--)
        *p++ = (uint8_t)(v >> (8 * i));
    return p;
}

static uint8_t *mp_uint(uint8_t *p, uint64_t v)
{
    if (v < 0x80) { *p++ = (uint8_t)v; return p; }
    if (v <= 0xff) { *p++ = 0xcc; return be(p, v, 1); }
    if (v <= 0xffff) { *p++ = 0xcd; return be(p, v, 2); }
    if (v <= 0xffffffffull) { *p++ = 0xce; return be(p, v, 4); }
    *p++ = 0xcf;
    return be(p, v, 8);
}

static uint8_t *mp_int(uint8_t *p, int64_t v)
{
    if (v >= 0) return mp_uint(p, (uint64_t)v);
    if (v >= -32) { *p++ = (uint8_t)v; return p; }
    if (v >= -128) { *p++ = 0xd0; return be(p, (uint64_t)v, 1); }
    if (v >= -32768) { *p++ = 0xd1; return be(p, (uint64_t)v, 2); }
    if (v >= -2147483648ll) { *p++ = 0xd2; return be(p, (uint64_t)v, 4); }
    *p++ = 0xd3;
    return be(p, (uint64_t)v, 8);
}

static uint8_t *mp_array(uint8_t *p, uint64_t n)
{
    if (n < 16) { *p++ = (uint8_t)(0x90 | n); return p; }
    if (n <= 0xffff) { *p++ = 0xdc; return be(p, n, 2); }
    *p++ = 0xdd;
    return be(p, n, 4);
}

static uint8_t *mp_map(uint8_t *p, uint32_t n) { *p++ = (uint8_t)(0x80 | n); return p; }   /* n < 16 */

static uint8_t *mp_str(uint8_t *p, const char *s)  /* s shorter than 32 bytes */
{
    size_t n = strlen(s);
    *p++ = (uint8_t)(0xa0 | n);
    memcpy(p, s, n);
    return p + n;
}

size_t sdb_encode_samples_bound(uint64_t n) { return 128 + 7 * 9 * n; }  /* 9 bytes at most per number */

#define COLUMN(name, expr)                       \
    do {                                         \
        p = mp_str(p, name);                     \
        p = mp_array(p, n);                      \
        for (i = 0; i < n; i++)                  \
            p = mp_uint(p, (expr));              \
    } while (0)

size_t sdb_encode_samples(const sdb_sample *smp, uint64_t n, uint8_t *buf)
{
    uint64_t i, base = smp[0].t_ns;
    uint8_t *p = mp_map(buf, 9);
    p = mp_str(p, "t");
    p = mp_str(p, "samples");
    p = mp_str(p, "base_ns");
    p = mp_uint(p, base);
    p = mp_str(p, "dt_ns");
    p = mp_array(p, n);
    for (i = 0; i < n; i++)
        p = mp_int(p, (int64_t)(smp[i].t_ns - base));   /* a retry's sample is older than the tick's first */
    COLUMN("thread", smp[i].serial);
    COLUMN("stack", smp[i].stack);
    COLUMN("state", smp[i].state);
    COLUMN("win_us", smp[i].win_us);
    COLUMN("span", smp[i].span);
    COLUMN("tick", smp[i].tick);
    return (size_t)(p - buf);
}
