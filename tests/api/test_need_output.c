/*
 * test_need_output.c - "need_output": false on /v1 forward leaves the output out of the reply, so a
 * client that only wants weights (the viewer zooming into a long input's map) does not move an
 * [N,L,E] tensor it will not read. The weights are the same, byte for byte, as with the output;
 * a request that would answer nothing, or need_output on a trace, is a 400.
 */
#include <string.h>

#include "check.h"
#include "http_client.h"

static const char *const QUERY =
    "[[[0.1,-0.2,0.3,0.4],[0.5,0.6,-0.7,0.8],[0.9,1.0,1.1,-1.2]]]";

/* POST forward with body; returns the parsed reply (new reference) and its status in *status. */
static json_t *forward(srv_daemon *d, const char *path, const char *body, long *status,
                       hc_response *keep)
{
    hc_request(d, "POST", path, NULL, body, -1, NULL, keep);
    *status = keep->status;
    return hc_json(keep);
}

int main(void)
{
    srv_daemon *d = hc_start(NULL);
    if (!CHECK(d, "daemon starts"))
        return check_report();
    hc_response r;
    hc_request(d, "PUT", "/v1/layers/t", NULL,
               "{\"config\": {\"embed_dim\": 4, \"num_heads\": 2}, \"init\": {\"seed\": 3}}", -1,
               NULL, &r);
    CHECK(r.status == 201, "layer created: %ld %s", r.status, r.body);
    hc_response_free(&r);

    char body[1024];
    long st;
    hc_response a, b;

    /* per-head weights, with and without the output: the same weights text */
    snprintf(body, sizeof body,
             "{\"query\": %s, \"need_weights\": true, \"average_attn_weights\": false}", QUERY);
    json_t *with = forward(d, "/v1/layers/t/forward", body, &st, &a);
    CHECK(st == 200 && json_object_get(with, "output") && json_object_get(with, "attn_weights"),
          "with the output: %s", a.body);
    snprintf(body, sizeof body,
             "{\"query\": %s, \"need_weights\": true, \"average_attn_weights\": false, "
             "\"need_output\": false}",
             QUERY);
    json_t *without = forward(d, "/v1/layers/t/forward", body, &st, &b);
    CHECK(st == 200 && !json_object_get(without, "output") &&
              json_object_size(without) == 1,
          "need_output false: only the weights: %s", b.body);
    char *wa = json_dumps(json_object_get(with, "attn_weights"), JSON_COMPACT);
    char *wb = json_dumps(json_object_get(without, "attn_weights"), JSON_COMPACT);
    CHECK(wa && wb && strcmp(wa, wb) == 0, "the same weights either way");
    CHECK(b.len > 0 && b.body[b.len - 1] == '\n', "the reply ends with a newline");
    free(wa);
    free(wb);
    json_decref(with);
    json_decref(without);
    hc_response_free(&a);
    hc_response_free(&b);

    /* a selection's top-k alone */
    snprintf(body, sizeof body,
             "{\"query\": %s, \"need_output\": false, \"weights_select\": {\"heads\": [1], "
             "\"top_k\": 2}}",
             QUERY);
    json_t *topk = forward(d, "/v1/layers/t/forward", body, &st, &a);
    CHECK(st == 200 && !json_object_get(topk, "output") && json_object_get(topk, "attn_topk") &&
              json_object_size(topk) == 1,
          "need_output false with top-k: only attn_topk: %s", a.body);
    json_decref(topk);
    hc_response_free(&a);

    /* need_output true is the default, said out loud */
    snprintf(body, sizeof body, "{\"query\": %s, \"need_output\": true}", QUERY);
    json_t *plain = forward(d, "/v1/layers/t/forward", body, &st, &a);
    CHECK(st == 200 && json_object_get(plain, "output") && json_object_size(plain) == 1,
          "need_output true: the output: %s", a.body);
    json_decref(plain);
    hc_response_free(&a);

    /* nothing asked for: a 400 naming need_output; not a boolean; not a trace member */
    snprintf(body, sizeof body, "{\"query\": %s, \"need_output\": false}", QUERY);
    hc_request(d, "POST", "/v1/layers/t/forward", NULL, body, -1, NULL, &a);
    HC_CHECK_ERROR(a, 400, "bad_request", "need_output");
    hc_response_free(&a);
    snprintf(body, sizeof body, "{\"query\": %s, \"need_output\": 0, \"need_weights\": true}",
             QUERY);
    hc_request(d, "POST", "/v1/layers/t/forward", NULL, body, -1, NULL, &a);
    CHECK(a.status == 400, "need_output 0 (not a boolean) is a 400: %ld %s", a.status, a.body);
    hc_response_free(&a);
    snprintf(body, sizeof body, "{\"query\": %s, \"need_output\": false}", QUERY);
    hc_request(d, "POST", "/v1/layers/t/trace", NULL, body, -1, NULL, &a);
    HC_CHECK_ERROR(a, 400, "unknown_field", "need_output");
    hc_response_free(&a);

    hc_stop(d);
    return check_report();
}
