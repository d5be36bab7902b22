/*
 * test_float_parse.c - srv_parse_float where its word-at-a-time reading could go wrong: numbers
 * whose digit runs straddle the 8-byte loads, numbers that end at the end of the text (held in heap
 * buffers of exactly that size, so ASan sees any read past it), every split of integer and fraction
 * digits around the fast path's limits (7 + 7 digits, 2^24, 19 digits), and the bytes next to '0'
 * and '9' after a number. Every result is checked against strtof (bits, length, overflow).
 * test_float_format.c holds the grammar and near-midpoint cases.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "codec/float_parse.h"
#include "float_check.h"

static uint64_t rng_state = 0x2545F4914F6CDD1DULL;
static uint64_t rng(void)
{
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return rng_state;
}

static int fails;

/* Parses number (a JSON number, NUL-terminated) placed at the start of a heap buffer of exactly
 * strlen(number) + strlen(tail) bytes, and checks it against strtof. */
static void check_in_buffer(const char *number, const char *tail)
{
    size_t nl = strlen(number), tl = strlen(tail);
    char *buf = malloc(nl + tl + 1); /* +1 only so that malloc(0) is never asked */
    if (!buf)
        return;
    memcpy(buf, number, nl);
    memcpy(buf + nl, tail, tl);
    float got = 0;
    bool ovf = false;
    size_t n = srv_parse_float(buf, buf + nl + tl, &got, &ovf);
    free(buf);
    float want = strtof(number, NULL);
    bool ok = n == nl && fc_bits(got) == fc_bits(want) && ovf == (bool)isinf(want);
    if (!ok && fails++ < 10)
        CHECK(0, "\"%s\" + \"%s\": consumed %zu of %zu, got %.9g (0x%08x) overflow=%d, strtof %.9g (0x%08x)",
              number, tail, n, nl, (double)got, fc_bits(got), ovf, (double)want, fc_bits(want));
}

/* Random digits: d[0..n) with the first nonzero when lead is set. */
static void digits(char *d, int n, bool lead)
{
    for (int i = 0; i < n; i++)
        d[i] = (char)('0' + rng() % 10);
    if (lead && n > 0 && d[0] == '0')
        d[0] = (char)('1' + rng() % 9);
}

/* Every integer/fraction split up to 24 digits, with and without sign and exponent, followed by
 * every tail length from 0 (the number ends the text) to 20 (both loads of the fast path fit). */
static void test_boundaries(void)
{
    static const char *tails[] = {"", ",", "]", " ", "]]", ", 1", ",1.5]", "]]]]]]]", ",-0.25, 3]",
                                  ", 0.123456, -1.5]]", "                    "};
    char num[96];
    for (int ip = 1; ip <= 24; ip++) {
        for (int fp = 0; fp <= 24; fp++) {
            for (int variant = 0; variant < 6; variant++) {
                char *o = num;
                if (variant & 1)
                    *o++ = '-';
                if (variant >= 4 && ip == 1) {
                    *o++ = '0'; /* "0.xxx", the usual small number */
                } else {
                    digits(o, ip, true);
                    o += ip;
                }
                if (fp) {
                    *o++ = '.';
                    digits(o, fp, false);
                    o += fp;
                }
                if (variant == 2 || variant == 3)
                    o += sprintf(o, "e%s%d", rng() & 1 ? "-" : "", (int)(rng() % 45));
                *o = '\0';
                for (size_t t = 0; t < sizeof tails / sizeof tails[0]; t++)
                    check_in_buffer(num, tails[t]);
            }
        }
    }
}

static void test_special(void)
{
    static const char *nums[] = {
        "0", "-0", "0.0", "-0.0", "0.0000000", "-0.0000000", "0.5", "-0.5", "0.1", "0.12573", "-1.265422",
        "9.9999999", "1.6777216", "16.777217", "1677.7217", "1677.7218", "16777216.1", "3355443.3",
        "0.0000001", "0.00000001", "1234567.1234567", "9999999.9999999", "12345678.1", "1.12345678",
        "1234567890123456789", "12345678901234567890", "0.1234567890123456789", "0.12345678901234567890",
        "1.000000000000000000001", "0.0000000000000000000000001", "99999999999999999999e-20",
        "16777217", "16777216.5", "1.00000005960464477539062", "0.30000001192092896", "3.4028235e38",
        "1e-45", "7e-46", "1.1754942e-38", "1e39",
    };
    static const char *tails[] = {"", ",", "/", ":", "\x80", "\xff", "e", "E+", ".", "0"};
    for (size_t i = 0; i < sizeof nums / sizeof nums[0]; i++)
        for (size_t t = 0; t < sizeof tails / sizeof tails[0]; t++) {
            /* a digit, '.', or 'e' after the number continues it: only tails that end it here */
            if ((tails[t][0] == '0' || tails[t][0] == '.' || tails[t][0] == 'e' || tails[t][0] == 'E'))
                continue;
            check_in_buffer(nums[i], tails[t]);
            char padded[64];
            snprintf(padded, sizeof padded, "%s%s", tails[t], ", 1.0, 2.0, 3.0, 4.0");
            check_in_buffer(nums[i], padded);
        }

    /* not numbers, or numbers that stop early, at the end of the text and with room after them */
    static const struct {
        const char *s;
        size_t n;
    } gram[] = {
        {"1.", 0},   {"-1.", 0},  {"1.e5", 0}, {"1e", 0},    {"1e+", 0}, {"-", 0},   {"01", 1},
        {"-01", 2},  {"00.5", 1}, {"0.5.1", 3}, {"1.5e", 0}, {"1.5e-", 0}, {".5", 0}, {"1.x", 0},
        {"12345678.", 0}, {"1234567.e1", 0}, {"1234567.1234567e", 0},
    };
    for (size_t i = 0; i < sizeof gram / sizeof gram[0]; i++) {
        for (int room = 0; room < 2; room++) {
            size_t len = strlen(gram[i].s);
            size_t cap = len + (room ? 20 : 0);
            char *buf = malloc(cap + 1);
            if (!buf)
                return;
            memcpy(buf, gram[i].s, len);
            memset(buf + len, ' ', cap - len);
            float f;
            bool ovf;
            size_t n = srv_parse_float(buf, buf + cap, &f, &ovf);
            CHECK(n == gram[i].n, "\"%s\"%s consumes %zu, want %zu", gram[i].s, room ? " + spaces" : "", n,
                  gram[i].n);
            free(buf);
        }
    }
}

/* Numbers as clients print them (6 decimals, shortest float32, integers), random positions. */
static void test_random(void)
{
    char num[64];
    for (int i = 0; i < 200000; i++) {
        uint32_t u = (uint32_t)rng();
        float f;
        memcpy(&f, &u, 4);
        if (!isfinite(f))
            continue;
        switch (i % 4) {
        case 0: snprintf(num, sizeof num, "%.6f", (double)((int32_t)u / 2147483648.0) * (double)(1 << (u % 12))); break;
        case 1: snprintf(num, sizeof num, "%.9g", (double)f); break;
        case 2: snprintf(num, sizeof num, "%.*f", (int)(u % 9), (double)((int32_t)rng() / 65536.0)); break;
        default: snprintf(num, sizeof num, "%.*e", (int)(u % 10), (double)f); break;
        }
        if (strchr(num, 'n'))
            continue; /* "inf", "nan" */
        static const char *tails[] = {"", ",", "]", ", 0.5, 1.5, 2.5, 3.5]"};
        check_in_buffer(num, tails[i % 4]);
    }
}

int main(void)
{
    test_boundaries();
    test_special();
    test_random();
    CHECK(fails == 0, "%d numbers parsed differently from strtof", fails);
    return check_report();
}
