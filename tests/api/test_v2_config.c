/*
 * test_v2_config.c - Triton's model configuration extension (GET /v2/models/{name}[/versions/{v}]
 * /config) against an in-process daemon on port 0: the body is a ModelConfig as
 * model_config.proto declares it (triton_model_config.h), it agrees with the model metadata the
 * way perf_analyzer reads the two (every config input in the metadata, same type and dims,
 * max_batch_size 0), its dims and parameters follow the layer's config (the same object as
 * GET /v1/layers/{name} shows), a replace shows at once, and the errors are the protocol's.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "http_client.h"
#include "triton_model_config.h"

#define LAYER_KV                                                                                   \
    "{\"config\": {\"embed_dim\": 6, \"num_heads\": 3, \"kdim\": 4, \"vdim\": 5, "                 \
    "\"batch_first\": false}, \"init\": {\"seed\": 3}}"
#define LAYER_SMALL "{\"config\": {\"embed_dim\": 4, \"num_heads\": 2}, \"init\": {\"seed\": 1}}"

static json_t *get(srv_daemon *d, const char *path, long want)
{
    hc_response r;
    hc_request(d, "GET", path, NULL, NULL, 0, NULL, &r);
    json_t *j = hc_json(&r);
    CHECK(r.status == want && j, "GET %s: %ld (want %ld) %.200s", path, r.status, want, r.body);
    hc_response_free(&r);
    return j;
}

static long put(srv_daemon *d, const char *path, const char *body)
{
    hc_response r;
    hc_request(d, "PUT", path, NULL, body, -1, NULL, &r);
    long s = r.status;
    hc_response_free(&r);
    return s;
}

static const char *str(const json_t *o, const char *k)
{
    const char *s = json_string_value(json_object_get(o, k));
    return s ? s : "";
}

static void check_error(srv_daemon *d, const char *method, const char *path, long want)
{
    hc_response r;
    hc_request(d, method, path, NULL, NULL, 0, NULL, &r);
    json_t *j = hc_json(&r);
    char id[160] = ""; /* attnd adds the request's id to the protocol's {"error": "..."} */
    hc_header(&r, "X-Request-Id", id, sizeof id);
    CHECK(r.status == want && json_is_string(json_object_get(j, "error")) &&
              json_object_size(j) == 2 &&
              !strcmp(json_string_value(json_object_get(j, "request_id")) ?: "-", id),
          "%s %s: want %ld {\"error\": \"...\"}, got %ld %s", method, path, want, r.status, r.body);
    json_decref(j);
    hc_response_free(&r);
}

/* What perf_analyzer reads from the two, and how. */
static void check_perf_analyzer_view(const json_t *config, const json_t *meta)
{
    CHECK(!strcmp(str(meta, "name"), str(config, "name")), "same name");
    CHECK(json_integer_value(json_object_get(config, "max_batch_size")) == 0,
          "max_batch_size 0: metadata shapes are taken whole");
    const char *pairs[2][2] = {{"input", "inputs"}, {"output", "outputs"}};
    for (int p = 0; p < 2; p++) {
        size_t i;
        const json_t *t;
        json_array_foreach(json_object_get(config, pairs[p][0]), i, t)
        {
            const json_t *m = NULL, *x;
            size_t k;
            json_array_foreach(json_object_get(meta, pairs[p][1]), k, x)
            {
                if (!strcmp(str(x, "name"), str(t, "name")))
                    m = x;
            }
            char want[32];
            snprintf(want, sizeof want, "TYPE_%s", str(m, "datatype"));
            CHECK(m && !strcmp(want, str(t, "data_type")) &&
                      json_equal(json_object_get(t, "dims"), json_object_get(m, "shape")) &&
                      json_is_boolean(json_object_get(t, "is_shape_tensor")),
                  "%s %s: in the metadata, same type and dims", pairs[p][0], str(t, "name"));
        }
    }
    CHECK(json_is_boolean(
              json_object_get(json_object_get(config, "model_transaction_policy"), "decoupled")) &&
              json_is_boolean(json_object_get(json_object_get(config, "response_cache"), "enable")),
          "decoupled and response_cache.enable are booleans");
}

int main(void)
{
    srv_daemon *d = hc_start(NULL);
    if (!CHECK(d, "daemon"))
        return check_report();
    CHECK(put(d, "/v1/layers/kv", LAYER_KV) == 201, "PUT kv");

    json_t *c = get(d, "/v2/models/kv/config", 200);
    json_t *m = get(d, "/v2/models/kv", 200);
    char why[256];
    CHECK(tmc_check(c, why, sizeof why), "a ModelConfig: %s", why);
    check_perf_analyzer_view(c, m);
    long long want_last[5] = {6, 4, 5, -1, -1};
    for (size_t i = 0; i < 5; i++) {
        const json_t *dims =
            json_object_get(json_array_get(json_object_get(c, "input"), i), "dims");
        CHECK(json_integer_value(json_array_get(dims, json_array_size(dims) - 1)) == want_last[i],
              "input %zu's last dim %lld", i, want_last[i]);
    }
    /* parameters: the layer's config as /v1 shows it, every field */
    json_t *v1 = get(d, "/v1/layers/kv", 200);
    const json_t *cfg = json_object_get(v1, "config"), *p = json_object_get(c, "parameters");
    CHECK(json_object_size(cfg) > 0 && json_object_size(p) == json_object_size(cfg),
          "one parameter per config field (%zu, %zu)", json_object_size(p), json_object_size(cfg));
    const char *k;
    const json_t *v;
    json_object_foreach((json_t *)cfg, k, v)
    {
        char *text = json_is_string(v) ? strdup(json_string_value(v))
                                       : json_dumps(v, JSON_COMPACT | JSON_ENCODE_ANY);
        CHECK(!strcmp(str(json_object_get(p, k), "string_value"), text), "parameter %s = %s", k,
              text);
        free(text);
    }
    CHECK(json_equal(json_object_get(m, "parameters"), (json_t *)cfg),
          "metadata parameters: the config object as /v1 shows it");
    json_decref(v1);
    json_decref(m);
    json_decref(c);

    /* at its version; a replace shows at once, and the old version is gone */
    json_t *meta = get(d, "/v2/models/kv", 200);
    char vpath[128], old[32];
    snprintf(old, sizeof old, "%s",
             json_string_value(json_array_get(json_object_get(meta, "versions"), 0)));
    snprintf(vpath, sizeof vpath, "/v2/models/kv/versions/%s/config", old);
    json_decref(meta);
    json_t *cv = get(d, vpath, 200);
    CHECK(!strcmp(str(cv, "name"), "kv"), "config at the version");
    json_decref(cv);
    CHECK(put(d, "/v1/layers/kv", LAYER_SMALL) == 200, "replace kv");
    json_t *c2 = get(d, "/v2/models/kv/config", 200);
    const json_t *q = json_object_get(json_array_get(json_object_get(c2, "input"), 0), "dims");
    CHECK(json_integer_value(json_array_get(q, 2)) == 4 &&
              !strcmp(str(json_object_get(json_object_get(c2, "parameters"), "embed_dim"),
                          "string_value"),
                      "4"),
          "the replaced layer's config");
    json_decref(c2);
    check_error(d, "GET", vpath, 404);

    check_error(d, "GET", "/v2/models/nope/config", 404);
    check_error(d, "GET", "/v2/models/nope/versions/1/config", 404);
    check_error(d, "GET", "/v2/models/kv/versions/0/config", 404);
    check_error(d, "POST", "/v2/models/kv/config", 405);
    check_error(d, "PUT", "/v2/models/kv/versions/1/config", 405);
    hc_stop(d);
    return check_report();
}
