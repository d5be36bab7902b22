/*
 * fuzz_expand.h - the escapes through which a small fuzz input stands for a large one, shared by
 * the harnesses that need bodies of megabytes (fuzz_http, fuzz_predecode):
 *   FF FE r0 r1 l0 l1 <l bytes>   those l bytes (l = l0 + 256 l1) repeated 1 + r0 + 256 r1 times
 *   FF FF                         one byte FF
 *   FF xx (xx = FB, FC, FD)       a mark: removed, and reported with its position in the output
 *                                 (each harness says what its marks mean)
 * Anything else is copied as it is (an FF before any other byte, or at the end, too). The output is
 * cut at cap bytes; marks past it are still reported (at cap).
 */
#ifndef ATTND_FUZZ_EXPAND_H
#define ATTND_FUZZ_EXPAND_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

typedef void (*fuzz_mark_fn)(void *ctx, uint8_t kind, size_t pos);

/* Expands d[0, n) into out (room for cap bytes); returns the length. */
static inline size_t fuzz_expand(uint8_t *out, size_t cap, const uint8_t *d, size_t n,
                                 fuzz_mark_fn mark, void *ctx)
{
    size_t len = 0;
#define FUZZ_PUT(src, k)                                                                           \
    do {                                                                                           \
        size_t k_ = (k) < cap - len ? (k) : cap - len;                                             \
        memcpy(out + len, (src), k_);                                                              \
        len += k_;                                                                                 \
    } while (0)
    for (size_t i = 0; i < n;) {
        if (d[i] != 0xFF || i + 1 == n) { /* a run of plain bytes up to the next FF */
            const uint8_t *ff = memchr(d + i + 1, 0xFF, n - i - 1);
            size_t run = ff ? (size_t)(ff - (d + i)) : n - i;
            FUZZ_PUT(d + i, run);
            i += run;
        } else if (d[i + 1] == 0xFE && i + 6 <= n) {
            size_t reps = 1 + ((size_t)d[i + 2] | (size_t)d[i + 3] << 8);
            size_t l = (size_t)d[i + 4] | (size_t)d[i + 5] << 8;
            i += 6;
            if (l > n - i)
                l = n - i;
            for (size_t r = 0; r < reps && l && len < cap; r++)
                FUZZ_PUT(d + i, l);
            i += l;
        } else if (d[i + 1] == 0xFF) {
            FUZZ_PUT(d + i, 1);
            i += 2;
        } else if (d[i + 1] >= 0xFB && d[i + 1] <= 0xFD) {
            if (mark)
                mark(ctx, d[i + 1], len);
            i += 2;
        } else {
            FUZZ_PUT(d + i, 1);
            i++;
        }
    }
#undef FUZZ_PUT
    return len;
}

#endif
