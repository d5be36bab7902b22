/*
 * test_http_select.c - the weights a client chooses (weights_select, issue 25) against torch, over
 * HTTP: for every golden case (tests/golden/: every config and mask combination the parity tests
 * cross) the selections tests/torch/gen_select_golden.py drew for it (tests/golden_select/: chosen
 * heads, query and key ranges, top-k, pooled mean and max, per head and averaged, float32, float16
 * and bfloat16), each sent
 *   - to /v1 forward in the three encodings (nested, flat, base64),
 *   - to /v2 infer as request parameters, with JSON and with binary inputs and outputs,
 *   - to /v1 trace (scores and attn_weights stages),
 * and compared with torch's numbers: output within the project's tolerance (and the same whatever
 * is chosen); the chosen weights within it too, plus the dtype's rounding; top-k indices equal to
 * torch's stable order wherever the values are exact ties (zeros of masked keys: ties go to the
 * lower key index), and where they differ only between near-equal values, those values equal within
 * the tolerance. A float16 / bfloat16 answer is, bit for bit, the float32 answer of the same
 * request rounded as torch rounds (codec/half.h, held to torch by test_half). Then every rule of
 * the selection as a 400 (or a 413 past the size limit) on /v1, /v2 and describe, and describe's
 * sizes.
 *
 * The variant cases (tests/golden_variants/: head_dim, grouped-query, RoPE, ALiBi, windows,
 * positions) likewise, with tests/golden_select_variants/. Optional arguments: another directory of
 * cases and the directory of their selections (a case's selections are the file of the same name).
 */
#include <inttypes.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "codec/half.h"
#include "golden.h"
#include "http_client.h"
#include "tensor_json.h"

/* ---------------------------------------------------------------------------------------------- */
/* Bodies                                                                                         */

typedef struct bytes {
    char *p;
    size_t len, cap;
} bytes;

static void b_add(bytes *b, const void *p, size_t n)
{
    if (b->len + n + 1 > b->cap) {
        b->cap = (b->len + n + 1) * 2;
        b->p = realloc(b->p, b->cap);
    }
    memcpy(b->p + b->len, p, n);
    b->len += n;
    b->p[b->len] = '\0';
}

static void b_printf(bytes *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void b_printf(bytes *b, const char *fmt, ...)
{
    char tmp[512];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(tmp, sizeof tmp, fmt, ap);
    va_end(ap);
    b_add(b, tmp, (size_t)(n < (int)sizeof tmp ? n : (int)sizeof tmp - 1));
}

/* ---------------------------------------------------------------------------------------------- */
/* What comes back: values (floats, whatever the dtype) and top-k indices */

typedef struct answer {
    bool ok;
    tj_tensor output, values, indices; /* indices: with top-k only                         */
    char dtype[12];                    /* the dtype the values said they are ("" nested)    */
} answer;

static void answer_free(answer *a)
{
    tj_free(&a->output);
    tj_free(&a->values);
    tj_free(&a->indices);
    memset(a, 0, sizeof *a);
}

/* The expected tensor of a golden selection, decoded (float32 or int32 as floats). */
static bool expected(tj_tensor *t, const json_t *v)
{
    return tj_read(t, v) == 0;
}

/* Rounding a float32 may carry when sent as dtype (half an ulp of it). */
static double dtype_slack(const char *dtype, double x)
{
    if (!strcmp(dtype, "float16"))
        return fabs(x) * 0x1p-11 + 0x1p-25;
    if (!strcmp(dtype, "bfloat16"))
        return fabs(x) * 0x1p-8;
    return 0.0;
}

static bool close_to(double got, double want, const char *dtype)
{
    if (strcmp(dtype, "float32")) { /* past the dtype's range (float16 from 65520 on): inf */
        float w = (float)want;
        srv_f32_round_array(&w, &w, 1, !strcmp(dtype, "float16") ? SRV_WIRE_F16 : SRV_WIRE_BF16);
        if (isinf(w))
            return got == w;
    }
    if (isinf(want))
        return got == want;
    return fabs(got - want) <= CHECK_ATOL + CHECK_RTOL * fabs(want) + dtype_slack(dtype, want);
}

/* Compares an answer's chosen weights with torch's (values, and indices with top-k). */
static void compare(const char *what, const tj_tensor *values, const tj_tensor *indices,
                    const json_t *want_v, const json_t *want_i, const char *dtype)
{
    tj_tensor ev = {0}, ei = {0};
    if (!CHECK(expected(&ev, want_v) && (!want_i || expected(&ei, want_i)), "%s: golden", what))
        goto done;
    bool shape = tj_shape_is(values, ev.ndim, ev.shape) &&
                 (!want_i || (indices && tj_shape_is(indices, ei.ndim, ei.shape)));
    if (!CHECK(shape, "%s: shape differs from torch's", what))
        goto done;
    int64_t bad = -1;
    for (int64_t i = 0; i < ev.count && bad < 0; i++) {
        if (!close_to(values->data[i], ev.data[i], dtype))
            bad = i;
        else if (want_i && indices->data[i] != ei.data[i] &&
                 (values->data[i] == ev.data[i] && !strcmp(dtype, "float32")))
            bad = i; /* an exact tie: the lower key index first, as torch's stable order */
        else if (want_i && indices->data[i] != ei.data[i] && ev.data[i] == 0.0f)
            bad = i;
    }
    CHECK(bad < 0, "%s: [%" PRId64 "] is %.9g (key %.0f), torch %.9g (key %.0f)", what, bad,
          bad >= 0 ? values->data[bad] : 0.0, want_i && bad >= 0 ? indices->data[bad] : -1.0,
          bad >= 0 ? ev.data[bad] : 0.0, want_i && bad >= 0 ? ei.data[bad] : -1.0);
done:
    tj_free(&ev);
    tj_free(&ei);
}

/* ---------------------------------------------------------------------------------------------- */
/* /v1                                                                                            */

/* The case's forward body with weights_select, average_attn_weights and encoding put in. */
static char *v1_body(const golden_case *c, const json_t *sel, bool average, const char *enc,
                     const char *dtype_override, const char *stages)
{
    json_t *body = json_loads(c->inputs_json, 0, NULL);
    json_t *s = json_deep_copy(sel);
    if (dtype_override)
        json_object_set_new(s, "dtype", json_string(dtype_override));
    json_object_set_new(body, "weights_select", s);
    json_object_set_new(body, "average_attn_weights", json_boolean(average));
    json_object_del(body, "need_weights"); /* weights_select implies it */
    json_object_set_new(body, "encoding", json_string(enc));
    if (stages)
        json_object_set_new(body, "stages", json_loads(stages, 0, NULL));
    char *text = json_dumps(body, JSON_COMPACT);
    json_decref(body);
    return text;
}

static void v1_forward(srv_daemon *d, const char *layer, const golden_case *c, const json_t *sel,
                       bool average, const char *enc, const char *dtype_override, answer *a)
{
    memset(a, 0, sizeof *a);
    char *body = v1_body(c, sel, average, enc, dtype_override, NULL), path[128];
    snprintf(path, sizeof path, "/v1/layers/%s/forward", layer);
    hc_response r;
    hc_request(d, "POST", path, NULL, body, -1, NULL, &r);
    free(body);
    if (CHECK(r.status == 200, "%s: forward (%s) %ld %.300s", c->name, enc, r.status, r.body)) {
        json_t *j = hc_json(&r);
        const json_t *topk = json_object_get(j, "attn_topk");
        const json_t *vals =
            topk ? json_object_get(topk, "values") : json_object_get(j, "attn_weights");
        a->ok = tj_read(&a->output, json_object_get(j, "output")) == 0 &&
                tj_read(&a->values, vals) == 0 &&
                (!json_object_get(sel, "top_k") ||
                 tj_read(&a->indices, json_object_get(topk, "indices")) == 0) &&
                (json_object_get(sel, "top_k") ? !json_object_get(j, "attn_weights") : !topk);
        snprintf(a->dtype, sizeof a->dtype, "%s", a->values.dtype);
        CHECK(a->ok, "%s: forward (%s): output, and attn_weights or attn_topk", c->name, enc);
        if (a->ok && topk && strcmp(enc, "nested"))
            CHECK(!strcmp(a->indices.dtype, "int32"), "%s: top-k indices say int32 (%s)", c->name,
                  enc);
        json_decref(j);
    }
    hc_response_free(&r);
}

/* ---------------------------------------------------------------------------------------------- */
/* /v2                                                                                            */

static const char *const in_names[5] = {"query", "key", "value", "key_padding_mask", "attn_mask"};

/* An infer body for case c with the selection as parameters; binary: inputs and outputs binary. */
static void v2_body(bytes *body, long *header_len, const golden_case *c, const json_t *sel,
                    bool average, bool binary)
{
    const golden_tensor *t5[5] = {&c->query, &c->key, &c->value, &c->key_padding_mask,
                                  &c->attn_mask};
    bytes bin = {0};
    body->len = 0;
    b_printf(body,
             "{\"parameters\":{\"average_attn_weights\":%s,\"is_causal\":%s,"
             "\"binary_data_output\":%s",
             average ? "true" : "false", c->is_causal ? "true" : "false",
             binary ? "true" : "false");
    const json_t *v;
    if ((v = json_object_get(sel, "heads"))) {
        b_printf(body, ",\"weights_heads\":\"");
        for (size_t i = 0; i < json_array_size(v); i++)
            b_printf(body, i ? ",%" PRId64 : "%" PRId64,
                     (int64_t)json_integer_value(json_array_get(v, i)));
        b_printf(body, "\"");
    }
    static const char *const ranges[2] = {"queries", "keys"};
    for (int k = 0; k < 2; k++)
        if ((v = json_object_get(sel, ranges[k])))
            b_printf(body, ",\"weights_%s\":\"%" PRId64 ":%" PRId64 "\"", ranges[k],
                     (int64_t)json_integer_value(json_array_get(v, 0)),
                     (int64_t)json_integer_value(json_array_get(v, 1)));
    if ((v = json_object_get(sel, "top_k"))) /* an integer, as Triton's clients send one */
        b_printf(body, ",\"weights_top_k\":%" PRId64, (int64_t)json_integer_value(v));
    if ((v = json_object_get(sel, "pool")))
        b_printf(body, ",\"weights_pool\":\"%" PRId64 "x%" PRId64 "\"",
                 (int64_t)json_integer_value(json_array_get(v, 0)),
                 (int64_t)json_integer_value(json_array_get(v, 1)));
    if ((v = json_object_get(sel, "pool_op")))
        b_printf(body, ",\"weights_pool_op\":\"%s\"", json_string_value(v));
    const char *dt = json_string_value(json_object_get(sel, "dtype"));
    const char *v2dt = !dt                       ? NULL
                       : !strcmp(dt, "float16")  ? "FP16"
                       : !strcmp(dt, "bfloat16") ? "BF16"
                                                 : "FP32";
    /* the precision asked as SPEC §2 allows: the parameter weights_datatype, or the weights
     * output's own datatype (its member, or its parameters'), by turns */
    static unsigned turn;
    const unsigned form = dt ? turn++ % 3 : 0;
    if (dt && form == 0)
        b_printf(body, ",\"weights_datatype\":\"%s\"", v2dt);
    if (json_object_size(sel) == 0) /* nothing chosen: the full map, asked the usual way */
        b_printf(body, ",\"need_weights\":true");
    b_printf(body, "},\"inputs\":[");
    bool first = true;
    for (int i = 0; i < 5; i++) {
        const golden_tensor *t = t5[i];
        if (!t->present)
            continue;
        b_printf(body, "%s{\"name\":\"%s\",\"datatype\":\"%s\",\"shape\":[", first ? "" : ",",
                 in_names[i], t->is_bool ? "BOOL" : "FP32");
        first = false;
        for (int dd = 0; dd < t->ndim; dd++)
            b_printf(body, dd ? ",%" PRId64 : "%" PRId64, t->shape[dd]);
        b_printf(body, "]");
        size_t size = (size_t)t->count * (t->is_bool ? 1 : 4);
        if (binary) {
            b_printf(body, ",\"parameters\":{\"binary_data_size\":%zu}}", size);
            b_add(&bin, t->is_bool ? (const void *)t->bytes : (const void *)t->data, size);
            continue;
        }
        b_printf(body, ",\"data\":[");
        for (int64_t e = 0; e < t->count; e++) {
            const char *sep = e ? "," : "";
            if (t->is_bool)
                b_printf(body, "%s%s", sep, t->bytes[e] ? "true" : "false");
            else if (isinf(t->data[e]))
                b_printf(body, "%s\"-inf\"", sep);
            else
                b_printf(body, "%s%.9g", sep, (double)t->data[e]);
        }
        b_printf(body, "]}");
    }
    const golden_positions *pos[2] = {&c->positions, &c->key_positions};
    static const char *const pos_names[2] = {"positions", "key_positions"};
    for (int i = 0; i < 2; i++) { /* the variant cases' positions, INT64 */
        const golden_positions *p = pos[i];
        if (!p->present)
            continue;
        const int64_t count = p->shape[0] * (p->ndim == 2 ? p->shape[1] : 1);
        b_printf(body, ",{\"name\":\"%s\",\"datatype\":\"INT64\",\"shape\":[%" PRId64, pos_names[i],
                 p->shape[0]);
        if (p->ndim == 2)
            b_printf(body, ",%" PRId64, p->shape[1]);
        if (binary) {
            b_printf(body, "],\"parameters\":{\"binary_data_size\":%" PRId64 "}}", count * 8);
            b_add(&bin, p->data, (size_t)count * 8);
            continue;
        }
        b_printf(body, "],\"data\":[");
        for (int64_t e = 0; e < count; e++)
            b_printf(body, e ? ",%" PRId64 : "%" PRId64, p->data[e]);
        b_printf(body, "]}");
    }
    b_printf(body, "]");
    if (form) {
        const bool top = json_object_get(sel, "top_k") != NULL;
        b_printf(body, ",\"outputs\":[{\"name\":\"output\"}%s,{\"name\":\"%s\",",
                 top ? ",{\"name\":\"attn_topk_indices\",\"datatype\":\"INT32\"}" : "",
                 top ? "attn_topk_values" : "attn_weights");
        b_printf(body,
                 form == 1 ? "\"datatype\":\"%s\"}]" : "\"parameters\":{\"datatype\":\"%s\"}}]",
                 v2dt);
    }
    b_printf(body, "}");
    *header_len = -1;
    if (bin.len) {
        *header_len = (long)body->len;
        b_add(body, bin.p, bin.len);
    }
    free(bin.p);
}

/* One output of a v2 reply into t (floats), by its datatype. */
static bool v2_output(tj_tensor *t, char dtype[12], const json_t *o, const char *bin, size_t *off,
                      size_t end)
{
    memset(t, 0, sizeof *t);
    const json_t *shape = json_object_get(o, "shape");
    const char *dt = json_string_value(json_object_get(o, "datatype"));
    if (!dt || json_array_size(shape) > 8)
        return false;
    snprintf(dtype, 12, "%s",
             !strcmp(dt, "FP16")    ? "float16"
             : !strcmp(dt, "BF16")  ? "bfloat16"
             : !strcmp(dt, "INT32") ? "int32"
             : !strcmp(dt, "FP32")  ? "float32"
                                    : "?");
    t->ndim = (int)json_array_size(shape);
    t->count = 1;
    for (int i = 0; i < t->ndim; i++) {
        t->shape[i] = json_integer_value(json_array_get(shape, (size_t)i));
        t->count *= t->shape[i];
    }
    t->data = malloc((size_t)t->count * 4 + 4);
    const json_t *bsz = json_object_get(json_object_get(o, "parameters"), "binary_data_size");
    if (!bsz) {
        const json_t *data = json_object_get(o, "data");
        if ((int64_t)json_array_size(data) != t->count)
            return false;
        for (int64_t e = 0; e < t->count; e++)
            t->data[e] = (float)json_number_value(json_array_get(data, (size_t)e));
        return true;
    }
    const size_t es = !strcmp(dtype, "float16") || !strcmp(dtype, "bfloat16") ? 2 : 4;
    if ((size_t)json_integer_value(bsz) != (size_t)t->count * es ||
        *off + (size_t)t->count * es > end)
        return false;
    const uint8_t *p = (const uint8_t *)bin + *off;
    for (int64_t e = 0; e < t->count; e++) {
        if (es == 2) { /* decoded by codec/half.h, which test_half holds to torch */
            uint16_t h = (uint16_t)(p[2 * e] | p[2 * e + 1] << 8);
            t->data[e] = !strcmp(dtype, "float16") ? srv_f16_to_f32(h) : srv_bf16_to_f32(h);
        } else if (!strcmp(dtype, "int32")) {
            int32_t x;
            memcpy(&x, p + 4 * e, 4);
            t->data[e] = (float)x;
        } else {
            memcpy(&t->data[e], p + 4 * e, 4);
        }
    }
    *off += (size_t)t->count * es;
    return true;
}

static void v2_infer(srv_daemon *d, const char *layer, const golden_case *c, const json_t *sel,
                     bool average, bool binary, answer *a)
{
    memset(a, 0, sizeof *a);
    bytes body = {0};
    long hl;
    v2_body(&body, &hl, c, sel, average, binary);
    char path[128], line[96];
    snprintf(path, sizeof path, "/v2/models/%s/infer", layer);
    snprintf(line, sizeof line, "Inference-Header-Content-Length: %ld", hl);
    const char *hdrs[2] = {hl >= 0 ? line : NULL, NULL};
    hc_opts o = {.headers = hdrs};
    hc_response r;
    hc_request(d, "POST", path, hl >= 0 ? "application/octet-stream" : "application/json", body.p,
               (long)body.len, &o, &r);
    free(body.p);
    const bool topk = json_object_get(sel, "top_k") != NULL;
    if (CHECK(r.status == 200, "%s: /v2 (%s) %ld %.300s", c->name, binary ? "binary" : "JSON",
              r.status, r.body)) {
        char v[32];
        size_t hlen = r.len;
        if (hc_header(&r, "Inference-Header-Content-Length", v, sizeof v))
            hlen = (size_t)strtoull(v, NULL, 10);
        json_t *j = hlen <= r.len ? json_loadb(r.body, hlen, 0, NULL) : NULL;
        json_t *outs = json_object_get(j, "outputs");
        size_t off = hlen;
        bool ok = json_array_size(outs) == (topk ? 3u : 2u);
        char dt[12], idt[12] = "";
        for (size_t i = 0; ok && i < json_array_size(outs); i++) {
            const json_t *out = json_array_get(outs, i);
            const char *name = json_string_value(json_object_get(out, "name"));
            tj_tensor *t = !name                                                       ? NULL
                           : !strcmp(name, "output")                                   ? &a->output
                           : !strcmp(name, "attn_topk_indices")                        ? &a->indices
                           : !strcmp(name, topk ? "attn_topk_values" : "attn_weights") ? &a->values
                                                                                       : NULL;
            ok = t && !t->data &&
                 v2_output(t,
                           t == &a->values    ? a->dtype
                           : t == &a->indices ? idt
                                              : dt,
                           out, r.body, &off, r.len);
        }
        a->ok = ok && off == r.len && (!topk || !strcmp(idt, "int32"));
        CHECK(a->ok, "%s: /v2 (%s): the outputs %s", c->name, binary ? "binary" : "JSON",
              topk ? "output, attn_topk_indices (INT32), attn_topk_values"
                   : "output, attn_weights");
        json_decref(j);
    }
    hc_response_free(&r);
}

/* ---------------------------------------------------------------------------------------------- */

/* The answer a of a float16 / bfloat16 request is the float32 answer f rounded, bit for bit. */
static void check_rounded(const char *what, const answer *a, const answer *f, const char *dtype)
{
    if (!a->ok || !f->ok || a->values.count != f->values.count)
        return;
    srv_wire_dtype d = !strcmp(dtype, "float16") ? SRV_WIRE_F16 : SRV_WIRE_BF16;
    int64_t bad = -1;
    for (int64_t i = 0; i < f->values.count && bad < 0; i++) {
        float want;
        srv_f32_round_array(&want, &f->values.data[i], 1, d);
        if (memcmp(&want, &a->values.data[i], 4))
            bad = i;
    }
    CHECK(bad < 0, "%s: %s [%" PRId64 "] is %.9g, the float32 answer rounded is not", what, dtype,
          bad, bad >= 0 ? a->values.data[bad] : 0.0);
    CHECK(!memcmp(a->output.data, f->output.data, (size_t)f->output.count * 4),
          "%s: the output does not depend on the dtype", what);
}

static const char *select_dir = "tests/golden_select";

static void replay(srv_daemon *d, const golden_case *c, int index)
{
    char sel_path[512];
    const char *base = strrchr(c->path, '/');
    snprintf(sel_path, sizeof sel_path, "%s/%s", select_dir, base ? base + 1 : c->path);
    json_error_t jerr;
    json_t *doc = json_load_file(sel_path, 0, &jerr);
    if (!CHECK(doc, "%s: %s", sel_path, jerr.text))
        return;
    char layer[32], path[96];
    snprintf(layer, sizeof layer, "s%d", index);
    snprintf(path, sizeof path, "/v1/layers/%s", layer);
    size_t n = strlen(c->config_json) + strlen(c->weights_json) + 64;
    char *put = malloc(n);
    snprintf(put, n, "{\"config\":%s,\"weights\":%s}", c->config_json, c->weights_json);
    hc_response r;
    hc_request(d, "PUT", path, NULL, put, -1, NULL, &r);
    free(put);
    CHECK(r.status == 201, "%s: PUT %ld %.300s", c->name, r.status, r.body);
    hc_response_free(&r);

    const json_t *sels = json_object_get(doc, "selections");
    for (size_t k = 0; k < json_array_size(sels); k++) {
        const json_t *s = json_array_get(sels, k);
        const json_t *sel = json_object_get(s, "weights_select");
        const bool average = json_is_true(json_object_get(s, "average_attn_weights"));
        const json_t *exp = json_object_get(s, "expected");
        const json_t *topk = json_object_get(exp, "attn_topk");
        const json_t *want_v =
            topk ? json_object_get(topk, "values") : json_object_get(exp, "attn_weights");
        const json_t *want_i = topk ? json_object_get(topk, "indices") : NULL;
        const char *dt = json_string_value(json_object_get(sel, "dtype"));
        const char *dtype = dt ? dt : "float32";
        char *sel_text = json_dumps(sel, JSON_COMPACT);
        char what[512];

        static const char *const encs[3] = {"nested", "flat", "base64"};
        answer f32 = {0};
        if (strcmp(dtype, "float32"))
            v1_forward(d, layer, c, sel, average, "base64", "float32", &f32);
        for (int e = 0; e < 5; e++) {
            answer a;
            if (e < 3) {
                v1_forward(d, layer, c, sel, average, encs[e], NULL, &a);
                snprintf(what, sizeof what, "%s %s avg=%d /v1 %s", c->name, sel_text, average,
                         encs[e]);
                if (a.ok && e > 0)
                    CHECK(!strcmp(a.dtype, dtype), "%s: dtype \"%s\", asked %s", what, a.dtype,
                          dtype);
            } else {
                v2_infer(d, layer, c, sel, average, e == 4, &a);
                snprintf(what, sizeof what, "%s %s avg=%d /v2 %s", c->name, sel_text, average,
                         e == 4 ? "binary" : "JSON");
                if (a.ok)
                    CHECK(!strcmp(a.dtype, dtype), "%s: datatype %s, asked %s", what, a.dtype,
                          dtype);
            }
            if (a.ok) {
                char ow[600];
                snprintf(ow, sizeof ow, "%s: output", what);
                if (CHECK(a.output.count == c->output.count, "%s: output count", what))
                    check_close_array(__FILE__, __LINE__, ow, a.output.data, c->output.data,
                                      c->output.count, NULL);
                compare(what, &a.values, &a.indices, want_v, want_i, dtype);
                if (strcmp(dtype, "float32"))
                    check_rounded(what, &a, &f32, dtype);
            }
            answer_free(&a);
        }
        answer_free(&f32);

        /* the trace: scores (per head) and attn_weights take the selection */
        char *body =
            v1_body(c, sel, average, encs[(index + k) % 3], NULL, "[\"scores\",\"attn_weights\"]");
        snprintf(path, sizeof path, "/v1/layers/%s/trace", layer);
        hc_request(d, "POST", path, NULL, body, -1, NULL, &r);
        free(body);
        snprintf(what, sizeof what, "%s %s avg=%d trace", c->name, sel_text, average);
        if (CHECK(r.status == 200, "%s: %ld %.300s", what, r.status, r.body)) {
            json_t *j = hc_json(&r);
            const json_t *st = json_object_get(j, "stages");
            const json_t *want_s = json_object_get(s, "expected_scores");
            for (int i = 0; i < 2 && CHECK(json_array_size(st) == 2, "%s: two stages", what); i++) {
                const json_t *stage = json_array_get(st, (size_t)i);
                tj_tensor tv = {0}, ti = {0};
                bool ok = tj_read(&tv, json_object_get(stage, "tensor")) == 0 &&
                          (!topk || tj_read(&ti, json_object_get(stage, "indices")) == 0);
                char sw[600];
                snprintf(sw, sizeof sw, "%s %s", what, i ? "attn_weights" : "scores");
                if (CHECK(ok, "%s: tensor%s", sw, topk ? " and indices" : "")) {
                    if (i == 0)
                        compare(sw, &tv, &ti, topk ? json_object_get(want_s, "values") : want_s,
                                topk ? json_object_get(want_s, "indices") : NULL, dtype);
                    else
                        compare(sw, &tv, &ti, want_v, want_i, dtype);
                }
                const json_t *axes = json_object_get(stage, "axes");
                const char *last =
                    json_string_value(json_array_get(axes, json_array_size(axes) - 1));
                CHECK(last && last[0] == (topk ? 'T' : 'S'), "%s: last axis %s", sw,
                      topk ? "T" : "S");
                tj_free(&tv);
                tj_free(&ti);
            }
            json_decref(j);
        }
        hc_response_free(&r);
        free(sel_text);
    }
    snprintf(path, sizeof path, "/v1/layers/%s", layer);
    hc_request(d, "DELETE", path, NULL, NULL, 0, NULL, &r);
    CHECK(r.status == 204, "%s: DELETE %ld", c->name, r.status);
    hc_response_free(&r);
    json_decref(doc);
}

static void replay_one(golden_case *c, int index, void *d)
{
    replay(d, c, index);
    golden_free(c);
}

/* The variant cases that have selections (the large ones carry no trace, so none). */
static void replay_only_selected(golden_case *c, int index, void *d)
{
    char sel_path[512];
    const char *base = strrchr(c->path, '/');
    snprintf(sel_path, sizeof sel_path, "%s/%s", select_dir, base ? base + 1 : c->path);
    FILE *f = fopen(sel_path, "r");
    if (f) {
        fclose(f);
        replay(d, c, 1000 + index);
    }
    golden_free(c);
}

/* ---------------------------------------------------------------------------------------------- */
/* Rules: every bad selection a 400 naming its member; nothing else changes */

static const char *LAYER_BODY =
    "{\"config\":{\"embed_dim\":8,\"num_heads\":2,\"add_zero_attn\":true},\"init\":{\"seed\":3}}";
/* N=2, L=3, S0=3 (S=4 with the zero key) */
static const char *QUERY = "[[[1,0,0,0,0,0,0,1],[0,1,0,0,0,0,1,0],[0,0,1,0,0,1,0,0]],"
                           "[[1,1,0,0,0,0,0,0],[0,0,1,1,0,0,0,0],[0,0,0,0,1,1,0,0]]]";

static void v1_rule(srv_daemon *d, const char *sel, int status, const char *code, const char *field)
{
    char body[1024];
    snprintf(body, sizeof body, "{\"query\":%s,\"weights_select\":%s}", QUERY, sel);
    hc_response r;
    hc_request(d, "POST", "/v1/layers/rules/forward", NULL, body, -1, NULL, &r);
    HC_CHECK_ERROR(r, status, code, field);
    char msg[64];
    snprintf(msg, sizeof msg, "%s", field);
    CHECK(strstr(r.body, msg) != NULL, "the message names %s: %.300s", field, r.body);
    hc_response_free(&r);
    /* the trace refuses it the same way */
    snprintf(body, sizeof body, "{\"query\":%s,\"weights_select\":%s,\"stages\":[\"scores\"]}",
             QUERY, sel);
    hc_request(d, "POST", "/v1/layers/rules/trace", NULL, body, -1, NULL, &r);
    HC_CHECK_ERROR(r, status, code, field);
    hc_response_free(&r);
}

static void v2_rule(srv_daemon *d, const char *params, int status, const char *part)
{
    char body[1024];
    snprintf(body, sizeof body,
             "{\"parameters\":{%s},\"inputs\":[{\"name\":\"query\",\"datatype\":\"FP32\","
             "\"shape\":[2,3,8],\"data\":%s}]}",
             params, QUERY);
    hc_response r;
    hc_request(d, "POST", "/v2/models/rules/infer", NULL, body, -1, NULL, &r);
    json_t *j = hc_json(&r);
    const char *msg = json_string_value(json_object_get(j, "error"));
    CHECK(r.status == status && msg && strstr(msg, part),
          "/v2 %s: want %d naming %s, got %ld %.300s", params, status, part, r.status, r.body);
    json_decref(j);
    hc_response_free(&r);
}

static void describe_rule(srv_daemon *d, const char *query, int status, const char *code,
                          const char *field)
{
    char path[512];
    snprintf(path, sizeof path, "/v1/layers/rules?%s", query);
    hc_response r;
    hc_request(d, "GET", path, NULL, NULL, 0, NULL, &r);
    HC_CHECK_ERROR(r, status, code, field);
    hc_response_free(&r);
}

static void test_rules(srv_daemon *d)
{
    hc_response r;
    hc_request(d, "PUT", "/v1/layers/rules", NULL, LAYER_BODY, -1, NULL, &r);
    CHECK(r.status == 201, "PUT rules: %ld %s", r.status, r.body);
    hc_response_free(&r);
    char body[1024];
    snprintf(body, sizeof body, "{\"query\":%s,\"encoding\":\"base64\"}", QUERY);
    hc_request(d, "POST", "/v1/layers/rules/forward", NULL, body, -1, NULL, &r);
    char *before = strdup(r.body);
    hc_response_free(&r);

    struct {
        const char *sel;
        int status;
        const char *code, *field;
    } v1[] = {
        {"{\"heads\":[2]}", 400, "bad_request", "weights_select.heads"}, /* outside 0..H-1 */
        {"{\"heads\":[-1]}", 400, "bad_request", "weights_select.heads"},
        {"{\"heads\":[1,0,1]}", 400, "bad_request", "weights_select.heads"}, /* twice */
        {"{\"heads\":[]}", 400, "bad_request", "weights_select.heads"},
        {"{\"heads\":[0.5]}", 400, "bad_request", "weights_select.heads"},
        {"{\"heads\":1}", 400, "bad_request", "weights_select.heads"},
        {"{\"queries\":[0,4]}", 400, "bad_request", "weights_select.queries"}, /* outside L */
        {"{\"queries\":[-1,2]}", 400, "bad_request", "weights_select.queries"},
        {"{\"queries\":[2,2]}", 400, "bad_request", "weights_select.queries"}, /* empty */
        {"{\"queries\":[2,1]}", 400, "bad_request", "weights_select.queries"},
        {"{\"queries\":[1]}", 400, "bad_request", "weights_select.queries"},
        {"{\"keys\":[0,5]}", 400, "bad_request", "weights_select.keys"}, /* S = 4 */
        {"{\"keys\":[4,4]}", 400, "bad_request", "weights_select.keys"},
        {"{\"keys\":\"0:2\"}", 400, "bad_request", "weights_select.keys"},
        {"{\"top_k\":0}", 400, "bad_request", "weights_select.top_k"}, /* k < 1 */
        {"{\"top_k\":-2}", 400, "bad_request", "weights_select.top_k"},
        {"{\"top_k\":1.5}", 400, "bad_request", "weights_select.top_k"},
        {"{\"pool\":[0,2]}", 400, "bad_request", "weights_select.pool"}, /* size < 1 */
        {"{\"pool\":[2,-1]}", 400, "bad_request", "weights_select.pool"},
        {"{\"pool\":[2,2],\"top_k\":1}", 400, "bad_request", "weights_select.pool"},
        {"{\"pool\":\"2x2\"}", 400, "bad_request", "weights_select.pool"},
        {"{\"pool\":[2,2],\"pool_op\":\"sum\"}", 400, "bad_request", "weights_select.pool_op"},
        {"{\"dtype\":\"float64\"}", 400, "bad_request", "weights_select.dtype"},
        {"{\"dtype\":\"half\"}", 400, "bad_request", "weights_select.dtype"},
        {"{\"head\":[0]}", 400, "unknown_field", "weights_select.head"}, /* unknown member */
        {"[0]", 400, "bad_request", "weights_select"},
    };
    for (size_t i = 0; i < sizeof v1 / sizeof v1[0]; i++)
        v1_rule(d, v1[i].sel, v1[i].status, v1[i].code, v1[i].field);

    struct {
        const char *params;
        const char *part;
    } v2[] = {
        {"\"weights_heads\":\"0,2\"", "weights_heads[1] is 2"},
        {"\"weights_heads\":\"1,1\"", "weights_heads[1] is 1"},
        {"\"weights_heads\":\"0;1\"", "weights_heads"},
        {"\"weights_heads\":\"\"", "weights_heads"},
        {"\"weights_queries\":\"0:4\"", "weights_queries"},
        {"\"weights_queries\":\"2:2\"", "weights_queries"},
        {"\"weights_queries\":\"0-2\"", "weights_queries"},
        {"\"weights_keys\":\"1:5\"", "weights_keys"},
        {"\"weights_top_k\":0", "weights_top_k"},
        {"\"weights_top_k\":\"x\"", "weights_top_k"},
        {"\"weights_top_k\":true", "weights_top_k"},
        {"\"weights_pool\":\"0x2\"", "weights_pool"},
        {"\"weights_pool\":\"2\"", "weights_pool"},
        {"\"weights_pool\":\"2x2\",\"weights_top_k\":1", "weights_pool"},
        {"\"weights_pool_op\":\"min\"", "weights_pool_op"},
        {"\"weights_datatype\":\"FP64\"", "weights_datatype"},
        {"\"weights_datatype\":\"float16\"", "weights_datatype"},
        {"\"weights_head\":\"0\"", "weights_head"},
        {"\"weights_top_k\":2,\"need_weights\":false", "need_weights"},
    };
    hc_request(d, "PUT", "/v1/layers/rules", NULL, LAYER_BODY, -1, NULL, &r); /* same layer */
    hc_response_free(&r);
    for (size_t i = 0; i < sizeof v2 / sizeof v2[0]; i++)
        v2_rule(d, v2[i].params, 400, v2[i].part);
    /* null parameters are absent, as /v1 reads a null member: the output alone */
    char v2body[1024];
    snprintf(v2body, sizeof v2body,
             "{\"parameters\":{\"weights_heads\":null,\"weights_top_k\":null,"
             "\"need_weights\":null,\"is_causal\":null},\"inputs\":[{\"name\":\"query\","
             "\"datatype\":\"FP32\",\"shape\":[2,3,8],\"data\":%s}]}",
             QUERY);
    hc_request(d, "POST", "/v2/models/rules/infer", NULL, v2body, -1, NULL, &r);
    {
        json_t *j = hc_json(&r);
        json_t *outs = json_object_get(j, "outputs");
        CHECK(r.status == 200 && json_array_size(outs) == 1 &&
                  strcmp(json_string_value(json_object_get(json_array_get(outs, 0), "name")),
                         "output") == 0,
              "/v2 with null weights_* and flags: 200, the output alone (%ld %.300s)", r.status,
              r.body);
        json_decref(j);
    }
    hc_response_free(&r);

    describe_rule(d, "L=3&weights_heads=5", 400, "bad_request", "weights_heads");
    describe_rule(d, "L=3&weights_pool=2", 400, "bad_request", "weights_pool");
    describe_rule(d, "L=3&weights_dtype=FP16", 400, "bad_request", "weights_dtype");
    describe_rule(d, "weights_top_k=2", 400, "missing_field", "L");
    describe_rule(d, "L=3&average_attn_weights=yes&weights_top_k=1", 400, "bad_request",
                  "average_attn_weights");
    describe_rule(d, "L=3&weights_top_k=2&weights_top=1", 400, "unknown_field", "weights_top");
    describe_rule(d, "L=3&S=4&L=16", 400, "bad_request", "L"); /* which L? given twice */
    describe_rule(d, "L=3&weights_heads=0&weights_heads=1", 400, "bad_request", "weights_heads");

    /* nothing changed: the same output, bit for bit */
    hc_request(d, "POST", "/v1/layers/rules/forward", NULL, body, -1, NULL, &r);
    json_t *a = json_loads(before, 0, NULL), *b = hc_json(&r);
    CHECK(json_equal(json_object_get(a, "output"), json_object_get(b, "output")),
          "the layer answers as before the bad selections");
    json_decref(a);
    json_decref(b);
    hc_response_free(&r);
    free(before);
}

/* The size limit counts the reply: a selection is served where the full map is refused. */
static void test_limits(void)
{
    srv_options opt;
    hc_options(&opt);
    opt.max_tensor_elements = 4096; /* the layer and the query [64,16] fit; 4 heads x 64 x 64 not */
    srv_daemon *d = hc_start(&opt);
    if (!CHECK(d != NULL, "daemon with a small limit"))
        return;
    hc_response r;
    hc_request(d, "PUT", "/v1/layers/big", NULL,
               "{\"config\":{\"embed_dim\":16,\"num_heads\":4},\"init\":{\"seed\":1}}", -1, NULL,
               &r);
    CHECK(r.status == 201, "PUT big: %ld %s", r.status, r.body);
    hc_response_free(&r);
    json_t *q = json_array(), *row;
    for (int i = 0; i < 64; i++) {
        row = json_array();
        for (int e = 0; e < 16; e++)
            json_array_append_new(row, json_real((i * 7 + e * 3) % 11 / 10.0 - 0.5));
        json_array_append_new(q, row);
    }
    json_t *body =
        json_pack("{s:o, s:b, s:b}", "query", q, "need_weights", 1, "average_attn_weights", 0);
    char *text = json_dumps(body, JSON_COMPACT);
    hc_request(d, "POST", "/v1/layers/big/forward", NULL, text, -1, NULL, &r);
    HC_CHECK_ERROR(r, 413, "too_large", "need_weights");
    /* the refusal says how big, which limit, and the way out */
    CHECK(strstr(r.body, "[4, 64, 64] per head") && strstr(r.body, "16384 elements") &&
              strstr(r.body, "limit of 4096") && strstr(r.body, "--max-tensor-elements") &&
              strstr(r.body, "selection"),
          "the 413 names the map's shape, its size, the limit and a selection: %.400s", r.body);
    hc_response_free(&r);
    /* a trace asks for the map by its stages (every stage when it names none), not need_weights */
    hc_request(d, "POST", "/v1/layers/big/trace", NULL, text, -1, NULL, &r);
    HC_CHECK_ERROR(r, 413, "too_large", "stages");
    CHECK(strstr(r.body, "attn_weights out of the trace"),
          "the trace's 413 says to leave attn_weights out of its stages: %.400s", r.body);
    hc_response_free(&r);
    free(text);
    json_object_del(body, "need_weights");
    json_object_set_new(body, "weights_select",
                        json_pack("{s:[i], s:[i,i]}", "heads", 2, "queries", 0, 16));
    text = json_dumps(body, JSON_COMPACT);
    hc_request(d, "POST", "/v1/layers/big/forward", NULL, text, -1, NULL, &r);
    json_t *j = hc_json(&r);
    tj_tensor w;
    int64_t want[3] = {1, 16, 64}; /* unbatched: [h', L', S'] */
    CHECK(r.status == 200 && tj_read(&w, json_object_get(j, "attn_weights")) == 0 &&
              tj_shape_is(&w, 3, want),
          "one head's 16 rows are served where all four heads are refused: %ld %.200s", r.status,
          r.body);
    tj_free(&w);
    json_decref(j);
    hc_response_free(&r);
    free(text);
    json_object_set_new(body, "weights_select",
                        json_pack("{s:[i,i], s:s}", "pool", 1, 1, "dtype", "float16"));
    text = json_dumps(body, JSON_COMPACT);
    hc_request(d, "POST", "/v1/layers/big/forward", NULL, text, -1, NULL, &r);
    HC_CHECK_ERROR(r, 413, "too_large", "weights_select");
    hc_response_free(&r);
    free(text);
    /* averaged over the chosen heads the reply is one [64, 64] map, 4096 elements: it fits,
     * however many heads are chosen (the limit counts the reply, not the heads behind it) */
    json_object_set_new(body, "average_attn_weights", json_true());
    json_object_set_new(body, "weights_select", json_pack("{s:[i,i,i,i]}", "heads", 0, 1, 2, 3));
    text = json_dumps(body, JSON_COMPACT);
    hc_request(d, "POST", "/v1/layers/big/forward", NULL, text, -1, NULL, &r);
    j = hc_json(&r);
    int64_t avg_shape[2] = {64, 64};
    CHECK(r.status == 200 && tj_read(&w, json_object_get(j, "attn_weights")) == 0 &&
              tj_shape_is(&w, 2, avg_shape),
          "four heads averaged, [64, 64], are served at a limit of 4096: %ld %.200s", r.status,
          r.body);
    tj_free(&w);
    json_decref(j);
    hc_response_free(&r);
    free(text);
    json_decref(body);
    hc_request(d, "GET", "/v1/layers/big?L=64&weights_heads=0,1,2,3", NULL, NULL, 0, NULL, &r);
    j = hc_json(&r);
    json_t *wsa = json_object_get(j, "weights_select");
    CHECK(r.status == 200 && json_integer_value(json_object_get(wsa, "elements")) == 4096 &&
              json_is_true(json_object_get(wsa, "fits")),
          "describe: four heads averaged fit: %.300s", r.body);
    json_decref(j);
    hc_response_free(&r);
    /* describe says so beforehand */
    hc_request(d, "GET", "/v1/layers/big?L=64&weights_heads=2&weights_queries=0:16", NULL, NULL, 0,
               NULL, &r);
    j = hc_json(&r);
    json_t *ws = json_object_get(j, "weights_select");
    CHECK(r.status == 200 && json_integer_value(json_object_get(ws, "elements")) == 1024 &&
              json_is_true(json_object_get(ws, "fits")),
          "describe: 1024 elements that fit: %.300s", r.body);
    json_decref(j);
    hc_response_free(&r);
    hc_request(d, "GET", "/v1/layers/big?L=64&weights_pool=1x1&average_attn_weights=false", NULL,
               NULL, 0, NULL, &r);
    j = hc_json(&r);
    ws = json_object_get(j, "weights_select");
    CHECK(r.status == 200 && json_integer_value(json_object_get(ws, "elements")) == 4 * 64 * 64 &&
              json_is_false(json_object_get(ws, "fits")),
          "describe: the full map does not fit: %.300s", r.body);
    json_decref(j);
    hc_response_free(&r);
    hc_stop(d);
}

/* Describe's numbers for a 16k-token selection (no pass runs). */
static void test_describe(srv_daemon *d)
{
    hc_response r;
    hc_request(d, "GET",
               "/v1/layers/rules?L=16384&weights_heads=1&weights_top_k=8&weights_dtype=float16",
               NULL, NULL, 0, NULL, &r);
    json_t *j = hc_json(&r), *ws = json_object_get(j, "weights_select");
    json_t *sizes = json_object_get(ws, "bytes");
    /* [1,16384,8]: values 2 bytes, indices 4 */
    CHECK(r.status == 200 && json_integer_value(json_object_get(ws, "elements")) == 16384 * 8 &&
              json_integer_value(json_object_get(sizes, "binary")) == 16384 * 8 * 6 &&
              json_integer_value(json_object_get(sizes, "base64")) ==
                  (16384 * 8 * 2 + 2) / 3 * 4 + (16384 * 8 * 4 + 2) / 3 * 4 &&
              json_integer_value(json_object_get(ws, "S")) == 16385 &&
              !strcmp(json_string_value(json_object_get(ws, "dtype")), "float16"),
          "describe: one head's top 8 at 16k in float16: %.400s", r.body);
    json_decref(j);
    hc_response_free(&r);
    /* the precision in /v2's name too, the same answer; both names at once: a 400 */
    hc_request(d, "GET",
               "/v1/layers/rules?L=16384&weights_heads=1&weights_top_k=8&weights_datatype=FP16",
               NULL, NULL, 0, NULL, &r);
    j = hc_json(&r);
    ws = json_object_get(j, "weights_select");
    CHECK(r.status == 200 &&
              json_integer_value(json_object_get(json_object_get(ws, "bytes"), "binary")) ==
                  16384 * 8 * 6 &&
              !strcmp(json_string_value(json_object_get(ws, "dtype")), "float16"),
          "describe: weights_datatype=FP16 as weights_dtype=float16: %.300s", r.body);
    json_decref(j);
    hc_response_free(&r);
    hc_request(d, "GET", "/v1/layers/rules?L=16&weights_dtype=float16&weights_datatype=FP16", NULL,
               NULL, 0, NULL, &r);
    CHECK(r.status == 400 && strstr(r.body, "give one"), "describe: both precisions: 400 (%ld %s)",
          r.status, r.body);
    hc_response_free(&r);
    hc_request(d, "GET",
               "/v1/layers/"
               "rules?L=100&S=50&N=2&weights_pool=8x8&weights_keys=0:51&average_attn_weights=false",
               NULL, NULL, 0, NULL, &r);
    j = hc_json(&r);
    ws = json_object_get(j, "weights_select");
    json_t *shape = json_object_get(ws, "shape");
    CHECK(r.status == 200 && json_array_size(shape) == 4 &&
              json_integer_value(json_array_get(shape, 1)) == 2 &&
              json_integer_value(json_array_get(shape, 2)) == 13 &&
              json_integer_value(json_array_get(shape, 3)) == 7,
          "describe: pooled [2,2,13,7]: %.400s", r.body);
    json_decref(j);
    hc_response_free(&r);
    hc_request(d, "GET", "/v1/layers/rules?L=4", NULL, NULL, 0, NULL, &r);
    j = hc_json(&r);
    CHECK(r.status == 200 && !json_object_get(j, "weights_select"),
          "describe without a selection has no weights_select");
    json_decref(j);
    hc_response_free(&r);
}

/* The text of a reply's member `name` (its value, from the first bracket to the one that closes
 * it): its length in *len; NULL when absent. */
static const char *member_text(const char *body, const char *name, size_t *len)
{
    char key[64];
    snprintf(key, sizeof key, "\"%s\":", name);
    const char *p = strstr(body, key);
    if (!p)
        return NULL;
    p += strlen(key);
    int depth = 0;
    const char *q = p;
    do {
        depth += *q == '[' || *q == '{';
        depth -= *q == ']' || *q == '}';
        q++;
    } while (*q && depth > 0);
    *len = (size_t)(q - p);
    return p;
}

/* Selections at the edges of int64 and describe's figures past them: a pool block near 2^63 is
 * one block over its axis (it crashed the daemon), describe's bytes saturate instead of wrapping,
 * and its JSON bound holds for a reply of size-1 axes (brackets included). */
static void test_edges(srv_daemon *d)
{
    hc_response r;
    hc_request(d, "PUT", "/v1/layers/edges", NULL,
               "{\"config\":{\"embed_dim\":8,\"num_heads\":2},\"init\":{\"seed\":3}}", -1, NULL,
               &r);
    CHECK(r.status == 201, "PUT edges: %ld %s", r.status, r.body);
    hc_response_free(&r);
    static const char *const q =
        "\"query\":[[1,2,3,4,5,6,7,8],[1,0,0,0,0,0,0,1],[0,1,0,1,0,1,0,1]]";
    static const struct {
        const char *huge, *same;
    } pools[] = {
        {"[1,9223372036854775807]", "[1,3]"},
        {"[9223372036854775807,2]", "[3,2]"},
        {"[4611686018427387905,9223372036854775806]", "[3,3]"},
        {"[2,9223372036854775807],\"keys\":[1,3]", "[2,2],\"keys\":[1,3]"},
        {"[9223372036854775807,9223372036854775807],\"queries\":[1,3],\"keys\":[2,3]",
         "[2,1],\"queries\":[1,3],\"keys\":[2,3]"},
    };
    for (size_t i = 0; i < sizeof pools / sizeof pools[0]; i++) {
        char body[512];
        hc_response a, b;
        for (int op = 0; op < 2; op++) {
            const char *pop = op ? "max" : "mean";
            snprintf(body, sizeof body, "{%s,\"weights_select\":{\"pool\":%s,\"pool_op\":\"%s\"}}",
                     q, pools[i].huge, pop);
            hc_request(d, "POST", "/v1/layers/edges/forward", NULL, body, -1, NULL, &a);
            snprintf(body, sizeof body, "{%s,\"weights_select\":{\"pool\":%s,\"pool_op\":\"%s\"}}",
                     q, pools[i].same, pop);
            hc_request(d, "POST", "/v1/layers/edges/forward", NULL, body, -1, NULL, &b);
            CHECK(a.status == 200 && b.status == 200 && !strcmp(a.body, b.body),
                  "pool %s (%s) is pool %s over its axes: %ld %.200s / %.200s", pools[i].huge, pop,
                  pools[i].same, a.status, a.body, b.body);
            hc_response_free(&a);
            hc_response_free(&b);
        }
    }
    hc_request(d, "POST", "/v2/models/edges/infer", NULL,
               "{\"inputs\":[{\"name\":\"query\",\"datatype\":\"FP32\",\"shape\":[2,8],\"data\":"
               "[1,2,3,4,5,6,7,8,1,0,0,0,0,0,0,1]}],\"parameters\":{\"weights_pool\":"
               "\"9223372036854775807x1\"}}",
               -1, NULL, &r);
    CHECK(r.status == 200 && strstr(r.body, "\"attn_weights\""),
          "/v2 weights_pool near 2^63: %ld %.200s", r.status, r.body);
    hc_response_free(&r);

    /* describe's JSON bound against a reply [1,1,1,1] (batched, per head): brackets and all */
    hc_request(d, "GET", "/v1/layers/edges?L=1&S=1&weights_heads=0&average_attn_weights=false",
               NULL, NULL, 0, NULL, &r);
    json_t *j = hc_json(&r);
    const json_int_t bound = json_integer_value(json_object_get(
        json_object_get(json_object_get(j, "weights_select"), "bytes"), "json_at_most"));
    json_decref(j);
    hc_response_free(&r);
    for (int flat = 0; flat < 2; flat++) {
        char body[256];
        snprintf(body, sizeof body,
                 "{\"query\":[[[-1.17549435e-38,3,3,4,5,6,7,8]]],\"average_attn_weights\":false,"
                 "\"weights_select\":{\"heads\":[0]}%s}",
                 flat ? ",\"encoding\":\"flat\"" : "");
        hc_request(d, "POST", "/v1/layers/edges/forward", NULL, body, -1, NULL, &r);
        size_t len = 0;
        const char *t = member_text(r.body ? r.body : "", "attn_weights", &len);
        CHECK(r.status == 200 && t && (json_int_t)len <= bound,
              "describe's json_at_most %lld holds for the %s reply of %zu characters: %.200s",
              (long long)bound, flat ? "flat" : "nested", len, r.body);
        hc_response_free(&r);
    }

    /* a pass far past every limit: figures saturate at 2^63 - 1, never wrap */
    hc_request(
        d, "GET",
        "/v1/layers/edges?L=1048576&S=1048576&N=1048576&weights_heads=0&average_attn_weights="
        "false",
        NULL, NULL, 0, NULL, &r);
    j = hc_json(&r);
    json_t *ws = json_object_get(j, "weights_select"), *sizes = json_object_get(ws, "bytes");
    CHECK(r.status == 200 &&
              json_integer_value(json_object_get(sizes, "binary")) == (json_int_t)1 << 62 &&
              json_integer_value(json_object_get(sizes, "base64")) > 0 &&
              json_integer_value(json_object_get(sizes, "json_at_most")) == INT64_MAX &&
              json_integer_value(
                  json_object_get(json_object_get(ws, "full_map"), "binary_bytes")) == INT64_MAX &&
              json_is_false(json_object_get(ws, "fits")),
          "describe at 2^60 elements a head: %.400s", r.body);
    json_decref(j);
    hc_response_free(&r);
}

int main(int argc, char **argv)
{
    srv_options opt;
    hc_options(&opt);
    srv_daemon *d = hc_start(&opt);
    if (!CHECK(d != NULL, "daemon"))
        return check_report();
    test_rules(d);
    test_describe(d);
    test_edges(d);
    if (argc > 2) {
        select_dir = argv[2];
        golden_each(argv[1], replay_one, d);
    } else {
        golden_each("tests/golden", replay_one, d);
        select_dir = "tests/golden_select_variants"; /* head_dim, GQA, RoPE, ALiBi, windows */
        golden_each("tests/golden_variants", replay_only_selected, d);
    }
    hc_stop(d);
    test_limits();
    return check_report();
}
