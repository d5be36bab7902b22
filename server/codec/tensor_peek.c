/*
 * tensor_peek.c - the shape a tensor in the flat or base64 form declares, read without its data
 * (see tensor.h): so that a request can be judged by its shapes (what a pass would cost) before
 * megabytes of numbers are decoded.
 *
 * Only a look: it validates nothing it skips (the data, other members), and anything it does not
 * expect makes it answer "does not say"; srv_tensor_parse reads the same text strictly later and
 * says what is wrong with it. Skipping is cheap: strings by memchr, arrays by a walk that only
 * follows brackets and quotes.
 */
#include "tensor.h"

#include <stddef.h>
#include <string.h>

static const char *skip_ws(const char *p, const char *end)
{
    while (p < end && (*p == ' ' || *p == '\t' || *p == '\n' || *p == '\r'))
        p++;
    return p;
}

/* After the string whose opening quote is at p, or NULL when it does not end. */
static const char *skip_string(const char *p, const char *end)
{
    for (p++; p < end;) {
        const char *q = memchr(p, '"', (size_t)(end - p));
        if (!q)
            return NULL;
        size_t slashes = 0;
        while (q - slashes > p && q[-1 - (ptrdiff_t)slashes] == '\\')
            slashes++;
        if (slashes % 2 == 0)
            return q + 1;
        p = q + 1; /* an escaped quote */
    }
    return NULL;
}

/* Bytes the walk over an array or object stops at: quotes and brackets. */
static const unsigned char stop[256] = {['"'] = 1, ['['] = 1, [']'] = 1, ['{'] = 1, ['}'] = 1};

/* After the value at p (a string, an array or object, or a number or literal), or NULL. */
static const char *skip_value(const char *p, const char *end)
{
    if (p >= end)
        return NULL;
    if (*p == '"')
        return skip_string(p, end);
    if (*p != '[' && *p != '{') {
        while (p < end && *p != ',' && *p != '}' && *p != ']')
            p++;
        return p;
    }
    size_t depth = 0;
    while (p < end) {
        while (p < end && !stop[(unsigned char)*p])
            p++;
        if (p >= end)
            return NULL;
        if (*p == '"') {
            if (!(p = skip_string(p, end)))
                return NULL;
            continue;
        }
        if (*p == '[' || *p == '{')
            depth++;
        else if (--depth == 0)
            return p + 1;
        p++;
    }
    return NULL;
}

/* Reads "shape": [n, ...] at p (after the colon): non-negative integers, at most
 * SRV_TENSOR_MAX_DIMS of them. */
static bool read_shape(const char *p, const char *end, int64_t shape[SRV_TENSOR_MAX_DIMS], int *ndim)
{
    p = skip_ws(p, end);
    if (p >= end || *p != '[')
        return false;
    p = skip_ws(p + 1, end);
    *ndim = 0;
    if (p < end && *p == ']')
        return true;
    for (;;) {
        int64_t v = 0;
        const char *d = p;
        while (p < end && *p >= '0' && *p <= '9') {
            if (v > (INT64_MAX - 9) / 10)
                return false;
            v = v * 10 + (*p++ - '0');
        }
        if (p == d || *ndim == SRV_TENSOR_MAX_DIMS)
            return false;
        shape[(*ndim)++] = v;
        p = skip_ws(p, end);
        if (p < end && *p == ']')
            return true;
        if (p >= end || *p != ',')
            return false;
        p = skip_ws(p + 1, end);
    }
}

bool srv_tensor_peek_shape(const char *json, size_t len, int64_t shape[SRV_TENSOR_MAX_DIMS],
                           int *ndim)
{
    const char *end = json + len, *p = skip_ws(json, end);
    if (p >= end || *p != '{')
        return false; /* the nested form, or not a tensor */
    p = skip_ws(p + 1, end);
    while (p < end && *p == '"') {
        const char *k = p + 1, *ke = skip_string(p, end);
        if (!ke)
            return false;
        bool is_shape = ke - k == 6 && memcmp(k, "shape\"", 6) == 0;
        p = skip_ws(ke, end);
        if (p >= end || *p != ':')
            return false;
        p = skip_ws(p + 1, end);
        if (is_shape)
            return read_shape(p, end, shape, ndim);
        p = skip_value(p, end);
        if (!p)
            return false;
        p = skip_ws(p, end);
        if (p >= end || *p != ',')
            return false;
        p = skip_ws(p + 1, end);
    }
    return false;
}
