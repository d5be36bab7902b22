/*
 * test_cost.c - --max-request-flops: a forward or trace whose cost, estimated from its shapes with
 * describe's formula (mha_flops), is over the limit is refused with 413 too_costly before it runs,
 * the estimate and the limit in the message; against in-process daemons (port 0) on the demo layer
 * (E=64, H=4).
 *
 *   - with the default limit (about a minute of one core), the issue's [1, 262144, 64] query (1.8e13
 *     FLOPs) is refused at once, in the flat and base64 forms whose data is not even there (the
 *     refusal comes before any tensor data is read), while a pass under the limit is served;
 *   - with a small limit (1e9), each way a request can carry shapes: nested (measured as read), flat
 *     and base64 with data that would not decode (refused before it is), a long key (S counts, as
 *     in describe), trace, /v2 with JSON data and with binary data missing its bytes;
 *   - shape errors and oversized tensors keep their own answers (a shape is judged before its cost);
 *   - the estimate in the message is describe's value for the same N, L, S.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "http_client.h"

static char code[64];

/* POSTs body to path and checks a 413 too_costly naming the limit (and `estimate` when given). */
static void expect_too_costly(srv_daemon *d, const char *what, const char *path, const char *body,
                              const char *estimate)
{
    hc_response r;
    hc_request(d, "POST", path, NULL, body, -1, NULL, &r);
    CHECK(r.status == 413 && !strcmp(hc_error_code(&r, code, sizeof code), "too_costly") &&
              strstr(r.body, "--max-request-flops") && (!estimate || strstr(r.body, estimate)),
          "%s: 413 too_costly naming the limit%s%s (%ld %.400s)", what, estimate ? " and " : "",
          estimate ? estimate : "", r.status, r.body);
    hc_response_free(&r);
}

static void expect_status(srv_daemon *d, const char *what, const char *path, const char *body,
                          long want, const char *want_code)
{
    hc_response r;
    hc_request(d, "POST", path, NULL, body, -1, NULL, &r);
    CHECK(r.status == want && (!want_code || !strcmp(hc_error_code(&r, code, sizeof code), want_code)),
          "%s: %ld %s (%ld %.300s)", what, want, want_code ? want_code : "", r.status, r.body);
    hc_response_free(&r);
}

/* A nested query [1, L, 64] (malloc'd). */
static char *nested_query(int L)
{
    size_t cap = (size_t)L * 64 * 3 + 64;
    char *b = malloc(cap), *p = b;
    p += sprintf(p, "{\"query\": [[");
    for (int i = 0; i < L; i++) {
        *p++ = i ? ',' : '[';
        if (i)
            *p++ = '[';
        for (int j = 0; j < 64; j++) {
            *p++ = j ? ',' : '0';
            if (j)
                *p++ = '0';
        }
        *p++ = ']';
    }
    sprintf(p, "]]}");
    return b;
}

static void test_default_limit(void)
{
    srv_options opt;
    srv_options_default(&opt);
    CHECK(opt.max_request_flops == INT64_C(3000000000000),
          "the default is 3e12, about a minute of one core (%lld)", (long long)opt.max_request_flops);
    hc_options(&opt);
    opt.demo = true;
    srv_daemon *d = hc_start(&opt);
    if (!CHECK(d != NULL, "daemon"))
        return;
    const char *fwd = "/v1/layers/demo/forward";
    /* the pass: 17.6 TFLOP, a 90 MB body; here without its data, which is never read */
    expect_too_costly(d, "[1,262144,64] flat, data absent", fwd,
                      "{\"query\": {\"shape\": [1, 262144, 64], \"data\": [0]}}", "1.76e+13");
    expect_too_costly(d, "[1,262144,64] base64, not even base64", fwd,
                      "{\"query\": {\"dtype\": \"float32\", \"base64\": \"!!!!\", \"shape\": [1, 262144, 64]}}",
                      "L=262144");
    expect_too_costly(d, "trace, the same", "/v1/layers/demo/trace",
                      "{\"query\": {\"shape\": [1, 262144, 64], \"data\": [0]}}",
                      "about a minute of one core");
    expect_status(d, "a pass under the limit", fwd, "{\"query\": [[[1, 2, 3, 4, 5, 6, 7, 8, 9, 10, "
                  "11, 12, 13, 14, 15, 16, 17, 18, 19, 20, 21, 22, 23, 24, 25, 26, 27, 28, 29, 30, 31, "
                  "32, 33, 34, 35, 36, 37, 38, 39, 40, 41, 42, 43, 44, 45, 46, 47, 48, 49, 50, 51, 52, "
                  "53, 54, 55, 56, 57, 58, 59, 60, 61, 62, 63, 64]]]}", 200, NULL);
    hc_stop(d);
}

static void test_small_limit(void)
{
    srv_options opt;
    hc_options(&opt);
    opt.demo = true;
    opt.max_request_flops = 1000000000; /* 1e9: [1,1024,64] costs 3.0e8, [1,2048,64] 1.14e9 */
    srv_daemon *d = hc_start(&opt);
    if (!CHECK(d != NULL, "daemon"))
        return;
    const char *fwd = "/v1/layers/demo/forward";

    char *q = nested_query(2048);
    expect_too_costly(d, "nested [1,2048,64]", fwd, q, "1.14e+09");
    /* the default is a minute of one core; a limit the operator chose is not said to be one */
    hc_response r;
    hc_request(d, "POST", fwd, NULL, q, -1, NULL, &r);
    CHECK(r.status == 413 && strstr(r.body, "over the limit of 1e+09 (--max-request-flops)") &&
              !strstr(r.body, "minute"),
          "a chosen limit is named without the default's time (%.300s)", r.body);
    hc_response_free(&r);
    free(q);
    q = nested_query(1024);
    expect_status(d, "nested [1,1024,64] is under it", fwd, q, 200, NULL);
    free(q);
    expect_too_costly(d, "flat [1,2048,64] whose data does not match its shape", fwd,
                      "{\"query\": {\"data\": [1, 2, 3], \"shape\": [1, 2048, 64]}}", NULL);
    expect_too_costly(d, "base64 [2048,64] unbatched with a bad base64 text", fwd,
                      "{\"query\": {\"shape\": [2048, 64], \"base64\": \"@@@@\"}}", "N=1, L=2048");
    /* cross-attention: a short query against 65536 keys; the keys' projections alone are 1.07e9 */
    expect_too_costly(d, "a long key", fwd,
                      "{\"query\": {\"shape\": [1, 4, 64], \"data\": [0]}, "
                      "\"key\": {\"shape\": [1, 65536, 64], \"base64\": \"\"}}",
                      "L=4, S=65536");
    expect_too_costly(d, "trace", "/v1/layers/demo/trace",
                      "{\"query\": {\"shape\": [1, 2048, 64], \"base64\": \"\"}}", NULL);

    /* a shape is judged before its cost: wrong features, a tensor over its size, a rank */
    expect_status(d, "wrong features: 400 shape_mismatch", fwd,
                  "{\"query\": {\"shape\": [1, 2048, 65], \"data\": [0]}}", 400, NULL);
    expect_status(d, "over --max-tensor-elements: too_large", fwd,
                  "{\"query\": {\"shape\": [4294967296, 4294967296, 64], \"data\": [1]}}", 413,
                  "too_large");
    expect_status(d, "a syntax error elsewhere wins", fwd,
                  "{\"query\": {\"shape\": [1, 2048, 64], \"data\": [0]}, \"is_causal\": tru}", 400,
                  "bad_json");

    /* describe gives the same estimate for the same N, L, S */
    hc_request(d, "GET", "/v1/layers/demo?L=2048", NULL, NULL, 0, NULL, &r);
    json_t *doc = hc_json(&r);
    double v = json_number_value(json_object_get(json_object_get(doc, "flops"), "value"));
    CHECK(v > 1e9 && v < 1.15e9, "describe's flops for L=2048: %g (the refused estimate)", v);
    json_decref(doc);
    hc_response_free(&r);

    /* /v2: JSON data, and binary data whose bytes are not even there */
    const char *v2 = "/v2/models/demo/infer";
    char body[512];
    snprintf(body, sizeof body,
             "{\"inputs\": [{\"name\": \"query\", \"shape\": [1, 2048, 64], \"datatype\": \"FP32\", "
             "\"data\": [1, 2, 3]}]}");
    hc_request(d, "POST", v2, NULL, body, -1, NULL, &r);
    CHECK(r.status == 413 && strstr(r.body, "--max-request-flops") && strstr(r.body, "\"error\""),
          "/v2 JSON data: 413 naming the limit, before its data is read (%ld %.300s)", r.status,
          r.body);
    hc_response_free(&r);
    int hl = snprintf(body, sizeof body,
                      "{\"inputs\": [{\"name\": \"query\", \"shape\": [1, 2048, 64], \"datatype\": "
                      "\"FP32\", \"parameters\": {\"binary_data_size\": 524288}}]}");
    char line[96];
    snprintf(line, sizeof line, "Inference-Header-Content-Length: %d", hl);
    const char *hdrs[] = {line, NULL};
    hc_opts o = {.headers = hdrs};
    hc_request(d, "POST", v2, "application/octet-stream", body, hl, &o, &r);
    CHECK(r.status == 413 && strstr(r.body, "--max-request-flops"),
          "/v2 binary data absent: 413 naming the limit (%ld %.300s)", r.status, r.body);
    hc_response_free(&r);
    snprintf(body, sizeof body,
             "{\"inputs\": [{\"name\": \"query\", \"shape\": [1, 4, 64], \"datatype\": \"FP32\", "
             "\"data\": [1]}]}");
    hc_request(d, "POST", v2, NULL, body, -1, NULL, &r);
    CHECK(r.status == 400, "/v2 under the limit: its data is read and judged (%ld %.200s)",
          r.status, r.body);
    hc_response_free(&r);

    hc_request(d, "GET", "/metrics", NULL, NULL, 0, NULL, &r);
    CHECK(r.status == 200 && strstr(r.body, "attnd_forward_passes_total{kind=\"forward\"} 1\n"),
          "only the pass under the limit ran");
    hc_response_free(&r);
    hc_stop(d);
}

int main(void)
{
    test_default_limit();
    test_small_limit();
    return check_report();
}
