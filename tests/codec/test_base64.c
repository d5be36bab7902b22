/*
 * test_base64.c - srv_base64_decode / _decode_f32 / _encode, with each kernel the processor has
 * (AVX-512 VBMI, AVX2, scalar: srv_base64_set_path), against plain reference coders written here
 * from RFC 4648:
 *   - every byte value at every position of a full and of the last quartet, and the padding rules;
 *   - every position of a bad byte (outside the alphabet, >= 0x80, '=', whitespace, '"') in texts
 *     long enough for several SIMD blocks and a tail;
 *   - random data of every length up to 300 bytes, encoded byte for byte as the reference does and
 *     decoded into buffers of exactly the documented room (so ASan sees a store past it);
 *   - texts and byte runs around SRV_BASE64_SPLIT_MIN (the two-thread path), with a bad byte in
 *     either half and at every place around the split;
 *   - the inf/NaN flag of srv_base64_decode_f32: a special word at every position of short texts
 *     and around the split, and values next to special ones that are not.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "codec/base64.h"
#include "codec/tensor.h"

static const char alphabet[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

/* RFC 4648 §4 decoding, one character at a time: the decoded length or -1. */
static long ref_decode(uint8_t *dst, const char *src, size_t len)
{
    if (len % 4)
        return -1;
    uint32_t acc = 0;
    int bits = 0;
    long n = 0;
    size_t pad = len >= 1 && src[len - 1] == '=' ? (len >= 2 && src[len - 2] == '=' ? 2 : 1) : 0;
    static int value[256]; /* the alphabet's index of each byte + 1, 0 outside it */
    if (!value['/'])
        for (int k = 0; k < 64; k++)
            value[(unsigned char)alphabet[k]] = k + 1;
    for (size_t i = 0; i < len - pad; i++) {
        int v = value[(unsigned char)src[i]] - 1;
        if (v < 0)
            return -1;
        acc = acc << 6 | (uint32_t)v;
        bits += 6;
        if (bits >= 8) {
            bits -= 8;
            dst[n++] = (uint8_t)(acc >> bits);
        }
    }
    if (bits && (acc & ((1u << bits) - 1)) != 0) /* padding remainder bits must be zero */
        return -1;
    return n;
}

static int fails;
static const char *path_name = "";

/* Whether a complete 32-bit word of p [n bytes] (at offsets 0, 4, ...) is a float32 inf or NaN. */
static bool ref_special(const uint8_t *p, size_t n)
{
    for (size_t i = 0; i + 4 <= n; i += 4) {
        uint32_t u = (uint32_t)p[i] | (uint32_t)p[i + 1] << 8 | (uint32_t)p[i + 2] << 16 |
                     (uint32_t)p[i + 3] << 24;
        if ((u & 0x7F800000u) == 0x7F800000u)
            return true;
    }
    return false;
}

/* Decodes src[0, len) with srv_base64_decode, srv_base64_decode_f32 and the reference, each into a
 * buffer of exactly (len/4)*3 bytes; they must agree, and so must the inf/NaN flag. */
static void agree(const char *src, size_t len, const char *what)
{
    size_t room = len / 4 * 3;
    uint8_t *a = malloc(room ? room : 1), *b = malloc(room ? room : 1), *c = malloc(room ? room : 1);
    if (!a || !b || !c) {
        free(a), free(b), free(c);
        CHECK(0, "out of memory for %zu bytes", room);
        return;
    }
    bool special = true;
    long ra = srv_base64_decode(a, src, len), rb = ref_decode(b, src, len);
    long rc = srv_base64_decode_f32(c, &special, src, len);
    bool want_special = rb >= 0 && ref_special(b, (size_t)rb);
    bool ok = ra == rb && rc == rb &&
              (ra < 0 || (memcmp(a, b, (size_t)ra) == 0 && memcmp(c, b, (size_t)ra) == 0)) &&
              special == want_special;
    if (!ok && fails++ < 10)
        CHECK(0,
              "[%s] %s: \"%.*s\" (%zu chars) decodes to %ld / %ld bytes (special %d), the "
              "reference to %ld (%d)",
              path_name, what, (int)(len < 40 ? len : 40), src, len, ra, rc, special, rb,
              want_special);
    free(a), free(b), free(c);
}

static void test_every_byte(void)
{
    char q[12];
    for (int pos = 0; pos < 12; pos++) { /* positions in two full quartets and the last one */
        for (int c = 1; c < 256; c++) {
            memcpy(q, "QUJDZGVmZ2hp", 12); /* "ABCdefghi" */
            q[pos] = (char)c;
            agree(q, 12, "one byte changed");
        }
    }
    /* the last quartet with padding: every byte at every place before the '=' or '==' */
    static const char *const padded[] = {"QUJDZGU=", "QUJDZA=="};
    for (int k = 0; k < 2; k++) {
        for (int pos = 4; pos < 8 - (k + 1); pos++) {
            for (int c = 1; c < 256; c++) {
                memcpy(q, padded[k], 8);
                q[pos] = (char)c;
                agree(q, 8, "padded quartet");
            }
        }
    }
}

static void test_padding(void)
{
    static const struct {
        const char *s;
        long want;
    } v[] = {
        {"", 0},          {"Zg==", 1},     {"Zh==", -1},     {"Zm8=", 2},     {"Zm9=", -1},
        {"Zm9v", 3},      {"=AAA", -1},    {"A=AA", -1},     {"AA=A", -1},    {"AAA=", 2},
        {"A===", -1},     {"====", -1},    {"Zg==Zg==", -1}, {"Zm9vYmFy", 6}, {"Zm9vYmE=", 5},
        {"Zm9vYg==", 4},  {"Zm9", -1},     {"Zm9vY", -1},    {"Zm 9", -1},    {"Zm9v\n", -1},
    };
    for (size_t i = 0; i < sizeof v / sizeof v[0]; i++) {
        uint8_t out[16];
        long got = srv_base64_decode(out, v[i].s, strlen(v[i].s));
        CHECK(got == v[i].want, "\"%s\" decodes to %ld bytes, want %ld", v[i].s, got, v[i].want);
        agree(v[i].s, strlen(v[i].s), "vector");
    }
}

/* RFC 4648 §4 encoding, six bits at a time. */
static void ref_encode(char *out, const uint8_t *src, size_t len)
{
    for (size_t i = 0; i < len; i += 3) {
        uint32_t v = (uint32_t)src[i] << 16 | (i + 1 < len ? (uint32_t)src[i + 1] << 8 : 0) |
                     (i + 2 < len ? src[i + 2] : 0);
        for (int k = 0; k < 4; k++)
            *out++ = (size_t)k <= len - i ? alphabet[v >> (18 - 6 * k) & 63] : '=';
    }
    *out = '\0';
}

/* The 4 characters of the group of 3 bytes at src (of len >= 1 bytes left), padded if it is the last. */
static void ref_encode_group(char *out, const uint8_t *src, size_t len)
{
    char tmp[5];
    ref_encode(tmp, src, len < 3 ? len : 3);
    memcpy(out, tmp, 4);
}

static uint64_t rng = 88172645463325252ULL;
static uint8_t random_byte(void)
{
    rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
    return (uint8_t)(rng >> 32);
}

static void test_round_trip(void)
{
    uint8_t raw[300];
    char want[sizeof raw / 3 * 4 + 5];
    for (size_t n = 0; n <= sizeof raw; n++) {
        for (size_t i = 0; i < n; i++)
            raw[i] = random_byte();
        /* the input in a buffer of exactly n bytes, so that ASan sees a load past it */
        uint8_t *exact = malloc(n ? n : 1);
        if (!exact)
            return;
        memcpy(exact, raw, n);
        ref_encode(want, raw, n);
        srv_buf b;
        srv_buf_init(&b);
        srv_base64_encode(&b, exact, n);
        CHECK(b.len == strlen(want) && memcmp(srv_buf_cstr(&b), want, b.len) == 0,
              "[%s] %zu random bytes encode as the reference does", path_name, n);
        agree(srv_buf_cstr(&b), b.len, "random data");
        /* the text in a buffer of exactly its length (no NUL) */
        char *text = malloc(b.len ? b.len : 1);
        uint8_t *dec = malloc(b.len / 4 * 3 + 1);
        if (text && dec) {
            memcpy(text, b.data, b.len);
            long got = srv_base64_decode(dec, text, b.len);
            CHECK(got == (long)n && memcmp(dec, raw, n) == 0, "[%s] round trip of %zu bytes",
                  path_name, n);
        }
        free(text), free(dec), free(exact);
        srv_buf_free(&b);
    }
}

/* A bad byte at every position of texts of 0 to 4 SIMD blocks and a tail (up to 300 characters):
 * bytes outside the alphabet next to ones in it, bytes >= 0x80 whose low 7 bits are in it, '=',
 * whitespace and '"'. */
static void test_bad_positions(void)
{
    static const unsigned char bad[] = {'=',  ' ',  '\n', '\r', '\t', '"',  '\\', '*',  '-',  '_',
                                        '.',  ',',  ':',  '@',  '[',  '`',  '{',  0x7F, 0x01, 0x80,
                                        0xAB, 0xAF, 0xB0, 0xC1, 0xE1, 0xFF, 0xC0, 0x9A};
    static const size_t lens[] = {4, 28, 32, 36, 60, 64, 68, 92, 96, 124, 128, 132, 256, 260, 300};
    uint8_t raw[225];
    for (size_t i = 0; i < sizeof raw; i++)
        raw[i] = random_byte();
    char text[sizeof raw / 3 * 4 + 1];
    ref_encode(text, raw, sizeof raw); /* 300 characters, no padding */
    for (size_t li = 0; li < sizeof lens / sizeof lens[0]; li++) {
        size_t len = lens[li];
        for (size_t pos = 0; pos < len; pos++) {
            for (size_t k = 0; k < sizeof bad; k++) {
                char keep = text[pos];
                text[pos] = (char)bad[k];
                agree(text, len, "one bad byte");
                text[pos] = keep;
            }
        }
        agree(text, len, "no bad byte");
    }
    /* every byte value at the first, a middle and the last place of the first and second blocks */
    static const size_t at[] = {0, 1, 31, 32, 33, 63, 64, 95, 127};
    for (size_t k = 0; k < sizeof at / sizeof at[0]; k++) {
        for (int c = 0; c < 256; c++) {
            char keep = text[at[k]];
            text[at[k]] = (char)c;
            agree(text, 132, "every byte in a block");
            text[at[k]] = keep;
        }
    }
}

/* The inf/NaN flag: a special word at every word of texts of 1 to 40 words (a tail, one and two
 * blocks of either kernel), and bit patterns next to special ones that are finite. */
static void test_special(void)
{
    static const uint32_t special[] = {0x7F800000u, 0xFF800000u, 0x7FC00000u, 0x7F800001u,
                                       0xFFFFFFFFu, 0x7FFFFFFFu, 0xFFC00001u};
    static const uint32_t finite[] = {0x7F7FFFFFu, 0xFF7FFFFFu, 0x00800000u, 0x80000000u,
                                      0x3F800000u, 0x007FFFFFu, 0x7F000000u, 0x0F800000u};
    uint32_t words[40];
    uint8_t bytes[sizeof words];
    char text[sizeof bytes / 3 * 4 + 5];
    for (size_t n = 1; n <= 40; n++) {
        for (size_t i = 0; i < n; i++) /* random bits but exponent bit 0 clear: finite */
            words[i] = ((uint32_t)random_byte() << 24 | (uint32_t)random_byte() << 16 |
                        (uint32_t)random_byte() << 8 | random_byte()) & ~0x00800000u;
        memcpy(bytes, words, 4 * n);
        ref_encode(text, bytes, 4 * n);
        agree(text, strlen(text), "finite words");
        for (size_t at = 0; at < n; at++) {
            uint32_t keep = words[at];
            for (size_t k = 0;
                 k < sizeof special / sizeof special[0] + sizeof finite / sizeof finite[0]; k++) {
                words[at] = k < 7 ? special[k] : finite[k - 7];
                memcpy(bytes, words, 4 * n);
                ref_encode(text, bytes, 4 * n);
                agree(text, strlen(text), k < 7 ? "one special word" : "a finite word near special");
            }
            words[at] = keep;
        }
    }
    /* a part word at the end is not a float: 0xFF 0xFF 0xFF (3 bytes) is not special */
    bool sp = true;
    uint8_t out[3];
    CHECK(srv_base64_decode_f32(out, &sp, "////", 4) == 3 && !sp, "[%s] a part word is not special",
          path_name);
    uint8_t out4[6];
    CHECK(srv_base64_decode_f32(out4, &sp, "//////8=", 8) == 5 && sp, "[%s] 0xFFFFFFFF is special",
          path_name);
    CHECK(srv_base64_decode_f32(out4, &sp, "//////8", 7) == -1 && !sp,
          "[%s] an error is not special", path_name);
}

static void test_large(void)
{
    uint64_t st = 0x9E3779B97F4A7C15ULL;
    /* raw lengths around the split threshold (as text and as bytes), each padding case */
    size_t lens[] = {SRV_BASE64_SPLIT_MIN / 4 * 3 + 3000, SRV_BASE64_SPLIT_MIN / 4 * 3 + 3001,
                     SRV_BASE64_SPLIT_MIN + 2, SRV_BASE64_SPLIT_MIN, SRV_BASE64_SPLIT_MIN - 1};
    for (size_t li = 0; li < sizeof lens / sizeof lens[0]; li++) {
        size_t n = lens[li], tlen = (n + 2) / 3 * 4;
        uint8_t *raw = malloc(n), *dec = malloc(tlen / 4 * 3);
        char *want = malloc(tlen + 1);
        if (!raw || !dec || !want) {
            free(raw), free(dec), free(want);
            CHECK(0, "out of memory for %zu bytes", n);
            return;
        }
        for (size_t i = 0; i < n; i++) {
            st ^= st << 13, st ^= st >> 7, st ^= st << 17;
            raw[i] = (uint8_t)st;
        }
        ref_encode(want, raw, n);
        srv_buf b;
        srv_buf_init(&b);
        srv_buf_puts(&b, "x"); /* appends after what the buffer holds */
        int rc = srv_base64_encode(&b, raw, n);
        CHECK(rc == 0 && b.len == tlen + 1 && memcmp(b.data + 1, want, tlen) == 0 &&
                  b.data[b.len] == '\0',
              "%zu bytes encode as the reference does", n);
        long got = srv_base64_decode(dec, want, tlen);
        CHECK(got == (long)n && memcmp(dec, raw, n) == 0, "%zu bytes round trip", n);
        agree(want, tlen, "large text");
        /* a bad byte: far in the first half, far in the second, and at every place around the
         * split (the middle of the full quartets, wherever exactly the decoder cuts) */
        size_t mid = (tlen / 4 - 1) / 2 * 4;
        size_t at[2 + 24];
        size_t nat = 0;
        at[nat++] = 5;
        at[nat++] = tlen - 9;
        for (size_t p = mid - 12; p < mid + 12; p++)
            at[nat++] = p;
        for (size_t k = 0; k < nat; k++) {
            for (int bad = 0; bad < 2; bad++) {
                char keep = want[at[k]];
                want[at[k]] = bad ? '=' : '*';
                CHECK(srv_base64_decode(dec, want, tlen) == -1, "'%c' at %zu of %zu is an error",
                      want[at[k]], at[k], tlen);
                if (k < 4)
                    agree(want, tlen, "large text, one bad byte");
                want[at[k]] = keep;
            }
        }
        /* the inf/NaN flag: finite words (exponent bit 0 cleared), then one +inf at a time at the
         * first words, around the split and in the tail (the kernels' and the scalar code's parts) */
        for (size_t i = 2; i < n; i += 4)
            raw[i] &= 0x7F;
        ref_encode(want, raw, n);
        bool sp = true;
        got = srv_base64_decode_f32(dec, &sp, want, tlen);
        CHECK(got == (long)n && !sp && memcmp(dec, raw, n) == 0,
              "[%s] %zu finite bytes: no special word", path_name, n);
        size_t words = n / 4, split_word = (tlen / 4 - 1) / 2 / 16 * 48 / 4;
        for (size_t w = 0; w < words; w++) {
            if (w > 1 && (w + 20 < split_word || w > split_word + 20) && w + 20 < words)
                continue;
            memcpy(raw + 4 * w, &(uint32_t){0x7F800000u}, 4);
            /* re-encode just the quartets around the word */
            size_t g0 = 4 * w / 3, g1 = (4 * w + 3) / 3;
            for (size_t g = g0; g <= g1 && 3 * g < n; g++)
                ref_encode_group(want + 4 * g, raw + 3 * g, n - 3 * g);
            got = srv_base64_decode_f32(dec, &sp, want, tlen);
            CHECK(got == (long)n && sp, "[%s] +inf at word %zu of %zu (split near %zu)", path_name,
                  w, words, split_word);
            memset(raw + 4 * w, 0, 4);
            for (size_t g = g0; g <= g1 && 3 * g < n; g++)
                ref_encode_group(want + 4 * g, raw + 3 * g, n - 3 * g);
        }
        got = srv_base64_decode_f32(dec, &sp, want, tlen);
        CHECK(got == (long)n && !sp, "[%s] %zu bytes with zeros: no special word", path_name, n);
        srv_buf_free(&b);
        free(raw), free(dec), free(want);
    }
}

int main(void)
{
    static const struct {
        int path;
        const char *name;
    } paths[] = {{SRV_BASE64_PATH_SCALAR, "scalar"},
                 {SRV_BASE64_PATH_AVX2, "AVX2"},
                 {SRV_BASE64_PATH_AVX512VBMI, "AVX-512 VBMI"}};
    for (size_t k = 0; k < sizeof paths / sizeof paths[0]; k++) {
        if (srv_base64_set_path(paths[k].path) != 0) {
            printf("base64 kernel %s: not on this processor, not tested\n", paths[k].name);
            continue;
        }
        path_name = paths[k].name;
        fails = 0;
        test_every_byte();
        test_padding();
        test_round_trip();
        test_bad_positions();
        test_special();
        test_large();
        CHECK(fails == 0, "[%s] %d texts decoded differently from the reference", path_name, fails);
    }
    CHECK(srv_base64_set_path(SRV_BASE64_PATH_AUTO) == 0, "back to the best kernel");
    CHECK(srv_base64_set_path(99) == -1 && srv_base64_set_path(-5) == -1,
          "an unknown kernel is refused");
    return check_report();
}
