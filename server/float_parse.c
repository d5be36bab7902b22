/*
 * float_parse.c - srv_parse_float: one JSON number, correctly rounded to float32 as strtof would.
 *
 * A hot path: a 30 MB request body is three million numbers, and strtof alone (which also needs a
 * NUL-terminated copy and a locale) runs at ~60 MB/s. The fast path reads the digits into a 64-bit
 * mantissa m and a power of ten; when m <= 2^53 and the power is within ±22, m and 10^|p| are exact
 * doubles, so one IEEE multiply or divide gives x correctly rounded to double. Rounding that double
 * to float32 gives the correctly rounded float32 of x unless the double landed exactly on a float32
 * midpoint (double rounding); then, and for every other case (more than 19 significant digits, large
 * exponents, subnormals), strtof_l in the C locale on a NUL-terminated copy decides.
 * The grammar is JSON's, strictly: -?(0|[1-9][0-9]*)(.[0-9]+)?([eE][+-]?[0-9]+)?
 */
#include <errno.h>
#include <locale.h>
#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "tensor.h"

static locale_t c_locale;
static pthread_once_t c_locale_once = PTHREAD_ONCE_INIT;

static void c_locale_init(void)
{
    c_locale = newlocale(LC_ALL_MASK, "C", (locale_t)0);
}

/* strtof of text [p, p+n) in the C locale, whatever the process locale is. */
static float strtof_c(const char *p, size_t n, int *erange)
{
    char small[64];
    char *s = n < sizeof small ? small : malloc(n + 1);
    if (!s) { /* cannot copy: a very long number and no memory; let the caller see an overflow */
        *erange = 1;
        return INFINITY;
    }
    memcpy(s, p, n);
    s[n] = '\0';
    pthread_once(&c_locale_once, c_locale_init);
    errno = 0;
    float f = c_locale ? strtof_l(s, NULL, c_locale) : strtof(s, NULL);
    *erange = errno == ERANGE;
    if (s != small)
        free(s);
    return f;
}

static const double exact_pow10[23] = {1e0,  1e1,  1e2,  1e3,  1e4,  1e5,  1e6,  1e7,
                                       1e8,  1e9,  1e10, 1e11, 1e12, 1e13, 1e14, 1e15,
                                       1e16, 1e17, 1e18, 1e19, 1e20, 1e21, 1e22};

size_t srv_parse_float(const char *p, const char *end, float *out, bool *overflow)
{
    const char *start = p;
    bool neg = false;
    *overflow = false;
    if (p < end && *p == '-') {
        neg = true;
        p++;
    }
    if (p >= end || (unsigned)(*p - '0') > 9)
        return 0;

    uint64_t m = 0;
    int sig = 0;     /* significant digits taken into m (leading zeros not counted)    */
    int dropped = 0; /* nonzero digits past the 19th: the fast path cannot be used      */
    int exp10 = 0;
    if (*p == '0') {
        p++;
    } else {
        while (p < end && (unsigned)(*p - '0') <= 9) {
            if (sig < 19) {
                m = m * 10 + (uint64_t)(*p - '0');
                sig++;
            } else {
                exp10++;
                dropped |= *p != '0';
            }
            p++;
        }
    }
    if (p < end && *p == '.') {
        p++;
        if (p >= end || (unsigned)(*p - '0') > 9)
            return 0;
        while (p < end && (unsigned)(*p - '0') <= 9) {
            if (sig < 19) {
                m = m * 10 + (uint64_t)(*p - '0');
                sig += m != 0; /* zeros before the first nonzero digit are not significant */
                exp10--;
            } else {
                dropped |= *p != '0';
            }
            p++;
        }
    }
    if (p < end && (*p == 'e' || *p == 'E')) {
        p++;
        bool eneg = false;
        if (p < end && (*p == '+' || *p == '-')) {
            eneg = *p == '-';
            p++;
        }
        if (p >= end || (unsigned)(*p - '0') > 9)
            return 0;
        int e = 0;
        while (p < end && (unsigned)(*p - '0') <= 9) {
            if (e < 100000) /* far beyond any float; keeps the sum from overflowing */
                e = e * 10 + (*p - '0');
            p++;
        }
        exp10 += eneg ? -e : e;
    }
    size_t n = (size_t)(p - start);

    if (m == 0 && !dropped) { /* zero, whatever the exponent */
        *out = neg ? -0.0f : 0.0f;
        return n;
    }
    if (!dropped && m <= (1ULL << 53) && exp10 >= -22 && exp10 <= 22) {
        double d = (double)m;
        d = exp10 < 0 ? d / exact_pow10[-exp10] : d * exact_pow10[exp10];
        /* d is in [1e-22, 2^53·1e22]: float32-normal and finite. Is it a float32 midpoint (the
         * 29 bits below float32 precision exactly 1000...0)? Then double rounding may be wrong. */
        uint64_t bits;
        memcpy(&bits, &d, 8);
        if ((bits & 0x1FFFFFFFu) != 0x10000000u) {
            float f = (float)d;
            *out = neg ? -f : f;
            return n;
        }
    }
    int erange;
    float f = strtof_c(start, n, &erange);
    if (isinf(f))
        *overflow = true;
    *out = f;
    return n;
}
