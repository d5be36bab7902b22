/*
 * fuzz_tensor_parse.c - srv_tensor_parse under every combination of rules, plus a write round trip.
 *
 * Input: one byte of rules, then the JSON text.
 *   bit 0 allow_bool, bit 1 allow_neg_inf, bits 2-4 max_depth (0..7; 0 = default), bits 5-6
 *   max_elements (none, 1, 7, 4096).
 * A parse that succeeds must give a consistent tensor (count = product of shape, every dimension
 * > 0, ndim within max_depth, elements within max_elements, floats finite or -inf only where
 * allowed, bools 0/1). Each float tensor is then written in all three encodings and parsed back
 * with the same rules: same shape, same bits. A failed parse must fill err with a code and leave
 * the tensor owning nothing. A text the parser accepts must be valid JSON by the strict scanner
 * (srv_json_skip_value): the daemon's body scan leaves tensor values' syntax to this parser.
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "codec/json_scan.h"
#include "codec/tensor.h"
#include "fuzz_fail.h"


int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1)
        return 0;
    static const int64_t max_el[4] = {0, 1, 7, 4096};
    srv_tensor_rules rules = {
        .field = "query",
        .allow_bool = data[0] & 1,
        .allow_neg_inf = (data[0] >> 1) & 1,
        .max_depth = (data[0] >> 2) & 7,
        .max_elements = max_el[(data[0] >> 5) & 3],
    };
    int depth = rules.max_depth < 1 ? SRV_TENSOR_MAX_DIMS : rules.max_depth;
    size_t len = size - 1;
    char *json = malloc(len ? len : 1); /* exact size: ASan catches a read past the end */
    if (!json)
        return 0;
    memcpy(json, data + 1, len);

    srv_tensor t;
    srv_error err = {0};
    memset(&t, 0x5A, sizeof t);
    if (srv_tensor_parse(&t, json, len, &rules, &err) != 0) {
        if (err.code == SRV_OK || !err.message[0])
            FAIL("failed without an error");
        if (err.code == SRV_E_INTERNAL)
            FAIL("internal error: %s", err.message);
        if (t.data)
            FAIL("failed but owns data");
        free(json);
        return 0;
    }
    if (err.code != SRV_OK)
        FAIL("succeeded with an error set: %s", err.message);
    srv_error se = {0};
    const char *end = srv_json_skip_value(json, json + len, 0, 64, json, "query", &se);
    if (!end || srv_json_skip_ws(end, json + len) != json + len)
        FAIL("parsed a text the strict scanner refuses: %s", end ? "text after the value" : se.message);
    if (t.ndim < 0 || t.ndim > depth)
        FAIL("ndim %d, max_depth %d", t.ndim, depth);
    int64_t count = 1;
    for (int i = 0; i < t.ndim; i++) {
        if (t.shape[i] <= 0)
            FAIL("dimension %d is %lld", i, (long long)t.shape[i]);
        count *= t.shape[i];
    }
    if (count != t.count)
        FAIL("count %lld, product of shape %lld", (long long)t.count, (long long)count);
    if (rules.max_elements > 0 && count > rules.max_elements)
        FAIL("count %lld over max_elements %lld", (long long)count, (long long)rules.max_elements);
    if (!t.data)
        FAIL("no data");
    if (t.dtype == SRV_DTYPE_BOOL) {
        if (!rules.allow_bool)
            FAIL("bool tensor without allow_bool");
        for (int64_t i = 0; i < count; i++)
            if (((uint8_t *)t.data)[i] > 1)
                FAIL("bool element %lld is %u", (long long)i, ((uint8_t *)t.data)[i]);
    } else if (t.dtype == SRV_DTYPE_F32) {
        const float *f = t.data;
        for (int64_t i = 0; i < count; i++)
            if (!isfinite(f[i]) && !(rules.allow_neg_inf && f[i] == -INFINITY))
                FAIL("element %lld is %a", (long long)i, f[i]);
        for (int enc = SRV_ENC_NESTED; enc <= SRV_ENC_BASE64; enc++) {
            srv_buf b;
            srv_buf_init(&b);
            if (srv_tensor_write(&b, f, t.ndim, t.shape, (srv_encoding)enc) != 0)
                FAIL("write failed");
            srv_tensor u;
            srv_error e2 = {0};
            if (srv_tensor_parse(&u, b.data, b.len, &rules, &e2) != 0)
                FAIL("encoding %d: own output does not parse back: %s\n%.300s", enc, e2.message,
                     b.data);
            if (u.dtype != SRV_DTYPE_F32 || u.ndim != t.ndim || u.count != t.count ||
                memcmp(u.shape, t.shape, sizeof(int64_t) * (size_t)t.ndim) != 0 ||
                memcmp(u.data, t.data, (size_t)count * 4) != 0)
                FAIL("encoding %d: round trip changed the tensor\n%.300s", enc, b.data);
            srv_tensor_free(&u);
            srv_buf_free(&b);
        }
    } else {
        FAIL("dtype %d", (int)t.dtype);
    }
    srv_tensor_free(&t);
    free(json);
    return 0;
}
