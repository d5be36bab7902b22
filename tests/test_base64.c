/*
 * test_base64.c - srv_base64_decode (table per quartet position, four-byte stores) against a plain
 * reference decoder written here from RFC 4648: every byte value at every position of a full and of
 * the last quartet, the padding rules, and random data of every length up to 300 bytes decoded into
 * buffers of exactly the documented room (so ASan sees a store past it).
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

int main(void)
{
    test_every_byte();
    test_padding();
    test_round_trip();
    CHECK(fails == 0, "%d texts decoded differently from the reference", fails);
    return check_report();
}
