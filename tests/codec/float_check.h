/*
 * float_check.h - the checks shared by tests/codec/test_float_format.c (random samples) and
 * bench/check_float_all.c (all 2^32 patterns): srv_format_float's output reads back bit for bit,
 * and no decimal with fewer significant digits does (brute force with printf's correctly rounded
 * "%.*e" and its neighbours in the last digit).
 */
#ifndef ATTND_FLOAT_CHECK_H
#define ATTND_FLOAT_CHECK_H

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "codec/float_format.h"

static inline uint32_t fc_bits(float f)
{
    uint32_t u;
    memcpy(&u, &f, 4);
    return u;
}

/* Significant digits of a decimal string: mantissa digits without leading or trailing zeros. */
static inline int fc_sig_digits(const char *s)
{
    char d[64];
    int n = 0;
    for (; *s && *s != 'e' && *s != 'E'; s++)
        if (*s >= '0' && *s <= '9' && n < 63)
            d[n++] = *s;
    int a = 0, b = n;
    while (a < b && d[a] == '0')
        a++;
    while (b > a && d[b - 1] == '0')
        b--;
    return b - a;
}

/* Does some decimal with `digits` significant digits read back as f? Tries the correctly rounded
 * one and its neighbours one unit in the last place away. */
static inline int fc_fits_in(float f, int digits)
{
    char s[64];
    snprintf(s, sizeof s, "%.*e", digits - 1, (double)f);
    if (fc_bits(strtof(s, NULL)) == fc_bits(f))
        return 1;
    /* neighbours: d.ddd +- 1 ulp of the decimal */
    char *e = strchr(s, 'e');
    int ex = atoi(e + 1);
    char mant[32];
    int n = 0;
    for (char *p = s; p < e; p++)
        if (*p >= '0' && *p <= '9')
            mant[n++] = *p;
    mant[n] = '\0';
    long long v = atoll(mant);
    for (int dv = -1; dv <= 1; dv += 2) {
        long long w = v + dv;
        if (w <= 0)
            continue;
        char t[64];
        snprintf(t, sizeof t, "%s%llde%d", f < 0 ? "-" : "", w, ex - (digits - 1));
        if (fc_bits(strtof(t, NULL)) == fc_bits(f))
            return 1;
    }
    return 0;
}

/* Checks one finite float; returns 0 when fine, else writes a description into why. */
static inline int fc_check(float f, char *why, size_t whylen)
{
    char out[16]; /* exactly the room the contract promises, so ASan sees any write past it */
    memset(out, 'x', sizeof out);
    int n = srv_format_float(out, f);
    if (n <= 0 || n > 15 || out[n] != '\0') {
        snprintf(why, whylen, "0x%08x: bad length %d", fc_bits(f), n);
        return 1;
    }
    float back = strtof(out, NULL);
    if (fc_bits(back) != fc_bits(f)) {
        snprintf(why, whylen, "0x%08x (%.9g): \"%s\" reads back as %.9g", fc_bits(f), (double)f, out,
                 (double)back);
        return 1;
    }
    int got = fc_sig_digits(out);
    if (f != 0 && got > 1 && fc_fits_in(f, got - 1)) {
        snprintf(why, whylen, "0x%08x (%.9g): \"%s\" has %d digits, %d would do", fc_bits(f),
                 (double)f, out, got, got - 1);
        return 1;
    }
    /* when printf's correctly rounded value of that length reads back, ours is the same value
     * (the closest of the shortest) */
    char ref[64];
    snprintf(ref, sizeof ref, "%.*e", got > 0 ? got - 1 : 0, (double)f);
    if (f != 0 && fc_bits(strtof(ref, NULL)) == fc_bits(f) && strtod(ref, NULL) != strtod(out, NULL)) {
        snprintf(why, whylen, "0x%08x: \"%s\" is not the closest shortest (\"%s\")", fc_bits(f), out,
                 ref);
        return 1;
    }
    return 0;
}

#endif
