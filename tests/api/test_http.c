/*
 * test_http.c - the /v1 API end to end: an in-process daemon on port 0, libcurl requests, every
 * route, every tensor form in and out, the error statuses, limits, and draining.
 * (Numbers against torch: test_http_golden.c; malformed requests: test_cases.c.)
 */
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include "base/sysinfo.h"
#include "check.h"
#include "http_client.h"
#include "tensor_json.h"

static char code[64], field[128];

#define CHECK_STATUS(r, want)                                                                      \
    CHECK((r).status == (want), "status %ld, want %d: %.300s", (r).status, (want), (r).body)
#define CHECK_ERROR HC_CHECK_ERROR /* status, code and field of an error reply */

/* One request, reply checked for status and freed; returns the parsed body (caller decrefs). */
static json_t *call(srv_daemon *d, const char *method, const char *path, const char *body, int want)
{
    hc_response r;
    hc_request(d, method, path, NULL, body, -1, NULL, &r);
    CHECK(r.status == want, "%s %s: status %ld, want %d: %.400s", method, path, r.status, want,
          r.body);
    json_t *doc = hc_json(&r);
    hc_response_free(&r);
    return doc;
}

/* A deterministic query [N,L,E] as nested JSON text. */
static char *nested_query(int N, int L, int E, float *values)
{
    size_t cap = (size_t)N * L * E * 24 + 64, k = 0;
    char *s = malloc(cap);
    k += (size_t)sprintf(s + k, "[");
    for (int n = 0; n < N; n++) {
        k += (size_t)sprintf(s + k, n ? ",[" : "[");
        for (int l = 0; l < L; l++) {
            k += (size_t)sprintf(s + k, l ? ",[" : "[");
            for (int e = 0; e < E; e++) {
                float v = sinf((float)(n * 131 + l * 17 + e * 3)) * 0.5f;
                values[((size_t)n * L + l) * E + e] = v;
                k += (size_t)sprintf(s + k, e ? ",%.9g" : "%.9g", (double)v);
            }
            k += (size_t)sprintf(s + k, "]");
        }
        k += (size_t)sprintf(s + k, "]");
    }
    sprintf(s + k, "]");
    return s;
}

static void test_health(srv_daemon *d)
{
    json_t *doc = call(d, "GET", "/healthz", NULL, 200);
    CHECK(!strcmp(json_string_value(json_object_get(doc, "status")), "ok"), "healthz status");
    json_decref(doc);
    doc = call(d, "GET", "/readyz", NULL, 200);
    CHECK(json_is_true(json_object_get(doc, "ready")), "readyz ready");
    json_decref(doc);

    hc_response r;
    hc_request(d, "GET", "/openapi.yaml", NULL, NULL, 0, NULL, &r);
    CHECK_STATUS(r, 200);
    CHECK(strstr(r.body, "openapi: 3.1") != NULL, "openapi.yaml is the spec: %.60s", r.body);
    size_t flen;
    char *file = check_read_file("openapi.yaml", &flen);
    CHECK(file && flen == r.len && !memcmp(file, r.body, flen), "served openapi.yaml = the file");
    free(file);
    hc_response_free(&r);
}

static void test_routing(srv_daemon *d)
{
    hc_response r;
    char allow[128];
    hc_request(d, "GET", "/nope", NULL, NULL, 0, NULL, &r);
    CHECK_ERROR(r, 404, "not_found", NULL);
    hc_response_free(&r);
    hc_request(d, "GET", "/v1/layers/demo/forwardx", NULL, NULL, 0, NULL, &r);
    CHECK_STATUS(r, 404);
    hc_response_free(&r);

    hc_request(d, "GET", "/v1/layers/demo/forward", NULL, NULL, 0, NULL, &r);
    CHECK_ERROR(r, 405, "method_not_allowed", NULL);
    CHECK(hc_header(&r, "Allow", allow, sizeof allow) && !strcmp(allow, "POST"), "Allow: %s",
          allow);
    hc_response_free(&r);
    hc_request(d, "POST", "/v1/layers/demo", NULL, "{}", -1, NULL, &r);
    CHECK_STATUS(r, 405);
    CHECK(hc_header(&r, "Allow", allow, sizeof allow) && strstr(allow, "GET") &&
              strstr(allow, "PUT") && strstr(allow, "DELETE"),
          "Allow on a layer: %s", allow);
    CHECK(strstr(r.body, "POST goes to its subpaths: /import, /forward, /trace"),
          "a POST to the layer (its /forward forgotten) names where POST goes: %s", r.body);
    hc_response_free(&r);
    hc_request(d, "PATCH", "/healthz", NULL, NULL, 0, NULL, &r);
    CHECK_STATUS(r, 405);
    hc_response_free(&r);

    hc_request(d, "HEAD", "/healthz", NULL, NULL, 0, NULL, &r);
    CHECK(r.status == 200 && r.len == 0, "HEAD: %ld, %zu bytes", r.status, r.len);
    hc_response_free(&r);
}

static void test_layer_lifecycle(srv_daemon *d)
{
    const char *body = "{\"config\": {\"embed_dim\": 8, \"num_heads\": 2}, "
                       "\"init\": {\"method\": \"xavier_uniform\", \"seed\": 3}}";
    hc_response r;
    hc_request(d, "PUT", "/v1/layers/t1", NULL, body, -1, NULL, &r);
    CHECK_STATUS(r, 201);
    char loc[128];
    CHECK(hc_header(&r, "Location", loc, sizeof loc) && !strcmp(loc, "/v1/layers/t1"), "Location");
    json_t *doc = hc_json(&r);
    json_int_t v1 = json_integer_value(json_object_get(doc, "version"));
    CHECK(json_integer_value(json_object_get(doc, "parameter_count")) == 3 * 64 + 24 + 64 + 8,
          "parameter_count");
    json_decref(doc);
    hc_response_free(&r);

    doc = call(d, "PUT", "/v1/layers/t1", body, 200);
    CHECK(json_integer_value(json_object_get(doc, "version")) > v1, "replacing bumps the version");
    json_decref(doc);

    doc = call(d, "GET", "/v1/layers", NULL, 200);
    json_t *layers = json_object_get(doc, "layers");
    bool found = false;
    for (size_t i = 0; i < json_array_size(layers); i++)
        found |=
            !strcmp(json_string_value(json_object_get(json_array_get(layers, i), "name")), "t1");
    CHECK(found, "t1 is listed");
    json_decref(doc);

    /* describe */
    doc = call(d, "GET", "/v1/layers/t1?L=10&S=12", NULL, 200);
    CHECK(json_integer_value(json_object_get(doc, "head_dim")) == 4, "head_dim");
    json_t *params = json_object_get(doc, "parameters");
    CHECK(json_array_size(params) == 4, "4 parameters (packed, bias)");
    CHECK(!strcmp(json_string_value(json_object_get(json_array_get(params, 0), "name")),
                  "in_proj_weight"),
          "first parameter in_proj_weight");
    json_t *h1 = json_array_get(json_object_get(doc, "heads"), 1);
    json_t *krows = json_object_get(json_object_get(h1, "k"), "rows");
    CHECK(json_integer_value(json_array_get(krows, 0)) == 12 &&
              json_integer_value(json_array_get(krows, 1)) == 16,
          "head 1 owns rows [12,16) of in_proj_weight for k");
    double flops = json_number_value(json_object_get(json_object_get(doc, "flops"), "value"));
    double want = 2.0 * 10 * 64 + 2.0 * 12 * 64 * 2 + 4.0 * 10 * 12 * 8 + 2.0 * 10 * 64;
    CHECK(fabs(flops - want) < 1e-6 * want, "flops %g, want %g", flops, want);
    json_decref(doc);
    doc = call(d, "GET", "/v1/layers/t1?L=0", NULL, 400);
    json_decref(doc);

    /* weights round trip, in every encoding */
    json_t *w[3];
    const char *encs[3] = {"nested", "flat", "base64"};
    for (int e = 0; e < 3; e++) {
        char path[128];
        snprintf(path, sizeof path, "/v1/layers/t1/weights?encoding=%s", encs[e]);
        w[e] = call(d, "GET", path, NULL, 200);
    }
    tj_tensor a, b;
    for (int e = 1; e < 3; e++) {
        const char *k;
        json_t *v;
        json_object_foreach(w[0], k, v)
        {
            CHECK(tj_read(&a, v) == 0 && tj_read(&b, json_object_get(w[e], k)) == 0,
                  "weights %s readable (%s)", k, encs[e]);
            CHECK(a.count == b.count && a.ndim == b.ndim &&
                      !memcmp(a.data, b.data, (size_t)a.count * 4),
                  "weights %s identical as nested and %s", k, encs[e]);
            tj_free(&a);
            tj_free(&b);
        }
    }
    /* a layer created from those weights is the same layer */
    char *wtext = json_dumps(w[2], JSON_COMPACT);
    size_t blen = strlen(wtext) + 128;
    char *put = malloc(blen);
    snprintf(put, blen, "{\"config\": {\"embed_dim\": 8, \"num_heads\": 2}, \"weights\": %s}",
             wtext);
    json_decref(call(d, "PUT", "/v1/layers/t2", put, 201));
    json_decref(call(d, "PUT", "/v1/layers/t2/weights", wtext, 200));
    json_t *w2 = call(d, "GET", "/v1/layers/t2/weights?encoding=base64", NULL, 200);
    CHECK(json_equal(w2, w[2]), "weights read back equal");
    json_decref(w2);
    const char *fw = "{\"query\": [[1,2,3,4,5,6,7,8],[8,7,6,5,4,3,2,1]], \"encoding\": \"base64\"}";
    json_t *o1 = call(d, "POST", "/v1/layers/t1/forward", fw, 200);
    json_t *o2 = call(d, "POST", "/v1/layers/t2/forward", fw, 200);
    CHECK(o1 && json_equal(o1, o2), "same weights, same output bit for bit");
    json_decref(o1);
    json_decref(o2);
    free(put);
    free(wtext);
    for (int e = 0; e < 3; e++)
        json_decref(w[e]);

    /* delete */
    hc_request(d, "DELETE", "/v1/layers/t2", NULL, NULL, 0, NULL, &r);
    CHECK(r.status == 204 && r.len == 0, "DELETE: %ld, %zu bytes", r.status, r.len);
    hc_response_free(&r);
    hc_request(d, "DELETE", "/v1/layers/t2", NULL, NULL, 0, NULL, &r);
    CHECK_ERROR(r, 404, "layer_not_found", "name");
    hc_response_free(&r);
    hc_request(d, "POST", "/v1/layers/t2/forward", NULL, fw, -1, NULL, &r);
    CHECK_ERROR(r, 404, "layer_not_found", "name");
    hc_response_free(&r);
}

/* Every input form gives the same output; every output form carries the same numbers. */
static void test_forward_forms(srv_daemon *d)
{
    enum { N = 2, L = 3, E = 64, H = 4 };
    float q[N * L * E];
    char *nested = nested_query(N, L, E, q);
    json_t *flat = json_array();
    for (int i = 0; i < N * L * E; i++)
        json_array_append_new(flat, json_real(q[i]));
    int64_t shape[3] = {N, L, E};
    json_t *qf = json_pack("{s:[I,I,I], s:o, s:s}", "shape", (json_int_t)N, (json_int_t)L,
                           (json_int_t)E, "data", flat, "dtype", "float32");
    json_t *qb = tj_base64(q, 3, shape);
    char *ftext = json_dumps(qf, JSON_COMPACT), *btext = json_dumps(qb, JSON_COMPACT);
    const char *forms[3] = {nested, ftext, btext};
    const char *encs[3] = {"nested", "flat", "base64"};

    tj_tensor ref = {0}, refw = {0};
    for (int f = 0; f < 3; f++)
        for (int e = 0; e < 3; e++) {
            size_t cap = strlen(forms[f]) + 200;
            char *body = malloc(cap);
            snprintf(body, cap,
                     "{\"query\": %s, \"need_weights\": true, \"average_attn_weights\": false, "
                     "\"encoding\": \"%s\"}",
                     forms[f], encs[e]);
            json_t *doc = call(d, "POST", "/v1/layers/demo/forward", body, 200);
            tj_tensor out, w;
            int64_t oshape[3] = {N, L, E}, wshape[4] = {N, H, L, L};
            CHECK(tj_read(&out, json_object_get(doc, "output")) == 0 &&
                      tj_shape_is(&out, 3, oshape),
                  "output [N,L,E] (input %d, encoding %s)", f, encs[e]);
            CHECK(tj_read(&w, json_object_get(doc, "attn_weights")) == 0 &&
                      tj_shape_is(&w, 4, wshape),
                  "per-head weights [N,H,L,S] (input %d, encoding %s)", f, encs[e]);
            if (!ref.data) {
                ref = out;
                refw = w;
            } else {
                CHECK(out.data && !memcmp(out.data, ref.data, sizeof(float) * N * L * E),
                      "output identical (input form %d, encoding %s)", f, encs[e]);
                CHECK(w.data && !memcmp(w.data, refw.data, sizeof(float) * N * H * L * L),
                      "weights identical (input form %d, encoding %s)", f, encs[e]);
                tj_free(&out);
                tj_free(&w);
            }
            json_decref(doc);
            free(body);
        }
    /* per-head weights are softmaxes: every row sums to 1 */
    for (int row = 0; row < N * H * L; row++) {
        double s = 0;
        for (int j = 0; j < L; j++)
            s += refw.data[row * L + j];
        if (fabs(s - 1) > 1e-5) {
            CHECK(false, "weights row %d sums to %g", row, s);
            break;
        }
    }

    /* defaults: need_weights false -> no attn_weights; averaged weights [N,L,S] */
    size_t cap = strlen(btext) + 200;
    char *body = malloc(cap);
    snprintf(body, cap, "{\"query\": %s}", btext);
    json_t *doc = call(d, "POST", "/v1/layers/demo/forward", body, 200);
    CHECK(doc && !json_object_get(doc, "attn_weights"), "no attn_weights unless asked");
    tj_tensor out;
    CHECK(tj_read(&out, json_object_get(doc, "output")) == 0 && ref.data &&
              !memcmp(out.data, ref.data, sizeof(float) * N * L * E),
          "need_weights does not change the output");
    tj_free(&out);
    json_decref(doc);
    /* a flag set to null is not given, as a tensor set to null is (it was a 400) */
    snprintf(body, cap,
             "{\"query\": %s, \"need_weights\": null, \"is_causal\": null, "
             "\"average_attn_weights\": null, \"need_output\": null}",
             btext);
    doc = call(d, "POST", "/v1/layers/demo/forward", body, 200);
    CHECK(doc && !json_object_get(doc, "attn_weights") &&
              tj_read(&out, json_object_get(doc, "output")) == 0 && ref.data &&
              !memcmp(out.data, ref.data, sizeof(float) * N * L * E),
          "flags set to null: the defaults (no weights, the same output)");
    tj_free(&out);
    json_decref(doc);
    snprintf(body, cap, "{\"query\": %s, \"need_weights\": true, \"key\": null}", btext);
    doc = call(d, "POST", "/v1/layers/demo/forward", body, 200);
    tj_tensor avg;
    int64_t ashape[3] = {N, L, L};
    CHECK(tj_read(&avg, json_object_get(doc, "attn_weights")) == 0 && tj_shape_is(&avg, 3, ashape),
          "averaged weights [N,L,S]");
    for (int n = 0; n < N && avg.data && refw.data; n++)
        for (int i = 0; i < L * L; i++) {
            double m = 0;
            for (int h = 0; h < H; h++)
                m += refw.data[(n * H + h) * L * L + i];
            if (!check_close(avg.data[n * L * L + i], (float)(m / H))) {
                CHECK(false, "averaged weight %d,%d = %g, mean of heads %g", n, i,
                      (double)avg.data[n * L * L + i], m / H);
                n = N;
                break;
            }
        }
    tj_free(&avg);
    json_decref(doc);

    /* masks: bool in nested form, float with "-inf" */
    snprintf(body, cap,
             "{\"query\": %s, \"need_weights\": true, \"key_padding_mask\": "
             "[[false,false,true],[false,true,true]], \"attn_mask\": "
             "[[0,\"-inf\",0],[0,0,0],[0,0,0]]}",
             btext);
    doc = call(d, "POST", "/v1/layers/demo/forward", body, 200);
    CHECK(tj_read(&avg, json_object_get(doc, "attn_weights")) == 0, "masked weights");
    if (avg.data) {
        CHECK(avg.data[2] == 0 && avg.data[1] == 0 && avg.data[0] == 1,
              "row 0 of batch 0 only sees key 0: %g %g %g", (double)avg.data[0],
              (double)avg.data[1], (double)avg.data[2]);
        CHECK(avg.data[9 + 0] == 1 && avg.data[9 + 3] == 1 && avg.data[9 + 6] == 1,
              "batch 1 only sees key 0");
    }
    tj_free(&avg);
    json_decref(doc);

    /* trace: every stage, in order, with batched shapes */
    snprintf(body, cap, "{\"query\": %s, \"encoding\": \"base64\"}", btext);
    doc = call(d, "POST", "/v1/layers/demo/trace", body, 200);
    json_t *stages = json_object_get(doc, "stages");
    const char *names[] = {"q_proj",       "k_proj",  "v_proj", "q_heads",
                           "k_heads",      "v_heads", "scores", "attn_weights",
                           "head_outputs", "concat",  "output"};
    CHECK(json_array_size(stages) == 11, "11 trace stages");
    for (size_t i = 0; i < json_array_size(stages) && i < 11; i++) {
        json_t *s = json_array_get(stages, i);
        CHECK(!strcmp(json_string_value(json_object_get(s, "name")), names[i]), "stage %zu is %s",
              i, names[i]);
    }
    tj_tensor last, heads;
    int64_t hshape[4] = {N, H, L, E / H};
    CHECK(tj_read(&last, json_object_get(json_array_get(stages, 10), "tensor")) == 0 && ref.data &&
              !memcmp(last.data, ref.data, sizeof(float) * N * L * E),
          "trace output = forward output, bit for bit");
    CHECK(tj_read(&heads, json_object_get(json_array_get(stages, 3), "tensor")) == 0 &&
              tj_shape_is(&heads, 4, hshape),
          "q_heads [N,H,L,hd]");
    tj_free(&last);
    tj_free(&heads);
    json_decref(doc);

    free(body);
    tj_free(&ref);
    tj_free(&refw);
    free(nested);
    free(ftext);
    free(btext);
    json_decref(qf);
    json_decref(qb);
}

/* Replies over a megabyte go out from cached blocks (bigbuf.c), and outputs of a million numbers
 * or more are written by two threads: the same numbers in every form, request after request. */
static void test_large(srv_daemon *d)
{
    enum { N = 256, L = 64, E = 64 };
    float *q = malloc(sizeof(float) * N * L * E);
    for (int i = 0; i < N * L * E; i++)
        q[i] = sinf((float)i * 0.01f);
    int64_t shape[3] = {N, L, E};
    json_t *qb = tj_base64(q, 3, shape);
    char *qtext = json_dumps(qb, JSON_COMPACT);
    size_t cap = strlen(qtext) + 100;
    char *body = malloc(cap);
    tj_tensor ref = {0};
    for (int round = 0; round < 3; round++) {
        const char *enc = round == 1 ? "base64" : "nested";
        snprintf(body, cap, "{\"query\": %s, \"encoding\": \"%s\"}", qtext, enc);
        hc_response r;
        hc_request(d, "POST", "/v1/layers/demo/forward", NULL, body, -1, NULL, &r);
        CHECK(r.status == 200 && (round == 1 || r.len > (1u << 20)),
              "large reply %d: %ld, %zu bytes", round, r.status, r.len);
        json_t *doc = hc_json(&r);
        tj_tensor out;
        if (CHECK(tj_read(&out, json_object_get(doc, "output")) == 0 && tj_shape_is(&out, 3, shape),
                  "large output [N,L,E]")) {
            if (!ref.data)
                ref = out;
            else {
                CHECK(!memcmp(out.data, ref.data, sizeof(float) * N * L * E),
                      "large output identical in round %d", round);
                tj_free(&out);
            }
        }
        json_decref(doc);
        hc_response_free(&r);
    }
    tj_free(&ref);
    free(body);
    free(qtext);
    json_decref(qb);
    free(q);
}

/* POSTs body to the demo layer's forward; returns the output tensor (caller tj_frees) or checks an
 * error: want_status 200, or the status with message containing want_msg. */
static bool forward_output(srv_daemon *d, const char *body, int want_status, const char *want_msg,
                           tj_tensor *out, const char *what)
{
    hc_response r;
    hc_request(d, "POST", "/v1/layers/demo/forward", NULL, body, -1, NULL, &r);
    bool ok = CHECK(r.status == want_status, "%s: status %ld, want %d: %.300s", what, r.status,
                    want_status, r.body);
    if (ok && want_status != 200)
        ok = CHECK(r.body && strstr(r.body, want_msg), "%s: message '%s' in %.300s", what, want_msg,
                   r.body);
    if (ok && want_status == 200) {
        json_t *doc = hc_json(&r);
        ok = CHECK(tj_read(out, json_object_get(doc, "output")) == 0, "%s: output read", what);
        json_decref(doc);
    }
    hc_response_free(&r);
    return ok;
}

/* Bodies of 1 MB and more have their base64 texts decoded while they arrive (predecode.c): the
 * numbers are the ones the nested form gives, and texts the predecoder leaves alone (escapes, key
 * order, bad bytes, NaN) get the parser's results and errors. */
static void test_large_base64_input(srv_daemon *d)
{
    enum { N = 64, L = 64, E = 64 }; /* 1 MB of floats, a 1.4 MB body */
    const size_t count = (size_t)N * L * E;
    float *q = malloc(sizeof(float) * count);
    char *nested = nested_query(N, L, E, q);
    size_t cap = strlen(nested) + 200;
    char *body = malloc(cap);
    snprintf(body, cap, "{\"query\": %s}", nested);
    tj_tensor ref = {0};
    if (!forward_output(d, body, 200, NULL, &ref, "nested reference"))
        goto done;

    int64_t shape[3] = {N, L, E};
    json_t *qb = tj_base64(q, 3, shape);
    const char *b64 = json_string_value(json_object_get(qb, "base64"));
    size_t blen = strlen(b64);
    char *text = malloc(blen + 16);
    struct {
        const char *what, *fmt;
        int edit; /* 0 none, 1 "\/" for the first '/', 2 '!' in the middle, 3 "==" in the middle */
        int status;
        const char *msg;
    } cases[] = {
        {"plain", "{\"query\": {\"shape\": [64, 64, 64], \"base64\": \"%s\"}}", 0, 200, NULL},
        {"base64 before shape",
         "{\"query\": {\"base64\": \"%s\", \"dtype\": \"float32\", "
         "\"shape\": [64, 64, 64]}, \"need_weights\": false}",
         0, 200, NULL},
        {"an escaped '/'", "{\"query\": {\"shape\": [64, 64, 64], \"base64\": \"%s\"}}", 1, 200,
         NULL},
        {"a bad byte", "{\"query\": {\"shape\": [64, 64, 64], \"base64\": \"%s\"}}", 2, 400,
         "query.base64 is not valid base64"},
        {"padding inside", "{\"query\": {\"shape\": [64, 64, 64], \"base64\": \"%s\"}}", 3, 400,
         "query.base64 is not valid base64"},
        {"wrong shape", "{\"query\": {\"shape\": [64, 64, 63], \"base64\": \"%s\"}}", 0, 400,
         "query.base64 holds 1048576 bytes but shape [64, 64, 63]"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        memcpy(text, b64, blen + 1);
        if (cases[i].edit == 1) {
            char *slash = strchr(text, '/');
            if (!CHECK(slash != NULL, "the text has a '/'"))
                continue;
            memmove(slash + 1, slash, strlen(slash) + 1);
            *slash = '\\';
        } else if (cases[i].edit == 2) {
            text[blen / 2] = '!';
        } else if (cases[i].edit == 3) {
            text[blen / 2 / 4 * 4 + 2] = '=';
            text[blen / 2 / 4 * 4 + 3] = '=';
        }
        char *b = malloc(blen + 400);
        snprintf(b, blen + 400, cases[i].fmt, text);
        tj_tensor out = {0};
        if (forward_output(d, b, cases[i].status, cases[i].msg, &out, cases[i].what) &&
            cases[i].status == 200)
            CHECK(tj_shape_is(&out, 3, shape) && !memcmp(out.data, ref.data, sizeof(float) * count),
                  "%s: the nested form's output", cases[i].what);
        tj_free(&out);
        free(b);
    }
    /* a NaN in the last element: named as the parser names it */
    q[count - 1] = NAN;
    json_t *qn = tj_base64(q, 3, shape);
    char *qtext = json_dumps(qn, JSON_COMPACT);
    char *b = malloc(strlen(qtext) + 64);
    sprintf(b, "{\"query\": %s}", qtext);
    tj_tensor none = {0};
    forward_output(d, b, 400, "query.base64 element 262143 is NaN", &none, "NaN at the end");
    free(b);
    free(qtext);
    json_decref(qn);
    free(text);
    json_decref(qb);
    tj_free(&ref);
done:
    free(body);
    free(nested);
    free(q);
}

/* Forward and trace replies say where the time went (Server-Timing): body, parse, pass, write in
 * that order, each a non-negative duration, the pass taking some; other replies and errors do not.
 */
static void test_server_timing(srv_daemon *d)
{
    const char *paths[2] = {"/v1/layers/demo/forward", "/v1/layers/demo/trace"};
    for (int i = 0; i < 2; i++) {
        hc_response r;
        hc_request(
            d, "POST", paths[i], NULL,
            "{\"query\": [[[1,2,3,4,5,6,7,8,1,2,3,4,5,6,7,8,1,2,3,4,5,6,7,8,"
            "1,2,3,4,5,6,7,8,1,2,3,4,5,6,7,8,1,2,3,4,5,6,7,8,1,2,3,4,5,6,7,8,1,2,3,4,5,6,7,8]]]}",
            -1, NULL, &r);
        char st[256] = "";
        double body = -1, parse = -1, pass = -1, write = -1;
        bool has = hc_header(&r, "Server-Timing", st, sizeof st);
        int n = sscanf(st, "body;dur=%lf, parse;dur=%lf, pass;dur=%lf, write;dur=%lf", &body,
                       &parse, &pass, &write);
        CHECK(r.status == 200 && has && n == 4 && body >= 0 && parse >= 0 && pass > 0 &&
                  write >= 0 && pass < 60000,
              "%s: Server-Timing '%s' (status %ld)", paths[i], st, r.status);
        hc_response_free(&r);
    }
    hc_response r;
    hc_request(d, "POST", "/v1/layers/demo/forward", NULL, "{\"query\": [[1]]}", -1, NULL, &r);
    char st[256];
    CHECK(r.status >= 400 && !hc_header(&r, "Server-Timing", st, sizeof st),
          "no Server-Timing on an error (status %ld)", r.status);
    hc_response_free(&r);
    hc_request(d, "GET", "/v1/layers/demo", NULL, NULL, -1, NULL, &r);
    CHECK(r.status == 200 && !hc_header(&r, "Server-Timing", st, sizeof st),
          "none on other routes");
    hc_response_free(&r);
}

static void test_errors(srv_daemon *d)
{
    hc_response r;
    const char *q = "[[1,2,3,4,5,6,7,8]]";
    char body[512];
    json_decref(
        call(d, "PUT", "/v1/layers/e8", "{\"config\": {\"embed_dim\": 8, \"num_heads\": 2}}", 201));

    snprintf(body, sizeof body, "{\"query\": %s, \"need_weight\": true}", q);
    hc_request(d, "POST", "/v1/layers/e8/forward", NULL, body, -1, NULL, &r);
    CHECK_ERROR(r, 400, "unknown_field", "need_weight");
    hc_response_free(&r);

    snprintf(body, sizeof body, "{\"query\": %s, \"need_weights\": 1}", q);
    hc_request(d, "POST", "/v1/layers/e8/forward", NULL, body, -1, NULL, &r);
    CHECK_ERROR(r, 400, "bad_request", "need_weights");
    hc_response_free(&r);

    snprintf(body, sizeof body, "{\"query\": %s, \"encoding\": \"hex\"}", q);
    hc_request(d, "POST", "/v1/layers/e8/forward", NULL, body, -1, NULL, &r);
    CHECK_ERROR(r, 400, "bad_request", "encoding");
    hc_response_free(&r);

    hc_request(d, "POST", "/v1/layers/e8/forward", NULL, "{\"query\": [[1,2,3]]}", -1, NULL, &r);
    CHECK_ERROR(r, 400, "shape_mismatch", "query");
    hc_response_free(&r);

    hc_request(d, "POST", "/v1/layers/e8/forward", NULL, "{\"key\": [[1,2,3]]}", -1, NULL, &r);
    CHECK_ERROR(r, 400, "missing_field", "query");
    hc_response_free(&r);

    hc_request(d, "POST", "/v1/layers/e8/forward", NULL, "{\"query\": [[1,2", -1, NULL, &r);
    CHECK_ERROR(r, 400, "bad_json", NULL);
    hc_response_free(&r);

    hc_request(d, "POST", "/v1/layers/e8/forward", NULL, "", 0, NULL, &r);
    CHECK_STATUS(r, 400);
    hc_response_free(&r);

    /* content types: JSON (with parameters) or none pass; others are a 415 */
    snprintf(body, sizeof body, "{\"query\": %s}", q);
    hc_request(d, "POST", "/v1/layers/e8/forward", "application/json; charset=utf-8", body, -1,
               NULL, &r);
    CHECK_STATUS(r, 200);
    hc_response_free(&r);
    hc_opts noct = {.no_content_type = true};
    hc_request(d, "POST", "/v1/layers/e8/forward", NULL, body, -1, &noct, &r);
    CHECK_STATUS(r, 200);
    hc_response_free(&r);
    hc_request(d, "POST", "/v1/layers/e8/forward", "text/plain", body, -1, NULL, &r);
    CHECK_ERROR(r, 415, "unsupported_media_type", "Content-Type");
    CHECK(!strstr(r.body, "octet-stream"), "a forward's 415 names JSON only: %s", r.body);
    hc_response_free(&r);

    /* chunked bodies are read too */
    hc_opts chunked = {.chunked = true};
    hc_request(d, "POST", "/v1/layers/e8/forward", NULL, body, -1, &chunked, &r);
    CHECK_STATUS(r, 200);
    hc_response_free(&r);

    /* 411: a body is needed and there is neither Content-Length nor chunked */
    char raw[4096];
    const char *req = "POST /v1/layers/e8/forward HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                      "Content-Type: application/json\r\n\r\n";
    int st = hc_raw(srv_daemon_port(d), req, strlen(req), 2000, raw, sizeof raw);
    CHECK(st == 411, "no length: status %d: %.200s", st, raw);

    /* names */
    const char *cfg = "{\"config\": {\"embed_dim\": 8, \"num_heads\": 2}}";
    const char *bad_names[] = {"..", ".hidden", "a%20b", "a%2Fb",
                               "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"};
    for (size_t i = 0; i < sizeof bad_names / sizeof *bad_names; i++) {
        char path[256];
        snprintf(path, sizeof path, "/v1/layers/%s", bad_names[i]);
        hc_request(d, "PUT", path, NULL, cfg, -1, NULL, &r);
        CHECK(r.status == 400 || r.status == 404, "PUT %s: %ld", path, r.status);
        if (r.status == 400)
            CHECK(!strcmp(hc_error_code(&r, code, sizeof code), "bad_name"), "%s: %s", path, code);
        hc_response_free(&r);
    }
    /* the refusal names the character and where it is (a control byte by its code, never as is) */
    hc_request(d, "PUT", "/v1/layers/my%20layer", NULL, cfg, -1, NULL, &r);
    CHECK(r.status == 400 && strstr(r.body, "byte 0x20 at offset 2"), "PUT 'my layer': %ld %s",
          r.status, r.body);
    hc_response_free(&r);
    hc_request(d, "PUT", "/v1/layers/my+layer", NULL, cfg, -1, NULL, &r);
    CHECK(r.status == 400 && strstr(r.body, "'+' at offset 2"), "PUT 'my+layer': %ld %s", r.status,
          r.body);
    hc_response_free(&r);
    json_decref(call(d, "PUT",
                     "/v1/layers/aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa",
                     cfg, 201));
    json_decref(call(d, "PUT", "/v1/layers/A-z_0.9", cfg, 201));

    /* configs */
    hc_request(d, "PUT", "/v1/layers/c", NULL,
               "{\"config\": {\"embed_dim\": 10, \"num_heads\": 3}}", -1, NULL, &r);
    CHECK_ERROR(r, 422, "invalid_config", NULL);
    CHECK(strstr(hc_error_field(&r, field, sizeof field), "config.") == field, "config field %s",
          field);
    hc_response_free(&r);
    hc_request(d, "PUT", "/v1/layers/c", NULL,
               "{\"config\": {\"embed_dim\": 8, \"num_heads\": 2, \"batch_frist\": true}}", -1,
               NULL, &r);
    CHECK_ERROR(r, 400, "unknown_field", "config.batch_frist");
    hc_response_free(&r);
    hc_request(d, "PUT", "/v1/layers/c", NULL,
               "{\"config\": {\"embed_dim\": 8, \"num_heads\": 2, \"bias\": 1}}", -1, NULL, &r);
    CHECK_ERROR(r, 422, "invalid_config", "config.bias");
    hc_response_free(&r);
    /* dropout: any probability, as torch takes (never applied: eval mode) */
    hc_request(d, "PUT", "/v1/layers/c", NULL,
               "{\"config\": {\"embed_dim\": 8, \"num_heads\": 2, \"dropout\": 1.5}}", -1, NULL,
               &r);
    CHECK_ERROR(r, 422, "invalid_config", "config.dropout");
    hc_response_free(&r);
    json_decref(call(d, "PUT", "/v1/layers/c",
                     "{\"config\": {\"embed_dim\": 8, \"num_heads\": 2, \"dropout\": 1}}", 201));
    json_decref(call(d, "DELETE", "/v1/layers/c", NULL, 204));
    hc_request(d, "PUT", "/v1/layers/c", NULL, "{\"init\": {}}", -1, NULL, &r);
    CHECK_ERROR(r, 400, "missing_field", "config");
    hc_response_free(&r);
    hc_request(d, "PUT", "/v1/layers/c", NULL,
               "{\"config\": {\"embed_dim\": 8, \"num_heads\": 2}, \"init\": {\"seeed\": 1}}", -1,
               NULL, &r);
    CHECK_ERROR(r, 400, "unknown_field", "init.seeed");
    hc_response_free(&r);

    /* weights maps: missing, unknown, wrong shape */
    hc_request(d, "PUT", "/v1/layers/c", NULL,
               "{\"config\": {\"embed_dim\": 2, \"num_heads\": 1, \"bias\": false}, \"weights\": "
               "{\"in_proj_weight\": [[1,0],[0,1],[1,0],[0,1],[1,0],[0,1]]}}",
               -1, NULL, &r);
    CHECK_ERROR(r, 400, "missing_field", "weights.out_proj.weight");
    hc_response_free(&r);
    hc_request(d, "PUT", "/v1/layers/c", NULL,
               "{\"config\": {\"embed_dim\": 2, \"num_heads\": 1, \"bias\": false}, \"weights\": "
               "{\"in_proj_weight\": [[1,0],[0,1],[1,0],[0,1],[1,0],[0,1]], "
               "\"out_proj.weight\": [[1,0],[0,1]], \"out_proj.bias\": [0,0]}}",
               -1, NULL, &r);
    CHECK_ERROR(r, 400, "unknown_field", "weights.out_proj.bias");
    hc_response_free(&r);
    hc_request(d, "PUT", "/v1/layers/c", NULL,
               "{\"config\": {\"embed_dim\": 2, \"num_heads\": 1, \"bias\": false}, \"weights\": "
               "{\"in_proj_weight\": [[1,0],[0,1],[1,0],[0,1]], "
               "\"out_proj.weight\": [[1,0],[0,1]]}}",
               -1, NULL, &r);
    CHECK_ERROR(r, 400, "shape_mismatch", "weights.in_proj_weight");
    hc_response_free(&r);
    hc_request(d, "PUT", "/v1/layers/c", NULL,
               "{\"config\": {\"embed_dim\": 2, \"num_heads\": 1, \"bias\": false}, \"weights\": "
               "{\"in_proj_weight\": [[1,0],[0,1],[1,0],[0,1],[1,0],[0,1]], "
               "\"out_proj.weight\": [[1,0],[0,1]]}}",
               -1, NULL, &r);
    CHECK_STATUS(r, 201);
    hc_response_free(&r);
    /* identity projections: with one key the output is that key's value */
    json_t *doc = call(d, "POST", "/v1/layers/c/forward", "{\"query\": [[0.5, -2]]}", 200);
    tj_tensor out;
    CHECK(tj_read(&out, json_object_get(doc, "output")) == 0 && out.count == 2 &&
              out.data[0] == 0.5f && out.data[1] == -2.0f,
          "identity layer passes the value through");
    tj_free(&out);
    json_decref(doc);
}

/* Small limits: body (413 from Content-Length and counted for chunked bodies), trace size. */
static void test_limits(void)
{
    srv_options opt;
    hc_options(&opt);
    opt.max_body_bytes = 8192;
    opt.max_trace_elements = 1000;
    opt.demo = true;
    srv_daemon *d = hc_start(&opt);
    if (!CHECK(d != NULL, "daemon with small limits"))
        return;
    size_t n = 300000;
    char *big = malloc(n + 1);
    memset(big, ' ', n);
    big[n] = '\0';
    big[0] = '{';
    big[n - 1] = '}';
    hc_response r;
    /* With Expect: 100-continue curl waits for the daemon's early 413 before sending the body.
     * Without it (curl asks only from 1 MiB), curl is writing the body when the daemon decides: the
     * body is read and dropped and the 413 follows it, so curl reads it (answered first and
     * closed, it failed with "Failed sending data to the peer" under load). */
    const char *const expect[] = {"Expect: 100-continue", NULL};
    hc_opts expect_continue = {.headers = expect};
    hc_request(d, "POST", "/v1/layers/demo/forward", NULL, big, (long)n, &expect_continue, &r);
    CHECK_ERROR(r, 413, "too_large", NULL);
    hc_response_free(&r);
    int got413 = 0;
    for (int i = 0; i < 20; i++) {
        hc_request(d, "POST", "/v1/layers/demo/forward", NULL, big, (long)n, NULL, &r);
        got413 += r.status == 413;
        hc_response_free(&r);
    }
    CHECK(got413 == 20, "20 bodies of %zu bytes sent without Expect: each read its 413 (%d)", n,
          got413);
    {
        /* the same by hand: nothing comes before the body ends, then the 413 */
        char head[256], ans[4096];
        int fd = hc_connect(srv_daemon_port(d));
        int hl = snprintf(head, sizeof head,
                          "POST /v1/layers/demo/forward HTTP/1.1\r\nHost: x\r\n"
                          "Content-Type: application/json\r\nContent-Length: %zu\r\n\r\n",
                          n);
        CHECK(fd >= 0 && hc_send_all(fd, head, (size_t)hl) == (size_t)hl, "headers sent");
        struct pollfd p = {.fd = fd, .events = POLLIN};
        CHECK(poll(&p, 1, 300) == 0, "no answer while the body is on its way");
        CHECK(hc_send_all(fd, big, n) == n, "the whole body was taken");
        int st = hc_raw_read(fd, 5000, ans, sizeof ans);
        CHECK(st == 413 && strstr(ans, "too_large"), "then the 413 (%d %.80s)", st, ans);
        if (fd >= 0)
            close(fd);
        /* headers alone, and the client waits: the 413 a second later, before any of the body
         * is read (SPEC 2), not --min-body-rate's 408 */
        fd = hc_connect(srv_daemon_port(d));
        CHECK(fd >= 0 && hc_send_all(fd, head, (size_t)hl) == (size_t)hl, "headers sent again");
        double t0 = srv_now();
        st = hc_raw_read(fd, 5000, ans, sizeof ans);
        CHECK(st == 413 && strstr(ans, "too_large") && strstr(ans, "--max-body-bytes") &&
                  srv_now() - t0 < 4.0 && strstr(ans, "\r\nDate: "),
              "headers alone: the 413 without the body (%d after %.1f s: %.120s)", st,
              srv_now() - t0, ans);
        if (fd >= 0)
            close(fd);
        /* a body that starts after the answer went (1.5 s after its headers) is still read and
         * dropped, so its client, writing it whole before it reads, gets the answer, not a reset
         * (the answer's connection was shut both ways, and such clients failed with EPIPE) */
        fd = hc_connect(srv_daemon_port(d));
        const size_t late_n = 4 << 20; /* more than the sockets' buffers hold */
        char *late = malloc(late_n);
        memset(late, ' ', late_n);
        int ll = snprintf(head, sizeof head,
                          "POST /v1/layers/demo/forward HTTP/1.1\r\nHost: x\r\n"
                          "Content-Type: application/json\r\nContent-Length: %zu\r\n\r\n",
                          late_n);
        CHECK(fd >= 0 && hc_send_all(fd, head, (size_t)ll) == (size_t)ll, "headers sent, again");
        usleep(1500 * 1000);
        CHECK(hc_send_all(fd, late, late_n) == late_n, "a late body of %zu bytes was taken whole",
              late_n);
        free(late);
        st = hc_raw_read(fd, 5000, ans, sizeof ans);
        CHECK(st == 413 && strstr(ans, "too_large"), "and the 413 read after it (%d %.80s)", st,
              ans);
        if (fd >= 0)
            close(fd);
        /* the same for HEAD: the status and headers, no content (RFC 9110 9.3.2) */
        static const char head_req[] =
            "HEAD /nope HTTP/1.1\r\nHost: x\r\nContent-Length: 10\r\n\r\n";
        fd = hc_connect(srv_daemon_port(d));
        CHECK(fd >= 0 && hc_send_all(fd, head_req, sizeof head_req - 1) == sizeof head_req - 1,
              "HEAD headers sent");
        st = hc_raw_read(fd, 5000, ans, sizeof ans);
        const char *end = strstr(ans, "\r\n\r\n");
        CHECK(st == 404 && end && end[4] == '\0',
              "HEAD, headers alone: 404 without content (%d %s)", st, ans);
        if (fd >= 0)
            close(fd);
    }
    hc_opts chunked = {.chunked = true};
    hc_request(d, "POST", "/v1/layers/demo/forward", NULL, big, (long)n, &chunked, &r);
    CHECK_ERROR(r, 413, "too_large", NULL);
    hc_response_free(&r);

    /* the 413 comes before the body: announce a huge body, send none of it */
    char raw[4096];
    const char *req = "POST /v1/layers/demo/forward HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                      "Content-Type: application/json\r\nContent-Length: 1000000000\r\n"
                      "Expect: 100-continue\r\n\r\n";
    int st = hc_raw(srv_daemon_port(d), req, strlen(req), 2000, raw, sizeof raw);
    CHECK(st == 413, "huge Content-Length: status %d before the body: %.100s", st, raw);
    /* past what the daemon reads to drop (64 MiB) it answers at once, without Expect too */
    const char *req2 = "POST /v1/layers/demo/forward HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                       "Content-Type: application/json\r\nContent-Length: 1000000000\r\n\r\n";
    st = hc_raw(srv_daemon_port(d), req2, strlen(req2), 2000, raw, sizeof raw);
    CHECK(st == 413, "huge Content-Length without Expect: status %d at once: %.100s", st, raw);

    /* trace: 1 x 8 x 64 query; q_proj alone has 512 elements, all stages well over 1000 */
    float q[8 * 64];
    char *nested = nested_query(1, 8, 64, q);
    size_t cap = strlen(nested) + 64;
    char *body = malloc(cap);
    snprintf(body, cap, "{\"query\": %s}", nested);
    hc_request(d, "POST", "/v1/layers/demo/trace", NULL, body, -1, NULL, &r);
    CHECK(r.status == 413 || r.status == 413, "trace over the limit: %ld %.200s", r.status, r.body);
    hc_response_free(&r);
    hc_request(d, "POST", "/v1/layers/demo/forward", NULL, body, -1, NULL, &r);
    CHECK_STATUS(r, 200);
    hc_response_free(&r);
    free(body);
    free(nested);
    free(big);
    hc_stop(d);
}

/* Drain: /readyz turns 503, new requests on open connections get 503, new connections are refused.
 */
static void test_drain(void)
{
    srv_daemon *d = hc_start(NULL);
    if (!CHECK(d != NULL, "daemon"))
        return;
    int port = srv_daemon_port(d);
    int fd = hc_connect(port);
    CHECK(fd >= 0, "connect");
    const char *req = "GET /readyz HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n";
    char buf[2048];
    CHECK(send(fd, req, strlen(req), MSG_NOSIGNAL) > 0, "send 1");
    ssize_t got = recv(fd, buf, sizeof buf - 1, 0);
    buf[got > 0 ? got : 0] = '\0';
    CHECK(strstr(buf, " 200 ") != NULL, "ready before the drain: %.60s", buf);

    CHECK(srv_daemon_drain(d, 1000) == 0, "nothing in flight");
    CHECK(send(fd, req, strlen(req), MSG_NOSIGNAL) > 0, "send 2");
    struct pollfd p = {.fd = fd, .events = POLLIN};
    got = poll(&p, 1, 2000) > 0 ? recv(fd, buf, sizeof buf - 1, 0) : 0;
    buf[got > 0 ? got : 0] = '\0';
    CHECK(strstr(buf, " 503 ") != NULL, "503 while draining: %.60s", buf);
    close(fd);
    hc_response r;
    hc_request_port(port, "GET", "/healthz", NULL, NULL, 0, NULL, &r);
    CHECK(r.status == 0, "no new connections after the drain began (status %ld)", r.status);
    hc_response_free(&r);
    hc_stop(d);
}

/* Stalled clients (half a header, half a body) hold up nobody, even with one HTTP thread, and are
 * closed after --timeout. */
static void test_slow_clients(void)
{
    srv_options opt;
    hc_options(&opt);
    opt.threads = 1;
    opt.timeout = 1;
    opt.demo = true;
    srv_daemon *d = hc_start(&opt);
    if (!CHECK(d != NULL, "daemon"))
        return;
    int port = srv_daemon_port(d);
    int a = hc_connect(port), b = hc_connect(port);
    const char *half_body = "POST /v1/layers/demo/forward HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                            "Content-Type: application/json\r\nContent-Length: 1000\r\n\r\n"
                            "{\"query\": [[";
    const char *half_header = "GET /healthz HTTP/1.1\r\nHo";
    CHECK(a >= 0 && b >= 0 && send(a, half_body, strlen(half_body), MSG_NOSIGNAL) > 0 &&
              send(b, half_header, strlen(half_header), MSG_NOSIGNAL) > 0,
          "two stalled clients");
    int ok = 0;
    for (int i = 0; i < 5; i++) {
        hc_response r;
        hc_request(
            d, "POST", "/v1/layers/demo/forward", NULL,
            "{\"query\": [[0,1,2,3,4,5,6,7,8,9,0,1,2,3,4,5,6,7,8,9,0,1,2,3,4,5,6,7,8,9,0,1,2,"
            "3,4,5,6,7,8,9,0,1,2,3,4,5,6,7,8,9,0,1,2,3,4,5,6,7,8,9,0,1,2,3]]}",
            -1, NULL, &r);
        ok += r.status == 200;
        hc_response_free(&r);
    }
    CHECK(ok == 5, "%d of 5 requests served beside the stalled clients", ok);
    /* the idle timeout closes both (recv sees the end, possibly after a 408-like reply) */
    for (int k = 0; k < 2; k++) {
        int fd = k ? b : a;
        char buf[512];
        struct pollfd p = {.fd = fd, .events = POLLIN};
        bool closed = false;
        for (int i = 0; i < 10 && !closed; i++) {
            if (poll(&p, 1, 1000) > 0) {
                ssize_t n = recv(fd, buf, sizeof buf, 0);
                closed = n <= 0;
            }
        }
        CHECK(closed, "stalled client %d closed by --timeout", k);
        close(fd);
    }
    hc_stop(d);
}

/* Many clients at once, some replacing the layer they use: all answers are whole and right. */
typedef struct worker_arg {
    srv_daemon *d;
    int id, ok;
} worker_arg;

static void *worker(void *p)
{
    worker_arg *w = p;
    for (int i = 0; i < 20; i++) {
        hc_response r;
        if (w->id == 0 && i % 4 == 0) {
            hc_request(w->d, "PUT", "/v1/layers/busy", NULL,
                       "{\"config\": {\"embed_dim\": 64, \"num_heads\": 4}}", -1, NULL, &r);
            w->ok += r.status == 200;
        } else {
            hc_request(
                w->d, "POST", "/v1/layers/busy/forward", NULL,
                "{\"query\": [[0.1,0.2,0.3,0.4,0.5,0.6,0.7,0.8,0.9,1.0,1.1,1.2,1.3,1.4,1.5,"
                "1.6,1.7,1.8,1.9,2.0,2.1,2.2,2.3,2.4,2.5,2.6,2.7,2.8,2.9,3.0,3.1,3.2,0.1,0.2,"
                "0.3,0.4,0.5,0.6,0.7,0.8,0.9,1.0,1.1,1.2,1.3,1.4,1.5,1.6,1.7,1.8,1.9,2.0,2.1,"
                "2.2,2.3,2.4,2.5,2.6,2.7,2.8,2.9,3.0,3.1,3.2]]}",
                -1, NULL, &r);
            w->ok += r.status == 200 && strstr(r.body, "\"output\"") != NULL;
        }
        hc_response_free(&r);
    }
    return NULL;
}

static void test_concurrency(srv_daemon *d)
{
    json_decref(call(d, "PUT", "/v1/layers/busy",
                     "{\"config\": {\"embed_dim\": 64, \"num_heads\": 4}}", 201));
    pthread_t t[4];
    worker_arg w[4];
    for (int i = 0; i < 4; i++) {
        w[i] = (worker_arg){d, i, 0};
        pthread_create(&t[i], NULL, worker, &w[i]);
    }
    int ok = 0;
    for (int i = 0; i < 4; i++) {
        pthread_join(t[i], NULL);
        ok += w[i].ok;
    }
    CHECK(ok == 80, "%d of 80 concurrent requests answered right", ok);
}

int main(void)
{
    srv_options opt;
    hc_options(&opt);
    opt.demo = true;
    srv_daemon *d = hc_start(&opt);
    if (!CHECK(d != NULL, "daemon starts on port 0"))
        return check_report();
    CHECK(srv_daemon_port(d) > 0, "real port read back: %d", srv_daemon_port(d));
    test_health(d);
    test_routing(d);
    test_layer_lifecycle(d);
    test_forward_forms(d);
    test_errors(d);
    test_large(d);
    test_large_base64_input(d);
    test_server_timing(d);
    test_concurrency(d);
    hc_stop(d);
    test_limits();
    test_slow_clients();
    test_drain();
    return check_report();
}
