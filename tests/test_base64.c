/*
 * test_base64.c - srv_base64_decode (table per quartet position, four-byte stores) against a plain
 * reference decoder written here from RFC 4648: every byte value at every position of a full and of
 * the last quartet, the padding rules, and random data of every length up to 300 bytes decoded into
 * buffers of exactly the documented room (so ASan sees a store past it). Texts and byte runs of
 * SRV_BASE64_SPLIT_MIN or more take the two-thread path: their encoding is checked byte for byte
 * against a plain reference encoder, their decoding against the reference decoder, with a bad byte
 * in either half and at every place around the split.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "tensor.h"

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
    for (size_t i = 0; i < len - pad; i++) {
        const char *at = src[i] ? strchr(alphabet, src[i]) : NULL;
        if (!at)
            return -1;
        acc = acc << 6 | (uint32_t)(at - alphabet);
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

/* Decodes src[0, len) with both decoders into buffers of exactly (len/4)*3 bytes; they must agree. */
static void agree(const char *src, size_t len, const char *what)
{
    size_t room = len / 4 * 3;
    uint8_t *a = malloc(room + 1), *b = malloc(room + 1);
    if (!a || !b) {
        free(a);
        free(b);
        return;
    }
    long ra = srv_base64_decode(a, src, len), rb = ref_decode(b, src, len);
    bool ok = ra == rb && (ra < 0 || memcmp(a, b, (size_t)ra) == 0);
    if (!ok && fails++ < 10)
        CHECK(0, "%s: \"%.*s\" decodes to %ld bytes, the reference to %ld", what, (int)(len < 40 ? len : 40), src,
              ra, rb);
    free(a);
    free(b);
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

static void test_round_trip(void)
{
    uint64_t st = 88172645463325252ULL;
    uint8_t raw[300];
    for (size_t n = 0; n <= sizeof raw; n++) {
        for (size_t i = 0; i < n; i++) {
            st ^= st << 13, st ^= st >> 7, st ^= st << 17;
            raw[i] = (uint8_t)st;
        }
        srv_buf b;
        srv_buf_init(&b);
        srv_base64_encode(&b, raw, n);
        agree(srv_buf_cstr(&b), b.len, "random data");
        uint8_t *dec = malloc(b.len / 4 * 3 + 1);
        long got = dec ? srv_base64_decode(dec, srv_buf_cstr(&b), b.len) : -1;
        CHECK(got == (long)n && memcmp(dec, raw, n) == 0, "round trip of %zu bytes", n);
        free(dec);
        srv_buf_free(&b);
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
        CHECK(rc == 0 && b.len == tlen + 1 && memcmp(b.data + 1, want, tlen) == 0 && b.data[b.len] == '\0',
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
        srv_buf_free(&b);
        free(raw), free(dec), free(want);
    }
}

int main(void)
{
    test_every_byte();
    test_padding();
    test_round_trip();
    test_large();
    CHECK(fails == 0, "%d texts decoded differently from the reference", fails);
    return check_report();
}
