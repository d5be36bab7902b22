/*
 * fuzz_v2_request.c - the KServe v2 inference request parser (srv_v2_request_parse) and the
 * Inference-Header-Content-Length check on arbitrary bodies.
 *
 * Input: 2 bytes little-endian JSON header length (0xFFFF: no header, the whole body is JSON;
 * otherwise passed as the header's decimal text, so lengths past the body are tried too), then the
 * body. An accepted request must be consistent: query present, every present input's count =
 * product of its shape <= max_elements, data there when count > 0, floats finite (-inf only in
 * FP32 masks), bools 0/1, positions whole numbers in [0, 2^24) of the declared shape, outputs
 * distinct; and a response written for it (with made-up results of the right sizes) must be
 * valid JSON up to json_len, followed by exactly the binary outputs it announces
 * (binary_data_size), in order, each holding its values (the /v2 binary framing).
 */
#include <jansson.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "codec/v2_codec.h"
#include "fuzz_fail.h"

#define MAX_EL 4096

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 2)
        return 0;
    unsigned hl = (unsigned)data[0] | (unsigned)data[1] << 8;
    size_t len = size - 2;
    char *body = malloc(len ? len : 1); /* exact size: ASan sees reads past the end */
    memcpy(body, data + 2, len);
    srv_error err = {0};
    size_t header_len = len;
    if (hl != 0xFFFF) {
        char text[16];
        snprintf(text, sizeof text, "%u", hl);
        if (srv_v2_header_length(&header_len, text, len, &err) != 0) {
            if (hl <= len)
                FAIL("header length %u refused for a %zu-byte body: %s", hl, len, err.message);
            free(body);
            return 0;
        }
        if (header_len != hl)
            FAIL("header length %u read as %zu", hl, header_len);
    }
    srv_v2_request req;
    memset(&req, 0x5A, sizeof req);
    if (srv_v2_request_parse(&req, body, len, header_len, MAX_EL, &err) != 0) {
        if (err.code == SRV_OK || !err.message[0] || err.code == SRV_E_INTERNAL)
            FAIL("refused with code %d: %s", err.code, err.message);
        free(body);
        return 0;
    }
    if (!req.inputs[SRV_V2_IN_QUERY].present)
        FAIL("accepted without a query");
    for (int i = 0; i < SRV_V2_IN_COUNT; i++) {
        const srv_v2_input *in = &req.inputs[i];
        if (!in->present)
            continue;
        if (in->ndim < 0 || in->ndim > SRV_TENSOR_MAX_DIMS)
            FAIL("%s: ndim %d", srv_v2_input_name(i), in->ndim);
        int64_t c = 1;
        for (int d = 0; d < in->ndim; d++) {
            if (in->shape[d] < 0)
                FAIL("%s: dim %d is %lld", srv_v2_input_name(i), d, (long long)in->shape[d]);
            c *= in->shape[d];
        }
        if (c != in->count || c > MAX_EL)
            FAIL("%s: count %lld, product %lld", srv_v2_input_name(i), (long long)in->count,
                 (long long)c);
        if (i == SRV_V2_IN_POSITIONS || i == SRV_V2_IN_KEY_POSITIONS) {
            if (in->pos.count != c || (in->ndim != 1 && in->ndim != 2) || !in->pos.data)
                FAIL("%s: %lld positions of rank %d for %lld", srv_v2_input_name(i),
                     (long long)in->pos.count, in->ndim, (long long)c);
            for (int64_t k = 0; k < c; k++)
                if (in->pos.data[k] < 0 || in->pos.data[k] >= MHA_MAX_POSITION)
                    FAIL("%s[%lld] = %lld", srv_v2_input_name(i), (long long)k,
                         (long long)in->pos.data[k]);
            continue;
        }
        if (c > 0 && !in->data)
            FAIL("%s: no data", srv_v2_input_name(i));
        bool mask = i == SRV_V2_IN_KEY_PADDING_MASK || i == SRV_V2_IN_ATTN_MASK;
        if (in->dtype == SRV_DTYPE_BOOL) {
            if (!mask)
                FAIL("%s is BOOL", srv_v2_input_name(i));
            for (int64_t k = 0; k < c; k++)
                if (((const uint8_t *)in->data)[k] > 1)
                    FAIL("%s[%lld] is a bool of %u", srv_v2_input_name(i), (long long)k,
                         ((const uint8_t *)in->data)[k]);
        } else {
            const float *x = in->data;
            for (int64_t k = 0; k < c; k++)
                if (!isfinite(x[k]) && !(mask && x[k] == -INFINITY))
                    FAIL("%s[%lld] is %g", srv_v2_input_name(i), (long long)k, x[k]);
        }
    }
    if (req.noutputs < 0 || req.noutputs > SRV_V2_OUT_COUNT)
        FAIL("noutputs %d", req.noutputs);
    if (req.noutputs == 2 && req.outputs[0].which == req.outputs[1].which)
        FAIL("an output asked twice");

    /* a response for it, with made-up results of 16 values each (the top-k indices as INT32; the
     * weights in the precision the request asks, weights_datatype) */
    static float vals[SRV_V2_OUT_COUNT][16];
    static int32_t idx[16];
    for (int i = 0; i < 16; i++) {
        for (int o = 0; o < SRV_V2_OUT_COUNT; o++)
            vals[o][i] = (float)i * 0.5f - 3 + (float)o / (float)(i + 1);
        idx[i] = 15 - i;
    }
    srv_v2_result res[SRV_V2_OUT_COUNT];
    for (int o = 0; o < SRV_V2_OUT_COUNT; o++) {
        bool weights = o != SRV_V2_OUT_OUTPUT && o != SRV_V2_OUT_ATTN_TOPK_INDICES;
        res[o] = (srv_v2_result){.data = vals[o], .ndim = 2, .shape = {4, 4},
                                 .dtype = weights ? req.select.dtype : SRV_WIRE_F32};
    }
    res[SRV_V2_OUT_ATTN_TOPK_INDICES].data = idx;
    res[SRV_V2_OUT_ATTN_TOPK_INDICES].is_int32 = true;
    srv_buf b;
    srv_buf_init(&b);
    size_t json_len = 0;
    if (srv_v2_response_write(&b, &json_len, &req, "m", "1", res, &err) != 0)
        FAIL("response: %s", err.message);
    json_error_t je;
    json_t *doc = json_loadb(b.data, json_len, 0, &je);
    if (!doc)
        FAIL("response is not JSON: %s\n%.300s", je.text, b.data);
    /* the binary framing: the outputs sent as binary_data_size bytes follow the JSON in order,
     * each exactly its values; the others carry "data"; nothing else follows */
    size_t at = json_len;
    json_t *outs = json_object_get(doc, "outputs");
    if (!json_is_array(outs) || json_array_size(outs) == 0)
        FAIL("response without outputs:\n%.300s", b.data);
    for (size_t i = 0; i < json_array_size(outs); i++) {
        json_t *o = json_array_get(outs, i);
        const char *name = json_string_value(json_object_get(o, "name"));
        const char *dt = json_string_value(json_object_get(o, "datatype"));
        int which = -1;
        for (int k = 0; k < SRV_V2_OUT_COUNT; k++)
            if (name && strcmp(name, srv_v2_output_name(k)) == 0)
                which = k;
        if (which < 0 || !dt)
            FAIL("response output %s, datatype %s", name ? name : "(none)", dt ? dt : "(none)");
        bool half = strcmp(dt, "FP16") == 0 || strcmp(dt, "BF16") == 0;
        size_t bytes = half ? 32 : 64;
        json_t *bds = json_object_get(json_object_get(o, "parameters"), "binary_data_size");
        if (bds) {
            if (!json_is_integer(bds) || (size_t)json_integer_value(bds) != bytes ||
                json_object_get(o, "data"))
                FAIL("binary output %s (%s): binary_data_size %lld, or data too", name, dt,
                     (long long)json_integer_value(bds));
            const void *raw = which == SRV_V2_OUT_ATTN_TOPK_INDICES ? (const void *)idx : vals[which];
            if (at + bytes > b.len || (!half && memcmp(b.data + at, raw, bytes) != 0))
                FAIL("binary output %s: its bytes at %zu are not its values", name, at);
            at += bytes;
        } else if (json_array_size(json_object_get(o, "data")) != 16) {
            FAIL("output %s: %zu values in data, 16 expected", name,
                 json_array_size(json_object_get(o, "data")));
        }
    }
    if (at != b.len)
        FAIL("the response has %zu bytes, its JSON and binary outputs %zu", b.len, at);
    json_decref(doc);
    srv_buf_free(&b);
    srv_v2_request_free(&req);
    free(body);
    return 0;
}
