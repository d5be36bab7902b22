/*
 * fuzz_base64.c - srv_base64_decode against a plain reference decoder, and the encode round trip.
 *
 * Input: the text to decode. The reference is RFC 4648 standard base64, padding required, no line
 * breaks, no characters after the padding; non-zero bits in the padding are accepted (as most
 * decoders do) only if srv_base64_decode accepts them - both answers are checked to agree on
 * everything else. Then the input bytes themselves are encoded and decoded back. All of it on every
 * kernel the processor has (scalar, AVX2, AVX-512 VBMI), and decode_f32's inf/NaN flag against the
 * decoded words.
 */
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "codec/base64.h"
#include "fuzz_fail.h"


static int val(unsigned char c)
{
    if (c >= 'A' && c <= 'Z')
        return c - 'A';
    if (c >= 'a' && c <= 'z')
        return c - 'a' + 26;
    if (c >= '0' && c <= '9')
        return c - '0' + 52;
    if (c == '+')
        return 62;
    if (c == '/')
        return 63;
    return -1;
}

/* Returns the decoded length or -1; *pad_bits_set tells whether the bits the padding drops were
 * nonzero (a non-canonical encoding). */
static long ref_decode(uint8_t *dst, const char *s, size_t len, int *pad_bits_set)
{
    *pad_bits_set = 0;
    if (len % 4)
        return -1;
    long n = 0;
    for (size_t i = 0; i < len; i += 4) {
        int v[4], pad = 0;
        for (int j = 0; j < 4; j++) {
            unsigned char c = (unsigned char)s[i + j];
            if (c == '=') {
                if (i + 4 != len || j < 2)
                    return -1;
                pad++;
                v[j] = 0;
            } else {
                if (pad)
                    return -1;
                v[j] = val(c);
                if (v[j] < 0)
                    return -1;
            }
        }
        uint32_t w = (uint32_t)v[0] << 18 | (uint32_t)v[1] << 12 | (uint32_t)v[2] << 6 | (uint32_t)v[3];
        dst[n++] = (uint8_t)(w >> 16);
        if (pad < 2)
            dst[n++] = (uint8_t)(w >> 8);
        if (pad < 1)
            dst[n++] = (uint8_t)w;
        if ((pad == 2 && (w & 0xFFFF)) || (pad == 1 && (w & 0xFF)))
            *pad_bits_set = 1;
    }
    return n;
}

/* Whether any 32-bit word at 0, 4, 8, ... of p[0, n) has all exponent bits set (inf or NaN). */
static bool ref_special(const uint8_t *p, long n)
{
    for (long i = 0; i + 4 <= n; i += 4) {
        uint32_t u;
        memcpy(&u, p + i, 4);
        if ((u & 0x7F800000u) == 0x7F800000u)
            return true;
    }
    return false;
}

/* Every kernel the processor has (scalar, AVX2, AVX-512 VBMI) must give the reference's answer. */
static void check_path(int path, const uint8_t *data, size_t size, const char *src, const uint8_t *want,
                       long w, int pad_bits)
{
    size_t cap = size / 4 * 3;
    uint8_t *got = malloc(cap ? cap : 1);
    long g = srv_base64_decode(got, src, size);
    if (g >= 0 && (size_t)g > cap)
        FAIL("path %d: decoded %ld bytes into room for %zu", path, g, cap);
    if (!(w < 0 || pad_bits) || g >= 0) {
        if (g != w)
            FAIL("path %d: srv_base64_decode gives %ld, the reference %ld (pad bits %d)", path, g, w,
                 pad_bits);
        if (g > 0 && memcmp(got, want, (size_t)g) != 0)
            FAIL("path %d: decoded bytes differ from the reference", path);
    }
    bool special = true;
    long g32 = srv_base64_decode_f32(got, &special, src, size);
    if (g32 != g || (g32 > 0 && memcmp(got, want, (size_t)g32) != 0))
        FAIL("path %d: decode_f32 gives %ld, decode %ld", path, g32, g);
    if (g32 >= 0 && special != ref_special(got, g32))
        FAIL("path %d: decode_f32 says special=%d, the words say %d", path, special,
             ref_special(got, g32));
    free(got);

    srv_buf b;
    srv_buf_init(&b);
    if (srv_base64_encode(&b, data, size) != 0)
        FAIL("path %d: encode failed", path);
    if (b.len != (size + 2) / 3 * 4)
        FAIL("path %d: encoded %zu bytes as %zu chars", path, size, b.len);
    uint8_t *back = malloc(b.len / 4 * 3 + 1);
    long r = srv_base64_decode(back, b.data ? b.data : "", b.len);
    if (r != (long)size || (size && memcmp(back, data, size) != 0))
        FAIL("path %d: encode/decode round trip of %zu bytes gave %ld", path, size, r);
    free(back);
    srv_buf_free(&b);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char *src = malloc(size ? size : 1);
    uint8_t *want = malloc(size + 3);
    memcpy(src, data, size);
    int pad_bits;
    long w = ref_decode(want, src, size, &pad_bits);
    static const int paths[] = {SRV_BASE64_PATH_SCALAR, SRV_BASE64_PATH_AVX2,
                                SRV_BASE64_PATH_AVX512VBMI};
    for (size_t i = 0; i < sizeof paths / sizeof paths[0]; i++)
        if (srv_base64_set_path(paths[i]) == 0)
            check_path(paths[i], data, size, src, want, w, pad_bits);
    srv_base64_set_path(SRV_BASE64_PATH_AUTO);
    free(src);
    free(want);
    return 0;
}
