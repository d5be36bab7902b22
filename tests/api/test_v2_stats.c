/*
 * test_v2_stats.c - Triton's statistics extension (GET /v2/models[/{name}[/versions/{v}]]/stats)
 * and the per-layer series of /metrics, against an in-process daemon on port 0:
 *
 *   - the replies have the form of the extension document's schema ($stats_model_response, read
 *     as written in extension_statistics.md) and of the replies Triton's own docs show (peoplenet);
 *     the schema reader itself refuses bodies that break it, so these checks can fail;
 *   - /v1 forward, /v1 trace and /v2 infer (JSON and binary) all count, successes with their
 *     phases, failures (bad shape, bad body, bad datatype) with their time; requests for unknown
 *     layers count nowhere; another layer stays at zero;
 *   - inference_count = execution_count = success.count, batch_stats (batch_size 1) equal to the
 *     phases, last_inference between the clock before and after, memory_usage the parameters;
 *   - requests from several threads at once all count (no update lost without a lock);
 *   - /metrics shows the same numbers (requests, histogram count and sum to the nanosecond, phase
 *     and failure seconds); a replaced layer keeps its counts, a deleted one's series are gone and
 *     a layer created again under that name starts from zero;
 *   - the errors: unknown model, unknown version (404), wrong method (405), all {"error": "..."}.
 */
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "check.h"
#include "http_client.h"
#include "v2_extension_docs.h"
#include "v2_schema.h"

#define LAYER_A "{\"config\": {\"embed_dim\": 8, \"num_heads\": 2}, \"init\": {\"seed\": 1}}"
#define LAYER_B "{\"config\": {\"embed_dim\": 4, \"num_heads\": 1}, \"init\": {\"seed\": 2}}"
#define A_PARAM_BYTES ((3 * 8 * 8 + 3 * 8 + 8 * 8 + 8) * 4) /* in_proj w+b, out_proj w+b */

#define Q8 "[[1,2,3,4,5,6,7,8],[8,7,6,5,4,3,2,1]]"

static long request(srv_daemon *d, const char *method, const char *path, const char *body,
                    json_t **json)
{
    hc_response r;
    hc_request(d, method, path, NULL, body, body ? -1 : 0, NULL, &r);
    long s = r.status;
    if (json)
        *json = hc_json(&r);
    hc_response_free(&r);
    return s;
}

static json_t *stats_of(srv_daemon *d, const char *path)
{
    json_t *j = NULL;
    long s = request(d, "GET", path, NULL, &j);
    CHECK(s == 200 && j, "GET %s: %ld", path, s);
    return j;
}

/* The model_stats entry called name in a reply, borrowed (NULL when absent). */
static json_t *entry(json_t *reply, const char *name)
{
    size_t i;
    json_t *e;
    json_array_foreach(json_object_get(reply, "model_stats"), i, e)
    {
        if (!strcmp(json_string_value(json_object_get(e, "name")), name))
            return e;
    }
    return NULL;
}

static uint64_t num(const json_t *o, const char *a, const char *b, const char *c)
{
    const json_t *v = json_object_get(o, a);
    if (b)
        v = json_object_get(v, b);
    if (c)
        v = json_object_get(v, c);
    return json_is_integer(v) ? (uint64_t)json_integer_value(v) : UINT64_MAX;
}

static bool conforms(const json_t *reply, const char *what)
{
    char why[512];
    bool ok = CHECK(v2_schema_check(triton_stats_schemas, TRITON_STATS_SCHEMAS_COUNT,
                                    "$stats_model_response", reply, why, sizeof why),
                    "%s: against extension_statistics.md: %s", what, why);
    ok &= CHECK(v2_example_check(TRITON_STATS_EXAMPLE_1, reply, why, sizeof why),
                "%s: against Triton's concurrency example: %s", what, why);
    ok &= CHECK(v2_example_check(TRITON_STATS_EXAMPLE_2, reply, why, sizeof why),
                "%s: against Triton's dynamic batching example: %s", what, why);
    return ok;
}

static void check_v2_error(srv_daemon *d, const char *method, const char *path, long want)
{
    hc_response r;
    hc_request(d, method, path, NULL, NULL, 0, NULL, &r);
    json_t *j = hc_json(&r);
    char why[512];
    /* attnd adds the request's id (its X-Request-Id) to the protocol's error; Triton's clients
     * read "error" only. The rest is checked against the document. */
    char id[160] = "";
    hc_header(&r, "X-Request-Id", id, sizeof id);
    CHECK(json_is_string(json_object_get(j, "request_id")) &&
              !strcmp(json_string_value(json_object_get(j, "request_id")), id),
          "%s %s: request_id is the X-Request-Id", method, path);
    json_object_del(j, "request_id");
    CHECK(r.status == want && j && json_object_size(j) == 1 &&
              v2_schema_check(triton_stats_schemas, TRITON_STATS_SCHEMAS_COUNT,
                              "$repository_statistics_error_response", j, why, sizeof why),
          "%s %s: want %ld {\"error\": ...}; got %ld %s %s", method, path, want, r.status, r.body,
          why);
    json_decref(j);
    hc_response_free(&r);
}

/* The schema reader and checker: the document's texts read, and bodies that break them fail. */
static void test_schema_reader(void)
{
    char name[64];
    for (int i = 0; i < TRITON_STATS_SCHEMAS_COUNT; i++) {
        json_t *j = v2_schema_parse(triton_stats_schemas[i], name);
        CHECK(j != NULL, "schema text %d reads", i);
        json_decref(j);
    }
    json_t *ms = v2_schema_parse(triton_stats_schemas[1], name);
    CHECK(!strcmp(name, "$model_stat") && json_object_get(ms, "version?") &&
              json_is_array(json_object_get(ms, "batch_stats")) &&
              json_array_size(json_object_get(ms, "batch_stats")) == 1,
          "$model_stat: version optional, batch_stats an array of one form");
    json_decref(ms);

    static const char *const bad[] = {
        "{\"model_stats\":[{\"name\":\"a\",\"last_inference\":0,\"inference_count\":\"1\"}]}",
        "{\"model_stats\":[{\"name\":\"a\"}]}",
        "{\"model_stats\":{}}",
        "{\"model_stats\":[],\"extra\":1}",
    };
    /* a full, valid entry to break one field at a time */
    const char *good =
        "{\"model_stats\":[{\"name\":\"a\",\"version\":\"1\",\"last_inference\":0,"
        "\"inference_count\":0,\"execution_count\":0,\"inference_stats\":{"
        "\"success\":{\"count\":0,\"ns\":0},\"fail\":{\"count\":0,\"ns\":0},"
        "\"queue\":{\"count\":0,\"ns\":0},\"compute_input\":{\"count\":0,\"ns\":0},"
        "\"compute_infer\":{\"count\":0,\"ns\":0},\"compute_output\":{\"count\":0,\"ns\":0},"
        "\"cache_hit\":{\"count\":0,\"ns\":0},\"cache_miss\":{\"count\":0,\"ns\":0}},"
        "\"response_stats\":{\"0\":{\"compute_infer\":{\"count\":0,\"ns\":0},"
        "\"compute_output\":{\"count\":0,\"ns\":0},\"success\":{\"count\":0,\"ns\":0},"
        "\"fail\":{\"count\":0,\"ns\":0},\"empty_response\":{\"count\":0,\"ns\":0},"
        "\"cancel\":{\"count\":0,\"ns\":0}}},"
        "\"batch_stats\":[],\"memory_usage\":[{\"type\":\"CPU\",\"id\":0,\"byte_size\":4}]}]}";
    char why[512];
    json_t *g = json_loads(good, 0, NULL);
    CHECK(v2_schema_check(triton_stats_schemas, TRITON_STATS_SCHEMAS_COUNT, "$stats_model_response",
                          g, why, sizeof why),
          "a body written from the document conforms: %s", why);
    json_object_del(json_array_get(json_object_get(g, "model_stats"), 0), "version");
    CHECK(v2_schema_check(triton_stats_schemas, TRITON_STATS_SCHEMAS_COUNT, "$stats_model_response",
                          g, why, sizeof why),
          "version is optional: %s", why);
    json_decref(g);
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        json_t *j = json_loads(bad[i], 0, NULL);
        CHECK(!v2_schema_check(triton_stats_schemas, TRITON_STATS_SCHEMAS_COUNT,
                               "$stats_model_response", j, why, sizeof why) &&
                  why[0],
              "refused: %s", bad[i]);
        json_decref(j);
    }
    /* the example check: a field the example shows missing, or of another type */
    json_t *j = json_loads("{\"model_stats\":[{\"name\":\"a\",\"version\":1}]}", 0, NULL);
    CHECK(!v2_example_check(TRITON_STATS_EXAMPLE_1, j, why, sizeof why) &&
              strstr(why, "version") != NULL,
          "the example check refuses a numeric version: %s", why);
    json_decref(j);
}

/* The value of the sample line "prefix value" as text (NULL when absent); value is copied out. */
static const char *sample(const char *text, const char *prefix, char *value, size_t size)
{
    size_t n = strlen(prefix);
    for (const char *p = text; p && *p; p = strchr(p, '\n') ? strchr(p, '\n') + 1 : NULL) {
        if (strncmp(p, prefix, n) == 0 && p[n] == ' ') {
            size_t k = strcspn(p + n + 1, "\n");
            snprintf(value, size, "%.*s", (int)k, p + n + 1);
            return value;
        }
    }
    return NULL;
}

/* A seconds value written as "S.NNNNNNNNN", as whole nanoseconds (UINT64_MAX when not that form).
 */
static uint64_t ns_of(const char *v)
{
    unsigned long long s, frac;
    int used = 0;
    if (!v || sscanf(v, "%llu.%9llu%n", &s, &frac, &used) != 2 || strlen(v) != (size_t)used ||
        strchr(v, '.') - v + 10 != used)
        return UINT64_MAX;
    return (uint64_t)s * 1000000000u + frac;
}

/* /metrics agrees with the model_stats entry e of layer name. */
static void check_metrics_agree(srv_daemon *d, const json_t *e, const char *name)
{
    hc_response r;
    hc_request(d, "GET", "/metrics", NULL, NULL, 0, NULL, &r);
    char key[256], v[64];
    const json_t *is = json_object_get(e, "inference_stats");
    snprintf(key, sizeof key, "attnd_layer_requests_total{layer=\"%s\",result=\"success\"}", name);
    CHECK(sample(r.body, key, v, sizeof v) &&
              strtoull(v, NULL, 10) == num(is, "success", "count", NULL),
          "%s: %s", key, v);
    snprintf(key, sizeof key, "attnd_layer_requests_total{layer=\"%s\",result=\"fail\"}", name);
    CHECK(sample(r.body, key, v, sizeof v) &&
              strtoull(v, NULL, 10) == num(is, "fail", "count", NULL),
          "%s: %s", key, v);
    snprintf(key, sizeof key, "attnd_layer_request_duration_seconds_count{layer=\"%s\"}", name);
    CHECK(sample(r.body, key, v, sizeof v) &&
              strtoull(v, NULL, 10) == num(is, "success", "count", NULL),
          "%s: %s", key, v);
    snprintf(key, sizeof key,
             "attnd_layer_request_duration_seconds_bucket{layer=\"%s\",le=\"+Inf\"}", name);
    CHECK(sample(r.body, key, v, sizeof v) &&
              strtoull(v, NULL, 10) == num(is, "success", "count", NULL),
          "%s: %s", key, v);
    snprintf(key, sizeof key, "attnd_layer_request_duration_seconds_sum{layer=\"%s\"}", name);
    CHECK(ns_of(sample(r.body, key, v, sizeof v)) == num(is, "success", "ns", NULL),
          "%s: %s vs %" PRIu64 " ns", key, v, num(is, "success", "ns", NULL));
    snprintf(key, sizeof key, "attnd_layer_failed_request_seconds_total{layer=\"%s\"}", name);
    CHECK(ns_of(sample(r.body, key, v, sizeof v)) == num(is, "fail", "ns", NULL), "%s: %s", key, v);
    static const char *const phases[] = {"queue", "compute_input", "compute_infer",
                                         "compute_output"};
    for (int k = 0; k < 4; k++) {
        snprintf(key, sizeof key, "attnd_layer_phase_seconds_total{layer=\"%s\",phase=\"%s\"}",
                 name, phases[k]);
        CHECK(ns_of(sample(r.body, key, v, sizeof v)) == num(is, phases[k], "ns", NULL),
              "%s: %s vs %" PRIu64, key, v, num(is, phases[k], "ns", NULL));
    }
    snprintf(key, sizeof key, "attnd_layer_last_request_timestamp_seconds{layer=\"%s\"}", name);
    CHECK(sample(r.body, key, v, sizeof v) &&
              (uint64_t)(strtod(v, NULL) * 1000 + 0.5) == num(e, "last_inference", NULL, NULL),
          "%s: %s", key, v);
    hc_response_free(&r);
}

static bool has_series(srv_daemon *d, const char *name)
{
    hc_response r;
    hc_request(d, "GET", "/metrics", NULL, NULL, 0, NULL, &r);
    char key[128];
    snprintf(key, sizeof key, "{layer=\"%s\"", name);
    bool has = r.body && strstr(r.body, key) != NULL;
    hc_response_free(&r);
    return has;
}

static uint64_t now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

static const char V2_JSON[] =
    "{\"inputs\":[{\"name\":\"query\",\"shape\":[2,8],\"datatype\":\"FP32\",\"data\":" Q8 "}]}";

static void post_binary(srv_daemon *d, long *status)
{
    const char *head = "{\"inputs\":[{\"name\":\"query\",\"shape\":[1,8],\"datatype\":\"FP32\","
                       "\"parameters\":{\"binary_data_size\":32}}]}";
    char body[512];
    size_t hl = strlen(head);
    memcpy(body, head, hl);
    float q[8] = {1, 2, 3, 4, 5, 6, 7, 8};
    memcpy(body + hl, q, sizeof q);
    char line[64];
    snprintf(line, sizeof line, "Inference-Header-Content-Length: %zu", hl);
    const char *hdrs[] = {line, NULL};
    hc_opts o = {.headers = hdrs};
    hc_response r;
    hc_request(d, "POST", "/v2/models/a/infer", "application/octet-stream", body,
               (long)(hl + sizeof q), &o, &r);
    *status = r.status;
    hc_response_free(&r);
}

typedef struct burst {
    srv_daemon *d;
    int n, ok;
} burst;

static void *burst_main(void *arg)
{
    burst *b = arg;
    for (int i = 0; i < b->n; i++)
        b->ok += request(b->d, "POST", "/v1/layers/a/forward", "{\"query\": " Q8 "}", NULL) == 200;
    return NULL;
}

static void test_counts(void)
{
    srv_daemon *d = hc_start(NULL);
    if (!CHECK(d, "daemon"))
        return;
    CHECK(request(d, "PUT", "/v1/layers/a", LAYER_A, NULL) == 201, "PUT a");
    CHECK(request(d, "PUT", "/v1/layers/b", LAYER_B, NULL) == 201, "PUT b");

    json_t *s0 = stats_of(d, "/v2/models/stats");
    conforms(s0, "stats before any request");
    const json_t *a0 = entry(s0, "a");
    CHECK(json_array_size(json_object_get(s0, "model_stats")) == 2 && a0 &&
              !strcmp(json_string_value(json_object_get(
                          json_array_get(json_object_get(s0, "model_stats"), 0), "name")),
                      "a"),
          "both layers, sorted by name");
    CHECK(num(a0, "inference_count", NULL, NULL) == 0 &&
              num(a0, "last_inference", NULL, NULL) == 0 &&
              json_array_size(json_object_get(a0, "batch_stats")) == 0,
          "zero before the first request, no batch_stats");
    CHECK(num(json_array_get(json_object_get(a0, "memory_usage"), 0), "byte_size", NULL, NULL) ==
                  A_PARAM_BYTES &&
              !strcmp(json_string_value(json_object_get(
                          json_array_get(json_object_get(a0, "memory_usage"), 0), "type")),
                      "CPU"),
          "memory_usage: the parameters in memory");
    json_decref(s0);

    uint64_t before = now_ms();
    long st;
    /* five successes through every API */
    CHECK(request(d, "POST", "/v1/layers/a/forward", "{\"query\": " Q8 "}", NULL) == 200, "v1 fwd");
    CHECK(request(d, "POST", "/v1/layers/a/forward", "{\"query\": " Q8 ", \"need_weights\": true}",
                  NULL) == 200,
          "v1 fwd weights");
    CHECK(request(d, "POST", "/v1/layers/a/trace", "{\"query\": " Q8 "}", NULL) == 200, "v1 trace");
    CHECK(request(d, "POST", "/v2/models/a/infer", V2_JSON, NULL) == 200, "v2 json");
    post_binary(d, &st);
    CHECK(st == 200, "v2 binary: %ld", st);
    /* three failures that reached the layer */
    CHECK(request(d, "POST", "/v1/layers/a/forward", "{\"query\": [[1,2,3]]}", NULL) == 400,
          "v1 bad shape");
    CHECK(request(d, "POST", "/v2/models/a/infer", "{\"inputs\": [", NULL) == 400, "v2 bad json");
    CHECK(request(d, "POST", "/v2/models/a/infer",
                  "{\"inputs\":[{\"name\":\"query\",\"shape\":[1,8],\"datatype\":\"INT8\","
                  "\"data\":[1,2,3,4,5,6,7,8]}]}",
                  NULL) == 400,
          "v2 bad datatype");
    /* and requests that reached no layer */
    CHECK(request(d, "POST", "/v1/layers/zz/forward", "{\"query\": " Q8 "}", NULL) == 404,
          "unknown");
    CHECK(request(d, "POST", "/v2/models/zz/infer", V2_JSON, NULL) == 404, "unknown v2");
    uint64_t after = now_ms();

    json_t *s1 = stats_of(d, "/v2/models/stats");
    conforms(s1, "stats after requests");
    const json_t *a = entry(s1, "a"), *b = entry(s1, "b");
    const json_t *is = json_object_get(a, "inference_stats");
    CHECK(num(a, "inference_count", NULL, NULL) == 5 &&
              num(a, "execution_count", NULL, NULL) == 5 && num(is, "success", "count", NULL) == 5,
          "5 successes: inference_count %" PRIu64 ", execution_count %" PRIu64,
          num(a, "inference_count", NULL, NULL), num(a, "execution_count", NULL, NULL));
    CHECK(num(is, "fail", "count", NULL) == 3 && num(is, "fail", "ns", NULL) > 0,
          "3 failures with their time (%" PRIu64 ")", num(is, "fail", "count", NULL));
    CHECK(num(is, "success", "ns", NULL) >= num(is, "compute_infer", "ns", NULL) &&
              num(is, "compute_infer", "ns", NULL) > 0 &&
              num(is, "compute_input", "ns", NULL) > 0 && num(is, "compute_output", "ns", NULL) > 0,
          "phases timed, each within the whole");
    static const char *const phases[] = {"queue", "compute_input", "compute_infer",
                                         "compute_output"};
    uint64_t sum = 0;
    for (int k = 0; k < 4; k++) {
        CHECK(num(is, phases[k], "count", NULL) == 5, "%s count 5", phases[k]);
        sum += num(is, phases[k], "ns", NULL);
    }
    CHECK(sum <= num(is, "success", "ns", NULL), "the phases add up to no more than the whole");
    CHECK(num(is, "cache_hit", "count", NULL) == 0 && num(is, "cache_miss", "count", NULL) == 0,
          "no cache");
    uint64_t last = num(a, "last_inference", NULL, NULL);
    CHECK(last >= before && last <= after + 1,
          "last_inference %" PRIu64 " in [%" PRIu64 ", %" PRIu64 "]", last, before, after);
    const json_t *bs = json_array_get(json_object_get(a, "batch_stats"), 0);
    CHECK(json_array_size(json_object_get(a, "batch_stats")) == 1 &&
              num(bs, "batch_size", NULL, NULL) == 1 &&
              num(bs, "compute_infer", "count", NULL) == 5 &&
              num(bs, "compute_infer", "ns", NULL) == num(is, "compute_infer", "ns", NULL) &&
              num(bs, "compute_input", "ns", NULL) == num(is, "compute_input", "ns", NULL) &&
              num(bs, "compute_output", "ns", NULL) == num(is, "compute_output", "ns", NULL),
          "batch_stats: batch size 1, the same phases");
    CHECK(b && num(b, "inference_count", NULL, NULL) == 0 &&
              num(json_object_get(b, "inference_stats"), "fail", "count", NULL) == 0,
          "the other layer counted nothing");
    check_metrics_agree(d, a, "a");
    check_metrics_agree(d, b, "b");

    /* one model, and at its version */
    json_t *one = stats_of(d, "/v2/models/a/stats");
    conforms(one, "stats of a");
    CHECK(json_array_size(json_object_get(one, "model_stats")) == 1 && entry(one, "a"),
          "/v2/models/a/stats: a only");
    char path[128];
    snprintf(path, sizeof path, "/v2/models/a/versions/%s/stats",
             json_string_value(json_object_get(entry(one, "a"), "version")));
    json_t *ver = stats_of(d, path);
    CHECK(entry(ver, "a") && num(entry(ver, "a"), "inference_count", NULL, NULL) == 5, "%s", path);
    json_decref(ver);
    json_decref(one);
    json_decref(s1);

    /* many requests at once: none lost */
    burst bursts[4];
    pthread_t t[4];
    for (int i = 0; i < 4; i++) {
        bursts[i] = (burst){.d = d, .n = 20};
        pthread_create(&t[i], NULL, burst_main, &bursts[i]);
    }
    int ok = 0;
    for (int i = 0; i < 4; i++) {
        pthread_join(t[i], NULL);
        ok += bursts[i].ok;
    }
    json_t *s2 = stats_of(d, "/v2/models/a/stats");
    CHECK(ok == 80 && num(entry(s2, "a"), "inference_count", NULL, NULL) == 85,
          "80 requests from 4 threads all counted (%d ok, count %" PRIu64 ")", ok,
          num(entry(s2, "a"), "inference_count", NULL, NULL));
    check_metrics_agree(d, entry(s2, "a"), "a");
    const char *v_before = json_string_value(json_object_get(entry(s2, "a"), "version"));
    char vb[32];
    snprintf(vb, sizeof vb, "%s", v_before ? v_before : "");
    json_decref(s2);

    /* a replaced layer keeps counting; a deleted one's counters and series end with it */
    CHECK(request(d, "PUT", "/v1/layers/a", LAYER_A, NULL) == 200, "replace a");
    json_t *s3 = stats_of(d, "/v2/models/a/stats");
    CHECK(num(entry(s3, "a"), "inference_count", NULL, NULL) == 85 &&
              strcmp(json_string_value(json_object_get(entry(s3, "a"), "version")), vb) != 0,
          "replaced: a new version, the same counts");
    snprintf(path, sizeof path, "/v2/models/a/versions/%s/stats", vb);
    check_v2_error(d, "GET", path, 404); /* the old version is gone */
    json_decref(s3);
    CHECK(has_series(d, "b"), "b has series");
    CHECK(request(d, "DELETE", "/v1/layers/b", NULL, NULL) == 204, "DELETE b");
    CHECK(!has_series(d, "b"), "b's series are gone with it");
    json_t *s4 = stats_of(d, "/v2/models/stats");
    CHECK(!entry(s4, "b") && entry(s4, "a"), "b is no longer in the statistics");
    json_decref(s4);
    CHECK(request(d, "POST", "/v1/layers/b/forward", "{\"query\": [[1,2,3,4]]}", NULL) == 404,
          "b is gone");
    CHECK(request(d, "PUT", "/v1/layers/b", LAYER_B, NULL) == 201, "b again");
    json_t *s5 = stats_of(d, "/v2/models/b/stats");
    CHECK(num(entry(s5, "b"), "inference_count", NULL, NULL) == 0 &&
              num(json_object_get(entry(s5, "b"), "inference_stats"), "fail", "count", NULL) == 0,
          "a layer created again starts from zero");
    json_decref(s5);

    /* errors, in the protocol's form */
    check_v2_error(d, "GET", "/v2/models/nope/stats", 404);
    check_v2_error(d, "GET", "/v2/models/a/versions/999999/stats", 404);
    check_v2_error(d, "GET", "/v2/models/nope/versions/1/stats", 404);
    check_v2_error(d, "POST", "/v2/models/stats", 405);
    check_v2_error(d, "DELETE", "/v2/models/a/stats", 405);
    hc_stop(d);
}

int main(void)
{
    test_schema_reader();
    test_counts();
    return check_report();
}
