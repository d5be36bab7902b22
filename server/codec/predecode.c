/*
 * predecode.c - base64 tensor texts decoded while the body arrives (see predecode.h).
 */
#include "predecode.h"

#include <string.h>

#include "base/bigbuf.h"
#include "base64.h"
#include "float_parse.h"

void srv_predecoder_init(srv_predecoder *p, size_t body_len)
{
    memset(p, 0, sizeof *p);
    p->body_len = body_len;
}

static bool is_ws(char c)
{
    return c == ' ' || c == '\t' || c == '\n' || c == '\r';
}

/* Looks for `"base64"`, white space, ':', white space, '"' from p->seen on. Returns true with
 * p->cur started when a string opens; false when more of the body is needed (p->seen is where
 * to look again) or the predecoder gave up. */
static bool find_string(srv_predecoder *p, const char *body, size_t len)
{
    static const char key[] = "\"base64\"";
    const size_t klen = sizeof key - 1;
    while (p->seen < len) {
        const char *k = memmem(body + p->seen, len - p->seen, key, klen);
        if (!k) { /* keep a key cut at the end of the chunk in view */
            if (len - p->seen > klen)
                p->seen = len - klen;
            return false;
        }
        size_t at = (size_t)(k - body), i = at + klen;
        bool colon = false;
        for (; i < len && (is_ws(body[i]) || (!colon && body[i] == ':')); i++)
            colon |= body[i] == ':';
        if (i >= len) { /* the rest has not arrived */
            p->seen = at;
            return false;
        }
        if (!colon || body[i] != '"') { /* not a key followed by a string */
            p->seen = at + 1;
            continue;
        }
        if (p->n == SRV_PREDECODE_MAX) {
            p->off = true;
            return false;
        }
        size_t start = i + 1;
        size_t rest = p->body_len > start ? p->body_len - start : 0;
        size_t cap = rest / 4 * 3 + 3;
        uint8_t *data = srv_bigbuf_array_alloc(cap);
        if (!data) {
            p->off = true;
            return false;
        }
        memset(&p->cur, 0, sizeof p->cur);
        p->cur.start = start;
        p->cur.data = data;
        p->cap = cap;
        p->pos = p->seen = start;
        p->checked = 0;
        p->active = true;
        p->failed = p->padded = false;
        return true;
    }
    return false;
}

/* Decodes the complete quartets of cur in body[p->pos, limit); at the string's end (closed) the
 * text up to limit must be whole quartets. Marks cur failed on anything a decoder refuses. */
static void decode_run(srv_predecoder *p, const char *body, size_t limit, bool closed)
{
    size_t avail = limit - p->pos;
    size_t take = avail / 4 * 4;
    if (closed && take != avail) {
        p->failed = true; /* not a multiple of 4: the parser says so */
        return;
    }
    if (take == 0)
        return;
    if (p->padded || p->cur.len + take / 4 * 3 > p->cap) { /* text after padding; past the
                                                                body's announced length */
        p->failed = true;
        return;
    }
    long got = srv_base64_decode(p->cur.data + p->cur.len, body + p->pos, take);
    if (got < 0) {
        p->failed = true;
        return;
    }
    p->padded = (size_t)got < take / 4 * 3;
    p->cur.len += (size_t)got;
    p->pos += take;
    size_t words = p->cur.len / 4 * 4;
    if (!p->cur.nonfinite && words > p->checked)
        p->cur.nonfinite = srv_floats_any_special(p->cur.data + p->checked, (words - p->checked) / 4);
    p->checked = words;
}

void srv_predecoder_feed(srv_predecoder *p, const char *body, size_t len)
{
    while (!p->off && p->seen < len) {
        if (!p->active && !find_string(p, body, len))
            return;
        const char *q = memchr(body + p->seen, '"', len - p->seen);
        size_t limit = q ? (size_t)(q - body) : len;
        if (!p->failed)
            decode_run(p, body, limit, q != NULL);
        if (!q) {
            p->seen = len;
            return;
        }
        /* the string ends at q (or, when it holds an escaped quote, decoding failed before it) */
        p->cur.end = limit;
        p->active = false;
        p->seen = limit + 1;
        if (p->failed) {
            srv_bigbuf_array_free(p->cur.data);
        } else {
            p->done[p->n++] = p->cur;
        }
        memset(&p->cur, 0, sizeof p->cur);
    }
}

uint8_t *srv_predecoder_take(srv_predecoder *p, size_t start, size_t end, size_t *len,
                             bool *nonfinite)
{
    for (int i = 0; p && i < p->n; i++) {
        srv_predecoded *d = &p->done[i];
        if (d->data && d->start == start && d->end == end) {
            uint8_t *data = d->data;
            d->data = NULL;
            *len = d->len;
            *nonfinite = d->nonfinite;
            return data;
        }
    }
    return NULL;
}

const char *srv_predecoder_close(const srv_predecoder *p, const char *body, const char *open_quote)
{
    if (!p || open_quote < body)
        return NULL;
    size_t start = (size_t)(open_quote - body) + 1;
    for (int i = 0; i < p->n; i++)
        if (p->done[i].start == start)
            return body + p->done[i].end;
    return NULL;
}

void srv_predecoder_free(srv_predecoder *p)
{
    if (!p)
        return;
    for (int i = 0; i < p->n; i++)
        srv_bigbuf_array_free(p->done[i].data);
    if (p->active)
        srv_bigbuf_array_free(p->cur.data);
    memset(p, 0, sizeof *p);
}
