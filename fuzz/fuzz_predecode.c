/*
 * fuzz_predecode.c - the streaming base64 predecoder (codec/predecode.h) on bodies of megabytes
 * that arrive in pieces.
 *
 * The input is a request body in fuzz_expand.h's escapes (repeats make megabytes from a few bytes;
 * bodies are cut at 1.25 MiB), whose marks FF FB / FF FC / FF FD are points where the body is split;
 * the first byte also sets a chunk size (1 byte to 64 KiB) at which it is split as well. The body
 * is fed to one predecoder whole and to another piece by piece, each call showing it the body so
 * far, as the HTTP layer does.
 * Checks: both predecoders decode the very same strings (positions, bytes, the inf/NaN flag): how
 * the body was cut never matters; every string decoded is exactly what srv_base64_decode makes of
 * the whole text between its quotes, which must follow `"base64"`, optional white space, ':',
 * optional white space (what the tensor parser will ask for); its inf/NaN flag is the one of its
 * float32 words; srv_predecoder_take hands it over once, srv_predecoder_close finds its end.
 */
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "base/bigbuf.h"
#include "codec/base64.h"
#include "codec/predecode.h"
#include "fuzz_expand.h"
#include "fuzz_fail.h"

#define MAX_BODY ((size_t)5 << 18) /* 1.25 MiB: over the daemon's 1 MiB threshold */
#define MAX_CUTS 256

typedef struct cuts {
    size_t at[MAX_CUTS];
    int n;
} cuts;

static void on_mark(void *ctx, uint8_t kind, size_t pos)
{
    cuts *c = ctx;
    if (c->n < MAX_CUTS)
        c->at[c->n++] = pos;
}

static int cmp_size(const void *a, const void *b)
{
    size_t x = *(const size_t *)a, y = *(const size_t *)b;
    return x < y ? -1 : x > y;
}

static bool is_ws(char c)
{
    return c == ' ' || c == '\t' || c == '\n' || c == '\r';
}

/* Whether body[0, start) ends with `"base64"`, white space, ':', white space, '"'. */
static bool after_base64_key(const char *body, size_t start)
{
    if (start < 1 || body[start - 1] != '"')
        return false;
    size_t i = start - 1;
    while (i > 0 && is_ws(body[i - 1]))
        i--;
    if (i == 0 || body[i - 1] != ':')
        return false;
    i--;
    while (i > 0 && is_ws(body[i - 1]))
        i--;
    return i >= 8 && memcmp(body + i - 8, "\"base64\"", 8) == 0;
}

static bool any_special(const uint8_t *p, size_t n)
{
    for (size_t i = 0; i + 4 <= n; i += 4) {
        uint32_t u;
        memcpy(&u, p + i, 4);
        if ((u & 0x7F800000u) == 0x7F800000u)
            return true;
    }
    return false;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    /* The body ends right before a page nobody may touch, so that a read past it faults, as ASan
     * would see it in a buffer of its exact size (a fresh megabyte malloc for every input cost
     * more in page faults than the decoding). */
    static uint8_t *buf, *guard;
    if (!buf) {
        size_t page = (size_t)sysconf(_SC_PAGESIZE), span = (MAX_BODY + page - 1) / page * page;
        buf = mmap(NULL, span + page, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        if (buf == MAP_FAILED || mprotect(buf + span, page, PROT_NONE) != 0)
            FAIL("cannot map the body buffer");
        guard = buf + span;
    }
    if (size < 1)
        return 0;
    cuts c = {.n = 0};
    static uint8_t tmp[MAX_BODY];
    size_t len = fuzz_expand(tmp, MAX_BODY, data + 1, size - 1, on_mark, &c);
    char *body = (char *)guard - len;
    memcpy(body, tmp, len);
    size_t chunk = data[0] < 128 ? 1 + data[0] : (size_t)1 << (data[0] % 17);
    for (size_t at = chunk; at < len && c.n < MAX_CUTS; at += chunk)
        c.at[c.n++] = at;
    qsort(c.at, (size_t)c.n, sizeof c.at[0], cmp_size);

    srv_predecoder whole, pieces;
    srv_predecoder_init(&whole, len);
    srv_predecoder_init(&pieces, len);
    srv_predecoder_feed(&whole, body, len);
    for (int i = 0; i < c.n; i++)
        if (c.at[i] > 0 && c.at[i] < len && (i == 0 || c.at[i] != c.at[i - 1]))
            srv_predecoder_feed(&pieces, body, c.at[i]);
    srv_predecoder_feed(&pieces, body, len);

    if (whole.n != pieces.n)
        FAIL("whole: %d strings decoded, in %d pieces: %d", whole.n, c.n + 1, pieces.n);
    if (whole.n > SRV_PREDECODE_MAX)
        FAIL("%d strings decoded, at most %d", whole.n, SRV_PREDECODE_MAX);
    for (int i = 0; i < whole.n; i++) {
        const srv_predecoded *a = &whole.done[i], *b = &pieces.done[i];
        if (a->start != b->start || a->end != b->end || a->len != b->len ||
            a->nonfinite != b->nonfinite || (a->len && memcmp(a->data, b->data, a->len) != 0))
            FAIL("string %d: whole [%zu, %zu) %zu bytes nonfinite %d; in pieces [%zu, %zu) %zu "
                 "bytes nonfinite %d, or other bytes",
                 i, a->start, a->end, a->len, a->nonfinite, b->start, b->end, b->len, b->nonfinite);
        if (a->start > a->end || a->end >= len || body[a->end] != '"')
            FAIL("string %d: [%zu, %zu) does not end at a quote", i, a->start, a->end);
        if (!after_base64_key(body, a->start))
            FAIL("string %d at %zu does not follow a \"base64\" key", i, a->start);
        if (i > 0 && a->start <= whole.done[i - 1].end)
            FAIL("string %d at %zu overlaps string %d", i, a->start, i - 1);
        size_t tl = a->end - a->start;
        static uint8_t want[MAX_BODY / 4 * 3 + 3];
        long w = srv_base64_decode(want, body + a->start, tl);
        if (w < 0 || (size_t)w != a->len || (w && memcmp(want, a->data, (size_t)w) != 0))
            FAIL("string %d [%zu, %zu): decoded %zu bytes, srv_base64_decode of the text %ld", i,
                 a->start, a->end, a->len, w);
        if (a->nonfinite != any_special(want, (size_t)w))
            FAIL("string %d: nonfinite %d, its words say %d", i, a->nonfinite,
                 any_special(want, (size_t)w));
        if (srv_predecoder_close(&whole, body, body + a->start - 1) != body + a->end)
            FAIL("string %d: srv_predecoder_close does not find its end", i);
        size_t got_len;
        bool nf;
        uint8_t *got = srv_predecoder_take(&whole, a->start, a->end, &got_len, &nf);
        if (!got || got_len != b->len || nf != b->nonfinite)
            FAIL("string %d: srv_predecoder_take gives %p (%zu bytes)", i, (void *)got, got_len);
        if (srv_predecoder_take(&whole, a->start, a->end, &got_len, &nf))
            FAIL("string %d: taken twice", i);
        srv_bigbuf_array_free(got);
    }
    srv_predecoder_free(&whole);
    srv_predecoder_free(&pieces);
    return 0;
}
