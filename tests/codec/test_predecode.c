/*
 * test_predecode.c - the predecoder (server/codec/predecode.c): base64 texts decoded from a body fed in
 * chunks of every size give the bytes a whole decode gives, with the float32 finite flag right;
 * texts it must leave to the parser (escapes, bad bytes, misplaced padding, no "base64" key before
 * them, too many) are not handed out; keys and strings cut at any chunk boundary are found.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/bigbuf.h"
#include "check.h"
#include "codec/base64.h"
#include "codec/predecode.h"
#include "codec/tensor.h"

static uint64_t rng = 0x9E3779B97F4A7C15ULL;
static uint32_t next_u32(void)
{
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return (uint32_t)(rng >> 32);
}

/* base64 of n bytes into out (NUL-terminated); returns its length. */
static size_t encode(char *out, const uint8_t *bytes, size_t n)
{
    srv_buf b;
    srv_buf_init(&b);
    srv_base64_encode(&b, bytes, n);
    memcpy(out, b.data, b.len + 1);
    size_t len = b.len;
    srv_buf_free(&b);
    return len;
}

/* Feeds body[0, len) in chunks of `chunk` bytes (0: random sizes). */
static void feed(srv_predecoder *p, const char *body, size_t len, size_t chunk)
{
    size_t have = 0;
    while (have < len) {
        size_t step = chunk ? chunk : 1 + next_u32() % 5000;
        have = have + step < len ? have + step : len;
        srv_predecoder_feed(p, body, have);
    }
}

/* The decoded bytes of the string starting at body+at (its opening quote), or NULL. */
static uint8_t *take_at(srv_predecoder *p, const char *body, const char *at, size_t *len, bool *nf)
{
    const char *close = strchr(at + 1, '"');
    return srv_predecoder_take(p, (size_t)(at + 1 - body), (size_t)(close - body), len, nf);
}

static void test_chunks(void)
{
    /* two float tensors (one with an inf at a random place) and a bool one, keys cut anywhere */
    enum { NQ = 3000, NK = 1001, NM = 77 };
    static float q[NQ], k[NK];
    static uint8_t m[NM];
    for (int i = 0; i < NQ; i++)
        q[i] = (float)((int32_t)next_u32()) * 1e-9f;
    for (int i = 0; i < NK; i++)
        k[i] = (float)i - 500.5f;
    for (int i = 0; i < NM; i++)
        m[i] = (uint8_t)(next_u32() & 1);
    static char qb[NQ * 6], kb[NK * 6], mb[NM * 2]; /* base64 takes 4/3 of the bytes */
    encode(qb, (const uint8_t *)q, sizeof q);
    encode(kb, (const uint8_t *)k, sizeof k);
    encode(mb, m, sizeof m);
    size_t cap = sizeof qb + sizeof kb + sizeof mb + 1024;
    char *body = malloc(cap);
    static const size_t chunks[] = {1, 2, 3, 5, 7, 8, 63, 64, 65, 1000, 4096, 1 << 20, 0, 0, 0};
    for (int inf_case = 0; inf_case < 2; inf_case++) {
        if (inf_case) {
            k[next_u32() % NK] = INFINITY;
            encode(kb, (const uint8_t *)k, sizeof k);
        }
        int len = snprintf(body, cap,
                           "{\"query\": {\"shape\": [%d], \"base64\"  :\n \"%s\"}, \"key\":{\"base64\":\"%s\","
                           "\"shape\":[%d]}, \"attn_mask\": {\"dtype\": \"bool\", \"shape\": [%d], "
                           "\"base64\" : \"%s\"}}",
                           NQ, qb, kb, NK, NM, mb);
        const char *qs = strstr(body, qb) - 1, *ks = strstr(body, kb) - 1, *ms = strstr(body, mb) - 1;
        for (size_t c = 0; c < sizeof chunks / sizeof chunks[0]; c++) {
            srv_predecoder p;
            srv_predecoder_init(&p, (size_t)len);
            feed(&p, body, (size_t)len, chunks[c]);
            size_t n = 0;
            bool nf = true;
            uint8_t *d = take_at(&p, body, qs, &n, &nf);
            CHECK(d && n == sizeof q && !memcmp(d, q, n) && !nf, "query decoded in chunks of %zu",
                  chunks[c]);
            srv_bigbuf_array_free(d);
            CHECK(take_at(&p, body, qs, &n, &nf) == NULL, "a string is handed out once");
            d = take_at(&p, body, ks, &n, &nf);
            CHECK(d && n == sizeof k && !memcmp(d, k, n) && nf == (inf_case == 1),
                  "key decoded in chunks of %zu, finite flag %d", chunks[c], nf);
            srv_bigbuf_array_free(d);
            d = take_at(&p, body, ms, &n, &nf);
            CHECK(d && n == sizeof m && !memcmp(d, m, n), "mask decoded in chunks of %zu", chunks[c]);
            srv_bigbuf_array_free(d);
            CHECK(srv_predecoder_take(&p, (size_t)(qs - body), (size_t)(qs - body) + 10, &n, &nf) == NULL,
                  "other spans are not handed out");
            CHECK(srv_predecoder_close(&p, body, qs) == strchr(qs + 1, '"') &&
                      srv_predecoder_close(&p, body, ks) == strchr(ks + 1, '"'),
                  "the closing quotes of decoded strings, taken or not");
            CHECK(srv_predecoder_close(&p, body, qs + 1) == NULL && srv_predecoder_close(&p, body, body) == NULL,
                  "no closing quote for other positions");
            srv_predecoder_free(&p);
        }
    }
    free(body);
}

/* One body holding "base64": <text>; whether the text comes out decoded, and as what. */
static void expect(const char *text, bool decoded, const char *what)
{
    char body[512];
    int len = snprintf(body, sizeof body, "{\"q\": {\"shape\": [3], \"base64\": \"%s\"}}", text);
    const char *at = strstr(body, "\"base64\": \"") + 10;
    for (size_t chunk = 1; chunk <= 9; chunk += 4) {
        srv_predecoder p;
        srv_predecoder_init(&p, (size_t)len);
        feed(&p, body, (size_t)len, chunk);
        size_t n = 0;
        bool nf;
        /* the span the parser would ask for: up to the real closing quote (escapes skipped) */
        const char *close = at + 1;
        while (*close != '"')
            close += *close == '\\' ? 2 : 1;
        uint8_t *d = srv_predecoder_take(&p, (size_t)(at + 1 - body), (size_t)(close - body), &n, &nf);
        CHECK((srv_predecoder_close(&p, body, at) != NULL) == decoded, "%s: closing quote known (chunk %zu)",
              what, chunk);
        if (decoded) {
            uint8_t want[64];
            long wn = srv_base64_decode(want, at + 1, (size_t)(close - at - 1));
            CHECK(d && (long)n == wn && !memcmp(d, want, n), "%s: decoded (%zu bytes, chunk %zu)", what,
                  n, chunk);
        } else {
            CHECK(d == NULL, "%s: left to the parser (chunk %zu)", what, chunk);
        }
        srv_bigbuf_array_free(d);
        srv_predecoder_free(&p);
    }
}

static void test_refusals(void)
{
    expect("QUJD", true, "plain");
    expect("QUI=", true, "one '='");
    expect("QQ==", true, "two '='");
    expect("", true, "empty");
    expect("QUJDRA==", true, "padded after a whole quartet");
    expect("QQ==QUJD", false, "'=' in the middle");
    expect("QUJ", false, "not a multiple of 4");
    expect("QU\\/D", false, "an escape");
    expect("QU\\\"D", false, "an escaped quote");
    expect("QU D", false, "a space");
    expect("QU\xc3\xa9", false, "non-ASCII");
    expect("QU-D", false, "a byte outside the alphabet");

    /* no key, or a key not followed by ':' and a string */
    const char *bodies[] = {
        "{\"q\": \"QUJD\"}",
        "{\"base64\" \"QUJD\"}",
        "{\"base64\"::\"QUJD\"}",
        "{\"base64\": [\"QUJD\"]}",
        "{\"base64\"}",
    };
    for (size_t i = 0; i < sizeof bodies / sizeof bodies[0]; i++) {
        srv_predecoder p;
        size_t len = strlen(bodies[i]);
        srv_predecoder_init(&p, len);
        feed(&p, bodies[i], len, 1);
        const char *at = strstr(bodies[i], "\"QUJD\"");
        size_t n;
        bool nf;
        CHECK(srv_predecoder_take(&p, (size_t)(at + 1 - bodies[i]), (size_t)(at + 5 - bodies[i]), &n, &nf) ==
                  NULL,
              "no string after a key: %s", bodies[i]);
        srv_predecoder_free(&p);
    }

    /* a "base64" inside another string: decoded from there, harmless; the real one still right */
    const char *tricky = "{\"note\": \"\\\"base64\\\": \\\"QUJD\\\"\", \"q\": {\"base64\": \"QUJDREVG\"}}";
    srv_predecoder p;
    srv_predecoder_init(&p, strlen(tricky));
    feed(&p, tricky, strlen(tricky), 3);
    const char *at = strstr(tricky, "\"QUJDREVG\"");
    size_t n = 0;
    bool nf;
    uint8_t *d = srv_predecoder_take(&p, (size_t)(at + 1 - tricky), (size_t)(at + 9 - tricky), &n, &nf);
    CHECK(d && n == 6 && !memcmp(d, "ABCDEF", 6), "the real string after a false match");
    srv_bigbuf_array_free(d);
    srv_predecoder_free(&p);

    /* more strings than it keeps: the first ones decoded, the rest left to the parser */
    char many[1024];
    size_t len = 0;
    len += (size_t)snprintf(many + len, sizeof many - len, "{");
    for (int i = 0; i < SRV_PREDECODE_MAX + 2; i++)
        len += (size_t)snprintf(many + len, sizeof many - len, "%s\"t%d\": {\"base64\": \"QUJD\"}",
                                i ? ", " : "", i);
    len += (size_t)snprintf(many + len, sizeof many - len, "}");
    srv_predecoder_init(&p, len);
    feed(&p, many, len, 0);
    int got = 0;
    for (const char *s = many; (s = strstr(s, "\"QUJD\"")) != NULL; s++) {
        d = srv_predecoder_take(&p, (size_t)(s + 1 - many), (size_t)(s + 5 - many), &n, &nf);
        got += d != NULL;
        srv_bigbuf_array_free(d);
    }
    CHECK(got == SRV_PREDECODE_MAX, "%d of %d strings decoded", got, SRV_PREDECODE_MAX + 2);
    srv_predecoder_free(&p);

    /* a body cut inside a string: freed with nothing handed out (LeakSanitizer checks the rest) */
    const char *cut = "{\"q\": {\"base64\": \"QUJDREVG";
    srv_predecoder_init(&p, 1 << 20);
    feed(&p, cut, strlen(cut), 4);
    srv_predecoder_free(&p);
    srv_predecoder_free(NULL);
}

int main(void)
{
    test_chunks();
    test_refusals();
    srv_bigbuf_drop_all();
    return check_report();
}
