/*
 * test_float_format.c - srv_format_float (shortest float32 decimal) and srv_parse_float (JSON
 * number to correctly rounded float32): edge cases, a million random bit patterns, and random
 * decimal strings compared with strtof; srv_format_floats (the batch writer) against
 * srv_format_float joined by the separator, in a buffer of exactly the room it asks for (so ASan
 * sees any write past it). The check of all 2^32 patterns is bench/check_float_all.c.
 */
#include <float.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "codec/float_format.h"
#include "codec/float_parse.h"
#include "float_check.h"

static uint64_t rng_state = 0x9E3779B97F4A7C15ULL;
static uint64_t rng(void)
{
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return rng_state;
}

static float from_bits(uint32_t u)
{
    float f;
    memcpy(&f, &u, 4);
    return f;
}

static void test_format_style(void)
{
    static const struct {
        float f;
        const char *s;
    } cases[] = {
        {0.0f, "0"},
        {-0.0f, "-0"},
        {1.0f, "1"},
        {-1.0f, "-1"},
        {0.1f, "0.1"},
        {0.5f, "0.5"},
        {123.5f, "123.5"},
        {1e-7f, "1e-7"},
        {0.0001f, "0.0001"},
        {0.00001f, "1e-5"},
        {100000000.0f, "100000000"},
        {1e9f, "1e9"},
        {1.5e10f, "1.5e10"},
        {FLT_MAX, "3.4028235e38"},
        {FLT_MIN, "1.1754944e-38"},
        {-FLT_MIN, "-1.1754944e-38"},
        {1.4e-45f, "1e-45"},
        {16777216.0f, "16777216"},
        {0.3f, "0.3"},
        {2.0f / 3.0f, "0.6666667"},
        {-0.123456f, "-0.123456"},
        {1e38f, "1e38"},
        {33554432.0f, "33554432"},
        {9.999999e-5f, "9.999999e-5"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char buf[16];
        int n = srv_format_float(buf, cases[i].f);
        CHECK(strcmp(buf, cases[i].s) == 0 && n == (int)strlen(cases[i].s), "%.9g -> \"%s\", want \"%s\"",
              (double)cases[i].f, buf, cases[i].s);
    }
}

static void check_one(float f, int *fails)
{
    char why[256];
    if (fc_check(f, why, sizeof why) != 0) {
        if (*fails < 10)
            CHECK(0, "%s", why);
        (*fails)++;
    }
}

static void test_format_roundtrip(void)
{
    int fails = 0;
    /* edge cases: subnormals, powers of 2 and 10, integers, the extremes */
    for (uint32_t u = 1; u < 5000; u++)
        check_one(from_bits(u), &fails);
    for (uint32_t u = 0x007FFFFF - 1000; u < 0x00800000 + 1000; u++)
        check_one(from_bits(u), &fails);
    for (uint32_t u = 0x7F7FFFFF - 1000; u <= 0x7F7FFFFF; u++)
        check_one(from_bits(u), &fails);
    for (int e = -149; e <= 127; e++) {
        float p = ldexpf(1.0f, e);
        check_one(p, &fails);
        check_one(nextafterf(p, 0), &fails);
        check_one(nextafterf(p, INFINITY), &fails);
    }
    for (int e = -45; e <= 38; e++) {
        char s[32];
        snprintf(s, sizeof s, "1e%d", e);
        float p = strtof(s, NULL);
        check_one(p, &fails);
        check_one(nextafterf(p, 0), &fails);
        check_one(nextafterf(p, INFINITY), &fails);
    }
    for (int i = -100000; i <= 100000; i++)
        check_one((float)i, &fails);
    for (int i = 0; i < 10000; i++)
        check_one((float)(16777216 - i), &fails);
    /* a million random bit patterns */
    int tried = 0;
    while (tried < 1000000) {
        float f = from_bits((uint32_t)rng());
        if (!isfinite(f))
            continue;
        check_one(f, &fails);
        tried++;
    }
    CHECK(fails == 0, "%d floats formatted wrong or not shortest", fails);
}

/* srv_parse_float against strtof on one string that is a JSON number. */
/* What srv_format_floats must write for x [n]: the single texts (strings for non-finite values)
 * joined by sep. */
static size_t joined(char *out, const float *x, size_t n, char sep)
{
    size_t len = 0;
    for (size_t i = 0; i < n; i++) {
        if (i > 0)
            out[len++] = sep;
        if (isfinite(x[i])) {
            len += (size_t)srv_format_float(out + len, x[i]);
        } else {
            const char *s = isnan(x[i]) ? "\"nan\"" : x[i] < 0 ? "\"-inf\"" : "\"inf\"";
            memcpy(out + len, s, strlen(s));
            len += strlen(s);
        }
    }
    return len;
}

/* srv_format_floats on x [n] in a heap buffer of exactly SRV_FORMAT_FLOATS_ROOM(n) bytes equals
 * the joined single texts; 0 when fine. */
static int batch_matches(const float *x, size_t n, char sep, const char *what)
{
    char *got = malloc(SRV_FORMAT_FLOATS_ROOM(n));
    char *want = malloc(16 * n + 16);
    size_t gl = srv_format_floats(got, x, n, sep);
    size_t wl = joined(want, x, n, sep);
    int ok = gl == wl && memcmp(got, want, wl) == 0;
    if (!ok) {
        size_t i = 0;
        while (i < gl && i < wl && got[i] == want[i])
            i++;
        size_t from = i > 20 ? i - 20 : 0;
        CHECK(0, "%s: srv_format_floats differs at byte %zu: \"%.40s\" vs \"%.40s\"", what, i,
              got + from, want + from);
    }
    free(got);
    free(want);
    return !ok;
}

static void test_format_batch(void)
{
    CHECK(srv_format_floats(NULL, NULL, 0, ',') == 0, "no numbers, no bytes");
    float one = -0.0f;
    char small[SRV_FORMAT_FLOATS_ROOM(1)];
    size_t n1 = srv_format_floats(small, &one, 1, ',');
    CHECK(n1 == 2 && memcmp(small, "-0", 2) == 0, "-0 alone: %zu bytes", n1);

    /* edge cases, each alone and all in a row */
    float edge[4096];
    size_t ne = 0;
    const float fixed[] = {0.0f, -0.0f, FLT_MIN, -FLT_MIN, FLT_MAX, -FLT_MAX, 1.4e-45f, -1.4e-45f,
                           INFINITY, -INFINITY, NAN, -NAN, 1.0f, -1.0f, 0.1f, 16777216.0f,
                           16777215.0f, 1e9f, 1e-5f, 1e-4f, 9.999999e-5f, 99999990.0f, 1e8f,
                           123456789.0f, 0.000123456789f, 1.17549421e-38f, 3.4028235e38f};
    for (size_t i = 0; i < sizeof fixed / sizeof fixed[0]; i++)
        edge[ne++] = fixed[i];
    for (int e = -45; e <= 38; e++) { /* powers of ten and their neighbours: the layout edges */
        char s[32];
        snprintf(s, sizeof s, "1e%d", e);
        float p = strtof(s, NULL);
        edge[ne++] = p;
        edge[ne++] = -nextafterf(p, 0);
        edge[ne++] = nextafterf(p, INFINITY);
        snprintf(s, sizeof s, "9.999999e%d", e);
        edge[ne++] = strtof(s, NULL);
        snprintf(s, sizeof s, "1.2345678e%d", e);
        edge[ne++] = strtof(s, NULL);
    }
    for (int e = -149; e <= 127; e += 3) /* powers of two (the irregular intervals), subnormals */
        edge[ne++] = ldexpf(1.0f, e);
    for (uint32_t u = 1; u < 200; u += 7)
        edge[ne++] = from_bits(u);
    for (int i = 0; i < 400; i++) /* integers up to 2^24, some with trailing zeros */
        edge[ne++] = (float)((i % 4 == 0) ? (int)(rng() % 1000) * 1000 : (int)(rng() % 16777217));
    int fails = 0;
    for (size_t i = 0; i < ne; i++)
        fails += batch_matches(&edge[i], 1, ',', "one edge case");
    fails += batch_matches(edge, ne, ',', "the edge cases in a row");
    fails += batch_matches(edge, ne, ' ', "the edge cases, separator ' '");

    /* random bit patterns (non-finite ones too) and realistic values, in rows of random length */
    float *row = malloc(5000 * sizeof(float));
    for (int r = 0; r < 300 && fails < 5; r++) {
        size_t n = (size_t)(rng() % 5000) + 1;
        for (size_t i = 0; i < n; i++) {
            switch (r % 3) {
            case 0: row[i] = from_bits((uint32_t)rng()); break;
            case 1: row[i] = (float)((double)(rng() >> 11) / 9007199254740992.0); break;
            default: row[i] = (float)((double)(int64_t)rng() / 9.2e19); break;
            }
        }
        fails += batch_matches(row, n, ',', "a random row");
    }
    free(row);
    CHECK(fails == 0, "%d batches differ", fails);
}

static void parse_vs_strtof(const char *s, int *fails)
{
    float got = 0;
    bool ovf = false;
    size_t n = srv_parse_float(s, s + strlen(s), &got, &ovf);
    float want = strtof(s, NULL);
    bool ok = n == strlen(s) && fc_bits(got) == fc_bits(want) && ovf == (bool)isinf(want);
    if (!ok) {
        if (*fails < 10)
            CHECK(0, "parse \"%s\": consumed %zu, got %.9g (0x%08x) overflow=%d, strtof %.9g (0x%08x)", s,
                  n, (double)got, fc_bits(got), ovf, (double)want, fc_bits(want));
        (*fails)++;
    }
}

static void test_parse(void)
{
    int fails = 0;
    static const char *good[] = {
        "0", "-0", "1", "-1", "0.1", "1e-7", "1E+7", "1e39", "-1e39", "3.4028235e38", "3.4028236e38",
        "3.40282357e38", "3.4028234664e38", "3.4028235677973366e38", "1e-45", "7e-46", "1e-46",
        "1.1754942e-38", "0.000000000000000000000000000000000000000000001", "123456789012345678901234567890",
        "0.1000000000000000000000000000000001", "16777217", "16777217.000000000001", "33554435",
        "1e-999999999999", "1e999999999999", "0e99999", "-0.0e-5", "0.30000001192092896",
        "4.7019774e-38", "2.5e-45", "1.00000005960464477539062", "1.000000059604644775390625",
        "1.0000000596046447753906250000000001", "9007199254740993", "9007199254740992e-22",
    };
    for (size_t i = 0; i < sizeof good / sizeof good[0]; i++)
        parse_vs_strtof(good[i], &fails);
    /* long tokens take the heap copy in the fallback */
    char longnum[1200];
    snprintf(longnum, sizeof longnum, "0.%0900d1", 0);
    parse_vs_strtof(longnum, &fails);
    memset(longnum, '7', 1000);
    longnum[1000] = '\0';
    parse_vs_strtof(longnum, &fails); /* 7777...7 (1000 digits): overflow */
    snprintf(longnum, sizeof longnum, "1.%0500de-500", 0);
    parse_vs_strtof(longnum, &fails);

    /* the grammar: what is not a JSON number consumes nothing or stops early */
    static const struct {
        const char *s;
        size_t n;
    } gram[] = {
        {"01", 1},  {"-", 0},    {"+1", 0},   {".5", 0},     {"1.", 0},     {"1.e5", 0},
        {"1e", 0},  {"1e+", 0},  {"0x10", 1}, {"NaN", 0},    {"Infinity", 0}, {"-Infinity", 0},
        {"1.5.3", 3}, {"- 1", 0}, {"00", 1},  {"1e5x", 3},   {"", 0},       {"-01", 2},
    };
    for (size_t i = 0; i < sizeof gram / sizeof gram[0]; i++) {
        float f;
        bool ovf;
        size_t n = srv_parse_float(gram[i].s, gram[i].s + strlen(gram[i].s), &f, &ovf);
        CHECK(n == gram[i].n, "\"%s\" consumes %zu, want %zu", gram[i].s, n, gram[i].n);
    }

    /* random floats printed in many ways, and random near-midpoint decimals */
    char s[96];
    for (int i = 0; i < 300000; i++) {
        uint32_t u = (uint32_t)rng();
        float f = from_bits(u);
        if (!isfinite(f))
            continue;
        int prec = (int)(rng() % 12);
        switch (i % 5) {
        case 0: snprintf(s, sizeof s, "%.*e", prec, (double)f); break;
        case 1: snprintf(s, sizeof s, "%.*f", prec, (double)(f / 1e30f)); break;
        case 2: { /* the exact midpoint between f and its neighbour, and a hair either side */
            double mid = ((double)f + (double)nextafterf(f, INFINITY)) / 2;
            snprintf(s, sizeof s, "%.*e", 8 + (int)(rng() % 40), mid);
            break;
        }
        case 3: snprintf(s, sizeof s, "%.6f", (double)((float)(int32_t)rng() / 2147483648.0f)); break;
        default: snprintf(s, sizeof s, "%lld", (long long)(rng() >> (rng() % 64))); break;
        }
        /* printf writes "inf", "+" is never produced by these formats, "e+07" is valid JSON */
        if (strchr(s, 'n'))
            continue;
        parse_vs_strtof(s, &fails);
    }
    CHECK(fails == 0, "%d numbers parsed differently from strtof", fails);
}

int main(void)
{
    test_format_style();
    test_format_roundtrip();
    test_format_batch();
    test_parse();
    return check_report();
}
