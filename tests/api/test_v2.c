/*
 * test_v2.c - the Open Inference Protocol over HTTP, against an in-process daemon on port 0:
 * every /v2 endpoint (and its /versions/{v} form), the protocol documentation's own examples as
 * written (with our input names), every torch golden case through /v2/.../infer with JSON, binary
 * and mixed inputs and JSON or binary outputs (checked against torch's numbers, and against /v1
 * forward on the same request bit for bit), outputs selection, and every error the protocol
 * promises (status and {"error": "..."} body). The cases of the extensions beyond torch
 * (tests/golden_variants/) go through infer too, their positions as INT64 or INT32 inputs.
 *
 * Requests are built here with printf("%.9g") and raw bytes, not with the daemon's own codec.
 */
#include <inttypes.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "golden.h"
#include "http_client.h"
#include "tensor_json.h"
#include "v2_examples.h"

/* A growable byte string for building bodies (test-local; the daemon's srv_buf is not used). */
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
    b_add(b, tmp, (size_t)n);
}

/* POSTs body to path; header_len >= 0 sends Inference-Header-Content-Length: header_len. */
static void post(srv_daemon *d, const char *path, const char *body, size_t len, long header_len,
                 hc_response *r)
{
    char line[96];
    const char *hdrs[2] = {NULL, NULL};
    if (header_len >= 0) {
        snprintf(line, sizeof line, "Inference-Header-Content-Length: %ld", header_len);
        hdrs[0] = line;
    }
    hc_opts o = {.headers = hdrs};
    hc_request(d, "POST", path, header_len >= 0 ? "application/octet-stream" : "application/json",
               body, (long)len, &o, r);
}

/* True when r is a protocol error: the status, and a body that is exactly {"error": string} whose
 * message contains part, and the request's id ("request_id", the reply's X-Request-Id). */
static bool is_v2_error(const hc_response *r, long status, const char *part)
{
    json_t *j = hc_json(r);
    const char *msg = json_string_value(json_object_get(j, "error"));
    const char *id = json_string_value(json_object_get(j, "request_id"));
    char echoed[160] = "";
    hc_header(r, "X-Request-Id", echoed, sizeof echoed);
    bool ok = r->status == status && msg && json_object_size(j) == 2 && strstr(msg, part) && id &&
              strcmp(id, echoed) == 0;
    json_decref(j);
    return ok;
}

#define CHECK_V2_ERROR(r, want, part, what)                                                        \
    CHECK(is_v2_error(r, want, part), "%s: want %d with an error naming '%s'; got %ld %.300s",     \
          what, want, part, (r)->status, (r)->body)

/* ---------------------------------------------------------------------------------------------- */
/* Requests from golden cases */

static const char *const in_names[5] = {"query", "key", "value", "key_padding_mask", "attn_mask"};

static const golden_tensor *case_input(const golden_case *c, int i)
{
    const golden_tensor *t[5] = {&c->query, &c->key, &c->value, &c->key_padding_mask,
                                 &c->attn_mask};
    return t[i];
}

static void put_layer(srv_daemon *d, const golden_case *c, const char *name)
{
    bytes b = {0};
    b_printf(&b, "{\"config\":");
    b_add(&b, c->config_json, strlen(c->config_json));
    b_printf(&b, ",\"weights\":");
    b_add(&b, c->weights_json, strlen(c->weights_json));
    b_printf(&b, "}");
    char path[128];
    snprintf(path, sizeof path, "/v1/layers/%s", name);
    hc_response r;
    hc_request(d, "PUT", path, NULL, b.p, (long)b.len, NULL, &r);
    CHECK(r.status == 201 || r.status == 200, "%s: PUT %ld %.300s", c->name, r.status, r.body);
    hc_response_free(&r);
    free(b.p);
}

static void delete_layer(srv_daemon *d, const char *name)
{
    char path[128];
    snprintf(path, sizeof path, "/v1/layers/%s", name);
    hc_response r;
    hc_request(d, "DELETE", path, NULL, NULL, 0, NULL, &r);
    CHECK(r.status == 204, "DELETE %s: %ld", name, r.status);
    hc_response_free(&r);
}

/* Appends the case's positions (p, named name) as an INT64 input (INT32 when int32), its data
 * binary (into bin) or JSON. */
static void add_positions(bytes *body, bytes *bin, const golden_positions *p, const char *name,
                          bool binary, bool int32)
{
    b_printf(body, ",{\"name\":\"%s\",\"datatype\":\"%s\",\"shape\":[%" PRId64, name,
             int32 ? "INT32" : "INT64", p->shape[0]);
    if (p->ndim == 2)
        b_printf(body, ",%" PRId64, p->shape[1]);
    const int64_t count = p->shape[0] * (p->ndim == 2 ? p->shape[1] : 1);
    if (binary) {
        b_printf(body, "],\"parameters\":{\"binary_data_size\":%" PRId64 "}}",
                 count * (int32 ? 4 : 8));
        for (int64_t e = 0; e < count; e++) {
            int32_t x = (int32_t)p->data[e];
            b_add(bin, int32 ? (const void *)&x : (const void *)&p->data[e], int32 ? 4 : 8);
        }
        return;
    }
    b_printf(body, "],\"data\":[");
    for (int64_t e = 0; e < count; e++)
        b_printf(body, e ? ",%" PRId64 : "%" PRId64, p->data[e]);
    b_printf(body, "]}");
}

/* Builds an infer body for case c: input i goes binary when bit i of binary_mask is set, in the
 * order given by order[0..4], then the positions (bits 5 and 6; INT32 when bit 7 is set); extra is
 * appended inside the top-level object (e.g. an "outputs" member), may be NULL. *header_len gets
 * the JSON length, -1 when nothing is binary. is_causal is sent only when the case's inputs give it
 * (else the layer's default applies, as in /v1). */
static void build_request(bytes *body, long *header_len, const golden_case *c, unsigned binary_mask,
                          const int order[5], bool binary_out, const char *extra)
{
    bytes bin = {0};
    body->len = 0;
    /* need_weights only when true: left out, the outputs asked for decide */
    b_printf(body,
             "{\"id\":\"%s\",\"parameters\":{%s\"average_attn_weights\":%s,"
             "%s%s%s\"binary_data_output\":%s},\"inputs\":[",
             c->name, c->need_weights ? "\"need_weights\":true," : "",
             c->average_attn_weights ? "true" : "false", c->is_causal_given ? "\"is_causal\":" : "",
             !c->is_causal_given ? "" : c->is_causal ? "true" : "false",
             c->is_causal_given ? "," : "", binary_out ? "true" : "false");
    bool first = true;
    for (int k = 0; k < 5; k++) {
        int i = order[k];
        const golden_tensor *t = case_input(c, i);
        if (!t->present)
            continue;
        b_printf(body, "%s{\"name\":\"%s\",\"datatype\":\"%s\",\"shape\":[", first ? "" : ",",
                 in_names[i], t->is_bool ? "BOOL" : "FP32");
        first = false;
        for (int dd = 0; dd < t->ndim; dd++)
            b_printf(body, dd ? ",%" PRId64 : "%" PRId64, t->shape[dd]);
        b_printf(body, "]");
        size_t size = (size_t)t->count * (t->is_bool ? 1 : 4);
        if (binary_mask & (1u << i)) {
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
    if (c->positions.present)
        add_positions(body, &bin, &c->positions, "positions", binary_mask & 0x20,
                      binary_mask & 0x80);
    if (c->key_positions.present)
        add_positions(body, &bin, &c->key_positions, "key_positions", binary_mask & 0x40,
                      binary_mask & 0x80);
    b_printf(body, "]%s%s}", extra ? "," : "", extra ? extra : "");
    *header_len = -1;
    if (bin.len) {
        *header_len = (long)body->len;
        b_add(body, bin.p, bin.len);
    }
    free(bin.p);
}

/* One output of a v2 response, binary or JSON. */
typedef struct v2_out {
    bool present, binary;
    int ndim;
    int64_t shape[8], count;
    float *data; /* malloc'd */
} v2_out;

/* Reads the outputs of a 200 response into out[0] (output) and out[1] (attn_weights); checks
 * model_name and id, the binary framing and that the binary sizes add up. Returns the number of
 * outputs, -1 when the response is malformed. */
static int read_response(v2_out out[2], const hc_response *r, const char *model, const char *id)
{
    memset(out, 0, 2 * sizeof *out);
    char v[32];
    size_t hl = r->len;
    bool framed = hc_header(r, "Inference-Header-Content-Length", v, sizeof v);
    if (framed)
        hl = (size_t)strtoull(v, NULL, 10);
    if (hl > r->len)
        return -1;
    json_t *j = json_loadb(r->body, hl, 0, NULL);
    if (!j)
        return -1;
    int n = -1;
    const char *mn = json_string_value(json_object_get(j, "model_name"));
    const char *rid = json_string_value(json_object_get(j, "id"));
    json_t *outs = json_object_get(j, "outputs");
    if (!mn || strcmp(mn, model) || (id && (!rid || strcmp(rid, id))) ||
        !json_is_string(json_object_get(j, "model_version")) || !json_is_array(outs))
        goto done;
    size_t off = hl, i;
    json_t *o;
    json_array_foreach(outs, i, o)
    {
        const char *name = json_string_value(json_object_get(o, "name"));
        int k = name && !strcmp(name, "output")         ? 0
                : name && !strcmp(name, "attn_weights") ? 1
                                                        : -1;
        json_t *shape = json_object_get(o, "shape");
        const char *dt = json_string_value(json_object_get(o, "datatype"));
        if (k < 0 || out[k].present || !dt || strcmp(dt, "FP32") || json_array_size(shape) > 8)
            goto done;
        v2_out *t = &out[k];
        t->present = true;
        t->ndim = (int)json_array_size(shape);
        t->count = 1;
        for (int dd = 0; dd < t->ndim; dd++) {
            t->shape[dd] = json_integer_value(json_array_get(shape, (size_t)dd));
            t->count *= t->shape[dd];
        }
        t->data = malloc((size_t)t->count * 4 + 4);
        json_t *bsz = json_object_get(json_object_get(o, "parameters"), "binary_data_size");
        if (bsz) {
            t->binary = true;
            if (!framed || json_integer_value(bsz) != t->count * 4 ||
                off + (size_t)t->count * 4 > r->len)
                goto done;
            memcpy(t->data, r->body + off, (size_t)t->count * 4);
            off += (size_t)t->count * 4;
        } else {
            json_t *data = json_object_get(o, "data");
            if ((int64_t)json_array_size(data) != t->count)
                goto done;
            for (int64_t e = 0; e < t->count; e++)
                t->data[e] = (float)json_number_value(json_array_get(data, (size_t)e));
        }
    }
    if (off == r->len)
        n = (int)json_array_size(outs);
done:
    json_decref(j);
    return n;
}

static void free_outs(v2_out out[2])
{
    free(out[0].data);
    free(out[1].data);
    memset(out, 0, 2 * sizeof *out);
}

static bool same_shape(const v2_out *o, const golden_tensor *t)
{
    if (o->ndim != t->ndim)
        return false;
    for (int i = 0; i < o->ndim; i++)
        if (o->shape[i] != t->shape[i])
            return false;
    return true;
}

/* /v1 forward of the same case, answers in base64: the exact float32 bits. */
static bool v1_forward(srv_daemon *d, const golden_case *c, const char *layer, tj_tensor *out,
                       tj_tensor *weights)
{
    size_t n = strlen(c->inputs_json) + 64;
    char *body = malloc(n);
    snprintf(body, n, "{\"encoding\":\"base64\",%s", c->inputs_json + 1);
    char path[160];
    snprintf(path, sizeof path, "/v1/layers/%s/forward", layer);
    hc_response r;
    hc_request(d, "POST", path, NULL, body, -1, NULL, &r);
    free(body);
    bool ok = CHECK(r.status == 200, "%s: /v1 forward %ld %.200s", c->name, r.status, r.body);
    memset(out, 0, sizeof *out);
    memset(weights, 0, sizeof *weights);
    if (ok) {
        json_t *j = hc_json(&r);
        ok = tj_read(out, json_object_get(j, "output")) == 0;
        if (ok && c->need_weights)
            ok = tj_read(weights, json_object_get(j, "attn_weights")) == 0;
        json_decref(j);
    }
    hc_response_free(&r);
    return ok;
}

/* Every golden case through /v2 infer: variant 0 all inputs binary, 1 all JSON, 2 mixed (and
 * inputs listed in another order); outputs binary on odd cases. Checked against torch and
 * against /v1 forward, bit for bit. */
static void replay(srv_daemon *d, const golden_case *c, int index)
{
    static const int natural[5] = {0, 1, 2, 3, 4}, shuffled[5] = {4, 2, 0, 3, 1};
    char layer[32], path[160];
    snprintf(layer, sizeof layer, "g%d", index);
    put_layer(d, c, layer);
    int variant = index % 3;
    unsigned mask = variant == 0 ? 0x7f : variant == 1 ? 0 : (index & 4 ? 0x35 : 0x4a);
    if (index % 4 == 1)
        mask |= 0x80; /* positions as INT32 */
    bool binary_out = index % 2 == 1;
    bytes body = {0};
    long hl;
    build_request(&body, &hl, c, mask, variant == 2 ? shuffled : natural, binary_out, NULL);
    snprintf(path, sizeof path, "/v2/models/%s/infer", layer);
    hc_response r;
    post(d, path, body.p, body.len, hl, &r);
    free(body.p);
    v2_out out[2];
    if (!CHECK(r.status == 200, "%s: v2 infer %ld %.300s", c->name, r.status, r.body)) {
        hc_response_free(&r);
        delete_layer(d, layer);
        return;
    }
    int n = read_response(out, &r, layer, c->name);
    CHECK(n == (c->need_weights ? 2 : 1), "%s: %d outputs in a well-formed response", c->name, n);
    char ct[64] = "", ihcl[32];
    hc_header(&r, "Content-Type", ct, sizeof ct);
    CHECK(binary_out == (strcmp(ct, "application/octet-stream") == 0) &&
              binary_out == hc_header(&r, "Inference-Header-Content-Length", ihcl, sizeof ihcl),
          "%s: binary framing iff binary outputs (Content-Type %s)", c->name, ct);
    CHECK(out[0].present && out[0].binary == binary_out, "%s: output as asked", c->name);
    hc_response_free(&r);

    char label[160];
    snprintf(label, sizeof label, "%s: v2 output vs torch", c->name);
    if (out[0].present && CHECK(same_shape(&out[0], &c->output), "%s: output shape", c->name))
        check_close_array(__FILE__, __LINE__, label, out[0].data, c->output.data, c->output.count,
                          NULL);
    if (c->need_weights) {
        snprintf(label, sizeof label, "%s: v2 attn_weights vs torch", c->name);
        if (out[1].present &&
            CHECK(same_shape(&out[1], &c->attn_weights), "%s: weights shape", c->name))
            check_close_array(__FILE__, __LINE__, label, out[1].data, c->attn_weights.data,
                              c->attn_weights.count, NULL);
    }

    tj_tensor o1, w1;
    if (v1_forward(d, c, layer, &o1, &w1) && out[0].present) {
        CHECK(o1.count == out[0].count && memcmp(o1.data, out[0].data, (size_t)o1.count * 4) == 0,
              "%s: /v2 output == /v1 output bit for bit", c->name);
        if (c->need_weights && out[1].present)
            CHECK(w1.count == out[1].count &&
                      memcmp(w1.data, out[1].data, (size_t)w1.count * 4) == 0,
                  "%s: /v2 attn_weights == /v1 attn_weights bit for bit", c->name);
    }
    tj_free(&o1);
    tj_free(&w1);
    free_outs(out);
    delete_layer(d, layer);
}

/* ---------------------------------------------------------------------------------------------- */
/* Endpoints */

static void get(srv_daemon *d, const char *path, hc_response *r)
{
    hc_request(d, "GET", path, NULL, NULL, 0, NULL, r);
}

/* The layer's version as the registry says (GET /v1/layers/{name}). */
static void layer_version(srv_daemon *d, const char *name, char *out, size_t size)
{
    char path[128];
    snprintf(path, sizeof path, "/v1/layers/%s", name);
    hc_response r;
    get(d, path, &r);
    json_t *j = hc_json(&r);
    snprintf(out, size, "%" JSON_INTEGER_FORMAT, json_integer_value(json_object_get(j, "version")));
    json_decref(j);
    hc_response_free(&r);
}

static void test_endpoints(srv_daemon *d, const golden_case *c)
{
    hc_response r;
    get(d, "/v2", &r);
    json_t *j = hc_json(&r);
    json_t *ext = json_object_get(j, "extensions");
    bool has_bin = false;
    for (size_t i = 0; i < json_array_size(ext); i++)
        has_bin |= !strcmp(json_string_value(json_array_get(ext, i))
                               ? json_string_value(json_array_get(ext, i))
                               : "",
                           "binary_tensor_data");
    CHECK(r.status == 200 && !strcmp(json_string_value(json_object_get(j, "name")), "attnd") &&
              json_is_string(json_object_get(j, "version")) && has_bin,
          "GET /v2: %ld %s", r.status, r.body);
    json_decref(j);
    hc_response_free(&r);

    get(d, "/v2/health/live", &r);
    j = hc_json(&r);
    CHECK(r.status == 200 && json_is_true(json_object_get(j, "live")), "live: %ld %s", r.status,
          r.body);
    json_decref(j);
    hc_response_free(&r);
    get(d, "/v2/health/ready", &r);
    j = hc_json(&r);
    CHECK(r.status == 200 && json_is_true(json_object_get(j, "ready")), "ready: %ld %s", r.status,
          r.body);
    json_decref(j);
    hc_response_free(&r);

    put_layer(d, c, "m");
    char ver[32], path[160];
    layer_version(d, "m", ver, sizeof ver);
    const char *meta_paths[2] = {"/v2/models/m", NULL};
    char vpath[128];
    snprintf(vpath, sizeof vpath, "/v2/models/m/versions/%s", ver);
    meta_paths[1] = vpath;
    for (int k = 0; k < 2; k++) {
        get(d, meta_paths[k], &r);
        j = hc_json(&r);
        json_t *ins = json_object_get(j, "inputs"), *outs = json_object_get(j, "outputs");
        CHECK(r.status == 200 && !strcmp(json_string_value(json_object_get(j, "name")), "m") &&
                  !strcmp(json_string_value(json_array_get(json_object_get(j, "versions"), 0)),
                          ver) &&
                  json_is_string(json_object_get(j, "platform")) && json_array_size(ins) == 7 &&
                  json_array_size(outs) == 4,
              "metadata %s: %ld %s", meta_paths[k], r.status, r.body);
        for (size_t i = 0; i < json_array_size(ins) && i < 5; i++) {
            json_t *t = json_array_get(ins, i);
            json_t *shape = json_object_get(t, "shape");
            CHECK(!strcmp(json_string_value(json_object_get(t, "name")), in_names[i]) &&
                      json_is_string(json_object_get(t, "datatype")) &&
                      json_array_size(shape) >= 2 &&
                      json_integer_value(json_array_get(shape, 0)) == -1,
                  "metadata input %s", in_names[i]);
        }
        json_t *q = json_object_get(json_array_get(ins, 0), "shape");
        CHECK(json_integer_value(json_array_get(q, 2)) == c->config.embed_dim,
              "query's last dimension is E");
        CHECK(!strcmp(json_string_value(json_object_get(json_array_get(outs, 0), "name")),
                      "output") &&
                  !strcmp(json_string_value(json_object_get(json_array_get(outs, 1), "name")),
                          "attn_weights"),
              "metadata outputs");
        json_decref(j);
        hc_response_free(&r);

        snprintf(path, sizeof path, "%s/ready", meta_paths[k]);
        get(d, path, &r);
        j = hc_json(&r);
        CHECK(r.status == 200 && json_is_true(json_object_get(j, "ready")) &&
                  !strcmp(json_string_value(json_object_get(j, "name")), "m"),
              "%s: %ld %s", path, r.status, r.body);
        json_decref(j);
        hc_response_free(&r);
    }

    /* infer under /versions/{v}: model_version in the response is that version */
    bytes body = {0};
    long hl;
    static const int natural[5] = {0, 1, 2, 3, 4};
    build_request(&body, &hl, c, 0x1f, natural, false, NULL);
    snprintf(path, sizeof path, "/v2/models/m/versions/%s/infer", ver);
    post(d, path, body.p, body.len, hl, &r);
    j = json_loadb(r.body, r.len, 0, NULL);
    CHECK(r.status == 200 && !strcmp(json_string_value(json_object_get(j, "model_version")), ver),
          "infer at version %s: %ld %.200s", ver, r.status, r.body);
    json_decref(j);
    hc_response_free(&r);

    /* unknown model, unknown version, on every route */
    const char *nf[] = {"/v2/models/nope", "/v2/models/nope/ready", "/v2/models/m/versions/999999",
                        "/v2/models/m/versions/999999/ready", "/v2/models/m/versions/x"};
    for (size_t i = 0; i < sizeof nf / sizeof nf[0]; i++) {
        get(d, nf[i], &r);
        CHECK_V2_ERROR(&r, 404, i < 2 ? "unknown model" : "no version", nf[i]);
        hc_response_free(&r);
    }
    post(d, "/v2/models/nope/infer", body.p, body.len, hl, &r);
    CHECK_V2_ERROR(&r, 404, "unknown model 'nope'", "infer on an unknown model");
    hc_response_free(&r);
    post(d, "/v2/models/m/versions/999999/infer", body.p, body.len, hl, &r);
    CHECK_V2_ERROR(&r, 404, "no version '999999'", "infer at an unknown version");
    hc_response_free(&r);

    /* a replaced layer has a new version; the old one is gone */
    put_layer(d, c, "m");
    get(d, vpath, &r);
    CHECK_V2_ERROR(&r, 404, "no version", "old version after a replace");
    hc_response_free(&r);

    /* unmatched /v2 paths and methods answer in the protocol's dialect too */
    get(d, "/v2/nothing/here", &r);
    CHECK_V2_ERROR(&r, 404, "/v2/nothing/here", "unknown /v2 path");
    hc_response_free(&r);
    get(d, "/v2/models/m/infer", &r);
    char allow[64] = "";
    CHECK(is_v2_error(&r, 405, "POST") && hc_header(&r, "Allow", allow, sizeof allow) &&
              strstr(allow, "POST"),
          "GET on infer: %ld %s (Allow: %s)", r.status, r.body, allow);
    hc_response_free(&r);
    free(body.p);
    delete_layer(d, "m");
}

/* The request/response example of the protocol's inference_rest.md and Triton's binary example,
 * as written but with our model's input and output names. */
static void test_protocol_examples(srv_daemon *d, const golden_case *c)
{
    (void)c;
    hc_response r;
    hc_request(
        d, "PUT", "/v1/layers/mymodel", NULL,
        "{\"config\":{\"embed_dim\":2,\"num_heads\":1},\"init\":{\"method\":\"xavier_uniform\","
        "\"seed\":1}}",
        -1, NULL, &r);
    CHECK(r.status == 201, "PUT mymodel: %ld %s", r.status, r.body);
    hc_response_free(&r);

    const char *json = V2_EXAMPLE_JSON("false, true");
    post(d, "/v2/models/mymodel/infer", json, strlen(json), -1, &r);
    v2_out out[2];
    CHECK(r.status == 200 && read_response(out, &r, "mymodel", "42") == 1 && out[0].present &&
              !out[0].binary && out[0].ndim == 2 && out[0].shape[0] == 2 && out[0].shape[1] == 2,
          "the protocol's JSON example: %ld %s", r.status, r.body);
    char ct[64] = "";
    CHECK(hc_header(&r, "Content-Type", ct, sizeof ct) && !strncmp(ct, "application/json", 16),
          "JSON response is application/json (%s)", ct);
    free_outs(out);
    hc_response_free(&r);

    /* the same numbers through Triton's binary example (model_name in the body, binary in and out)
     */
    const char *hdr = V2_EXAMPLE_BINARY(2);
    bytes b = {0};
    b_add(&b, hdr, strlen(hdr));
    float q[4] = {1, 2, 3, 4};
    unsigned char m[2] = {0, 1};
    b_add(&b, q, 16);
    b_add(&b, m, 2);
    post(d, "/v2/models/mymodel/infer", b.p, b.len, (long)strlen(hdr), &r);
    CHECK(r.status == 200 && read_response(out, &r, "mymodel", NULL) == 1 && out[0].binary,
          "Triton's binary example: %ld %.300s", r.status, r.body);
    char ihcl[32] = "";
    CHECK(hc_header(&r, "Content-Type", ct, sizeof ct) && !strcmp(ct, "application/octet-stream") &&
              hc_header(&r, "Inference-Header-Content-Length", ihcl, sizeof ihcl) &&
              r.len == strtoull(ihcl, NULL, 10) + 16,
          "binary response: octet-stream, 16 bytes after the JSON header (%s of %zu)", ihcl, r.len);
    hc_response_free(&r);

    /* both ways give the same bits; and /v1 too */
    post(d, "/v2/models/mymodel/infer", json, strlen(json), -1, &r);
    v2_out o2[2];
    read_response(o2, &r, "mymodel", "42");
    hc_response_free(&r);
    hc_request(
        d, "POST", "/v1/layers/mymodel/forward", NULL,
        "{\"query\":[[1,2],[3,4]],\"key_padding_mask\":[false,true],\"encoding\":\"base64\"}", -1,
        NULL, &r);
    json_t *j = hc_json(&r);
    tj_tensor t;
    bool ok = tj_read(&t, json_object_get(j, "output")) == 0;
    CHECK(ok && out[0].present && o2[0].present && t.count == 4 &&
              !memcmp(out[0].data, o2[0].data, 16) && !memcmp(t.data, out[0].data, 16),
          "JSON, binary and /v1 give the same bits");
    if (ok)
        tj_free(&t);
    json_decref(j);
    hc_response_free(&r);
    free_outs(out);
    free_outs(o2);
    free(b.p);
    delete_layer(d, "mymodel");
}

/* outputs: selection, order, binary per output, binary_data_output with an override. */
static void test_outputs(srv_daemon *d, const golden_case *c)
{
    put_layer(d, c, "o");
    static const int natural[5] = {0, 1, 2, 3, 4};
    struct {
        const char *extra;
        bool binary_out;
        int n;
        bool out_bin, w_bin; /* which are binary */
        bool has_out, has_w;
    } cases[] = {
        {"\"outputs\":[{\"name\":\"attn_weights\"}]", false, 1, false, false, false, true},
        {"\"outputs\":[{\"name\":\"attn_weights\",\"parameters\":{\"binary_data\":true}},"
         "{\"name\":\"output\"}]",
         false, 2, false, true, true, true},
        {"\"outputs\":[{\"name\":\"output\",\"parameters\":{\"binary_data\":false}},"
         "{\"name\":\"attn_weights\"}]",
         true, 2, false, true, true, true},
        {"\"outputs\":[{\"name\":\"output\"}]", true, 1, true, false, true, false},
        {"\"outputs\":[]", false, 1, false, false, true, false},
    };
    golden_case cc = *c;
    cc.need_weights = false; /* the outputs decide */
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
        bytes body = {0};
        long hl;
        build_request(&body, &hl, &cc, 0, natural, cases[k].binary_out, cases[k].extra);
        hc_response r;
        post(d, "/v2/models/o/infer", body.p, body.len, hl, &r);
        free(body.p);
        v2_out out[2];
        int n = r.status == 200 ? read_response(out, &r, "o", c->name) : -1;
        CHECK(n == cases[k].n && out[0].present == cases[k].has_out &&
                  out[1].present == cases[k].has_w &&
                  (!cases[k].has_out || out[0].binary == cases[k].out_bin) &&
                  (!cases[k].has_w || out[1].binary == cases[k].w_bin),
              "outputs case %zu (%s): %ld %.300s", k, cases[k].extra, r.status, r.body);
        if (n > 0 && cases[k].has_w) {
            /* the order is the one asked for */
            json_t *j = json_loadb(r.body, strlen(r.body), JSON_DISABLE_EOF_CHECK, NULL);
            const char *first = json_string_value(
                json_object_get(json_array_get(json_object_get(j, "outputs"), 0), "name"));
            char want[32];
            sscanf(strstr(cases[k].extra, "\"name\":\"") + 8, "%31[a-z_]", want);
            CHECK(first && !strcmp(first, want), "outputs case %zu: order kept (%s first, want %s)",
                  k, first ? first : "?", want);
            json_decref(j);
            if (c->attn_weights.present && c->average_attn_weights == cc.average_attn_weights &&
                same_shape(&out[1], &c->attn_weights))
                check_close_array(__FILE__, __LINE__, "selected attn_weights vs torch", out[1].data,
                                  c->attn_weights.data, c->attn_weights.count, NULL);
        }
        if (n > 0)
            free_outs(out);
        hc_response_free(&r);
    }
    delete_layer(d, "o");
}

/* Every refusal over HTTP: status and {"error": "..."}. */
static void test_errors(srv_daemon *d, const golden_case *c)
{
    put_layer(d, c, "e");
    static const int natural[5] = {0, 1, 2, 3, 4};
    hc_response r;
    bytes body = {0};
    long hl;

    /* wrong datatype */
    const char *dt = "{\"inputs\":[{\"name\":\"query\",\"shape\":[1,1],\"datatype\":\"INT32\","
                     "\"data\":[1]}]}";
    post(d, "/v2/models/e/infer", dt, strlen(dt), -1, &r);
    CHECK_V2_ERROR(&r, 400, "INT32", "wrong datatype");
    hc_response_free(&r);

    /* wrong shape: the query's features are not the layer's E (the engine says so) */
    char sh[256];
    snprintf(sh, sizeof sh,
             "{\"inputs\":[{\"name\":\"query\",\"shape\":[1,2,%" PRId64 "],\"datatype\":\"FP32\","
             "\"parameters\":{\"binary_data_size\":%" PRId64 "}}]}",
             c->config.embed_dim + 1, 2 * (c->config.embed_dim + 1) * 4);
    bytes b = {0};
    b_add(&b, sh, strlen(sh));
    float *zeros = calloc((size_t)(2 * (c->config.embed_dim + 1)), 4);
    b_add(&b, zeros, (size_t)(2 * (c->config.embed_dim + 1)) * 4);
    post(d, "/v2/models/e/infer", b.p, b.len, (long)strlen(sh), &r);
    CHECK_V2_ERROR(&r, 400, "query", "query with the wrong feature size");
    hc_response_free(&r);

    /* data count against the shape */
    const char *cnt = "{\"inputs\":[{\"name\":\"query\",\"shape\":[1,2,2],\"datatype\":\"FP32\","
                      "\"data\":[1,2,3]}]}";
    post(d, "/v2/models/e/infer", cnt, strlen(cnt), -1, &r);
    CHECK_V2_ERROR(&r, 400, "holds 3", "data count vs shape");
    hc_response_free(&r);

    /* binary sizes that do not add up to the body: one byte more, one byte less */
    build_request(&body, &hl, c, 0x1f, natural, false, NULL);
    b_add(&body, "x", 1);
    post(d, "/v2/models/e/infer", body.p, body.len, hl, &r);
    CHECK_V2_ERROR(&r, 400, "must match exactly", "one byte too many");
    hc_response_free(&r);
    post(d, "/v2/models/e/infer", body.p, body.len - 2, hl, &r);
    CHECK_V2_ERROR(&r, 400, "must match exactly", "one byte too few");
    hc_response_free(&r);
    /* binary data but no Inference-Header-Content-Length */
    post(d, "/v2/models/e/infer", body.p, (size_t)hl, -1, &r);
    CHECK_V2_ERROR(&r, 400, "Inference-Header-Content-Length", "binary without the header");
    hc_response_free(&r);

    /* header length past the body, and not a number */
    post(d, "/v2/models/e/infer", body.p, body.len - 1, (long)body.len + 10, &r);
    CHECK_V2_ERROR(&r, 400, "Inference-Header-Content-Length", "header length past the body");
    hc_response_free(&r);
    {
        const char *hdrs[] = {"Inference-Header-Content-Length: twelve", NULL};
        hc_opts o = {.headers = hdrs};
        hc_request(d, "POST", "/v2/models/e/infer", "application/octet-stream", body.p,
                   (long)body.len - 1, &o, &r);
        CHECK_V2_ERROR(&r, 400, "twelve", "header length not a number");
        hc_response_free(&r);
    }
    {
        const char *hdrs[] = {"Content-Encoding: gzip", NULL};
        hc_opts o = {.headers = hdrs};
        hc_request(d, "POST", "/v2/models/e/infer", NULL, dt, -1, &o, &r);
        CHECK_V2_ERROR(&r, 415, "gzip", "compressed body");
        hc_response_free(&r);
    }
    /* header length shorter than the JSON: the JSON part is cut */
    post(d, "/v2/models/e/infer", body.p, body.len - 1, hl - 5, &r);
    CHECK(r.status == 400 && is_v2_error(&r, 400, ""), "header length inside the JSON: %ld %s",
          r.status, r.body);
    hc_response_free(&r);

    struct {
        const char *what, *json, *part;
    } bad[] = {
        {"not JSON", "{\"inputs\": [", "JSON"},
        {"no inputs", "{}", "inputs"},
        {"unknown input",
         "{\"inputs\":[{\"name\":\"input0\",\"shape\":[1],\"datatype\":\"FP32\",\"data\":[1]}]}",
         "unknown input 'input0'"},
        {"duplicate input",
         "{\"inputs\":[{\"name\":\"query\",\"shape\":[1,1],\"datatype\":\"FP32\",\"data\":[1]},"
         "{\"name\":\"query\",\"shape\":[1,1],\"datatype\":\"FP32\",\"data\":[1]}]}",
         "twice"},
        {"unknown output",
         "{\"inputs\":[{\"name\":\"query\",\"shape\":[1,1],\"datatype\":\"FP32\",\"data\":[1]}],"
         "\"outputs\":[{\"name\":\"output0\"}]}",
         "unknown output 'output0'"},
        {"BOOL query",
         "{\"inputs\":[{\"name\":\"query\",\"shape\":[1,1],\"datatype\":\"BOOL\",\"data\":[true]}]"
         "}",
         "FP32"},
        {"need_weights not a boolean",
         "{\"parameters\":{\"need_weights\":1},\"inputs\":[{\"name\":\"query\",\"shape\":[1,1],"
         "\"datatype\":\"FP32\",\"data\":[1]}]}",
         "need_weights"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        post(d, "/v2/models/e/infer", bad[i].json, strlen(bad[i].json), -1, &r);
        CHECK_V2_ERROR(&r, 400, bad[i].part, bad[i].what);
        hc_response_free(&r);
    }

    /* no body at all (neither Content-Length nor chunked): 411 in the protocol's dialect */
    {
        const char *raw = "POST /v2/models/e/infer HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                          "Connection: close\r\n\r\n";
        char reply[2048] = "";
        int st = hc_raw(srv_daemon_port(d), raw, strlen(raw), 2000, reply, sizeof reply);
        CHECK(st == 411 && strstr(reply, "{\"error\":\""), "no body: %d %.300s", st, reply);
    }
    /* a body over --max-body-bytes: 413 in the protocol's dialect */
    {
        srv_app *app = srv_daemon_app(d);
        size_t big = (size_t)app->opt.max_body_bytes + 1;
        char *huge = malloc(big);
        memset(huge, ' ', big);
        huge[0] = '{';
        huge[big - 1] = '}';
        post(d, "/v2/models/e/infer", huge, big, -1, &r);
        CHECK(r.status == 413 && is_v2_error(&r, 413, ""), "too large: %ld %.200s", r.status,
              r.body);
        hc_response_free(&r);
        free(huge);
    }
    free(zeros);
    free(b.p);
    free(body.p);
    delete_layer(d, "e");
}

typedef struct replay_ctx {
    srv_daemon *d;
    golden_case pick; /* the case for the endpoint tests (zeroed until one is found) */
    int offset;       /* added to the index of each case: layer names stay distinct */
} replay_ctx;

/* Replays c, or keeps it as the case for the endpoint tests when it is the first with both masks
 * and the weights, batch-first. */
static void replay_or_pick(golden_case *c, int index, void *ctx)
{
    replay_ctx *x = ctx;
    if (!x->pick.name && c->key_padding_mask.present && c->attn_mask.present && c->need_weights &&
        c->config.batch_first && c->query.ndim == 3 && !c->fully_masked_rows) {
        x->pick = *c;
        return;
    }
    replay(x->d, c, x->offset + index);
    golden_free(c);
}

int main(int argc, char **argv)
{
    srv_options opt;
    hc_options(&opt);
    opt.max_body_bytes = 1 << 22;
    replay_ctx x;
    memset(&x, 0, sizeof x);
    x.d = hc_start(&opt);
    if (!CHECK(x.d != NULL, "daemon"))
        return check_report();
    int n = golden_each(argc > 1 ? argv[1] : "tests/golden", replay_or_pick, &x);
    if (argc == 1) { /* and the extensions' cases, numbered on from the torch ones */
        x.offset = n;
        golden_each("tests/golden_variants", replay_or_pick, &x);
    }
    if (n > 0 && CHECK(x.pick.name != NULL, "a golden case with both masks")) {
        replay(x.d, &x.pick, n);
        test_endpoints(x.d, &x.pick);
        test_protocol_examples(x.d, &x.pick);
        test_outputs(x.d, &x.pick);
        test_errors(x.d, &x.pick);
    }
    golden_free(&x.pick);
    hc_stop(x.d);
    return check_report();
}
