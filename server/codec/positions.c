/*
 * positions.c - request positions from JSON or bytes (see positions.h).
 */
#include "positions.h"

#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base64.h"
#include "mha.h"

#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "positions.c reads little-endian integers as host integers: little-endian hosts only"
#endif

void srv_positions_free(srv_positions *p)
{
    if (!p)
        return;
    free(p->data);
    memset(p, 0, sizeof *p);
}

/* One value: a whole number in [0, MHA_MAX_POSITION). where names it ("positions[1][2]"). */
static int check_value(int64_t *out, const json_t *x, const char *where, const char *field,
                       srv_error *err)
{
    double d;
    if (json_is_integer(x))
        d = (double)json_integer_value(x);
    else if (json_is_real(x))
        d = json_real_value(x);
    else
        return srv_error_set(err, SRV_E_BAD_REQUEST, field,
                             "%s is not a number; positions are whole numbers from 0 to %" PRId64,
                             where, MHA_MAX_POSITION - 1);
    if (d != floor(d) || d < 0 || d >= (double)MHA_MAX_POSITION)
        return srv_error_set(err, SRV_E_BAD_REQUEST, field,
                             "%s is %.17g; positions are whole numbers from 0 to %" PRId64, where,
                             d, MHA_MAX_POSITION - 1);
    *out = (int64_t)d;
    return 0;
}

static int alloc_data(srv_positions *out, int64_t count, int64_t max_elements, const char *field,
                      srv_error *err)
{
    if (max_elements > 0 && count > max_elements)
        return srv_error_set(err, SRV_E_TOO_LARGE, field,
                             "%s has %" PRId64 " elements, over the limit of %" PRId64, field,
                             count, max_elements);
    out->data = malloc((size_t)(count > 0 ? count : 1) * sizeof(int64_t));
    if (!out->data)
        return srv_error_set(err, SRV_E_NOMEM, field, "out of memory for %s", field);
    out->count = count;
    return 0;
}

/* Form 1: [v, ...] or [[v, ...], ...]. */
static int from_nested(srv_positions *out, const json_t *v, const char *field,
                       int64_t max_elements, srv_error *err)
{
    char where[96];
    const size_t rows = json_array_size(v);
    const json_t *first = json_array_get(v, 0);
    const bool two = json_is_array(first);
    const size_t len = two ? json_array_size(first) : rows;
    if (rows == 0 || len == 0)
        return srv_error_set(err, SRV_E_SHAPE, field, "%s is empty; it needs one position per %s",
                             field, strcmp(field, "key_positions") ? "query" : "key");
    out->ndim = two ? 2 : 1;
    out->shape[0] = (int64_t)rows;
    out->shape[1] = two ? (int64_t)len : 0;
    if (alloc_data(out, (int64_t)(two ? rows * len : rows), max_elements, field, err) < 0)
        return -1;
    for (size_t r = 0; r < (two ? rows : 1); r++) {
        const json_t *row = two ? json_array_get(v, r) : v;
        if (two && (!json_is_array(row) || json_array_size(row) != len))
            return srv_error_set(err, SRV_E_SHAPE, field,
                                 "%s[%zu] is not an array of %zu positions like %s[0]; positions "
                                 "are [L] or [N,L]",
                                 field, r, len, field);
        for (size_t i = 0; i < len; i++) {
            const json_t *x = json_array_get(row, i);
            if (two)
                snprintf(where, sizeof where, "%s[%zu][%zu]", field, r, i);
            else
                snprintf(where, sizeof where, "%s[%zu]", field, i);
            if (json_is_array(x))
                return srv_error_set(err, SRV_E_SHAPE, field,
                                     "%s is an array; positions have one or two dimensions", where);
            if (check_value(&out->data[r * len + i], x, where, field, err) < 0)
                return -1;
        }
    }
    return 0;
}

/* "shape" of forms 2 and 3: one or two positive integers. */
static int read_shape(srv_positions *out, const json_t *shape, const char *field, srv_error *err)
{
    if (!json_is_array(shape))
        return srv_error_set(err, SRV_E_BAD_REQUEST, field,
                             "%s.shape must be an array like [L] or [N,L]", field);
    const size_t nd = json_array_size(shape);
    if (nd < 1 || nd > 2)
        return srv_error_set(err, SRV_E_SHAPE, field,
                             "%s.shape has %zu dimensions; positions are [L] or [N,L]", field, nd);
    for (size_t i = 0; i < nd; i++) {
        const json_t *d = json_array_get(shape, i);
        if (!json_is_integer(d) || json_integer_value(d) < 1 || json_integer_value(d) > (1 << 30))
            return srv_error_set(err, SRV_E_SHAPE, field,
                                 "%s.shape[%zu] must be a positive whole number", field, i);
        out->shape[i] = json_integer_value(d);
    }
    out->ndim = (int)nd;
    return 0;
}

/* "dtype" of forms 2 and 3: "int64" or "int32"; the element size, or -1 with err. */
static int read_dtype(const json_t *dt, bool required, const char *field, srv_error *err)
{
    if (!dt && !required)
        return 8;
    const char *s = json_string_value(dt);
    if (s && !strcmp(s, "int64"))
        return 8;
    if (s && !strcmp(s, "int32"))
        return 4;
    return srv_error_set(err, SRV_E_BAD_REQUEST, field, "%s.dtype must be \"int64\" or \"int32\"%s",
                         field, required ? " (the base64 form says how wide its integers are)" : "");
}

/* Checks the values bytes -> out->data, count elements of elem_size bytes. */
static int from_ints(srv_positions *out, const uint8_t *bytes, int elem_size, const char *field,
                     srv_error *err)
{
    for (int64_t i = 0; i < out->count; i++) {
        int64_t x;
        if (elem_size == 8) {
            memcpy(&x, bytes + i * 8, 8);
        } else {
            int32_t y;
            memcpy(&y, bytes + i * 4, 4);
            x = y;
        }
        if (x < 0 || x >= MHA_MAX_POSITION)
            return srv_error_set(err, SRV_E_BAD_REQUEST, field,
                                 "%s element %" PRId64 " is %" PRId64
                                 "; positions are whole numbers from 0 to %" PRId64,
                                 field, i, x, MHA_MAX_POSITION - 1);
        out->data[i] = x;
    }
    return 0;
}

/* Forms 2 and 3: {"shape", "data" | "base64", "dtype"}. */
static int from_object(srv_positions *out, const json_t *v, const char *field,
                       int64_t max_elements, srv_error *err)
{
    char where[96];
    const char *key;
    json_t *m;
    json_object_foreach((json_t *)v, key, m)
    {
        if (strcmp(key, "shape") && strcmp(key, "data") && strcmp(key, "dtype") &&
            strcmp(key, "base64")) {
            snprintf(where, sizeof where, "%s.%.48s", field, key);
            return srv_error_set(err, SRV_E_UNKNOWN_FIELD, where,
                                 "unknown member %s; positions as an object have shape, dtype "
                                 "and data or base64",
                                 where);
        }
    }
    const json_t *shape = json_object_get(v, "shape"), *data = json_object_get(v, "data");
    const json_t *b64 = json_object_get(v, "base64"), *dt = json_object_get(v, "dtype");
    if (!shape)
        return srv_error_set(err, SRV_E_MISSING_FIELD, field, "%s has no \"shape\"", field);
    if (!!data == !!b64)
        return srv_error_set(err, SRV_E_BAD_REQUEST, field,
                             "%s needs exactly one of \"data\" and \"base64\"", field);
    const int esize = read_dtype(dt, b64 != NULL, field, err);
    if (esize < 0 || read_shape(out, shape, field, err) < 0)
        return -1;
    const int64_t count = out->shape[0] * (out->ndim == 2 ? out->shape[1] : 1);
    if (alloc_data(out, count, max_elements, field, err) < 0)
        return -1;
    if (data) {
        if (!json_is_array(data) || (int64_t)json_array_size(data) != count)
            return srv_error_set(err, SRV_E_SHAPE, field,
                                 "%s.data must be a flat array of %" PRId64 " positions (the shape's "
                                 "product)",
                                 field, count);
        for (int64_t i = 0; i < count; i++) {
            snprintf(where, sizeof where, "%s.data[%" PRId64 "]", field, i);
            if (check_value(&out->data[i], json_array_get(data, (size_t)i), where, field, err) < 0)
                return -1;
        }
        return 0;
    }
    const char *text = json_string_value(b64);
    if (!text)
        return srv_error_set(err, SRV_E_BAD_REQUEST, field, "%s.base64 must be a string", field);
    const size_t len = json_string_length(b64);
    uint8_t *raw = malloc(len / 4 * 3 + 3);
    if (!raw)
        return srv_error_set(err, SRV_E_NOMEM, field, "out of memory for %s", field);
    const long n = srv_base64_decode(raw, text, len);
    int rc = 0;
    if (n < 0)
        rc = srv_error_set(err, SRV_E_BAD_REQUEST, field, "%s.base64 is not valid base64", field);
    else if (n != count * esize)
        rc = srv_error_set(err, SRV_E_SHAPE, field,
                           "%s.base64 holds %ld bytes; shape and dtype need %" PRId64, field, n,
                           count * esize);
    else
        rc = from_ints(out, raw, esize, field, err);
    free(raw);
    return rc;
}

int srv_positions_from_json(srv_positions *out, const json_t *v, const char *field,
                            int64_t max_elements, srv_error *err)
{
    memset(out, 0, sizeof *out);
    int rc;
    if (json_is_array(v))
        rc = from_nested(out, v, field, max_elements, err);
    else if (json_is_object(v))
        rc = from_object(out, v, field, max_elements, err);
    else
        rc = srv_error_set(err, SRV_E_BAD_REQUEST, field,
                           "%s must be an array of whole numbers ([L] or [N,L]) or a tensor "
                           "object with shape",
                           field);
    if (rc < 0)
        srv_positions_free(out);
    return rc;
}

int srv_positions_from_bytes(srv_positions *out, const void *bytes, size_t nbytes, int elem_size,
                             int ndim, const int64_t *shape, const char *field, srv_error *err)
{
    memset(out, 0, sizeof *out);
    if (ndim < 1 || ndim > 2)
        return srv_error_set(err, SRV_E_SHAPE, field,
                             "%s has %d dimensions; positions are [L] or [N,L]", field, ndim);
    out->ndim = ndim;
    out->shape[0] = shape[0];
    out->shape[1] = ndim == 2 ? shape[1] : 0;
    const int64_t count = shape[0] * (ndim == 2 ? shape[1] : 1);
    int rc = (int64_t)nbytes != count * elem_size
                 ? srv_error_set(err, SRV_E_SHAPE, field,
                                 "%s holds %zu bytes; its shape needs %" PRId64, field, nbytes,
                                 count * elem_size)
                 : alloc_data(out, count, 0, field, err);
    if (rc == 0)
        rc = from_ints(out, bytes, elem_size, field, err);
    if (rc < 0)
        srv_positions_free(out);
    return rc;
}
