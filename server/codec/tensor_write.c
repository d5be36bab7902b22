/*
 * tensor_write.c - tensors written in their three JSON forms (docs/api.md, "Tensors in JSON"), the
 * form a response asks for with "encoding".
 *
 * A hot path: an L response is millions of numbers. Each float is formatted in the shortest
 * round-trip form (float_format.c) directly into the output buffer, a row at a time, with
 * bounded reservations of room.
 */
#include "tensor.h"

#include <string.h>

#include "base64.h"
#include "float_format.h"

int srv_encoding_parse(const char *s, srv_encoding *out)
{
    if (!s)
        return -1;
    if (strcmp(s, "nested") == 0)
        *out = SRV_ENC_NESTED;
    else if (strcmp(s, "flat") == 0)
        *out = SRV_ENC_FLAT;
    else if (strcmp(s, "base64") == 0)
        *out = SRV_ENC_BASE64;
    else
        return -1;
    return 0;
}

/* Writes n floats separated by ',' (no brackets) straight into b. */
static int write_numbers(srv_buf *b, const float *x, int64_t n)
{
    const int64_t chunk = 4096; /* bounded reservations, so huge rows need no huge spare room */
    for (int64_t i0 = 0; i0 < n; i0 += chunk) {
        int64_t m = n - i0 < chunk ? n - i0 : chunk;
        if (srv_buf_reserve(b, SRV_FORMAT_FLOATS_ROOM(m) + 1) != 0)
            return -1;
        char *o = b->data + b->len;
        if (i0 > 0)
            *o++ = ',';
        o += srv_format_floats(o, x + i0, (size_t)m, ',');
        b->len = (size_t)(o - b->data);
        b->data[b->len] = '\0';
    }
    return 0;
}

static int write_nested_level(srv_buf *b, const float *x, int ndim, const int64_t *shape,
                              const int64_t *stride)
{
    srv_buf_putc(b, '[');
    if (ndim == 1) {
        if (write_numbers(b, x, shape[0]) != 0)
            return -1;
    } else {
        for (int64_t i = 0; i < shape[0]; i++) {
            if (i > 0)
                srv_buf_putc(b, ',');
            if (write_nested_level(b, x + i * stride[0], ndim - 1, shape + 1, stride + 1) != 0)
                return -1;
        }
    }
    return srv_buf_putc(b, ']');
}

static int write_shape_as(srv_buf *b, int ndim, const int64_t *shape, const char *dtype)
{
    srv_buf_puts(b, "{\"shape\":[");
    for (int i = 0; i < ndim; i++)
        srv_buf_printf(b, "%s%lld", i ? "," : "", (long long)shape[i]);
    return srv_buf_printf(b, "],\"dtype\":\"%s\",", dtype);
}

static int write_shape(srv_buf *b, int ndim, const int64_t *shape)
{
    return write_shape_as(b, ndim, shape, "float32");
}

int srv_tensor_write(srv_buf *b, const float *data, int ndim, const int64_t *shape,
                     srv_encoding enc)
{
    int64_t count = 1;
    int64_t stride[SRV_TENSOR_MAX_DIMS];
    if (ndim < 0 || ndim > SRV_TENSOR_MAX_DIMS)
        return -1;
    for (int i = ndim - 1; i >= 0; i--) {
        stride[i] = count;
        count *= shape[i];
    }
    /* one reservation for the usual size (~10 bytes a number) saves the doubling copies */
    if (enc != SRV_ENC_BASE64 && count < ((int64_t)1 << 40) && srv_buf_reserve(b, (size_t)count * 10 + 64) != 0)
        return -1;
    switch (enc) {
    case SRV_ENC_FLAT:
        write_shape(b, ndim, shape);
        srv_buf_puts(b, "\"data\":[");
        write_numbers(b, data, count);
        srv_buf_puts(b, "]}");
        break;
    case SRV_ENC_BASE64:
        write_shape(b, ndim, shape);
        srv_buf_puts(b, "\"base64\":\"");
        srv_base64_encode(b, (const uint8_t *)data, (size_t)count * 4);
        srv_buf_puts(b, "\"}");
        break;
    default:
        if (ndim == 0)
            write_numbers(b, data, 1);
        else
            write_nested_level(b, data, ndim, shape, stride);
        break;
    }
    return b->failed ? -1 : 0;
}

/* ---------------------------------------------------------------------------------------------- */
/* Other precisions, and int32                                                                    */

/* Elements of a shape; -1 for a bad rank. */
static int64_t count_of(int ndim, const int64_t *shape)
{
    if (ndim < 0 || ndim > SRV_TENSOR_MAX_DIMS)
        return -1;
    int64_t count = 1;
    for (int i = 0; i < ndim; i++)
        count *= shape[i];
    return count;
}

/* The numbers of a nested level written from rounded copies, a chunk at a time. */
static int write_rounded_level(srv_buf *b, const float *x, int ndim, const int64_t *shape,
                               const int64_t *stride, srv_wire_dtype dtype, float *tmp,
                               int64_t tmp_n)
{
    srv_buf_putc(b, '[');
    if (ndim == 1) {
        for (int64_t i0 = 0; i0 < shape[0]; i0 += tmp_n) {
            int64_t m = shape[0] - i0 < tmp_n ? shape[0] - i0 : tmp_n;
            srv_f32_round_array(tmp, x + i0, (size_t)m, dtype);
            if (i0 > 0)
                srv_buf_putc(b, ',');
            if (write_numbers(b, tmp, m) != 0)
                return -1;
        }
    } else {
        for (int64_t i = 0; i < shape[0]; i++) {
            if (i > 0)
                srv_buf_putc(b, ',');
            if (write_rounded_level(b, x + i * stride[0], ndim - 1, shape + 1, stride + 1, dtype,
                                    tmp, tmp_n) != 0)
                return -1;
        }
    }
    return srv_buf_putc(b, ']');
}

int srv_tensor_write_as(srv_buf *b, const float *data, int ndim, const int64_t *shape,
                        srv_encoding enc, srv_wire_dtype dtype)
{
    if (dtype == SRV_WIRE_F32)
        return srv_tensor_write(b, data, ndim, shape, enc);
    int64_t count = count_of(ndim, shape), stride[SRV_TENSOR_MAX_DIMS];
    if (count < 0)
        return -1;
    int64_t c = 1;
    for (int i = ndim - 1; i >= 0; i--) {
        stride[i] = c;
        c *= shape[i];
    }
    enum { CHUNK = 3 * 2048 }; /* values: a multiple of 3 keeps base64 chunks joinable */
    float tmp[CHUNK];
    if (enc == SRV_ENC_BASE64) {
        uint16_t half[CHUNK];
        write_shape_as(b, ndim, shape, srv_wire_dtype_name(dtype));
        srv_buf_puts(b, "\"base64\":\"");
        for (int64_t i0 = 0; i0 < count; i0 += CHUNK) {
            int64_t m = count - i0 < CHUNK ? count - i0 : CHUNK;
            srv_f32_to_half_array(half, data + i0, (size_t)m, dtype);
            srv_base64_encode(b, (const uint8_t *)half, (size_t)m * 2);
        }
        srv_buf_puts(b, "\"}");
        return b->failed ? -1 : 0;
    }
    if (count < ((int64_t)1 << 40) && srv_buf_reserve(b, (size_t)count * 10 + 64) != 0)
        return -1;
    if (enc == SRV_ENC_FLAT) {
        write_shape_as(b, ndim, shape, srv_wire_dtype_name(dtype));
        srv_buf_puts(b, "\"data\":");
        int64_t one = count;
        write_rounded_level(b, data, 1, &one, stride, dtype, tmp, CHUNK);
        srv_buf_putc(b, '}');
    } else if (ndim == 0) {
        srv_f32_round_array(tmp, data, 1, dtype);
        write_numbers(b, tmp, 1);
    } else {
        write_rounded_level(b, data, ndim, shape, stride, dtype, tmp, CHUNK);
    }
    return b->failed ? -1 : 0;
}

/* n integers separated by ','. */
static int write_ints(srv_buf *b, const int32_t *x, int64_t n)
{
    for (int64_t i = 0; i < n; i++)
        srv_buf_printf(b, i ? ",%d" : "%d", (int)x[i]);
    return b->failed ? -1 : 0;
}

static int write_int_level(srv_buf *b, const int32_t *x, int ndim, const int64_t *shape,
                           const int64_t *stride)
{
    srv_buf_putc(b, '[');
    if (ndim == 1) {
        write_ints(b, x, shape[0]);
    } else {
        for (int64_t i = 0; i < shape[0]; i++) {
            if (i > 0)
                srv_buf_putc(b, ',');
            write_int_level(b, x + i * stride[0], ndim - 1, shape + 1, stride + 1);
        }
    }
    return srv_buf_putc(b, ']');
}

int srv_tensor_write_i32(srv_buf *b, const int32_t *data, int ndim, const int64_t *shape,
                         srv_encoding enc)
{
    int64_t count = count_of(ndim, shape), stride[SRV_TENSOR_MAX_DIMS];
    if (count < 0)
        return -1;
    int64_t c = 1;
    for (int i = ndim - 1; i >= 0; i--) {
        stride[i] = c;
        c *= shape[i];
    }
    if (enc == SRV_ENC_BASE64) {
        write_shape_as(b, ndim, shape, "int32");
        srv_buf_puts(b, "\"base64\":\"");
        srv_base64_encode(b, (const uint8_t *)data, (size_t)count * 4);
        srv_buf_puts(b, "\"}");
    } else if (enc == SRV_ENC_FLAT) {
        write_shape_as(b, ndim, shape, "int32");
        srv_buf_puts(b, "\"data\":[");
        write_ints(b, data, count);
        srv_buf_puts(b, "]}");
    } else if (ndim == 0) {
        write_ints(b, data, 1);
    } else {
        write_int_level(b, data, ndim, shape, stride);
    }
    return b->failed ? -1 : 0;
}
