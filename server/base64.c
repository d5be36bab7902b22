/*
 * base64.c - standard base64 (RFC 4648 §4: A-Z a-z 0-9 + /, '=' padding required, no line breaks)
 * for the base64 tensor form, both directions.
 *
 * Hand-written because it is a hot path for large tensors (the base64 form exists to be fast:
 * a 12 MB tensor should cost milliseconds) and the libraries at hand (jansson, libmicrohttpd) do not
 * offer it. Decoding is table-driven, a quartet at a time with one table per position (dec0-dec3);
 * any byte outside the alphabet, misplaced '=', or non-zero bits in the padding remainder is an
 * error. Texts and byte runs of SRV_BASE64_SPLIT_MIN or more are split in two halves on quartet /
 * 3-byte-group boundaries, one decoded or encoded by a second thread (an L tensor's 12.6 MB each
 * way cost about 7 ms on one core); the result is byte for byte that of one pass.
 */
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <string.h>

#include "options.h"
#include "tensor.h"

static const char b64_alphabet[65] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

/* 0-63 for alphabet bytes, 0xFF for everything else. */
static const uint8_t b64_value[256] = {
#define X 0xFF
#define X16 X, X, X, X, X, X, X, X, X, X, X, X, X, X, X, X
    X16, X16,
    X, X, X, X, X, X, X, X, X, X, X, 62, X, X, X, 63,               /* '+' 0x2B, '/' 0x2F */
    52, 53, 54, 55, 56, 57, 58, 59, 60, 61, X, X, X, X, X, X,       /* '0'-'9'            */
    X, 0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14,            /* 'A'-'O'            */
    15, 16, 17, 18, 19, 20, 21, 22, 23, 24, 25, X, X, X, X, X,      /* 'P'-'Z'            */
    X, 26, 27, 28, 29, 30, 31, 32, 33, 34, 35, 36, 37, 38, 39, 40,  /* 'a'-'o'            */
    41, 42, 43, 44, 45, 46, 47, 48, 49, 50, 51, X, X, X, X, X,      /* 'p'-'z'            */
    X16, X16, X16, X16, X16, X16, X16, X16,
#undef X16
#undef X
};

/* Decoding tables for the full quartets: dec<i>[c] holds character c's six bits where they land, as
 * quartet position i, in the three output bytes read as a little-endian word; DEC_BAD (a bit of the
 * unused fourth byte) for a byte outside the alphabet. A quartet is then four loads, three ORs and
 * one test. */
#define B64V(c)                                                                                    \
    ((c) >= 'A' && (c) <= 'Z'   ? (c) - 'A'                                                        \
     : (c) >= 'a' && (c) <= 'z' ? (c) - 'a' + 26                                                   \
     : (c) >= '0' && (c) <= '9' ? (c) - '0' + 52                                                   \
     : (c) == '+'               ? 62                                                               \
     : (c) == '/'               ? 63                                                               \
                                : -1)
#define DEC_BAD 0x01000000u
#define DEC(c, expr) (B64V(c) < 0 ? DEC_BAD : (uint32_t)(expr))
#define D0(c) DEC(c, B64V(c) << 2)                                  /* byte 0, bits 7-2         */
#define D1(c) DEC(c, B64V(c) >> 4 | (B64V(c) & 0x0F) << 12)         /* byte 0 bits 1-0, byte 1  */
#define D2(c) DEC(c, (B64V(c) >> 2) << 8 | (B64V(c) & 0x03) << 22)  /* byte 1 bits 3-0, byte 2  */
#define D3(c) DEC(c, B64V(c) << 16)                                 /* byte 2, bits 5-0         */
#define T4(F, i) F(i), F(i + 1), F(i + 2), F(i + 3)
#define T16(F, i) T4(F, i), T4(F, i + 4), T4(F, i + 8), T4(F, i + 12)
#define T64(F, i) T16(F, i), T16(F, i + 16), T16(F, i + 32), T16(F, i + 48)
#define T256(F) T64(F, 0), T64(F, 64), T64(F, 128), T64(F, 192)
static const uint32_t dec0[256] = {T256(D0)};
static const uint32_t dec1[256] = {T256(D1)};
static const uint32_t dec2[256] = {T256(D2)};
static const uint32_t dec3[256] = {T256(D3)};

_Static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__, "the decoding tables are little-endian");

/* Decodes n padding-free quartets into exactly 3n bytes at d (nothing past them, so two threads can
 * decode neighbouring runs): 0, or -1 when any byte is outside the alphabet ('=' included). */
static int decode_quartets(uint8_t *d, const unsigned char *s, size_t n)
{
    if (n == 0)
        return 0;
    /* Each quartet but the last stores four bytes, the fourth overwritten by the next quartet. */
    for (size_t i = 0; i + 1 < n; i++, s += 4) {
        uint32_t v = dec0[s[0]] | dec1[s[1]] | dec2[s[2]] | dec3[s[3]];
        if (v & DEC_BAD)
            return -1;
        memcpy(d, &v, 4);
        d += 3;
    }
    uint32_t v = dec0[s[0]] | dec1[s[1]] | dec2[s[2]] | dec3[s[3]];
    if (v & DEC_BAD)
        return -1;
    memcpy(d, &v, 3);
    return 0;
}

typedef struct decode_job {
    uint8_t *dst;
    const unsigned char *src;
    size_t n; /* quartets */
    int rc;
} decode_job;

static void *decode_job_run(void *arg)
{
    decode_job *j = arg;
    j->rc = decode_quartets(j->dst, j->src, j->n);
    return NULL;
}

long srv_base64_decode(uint8_t *dst, const char *src, size_t len)
{
    if (len % 4 != 0)
        return -1;
    if (len == 0)
        return 0;
    const unsigned char *s = (const unsigned char *)src;
    size_t full = len / 4 - 1; /* the last quartet may carry padding */
    /* Large texts: the first half of the full quartets on one more thread. Each half writes only its
     * own bytes, and a text is valid only if both halves are, so the result is the same either way. */
    decode_job j = {.dst = dst, .src = s, .n = full / 2, .rc = 0};
    pthread_t t;
    bool split = len >= SRV_BASE64_SPLIT_MIN && srv_ncores() >= 2 &&
                 pthread_create(&t, NULL, decode_job_run, &j) == 0;
    size_t done = split ? j.n : 0;
    int rc = decode_quartets(dst + done * 3, s + done * 4, full - done);
    if (split) {
        pthread_join(t, NULL);
        rc |= j.rc;
    }
    if (rc != 0)
        return -1;
    s += full * 4;
    uint8_t *d = dst + full * 3;
    uint32_t a = b64_value[s[0]], b = b64_value[s[1]];
    if ((a | b) & 0x80)
        return -1;
    if (s[2] == '=') {
        if (s[3] != '=' || (b & 0x0F) != 0)
            return -1;
        d[0] = (uint8_t)(a << 2 | b >> 4);
        d += 1;
    } else if (s[3] == '=') {
        uint32_t c = b64_value[s[2]];
        if ((c & 0x80) || (c & 0x03) != 0)
            return -1;
        d[0] = (uint8_t)(a << 2 | b >> 4);
        d[1] = (uint8_t)(b << 4 | c >> 2);
        d += 2;
    } else {
        uint32_t c = b64_value[s[2]], e = b64_value[s[3]];
        if ((c | e) & 0x80)
            return -1;
        uint32_t v = a << 18 | b << 12 | c << 6 | e;
        d[0] = (uint8_t)(v >> 16);
        d[1] = (uint8_t)(v >> 8);
        d[2] = (uint8_t)v;
        d += 3;
    }
    return (long)(d - dst);
}

/* Encodes len bytes into (len+2)/3*4 characters at o (no terminator). */
static void encode_into(char *o, const uint8_t *src, size_t len)
{
    size_t i = 0;
    for (; i + 3 <= len; i += 3) {
        uint32_t v = (uint32_t)src[i] << 16 | (uint32_t)src[i + 1] << 8 | src[i + 2];
        o[0] = b64_alphabet[v >> 18];
        o[1] = b64_alphabet[v >> 12 & 63];
        o[2] = b64_alphabet[v >> 6 & 63];
        o[3] = b64_alphabet[v & 63];
        o += 4;
    }
    if (i < len) {
        uint32_t v = (uint32_t)src[i] << 16 | (i + 1 < len ? (uint32_t)src[i + 1] << 8 : 0);
        o[0] = b64_alphabet[v >> 18];
        o[1] = b64_alphabet[v >> 12 & 63];
        o[2] = i + 1 < len ? b64_alphabet[v >> 6 & 63] : '=';
        o[3] = '=';
    }
}

typedef struct encode_job {
    char *out;
    const uint8_t *src;
    size_t len;
} encode_job;

static void *encode_job_run(void *arg)
{
    encode_job *j = arg;
    encode_into(j->out, j->src, j->len);
    return NULL;
}

int srv_base64_encode(srv_buf *b, const uint8_t *src, size_t len)
{
    size_t out_len = (len + 2) / 3 * 4;
    if (srv_buf_reserve(b, out_len) != 0)
        return -1;
    char *o = b->data + b->len;
    /* Large inputs: the first half, a whole number of 3-byte groups, on one more thread; the two
     * halves' characters are the ones one pass would write. */
    encode_job j = {.out = o, .src = src, .len = len / 6 * 3};
    pthread_t t;
    bool split = len >= SRV_BASE64_SPLIT_MIN && srv_ncores() >= 2 &&
                 pthread_create(&t, NULL, encode_job_run, &j) == 0;
    size_t done = split ? j.len : 0;
    encode_into(o + done / 3 * 4, src + done, len - done);
    if (split)
        pthread_join(t, NULL);
    b->len += out_len;
    b->data[b->len] = '\0';
    return 0;
}
