/*
 * tensor_json.c - tensors out of JSON replies, for the tests (see tensor_json.h).
 */
#include "tensor_json.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char B64[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

static int b64val(char c)
{
    const char *p = strchr(B64, c);
    return c && p ? (int)(p - B64) : -1;
}

static float number(const json_t *v, bool *ok)
{
    if (json_is_number(v))
        return (float)json_number_value(v);
    const char *s = json_string_value(v);
    if (s && !strcmp(s, "-inf"))
        return -INFINITY;
    if (s && !strcmp(s, "inf"))
        return INFINITY;
    if (s && !strcmp(s, "nan"))
        return NAN;
    *ok = false;
    return 0;
}

/* Shape of a nested array (first elements). */
static int nested_shape(const json_t *v, int64_t *shape)
{
    int nd = 0;
    while (json_is_array(v) && nd < 8) {
        shape[nd++] = (int64_t)json_array_size(v);
        if (json_array_size(v) == 0)
            break;
        v = json_array_get(v, 0);
    }
    return nd;
}

static bool fill_nested(const json_t *v, int depth, int nd, const int64_t *shape, float **out)
{
    if (depth == nd) {
        bool ok = true;
        *(*out)++ = number(v, &ok);
        return ok;
    }
    if (!json_is_array(v) || (int64_t)json_array_size(v) != shape[depth])
        return false;
    for (size_t i = 0; i < json_array_size(v); i++)
        if (!fill_nested(json_array_get(v, i), depth + 1, nd, shape, out))
            return false;
    return true;
}

/* A float16's value (IEEE binary16), from its definition. */
static float from_f16(uint16_t h)
{
    int e = (h >> 10) & 31, m = h & 1023;
    float v = e == 0    ? ldexpf((float)m, -24)
              : e == 31 ? (m ? NAN : INFINITY)
                        : ldexpf((float)(m + 1024), e - 25);
    return h & 0x8000 ? -v : v;
}

/* The raw base64 bytes (in t->data) as floats, in place, by t->dtype: little-endian float16,
 * bfloat16 (the top half of a float32) or int32; float32 stays as it is. */
static void widen(tj_tensor *t, const uint8_t *bytes)
{
    if (!strcmp(t->dtype, "int32")) {
        for (int64_t i = 0; i < t->count; i++) {
            int32_t x;
            memcpy(&x, bytes + 4 * i, 4);
            t->data[i] = (float)x;
        }
        return;
    }
    bool bf = !strcmp(t->dtype, "bfloat16");
    if (!bf && strcmp(t->dtype, "float16"))
        return;
    for (int64_t i = t->count - 1; i >= 0; i--) { /* backwards: 2-byte sources under 4-byte slots */
        uint16_t h = (uint16_t)(bytes[2 * i] | bytes[2 * i + 1] << 8);
        if (bf) {
            uint32_t u = (uint32_t)h << 16;
            memcpy(&t->data[i], &u, 4);
        } else {
            t->data[i] = from_f16(h);
        }
    }
}

int tj_read(tj_tensor *t, const json_t *v)
{
    memset(t, 0, sizeof *t);
    if (json_is_object(v)) {
        const json_t *shape = json_object_get(v, "shape");
        if (!json_is_array(shape) || json_array_size(shape) > 8)
            return -1;
        t->ndim = (int)json_array_size(shape);
        t->count = 1;
        for (int i = 0; i < t->ndim; i++) {
            t->shape[i] = json_integer_value(json_array_get(shape, (size_t)i));
            t->count *= t->shape[i];
        }
        t->data = malloc((size_t)(t->count ? t->count : 1) * sizeof(float));
        const json_t *data = json_object_get(v, "data");
        const char *b64 = json_string_value(json_object_get(v, "base64"));
        const char *dt = json_string_value(json_object_get(v, "dtype"));
        snprintf(t->dtype, sizeof t->dtype, "%s", dt ? dt : "float32");
        const int esize = !strcmp(t->dtype, "float16") || !strcmp(t->dtype, "bfloat16") ? 2 : 4;
        if (json_is_array(data) && (int64_t)json_array_size(data) == t->count) {
            bool ok = true;
            for (int64_t i = 0; i < t->count; i++)
                t->data[i] = number(json_array_get(data, (size_t)i), &ok);
            if (ok)
                return 0;
        } else if (b64) {
            size_t n = strlen(b64), k = 0;
            uint8_t *bytes = (uint8_t *)t->data;
            uint32_t acc = 0;
            int bits = 0;
            for (size_t i = 0; i < n && b64[i] != '='; i++) {
                int x = b64val(b64[i]);
                if (x < 0)
                    goto fail;
                acc = acc << 6 | (uint32_t)x;
                bits += 6;
                if (bits >= 8) {
                    bits -= 8;
                    if (k >= (size_t)t->count * (size_t)esize)
                        goto fail;
                    bytes[k++] = (uint8_t)(acc >> bits);
                }
            }
            if (k == (size_t)t->count * (size_t)esize) {
                widen(t, bytes);
                return 0;
            }
        }
    fail:
        tj_free(t);
        return -1;
    }
    t->ndim = nested_shape(v, t->shape);
    t->count = 1;
    for (int i = 0; i < t->ndim; i++)
        t->count *= t->shape[i];
    t->data = malloc((size_t)(t->count ? t->count : 1) * sizeof(float));
    float *p = t->data;
    if (!fill_nested(v, 0, t->ndim, t->shape, &p)) {
        tj_free(t);
        return -1;
    }
    return 0;
}

void tj_free(tj_tensor *t)
{
    free(t->data);
    memset(t, 0, sizeof *t);
}

bool tj_shape_is(const tj_tensor *t, int ndim, const int64_t *dims)
{
    if (t->ndim != ndim)
        return false;
    for (int i = 0; i < ndim; i++)
        if (t->shape[i] != dims[i])
            return false;
    return true;
}

json_t *tj_base64(const float *data, int ndim, const int64_t *shape)
{
    int64_t count = 1;
    json_t *sh = json_array();
    for (int i = 0; i < ndim; i++) {
        count *= shape[i];
        json_array_append_new(sh, json_integer(shape[i]));
    }
    const uint8_t *in = (const uint8_t *)data;
    size_t n = (size_t)count * 4;
    char *s = malloc(n / 3 * 4 + 8), *o = s;
    size_t i = 0;
    for (; i + 2 < n; i += 3) {
        uint32_t x = (uint32_t)in[i] << 16 | (uint32_t)in[i + 1] << 8 | in[i + 2];
        *o++ = B64[x >> 18 & 63], *o++ = B64[x >> 12 & 63], *o++ = B64[x >> 6 & 63];
        *o++ = B64[x & 63];
    }
    if (n - i == 1) {
        uint32_t x = (uint32_t)in[i] << 16;
        *o++ = B64[x >> 18 & 63], *o++ = B64[x >> 12 & 63], *o++ = '=', *o++ = '=';
    } else if (n - i == 2) {
        uint32_t x = (uint32_t)in[i] << 16 | (uint32_t)in[i + 1] << 8;
        *o++ = B64[x >> 18 & 63], *o++ = B64[x >> 12 & 63], *o++ = B64[x >> 6 & 63], *o++ = '=';
    }
    *o = '\0';
    json_t *doc = json_pack("{s:o, s:s, s:s}", "shape", sh, "dtype", "float32", "base64", s);
    free(s);
    return doc;
}
