/*
 * v2_response.c - Open Inference Protocol replies for attnd's layers (see v2_codec.h): inference
 * responses (JSON, and the binary tensor extension) and the error body.
 *
 * Binary tensors are little-endian by the protocol; this file assumes a little-endian host.
 */
#include "v2_codec.h"

#include <inttypes.h>
#include <string.h>

#include "base/bigbuf.h"
#include "float_format.h"

#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "v2_response.c writes binary tensors as host floats: little-endian hosts only"
#endif

static int v2_write_shape(srv_buf *b, int ndim, const int64_t *shape)
{
    srv_buf_putc(b, '[');
    for (int i = 0; i < ndim; i++)
        srv_buf_printf(b, i ? ",%" PRId64 : "%" PRId64, shape[i]);
    return srv_buf_putc(b, ']');
}

/* Appends count floats as a flat JSON array, each in its shortest float32 form. This is the hot
 * loop of a JSON response: room is reserved once and the digits written in place. */
static int v2_write_floats(srv_buf *b, const float *f, int64_t count)
{
    size_t need;
    if (count < 0 || __builtin_mul_overflow((size_t)count, (size_t)16, &need) ||
        srv_buf_reserve(b, need + 16 + 2) < 0) { /* SRV_FORMAT_FLOATS_ROOM(count) and '[', ']' */
        b->failed = true;
        return -1;
    }
    char *p = b->data + b->len;
    *p++ = '[';
    p += srv_format_floats(p, f, (size_t)count, ',');
    *p++ = ']';
    *p = '\0';
    b->len = (size_t)(p - b->data);
    return 0;
}

/* The same for floats rounded to dtype (FP16 / BF16), a chunk at a time. */
static int v2_write_rounded(srv_buf *b, const float *f, int64_t count, srv_wire_dtype dtype)
{
    enum { CHUNK = 4096 };
    float tmp[CHUNK];
    srv_buf_putc(b, '[');
    for (int64_t i0 = 0; i0 < count; i0 += CHUNK) {
        int64_t m = count - i0 < CHUNK ? count - i0 : CHUNK;
        srv_f32_round_array(tmp, f + i0, (size_t)m, dtype);
        if (srv_buf_reserve(b, 16 * (size_t)m + 18) < 0) {
            b->failed = true;
            return -1;
        }
        char *p = b->data + b->len;
        if (i0 > 0)
            *p++ = ',';
        p += srv_format_floats(p, tmp, (size_t)m, ',');
        *p = '\0';
        b->len = (size_t)(p - b->data);
    }
    return srv_buf_putc(b, ']');
}

static int v2_write_ints(srv_buf *b, const int32_t *x, int64_t count)
{
    srv_buf_putc(b, '[');
    for (int64_t i = 0; i < count; i++)
        srv_buf_printf(b, i ? ",%d" : "%d", (int)x[i]);
    return srv_buf_putc(b, ']');
}

/* The OIP datatype of a result. */
static const char *v2_datatype(const srv_v2_result *r)
{
    return r->is_int32 ? "INT32" : srv_wire_dtype_v2_name(r->dtype);
}

/* Bytes one element of a result takes in the binary part. */
static size_t v2_elem_bytes(const srv_v2_result *r)
{
    return r->is_int32 ? 4 : (size_t)srv_wire_dtype_size(r->dtype);
}

int srv_v2_response_write(srv_buf *b, size_t *json_len, const srv_v2_request *req,
                          const char *model_name, const char *model_version,
                          const srv_v2_result results[SRV_V2_OUT_COUNT], srv_error *err)
{
    int64_t counts[SRV_V2_OUT_COUNT];
    for (int k = 0; k < req->noutputs; k++) {
        const srv_v2_result *r = &results[req->outputs[k].which];
        if (!r->data || r->ndim < 0 || r->ndim > 4)
            return srv_error_set(err, SRV_E_INTERNAL, srv_v2_output_name(req->outputs[k].which),
                                 "output '%s' was not computed",
                                 srv_v2_output_name(req->outputs[k].which));
        int64_t c = 1;
        for (int i = 0; i < r->ndim; i++)
            c *= r->shape[i];
        counts[req->outputs[k].which] = c;
    }
    /* One allocation for the whole response: the binary part and the numbers are most of it. */
    size_t need = 512 + strlen(model_name) * 6 + (req->id ? strlen(req->id) * 6 : 0);
    for (int k = 0; k < req->noutputs; k++)
        need += (size_t)counts[req->outputs[k].which] *
                (req->outputs[k].binary ? v2_elem_bytes(&results[req->outputs[k].which]) : 18);
    /* from bigbuf's cache when the body is empty (a fresh 12.6 MB block faulted in cost the L
     * request ~20 ms on the development VM; http/reply.c gives large reply blocks back to the cache) */
    if ((b->len ? srv_buf_reserve(b, need) : srv_bigbuf_reserve(b, need)) < 0)
        return srv_error_set(err, SRV_E_NOMEM, "", "out of memory for a %zu-byte response", need);
    srv_buf_puts(b, "{\"model_name\":");
    srv_buf_json_string(b, model_name);
    srv_buf_puts(b, ",\"model_version\":");
    srv_buf_json_string(b, model_version);
    if (req->id) {
        srv_buf_puts(b, ",\"id\":");
        srv_buf_json_string(b, req->id);
    }
    srv_buf_puts(b, ",\"outputs\":[");
    for (int k = 0; k < req->noutputs; k++) {
        srv_v2_output_id which = req->outputs[k].which;
        const srv_v2_result *r = &results[which];
        srv_buf_printf(b, "%s{\"name\":\"%s\",\"datatype\":\"%s\",\"shape\":", k ? "," : "",
                       srv_v2_output_name(which), v2_datatype(r));
        v2_write_shape(b, r->ndim, r->shape);
        if (req->outputs[k].binary) {
            srv_buf_printf(b, ",\"parameters\":{\"binary_data_size\":%" PRId64 "}}",
                           counts[which] * (int64_t)v2_elem_bytes(r));
        } else {
            srv_buf_puts(b, ",\"data\":");
            if (r->is_int32)
                v2_write_ints(b, r->data, counts[which]);
            else if (r->dtype != SRV_WIRE_F32)
                v2_write_rounded(b, r->data, counts[which], r->dtype);
            else
                v2_write_floats(b, r->data, counts[which]);
            srv_buf_putc(b, '}');
        }
    }
    srv_buf_puts(b, "]}");
    *json_len = b->len;
    for (int k = 0; k < req->noutputs; k++) {
        const srv_v2_result *r = &results[req->outputs[k].which];
        const size_t count = (size_t)counts[req->outputs[k].which];
        if (!req->outputs[k].binary)
            continue;
        if (r->is_int32 || r->dtype == SRV_WIRE_F32) {
            srv_buf_append(b, r->data, count * v2_elem_bytes(r));
            continue;
        }
        enum { CHUNK = 8192 }; /* float16 / bfloat16 bits, a chunk at a time */
        uint16_t half[CHUNK];
        for (size_t i0 = 0; i0 < count; i0 += CHUNK) {
            size_t m = count - i0 < CHUNK ? count - i0 : CHUNK;
            srv_f32_to_half_array(half, (const float *)r->data + i0, m, r->dtype);
            srv_buf_append(b, half, m * 2);
        }
    }
    if (b->failed)
        return srv_error_set(err, SRV_E_NOMEM, "", "out of memory writing the response");
    return 0;
}

int srv_v2_error_write(srv_buf *b, const srv_error *err, const char *request_id)
{
    srv_code code = err->code == SRV_OK ? SRV_E_INTERNAL : err->code;
    srv_buf_puts(b, "{\"error\":");
    srv_buf_json_string(b, err->message[0] ? err->message : srv_error_name(code));
    if (request_id) {
        srv_buf_puts(b, ",\"request_id\":");
        srv_buf_json_string(b, request_id);
    }
    srv_buf_puts(b, "}\n");
    return srv_error_status(code);
}
