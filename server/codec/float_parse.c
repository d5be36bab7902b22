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
 * Most numbers a client sends are short ("-1.265422"), with m <= 2^24 and a power within ±10: both
 * are exact float32s, so one float32 division or multiply is already correctly rounded (no midpoint
 * to check). Digit runs are read eight bytes at a time (SWAR: find the run's end with bit tricks,
 * convert up to eight digits with three multiplies), only where at least eight bytes remain before
 * `end` (nothing is read past it; the buffer needs no padding). Numbers with more than 19 digits
 * take the byte-by-byte reader (parse_slow).
 * The grammar is JSON's, strictly: -?(0|[1-9][0-9]*)(.[0-9]+)?([eE][+-]?[0-9]+)?
 */
#include <errno.h>
#include <locale.h>
#include <math.h>
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "float_parse.h"

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

/* strtof's answer for the number's text [start, start+n) into *out; *overflow when out of range. */
static size_t strtof_tail(const char *start, size_t n, float *out, bool *overflow)
{
    int erange;
    float f = strtof_c(start, n, &erange);
    if (isinf(f))
        *overflow = true;
    *out = f;
    return n;
}

static size_t finish(uint64_t m, int exp10, bool neg, const char *start, size_t n, float *out,
                     bool *overflow);

/* The whole grammar byte by byte, for numbers with more than 19 digits (srv_parse_float's contract). */
static size_t parse_slow(const char *p, const char *end, float *out, bool *overflow)
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
    if (!dropped) /* m holds every nonzero digit: the exact shortcuts may apply */
        return finish(m, exp10, neg, start, n, out, overflow);
    return strtof_tail(start, n, out, overflow);
}

#define ONES 0x0101010101010101ULL
#define HIGHS 0x8080808080808080ULL

static const uint64_t pow10_u64[9] = {1, 10, 100, 1000, 10000, 100000, 1000000, 10000000, 100000000};
static const float exact_pow10f[11] = {1e0f, 1e1f, 1e2f, 1e3f, 1e4f, 1e5f, 1e6f, 1e7f, 1e8f, 1e9f, 1e10f};

/* Eight bytes of text at p (the caller checked that they are there) with '0'-'9' turned into 0-9. */
static inline uint64_t load8_digits(const char *p)
{
    uint64_t x;
    memcpy(&x, p, 8);
    return x ^ ONES * '0';
}

/* How many of the eight bytes of x (from load8_digits) start the text with digits (0-8). A byte is
 * not a digit when it is > 9: adding 0x76 sets its high bit, or it has it already. A carry out of a
 * non-digit byte can only flag bytes after it, and only the first flagged byte counts. */
static inline int digit_count(uint64_t x)
{
    uint64_t nondigit = ((x + ONES * 0x76) | x) & HIGHS;
    return nondigit ? __builtin_ctzll(nondigit) >> 3 : 8;
}

/* The value of the first k (1-8) digits of x (from load8_digits). */
static inline uint32_t digits_value(uint64_t x, int k)
{
    x <<= 8 * (8 - k); /* the k digits to the top, zeros (leading zeros of the number) below */
    x = x * 10 + (x >> 8); /* each 16-bit lane's low byte is 10*d0 + d1 */
    x = ((x & 0x000000FF000000FFULL) * (100 + (1000000ULL << 32)) +
         ((x >> 16 & 0x000000FF000000FFULL) * (1 + (10000ULL << 32)))) >> 32;
    return (uint32_t)x;
}

/* Reads the digit run at p into *m (m = m*10^k + run), counting digits in *nd; returns the position
 * after the run, or NULL when *nd would pass 19 (m could overflow: parse_slow takes over). */
static const char *digit_run(const char *p, const char *end, uint64_t *m, int *nd)
{
    while (end - p >= 8) {
        uint64_t x = load8_digits(p);
        int k = digit_count(x);
        if (k == 0)
            return p;
        if (*nd + k > 19)
            return NULL;
        *m = *m * pow10_u64[k] + digits_value(x, k);
        *nd += k;
        p += k;
        if (k < 8)
            return p;
    }
    for (; p < end && (unsigned)(*p - '0') <= 9; p++) {
        if (*nd >= 19)
            return NULL;
        *m = *m * 10 + (uint64_t)(*p - '0');
        (*nd)++;
    }
    return p;
}

/* m·10^exp10, negated when neg, correctly rounded to float32 into *out; [start, start+n) is the
 * number's text, for strtof when the exact shortcuts do not apply. Returns n. */
__attribute__((noinline)) static size_t finish(uint64_t m, int exp10, bool neg, const char *start, size_t n, float *out,
                     bool *overflow)
{
    if (m == 0) { /* zero, whatever the exponent */
        *out = neg ? -0.0f : 0.0f;
        return n;
    }
    if (m <= (1u << 24) && exp10 >= -10 && exp10 <= 10) {
        /* m and 10^|exp10| are exact float32s: one IEEE operation rounds correctly */
        float f = (float)m;
        f = exp10 < 0 ? f / exact_pow10f[-exp10] : f * exact_pow10f[exp10];
        *out = neg ? -f : f;
        return n;
    }
    if (m <= (1ULL << 53) && exp10 >= -22 && exp10 <= 22) {
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
    return strtof_tail(start, n, out, overflow);
}

/* The whole grammar, digit runs eight bytes at a time; more than 19 digits go to parse_slow. */
__attribute__((noinline)) static size_t parse_general(const char *p, const char *end, float *out, bool *overflow)
{
    const char *start = p;
    bool neg = false;
    if (p < end && *p == '-') {
        neg = true;
        p++;
    }
    if (p >= end || (unsigned)(*p - '0') > 9)
        return 0;
    uint64_t m = 0;
    int nd = 0; /* digits in m, leading zeros included (a bound on m: m < 10^nd) */
    int exp10 = 0;
    if (*p == '0') {
        p++;
    } else {
        p = digit_run(p, end, &m, &nd);
        if (!p)
            return parse_slow(start, end, out, overflow);
    }
    if (p < end && *p == '.') {
        p++;
        if (p >= end || (unsigned)(*p - '0') > 9)
            return 0;
        const char *frac = p;
        p = digit_run(p, end, &m, &nd);
        if (!p)
            return parse_slow(start, end, out, overflow);
        exp10 = -(int)(p - frac);
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
        for (; p < end && (unsigned)(*p - '0') <= 9; p++)
            if (e < 100000) /* far beyond any float; keeps the sum from overflowing */
                e = e * 10 + (*p - '0');
        exp10 += eneg ? -e : e;
    }
    return finish(m, exp10, neg, start, (size_t)(p - start), out, overflow);
}

size_t srv_parse_float(const char *p, const char *end, float *out, bool *overflow)
{
    *overflow = false;
    bool neg = p < end && *p == '-';
    const char *q = p + neg;
    /* The usual number, [-]d.ddd: integer part and fraction of 1-7 digits each, one load each, when
     * 16 bytes of text remain (so both loads stay inside it). Anything else: parse_general. */
    if (end - q >= 16 && (unsigned)(*q - '0') <= 9) {
        uint64_t x = load8_digits(q);
        int k = *q == '0' ? 1 : digit_count(x); /* "0" stands alone: "01" is not a number */
        if (k < 8 && q[k] == '.') {
            const char *f = q + k + 1;
            uint64_t y = load8_digits(f);
            int k2 = digit_count(y);
            if (k2 > 0 && k2 < 8 && f[k2] != 'e' && f[k2] != 'E') {
                uint64_t m = (uint64_t)digits_value(x, k) * pow10_u64[k2] + digits_value(y, k2);
                size_t n = (size_t)(f + k2 - p);
                if (m == 0 || m > (1u << 24)) /* -0, or more than float32's exact integers */
                    return finish(m, -k2, neg, p, n, out, overflow);
                /* the sign without a branch (it is random in real data): ±m is exact too */
                int32_t sm = ((int32_t)m ^ -(int32_t)neg) + (int32_t)neg;
                *out = (float)sm / exact_pow10f[k2]; /* both exact: rounded correctly */
                return n;
            }
        }
    }
    return parse_general(p, end, out, overflow);
}

bool srv_floats_any_special(const void *p, size_t count)
{
    const uint8_t *b = p;
    uint32_t special = 0;
    size_t i = 0;
    for (; i + 8 <= count; i += 8) {
        uint32_t u[8];
        memcpy(u, b + 4 * i, sizeof u);
        for (int k = 0; k < 8; k++)
            special |= (u[k] & 0x7F800000u) == 0x7F800000u; /* exponent all ones */
    }
    for (; i < count; i++) {
        uint32_t u;
        memcpy(&u, b + 4 * i, sizeof u);
        special |= (u & 0x7F800000u) == 0x7F800000u;
    }
    return special != 0;
}
