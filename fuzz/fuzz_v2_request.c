/*
 * fuzz_v2_request.c - the KServe v2 inference request parser (srv_v2_request_parse) and the
 * Inference-Header-Content-Length check on arbitrary bodies.
 *
 * Input: 2 bytes little-endian JSON header length (0xFFFF: no header, the whole body is JSON;
 * otherwise passed as the header's decimal text, so lengths past the body are tried too), then the
 * body. An accepted request must be consistent: query present, every present input's count =
 * product of its shape <= max_elements, data there when count > 0, floats finite (-inf only in
 * FP32 masks), bools 0/1, positions whole numbers in [0, 2^24) of the declared shape, outputs
 * distinct; and a response written for it (with made-up results
 * of the right sizes) must be valid JSON up to json_len.
 */
#include <jansson.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "codec/v2_codec.h"

#define FAIL(...) (fprintf(stderr, __VA_ARGS__), fputc('\n', stderr), abort())
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

    /* a response for it, with made-up results shaped like the query */
    static float zeros[16];
    srv_v2_result res[SRV_V2_OUT_COUNT] = {{.data = zeros, .ndim = 2, .shape = {2, 8}},
                                           {.data = zeros, .ndim = 2, .shape = {4, 4}}};
    srv_buf b;
    srv_buf_init(&b);
    size_t json_len = 0;
    if (srv_v2_response_write(&b, &json_len, &req, "m", "1", res, &err) != 0)
        FAIL("response: %s", err.message);
    json_error_t je;
    json_t *doc = json_loadb(b.data, json_len, 0, &je);
    if (!doc)
        FAIL("response is not JSON: %s\n%.300s", je.text, b.data);
    json_decref(doc);
    srv_buf_free(&b);
    srv_v2_request_free(&req);
    free(body);
    return 0;
}
