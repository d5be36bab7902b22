/*
 * fuzz_format_float.c - srv_format_float: round trip, length, and shortness.
 *
 * Input: 4 bytes, a float32 bit pattern (non-finite ones are skipped: the contract excludes them).
 * The text must read back (strtof) as exactly the same bits, be at most 15 chars, read back through
 * srv_parse_float too, and have no more significant digits than the shortest round-trip form
 * (found by trying the correctly rounded p-digit decimal, and its two neighbours, for each p).
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "codec/float_format.h"
#include "codec/float_parse.h"

static bool reads_back(const char *s, float f)
{
    float g = strtof(s, NULL);
    return memcmp(&f, &g, 4) == 0;
}

/* True when some decimal with p significant digits reads back as f: the correctly rounded one or a
 * neighbour one unit in the last place away (the round-trip interval is not always centred on f). */
static bool p_digits_suffice(float f, int p)
{
    char s[64];
    snprintf(s, sizeof s, "%.*e", p - 1, (double)f);
    if (reads_back(s, f))
        return true;
    /* split "d.ddde±x" into digits and exponent, then try +-1 in the last digit */
    char *e = strchr(s, 'e');
    int ex = atoi(e + 1);
    char digits[32];
    int nd = 0;
    for (char *q = s; q < e; q++)
        if (*q >= '0' && *q <= '9')
            digits[nd++] = *q;
    digits[nd] = '\0';
    long long m = atoll(digits);
    for (int d = -1; d <= 1; d += 2) {
        long long mm = m + d;
        if (mm <= 0)
            continue;
        char t[64];
        snprintf(t, sizeof t, "%s%llde%d", signbit(f) ? "-" : "", mm, ex - (p - 1));
        if (reads_back(t, f))
            return true;
    }
    return false;
}

/* Significant digits of a srv_format_float text. */
static int sig_digits(const char *s)
{
    char d[32];
    int n = 0;
    for (const char *q = s; *q && *q != 'e'; q++)
        if (*q >= '0' && *q <= '9' && n < 31)
            d[n++] = *q;
    d[n] = '\0';
    int a = 0;
    while (a < n && d[a] == '0')
        a++;
    int b = n;
    while (b > a && d[b - 1] == '0')
        b--;
    return b > a ? b - a : 1;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 4)
        return 0;
    float f;
    memcpy(&f, data, 4);
    if (!isfinite(f))
        return 0;
    char buf[16];
    memset(buf, 'X', sizeof buf);
    int n = srv_format_float(buf, f);
    if (n <= 0 || n > 15 || (size_t)n != strnlen(buf, 16)) {
        fprintf(stderr, "%a: returned %d, text \"%.16s\"\n", f, n, buf);
        abort();
    }
    if (!reads_back(buf, f)) {
        fprintf(stderr, "%a formats as \"%s\", which reads back as %a\n", f, buf,
                strtof(buf, NULL));
        abort();
    }
    float g;
    bool ovf;
    if (srv_parse_float(buf, buf + n, &g, &ovf) != (size_t)n || memcmp(&f, &g, 4) != 0) {
        fprintf(stderr, "%a formats as \"%s\", which srv_parse_float does not read back\n", f, buf);
        abort();
    }
    int sd = sig_digits(buf);
    for (int p = 1; p < sd; p++)
        if (p_digits_suffice(f, p)) {
            fprintf(stderr, "%a formats as \"%s\" (%d digits) but %d digits suffice\n", f, buf, sd, p);
            abort();
        }
    return 0;
}
