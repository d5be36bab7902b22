/*
 * fuzz_parse_float.c - srv_parse_float against strtof, differentially.
 *
 * For every input: srv_parse_float must consume exactly the longest prefix that is a JSON number
 * (-?(0|[1-9][0-9]*)(.[0-9]+)?([eE][+-]?[0-9]+)?, or 0 bytes when a '.'/'e' is not followed by a
 * digit), and the float it gives must be bit for bit what strtof gives for that prefix (the C
 * locale), overflow flagged exactly when strtof returns an infinity.
 * Random bytes seldom spell the hard cases, so every input of 6 bytes or more is also read as a
 * float32 f and a digit count: the midpoint between f and the next float32 (where double rounding
 * goes wrong) is written with 9-20 significant digits, nudged by a few units in the last place,
 * and parsed both ways.
 */
#include <float.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "codec/float_parse.h"

/* The reference grammar: length of the JSON number at [p, end), 0 when there is none (including
 * "1." and "1e" which srv_parse_float refuses whole). */
static size_t json_number_len(const char *p, const char *end)
{
    const char *s = p;
    if (p < end && *p == '-')
        p++;
    if (p >= end || *p < '0' || *p > '9')
        return 0;
    if (*p == '0')
        p++;
    else
        while (p < end && *p >= '0' && *p <= '9')
            p++;
    if (p < end && *p == '.') {
        p++;
        if (p >= end || *p < '0' || *p > '9')
            return 0;
        while (p < end && *p >= '0' && *p <= '9')
            p++;
    }
    if (p < end && (*p == 'e' || *p == 'E')) {
        p++;
        if (p < end && (*p == '+' || *p == '-'))
            p++;
        if (p >= end || *p < '0' || *p > '9')
            return 0;
        while (p < end && *p >= '0' && *p <= '9')
            p++;
    }
    return (size_t)(p - s);
}

static void check(const char *buf, size_t size);

/* The near-midpoint text described above. */
static void check_midpoint(const uint8_t *data)
{
    float f;
    memcpy(&f, data, 4);
    f = fabsf(f);
    if (!isfinite(f) || f == FLT_MAX)
        return;
    double m = ((double)f + (double)nextafterf(f, INFINITY)) / 2; /* exact in a double */
    int digits = 9 + data[4] % 12;
    char s[64];
    int n = snprintf(s, sizeof s, "%s%.*e", data[5] & 1 ? "-" : "", digits - 1, m);
    /* nudge the last mantissa digit by -2..+2 (no carry: skip when it would need one) */
    char *e = strchr(s, 'e');
    int nudge = (int)((data[5] >> 1) % 5) - 2;
    int last = e[-1] - '0' + nudge;
    if (last >= 0 && last <= 9)
        e[-1] = (char)('0' + last);
    check(s, (size_t)n);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size >= 6)
        check_midpoint(data);
    check((const char *)data, size);
    return 0;
}

static void check(const char *data, size_t size)
{
    /* an exact-size heap copy, so ASan sees any read past the end */
    char *buf = malloc(size ? size : 1);
    if (!buf)
        return;
    memcpy(buf, data, size);
    float f = 12345.0f;
    bool ovf = false;
    size_t n = srv_parse_float(buf, buf + size, &f, &ovf);
    size_t want = json_number_len(buf, buf + size);
    if (n != want) {
        fprintf(stderr, "consumed %zu bytes, the JSON grammar says %zu\n", n, want);
        abort();
    }
    if (n > 0) {
        char *s = malloc(n + 1);
        memcpy(s, buf, n);
        s[n] = '\0';
        char *e;
        float g = strtof(s, &e);
        if ((size_t)(e - s) != n) {
            fprintf(stderr, "strtof consumed %zu of %zu bytes of \"%s\"\n", (size_t)(e - s), n, s);
            abort();
        }
        uint32_t fb, gb;
        memcpy(&fb, &f, 4);
        memcpy(&gb, &g, 4);
        if (fb != gb) {
            fprintf(stderr, "\"%.200s\": srv_parse_float %a (0x%08x), strtof %a (0x%08x)\n", s, f,
                    fb, g, gb);
            abort();
        }
        if (ovf != (isinf(g) != 0)) {
            fprintf(stderr, "\"%.200s\": overflow flag %d but strtof gives %a\n", s, ovf, g);
            abort();
        }
        free(s);
    }
    free(buf);
}
