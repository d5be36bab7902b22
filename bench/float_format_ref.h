/*
 * float_format_ref.h - the srv_format_float of commit 3e3691f (Schubfach with a division loop for
 * the digits), kept verbatim as ref_format_float: the reference the faster server/codec/float_format.c
 * must match byte for byte (bench/check_float_all.c over all 2^32 patterns) and the baseline of
 * bench/bench_float_format.c. Not linked into the daemon.
 */
#ifndef ATTND_FLOAT_FORMAT_REF_H
#define ATTND_FLOAT_FORMAT_REF_H

#include <stdint.h>
#include <string.h>

/* g[e + 31] = floor(10^e · 2^(63 - floor(log2 10^e))) + 1 for e in [-31, 45]: 10^e as a 64-bit
 * significand rounded up (Schubfach's g). Generated with exact rational arithmetic (Python's
 * fractions.Fraction): for e: r = floor(e·log2(10)) - 63; g = floor(10^e / 2^r) + 1. */
#define REF_POW10_MIN_EXP (-31)
static const uint64_t ref_pow10_g[77] = {
    0x81CEB32C4B43FCF5, 0xA2425FF75E14FC32, 0xCAD2F7F5359A3B3F, 0xFD87B5F28300CA0E,
    0x9E74D1B791E07E49, 0xC612062576589DDB, 0xF79687AED3EEC552, 0x9ABE14CD44753B53,
    0xC16D9A0095928A28, 0xF1C90080BAF72CB2, 0x971DA05074DA7BEF, 0xBCE5086492111AEB,
    0xEC1E4A7DB69561A6, 0x9392EE8E921D5D08, 0xB877AA3236A4B44A, 0xE69594BEC44DE15C,
    0x901D7CF73AB0ACDA, 0xB424DC35095CD810, 0xE12E13424BB40E14, 0x8CBCCC096F5088CC,
    0xAFEBFF0BCB24AAFF, 0xDBE6FECEBDEDD5BF, 0x89705F4136B4A598, 0xABCC77118461CEFD,
    0xD6BF94D5E57A42BD, 0x8637BD05AF6C69B6, 0xA7C5AC471B478424, 0xD1B71758E219652C,
    0x83126E978D4FDF3C, 0xA3D70A3D70A3D70B, 0xCCCCCCCCCCCCCCCD, 0x8000000000000001,
    0xA000000000000001, 0xC800000000000001, 0xFA00000000000001, 0x9C40000000000001,
    0xC350000000000001, 0xF424000000000001, 0x9896800000000001, 0xBEBC200000000001,
    0xEE6B280000000001, 0x9502F90000000001, 0xBA43B74000000001, 0xE8D4A51000000001,
    0x9184E72A00000001, 0xB5E620F480000001, 0xE35FA931A0000001, 0x8E1BC9BF04000001,
    0xB1A2BC2EC5000001, 0xDE0B6B3A76400001, 0x8AC7230489E80001, 0xAD78EBC5AC620001,
    0xD8D726B7177A8001, 0x878678326EAC9001, 0xA968163F0A57B401, 0xD3C21BCECCEDA101,
    0x84595161401484A1, 0xA56FA5B99019A5C9, 0xCECB8F27F4200F3B, 0x813F3978F8940985,
    0xA18F07D736B90BE6, 0xC9F2C9CD04674EDF, 0xFC6F7C4045812297, 0x9DC5ADA82B70B59E,
    0xC5371912364CE306, 0xF684DF56C3E01BC7, 0x9A130B963A6C115D, 0xC097CE7BC90715B4,
    0xF0BDC21ABB48DB21, 0x96769950B50D88F5, 0xBC143FA4E250EB32, 0xEB194F8E1AE525FE,
    0x92EFD1B8D0CF37BF, 0xB7ABC627050305AE, 0xE596B7B0C643C71A, 0x8F7E32CE7BEA5C70,
    0xB35DBF821AE4F38C,
};

/* floor(log10(2^q)), floor(log10(3/4 · 2^q)) and floor(log2(10^e)) for the exponent ranges of
 * binary32 (checked against exact arithmetic for |q|, |e| < 200). */
static inline int ref_flog10_pow2(int q) { return (q * 1262611) >> 22; }
static inline int ref_flog10_three_quarters_pow2(int q) { return (q * 1262611 - 524031) >> 22; }
static inline int ref_flog2_pow10(int e) { return (e * 1741647) >> 19; }

/* floor(g · cp / 2^64) with the lowest bit or-ed with "the rest is not zero" (round to odd): the
 * bit records whether the true product was exact, which keeps the interval tests exact. */
static inline uint32_t ref_round_to_odd(uint64_t g, uint32_t cp)
{
    unsigned __int128 p = (unsigned __int128)g * cp;
    uint32_t y1 = (uint32_t)(p >> 64);
    uint32_t y0 = (uint32_t)((uint64_t)p >> 32);
    return y1 | (y0 > 1);
}

/* The shortest decimal digits s and exponent k with s·10^k inside the rounding interval of
 * v = c·2^q (c > 0), closest to v when several have the shortest length. s may end in zeros. */
static void ref_shortest_decimal(uint32_t c, int q, int irregular, uint32_t *s_out, int *k_out)
{
    int even = (c & 1) == 0;
    uint32_t cbl = 4 * c - 2 + (uint32_t)irregular; /* the lower bound is closer at 2^n        */
    uint32_t cb = 4 * c;
    uint32_t cbr = 4 * c + 2;
    int k = irregular ? ref_flog10_three_quarters_pow2(q) : ref_flog10_pow2(q);
    int h = q + ref_flog2_pow10(-k) + 1; /* in [1, 4] */
    uint64_t g = ref_pow10_g[-k - REF_POW10_MIN_EXP];
    uint32_t vbl = ref_round_to_odd(g, cbl << h);
    uint32_t vb = ref_round_to_odd(g, cb << h);
    uint32_t vbr = ref_round_to_odd(g, cbr << h);
    uint32_t lower = vbl + !even; /* bounds are in the interval only when c is even */
    uint32_t upper = vbr - !even;

    uint32_t s = vb >> 2; /* floor(v·10^-k) */
    if (s >= 10) {
        /* one digit fewer: is exactly one of the neighbours sp·10, (sp+1)·10 inside? */
        uint32_t sp = s / 10;
        int up_in = lower <= 40 * sp;
        int wp_in = 40 * sp + 40 <= upper;
        if (up_in != wp_in) {
            *s_out = sp + (uint32_t)wp_in;
            *k_out = k + 1;
            return;
        }
    }
    int u_in = lower <= 4 * s;
    int w_in = 4 * s + 4 <= upper;
    if (u_in != w_in) {
        *s_out = s + (uint32_t)w_in;
        *k_out = k;
        return;
    }
    uint32_t mid = 4 * s + 2; /* both inside: take the closer, ties to even */
    int up = vb > mid || (vb == mid && (s & 1) != 0);
    *s_out = s + (uint32_t)up;
    *k_out = k;
}

static const char ref_digit_pairs[201] =
    "00010203040506070809101112131415161718192021222324252627282930313233343536373839"
    "40414243444546474849505152535455565758596061626364656667686970717273747576777879"
    "8081828384858687888990919293949596979899";

/* Writes the n decimal digits of s (n = its digit count) at p. */
static inline void ref_write_digits(char *p, uint32_t s, int n)
{
    char *q = p + n;
    while (s >= 100) {
        uint32_t r = s % 100;
        s /= 100;
        q -= 2;
        memcpy(q, ref_digit_pairs + 2 * r, 2);
    }
    if (s >= 10) {
        q -= 2;
        memcpy(q, ref_digit_pairs + 2 * s, 2);
    } else {
        *--q = (char)('0' + s);
    }
}

static inline int ref_digit_count(uint32_t s) /* s < 10^9 */
{
    if (s < 10000)
        return s < 100 ? 1 + (s >= 10) : 3 + (s >= 1000);
    if (s < 10000000)
        return s < 1000000 ? 5 + (s >= 100000) : 7;
    return 8 + (s >= 100000000);
}

static int ref_format_float(char *buf, float f)
{
    uint32_t bits;
    memcpy(&bits, &f, 4);
    char *p = buf;
    if (bits >> 31)
        *p++ = '-';
    uint32_t frac = bits & 0x7FFFFF;
    int bexp = (int)((bits >> 23) & 0xFF);
    if (bexp == 0 && frac == 0) {
        *p++ = '0';
        *p = '\0';
        return (int)(p - buf);
    }

    uint32_t s;
    int k;
    uint32_t c;
    int q;
    if (bexp != 0) {
        c = frac | 0x800000;
        q = bexp - 150;
    } else {
        c = frac;
        q = -149;
    }
    if (q <= 0 && q > -24 && (c & ((1u << -q) - 1)) == 0) {
        s = c >> -q; /* an integer below 2^24: exact, and no shorter decimal is inside the interval */
        k = 0;
    } else {
        ref_shortest_decimal(c, q, bexp > 1 && frac == 0, &s, &k);
    }
    while (s % 10 == 0) {
        s /= 10;
        k++;
    }

    int n = ref_digit_count(s);
    int e = k + n - 1; /* v = d.ddd · 10^e */
    if (e >= -4 && e < 9) {
        /* fixed-size copies and short loops: a libc call per number would cost more than the rest */
        if (k >= 0) { /* integer: digits then k zeros (n + k <= 9) */
            ref_write_digits(p, s, n);
            for (int i = 0; i < k; i++)
                p[n + i] = '0';
            p += n + k;
        } else if (e >= 0) { /* ddd.ddd: digits one to the right, then the integer part back left */
            ref_write_digits(p + 1, s, n);
            for (int i = 0; i <= e; i++)
                p[i] = p[i + 1];
            p[e + 1] = '.';
            p += n + 1;
        } else { /* 0.000ddd with -e-1 <= 3 zeros */
            int zeros = -e - 1;
            memcpy(p, "0.000", 5);
            ref_write_digits(p + 2 + zeros, s, n);
            p += 2 + zeros + n;
        }
    } else {
        ref_write_digits(p + 1, s, n);
        p[0] = p[1];
        if (n > 1) {
            p[1] = '.';
            p += n + 1;
        } else {
            p += 1;
        }
        *p++ = 'e';
        if (e < 0) {
            *p++ = '-';
            e = -e;
        }
        if (e >= 10) {
            memcpy(p, ref_digit_pairs + 2 * e, 2);
            p += 2;
        } else {
            *p++ = (char)('0' + e);
        }
    }
    *p = '\0';
    return (int)(p - buf);
}

#endif
