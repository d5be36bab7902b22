/*
 * test_v2_repository.c - Triton's model repository extension (POST /v2/repository/index,
 * .../models/{name}/load and .../unload) and GET /v2's extensions, against in-process daemons on
 * port 0:
 *
 *   - bodies as extension_model_repository.md writes them: the index reply against
 *     $repository_index_response, errors against the $repository_*_error_response schemas, our
 *     requests against the request schemas, and the document's load example as written (its
 *     "config" string is not JSON, so it is refused with the protocol's error, as is the same
 *     example written as valid JSON: attnd takes no config override);
 *   - without a data dir: unload keeps an in-memory layer but stops serving it (/ready 400, infer
 *     400, /v1 404 saying why, gone from /v1/layers), unload twice and unload of an unknown model
 *     are 200 (as Triton), load restores the same version and its counters go on, load of a layer
 *     served from memory is a no-op, load of an unknown model is a 400;
 *   - with a data dir: a damaged layer is UNAVAILABLE with a reason that names no server path and
 *     quotes no file; its load is a 400 saying why, and once repaired a load serves it; a layer
 *     written after start is "not loaded" until a load; load re-reads changed files; unload keeps
 *     the files; DELETE of an unloaded layer deletes it; PUT serves it again; a restart loads all;
 *   - --watch: an unloaded layer stays unloaded while its files do not change, is served again
 *     (new version, counters carried on) when another replica writes it, and is forgotten when
 *     another replica deletes it - by sync steps, and once through the real watching thread;
 *   - the API key guards load and unload (401), --read-only refuses them (403), the index is a
 *     read; wrong methods are 405; every error is {"error": "..."}.
 */
#define _XOPEN_SOURCE 700
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "check.h"
#include "http_client.h"
#include "store/persist.h"
#include "tmpdir.h"
#include "v2_extension_docs.h"
#include "v2_schema.h"

#define LAYER_A "{\"config\": {\"embed_dim\": 8, \"num_heads\": 2}, \"init\": {\"seed\": 1}}"
#define LAYER_X "{\"config\": {\"embed_dim\": 4, \"num_heads\": 1}, \"init\": {\"seed\": 5}}"
#define Q8 "[[1,2,3,4,5,6,7,8]]"
#define INFER8                                                                                     \
    "{\"inputs\":[{\"name\":\"query\",\"shape\":[1,8],\"datatype\":\"FP32\",\"data\":" Q8 "}]}"

static char root[64];

/* Sends method path with body (NULL: none) and the header lines hdrs (may be NULL); *json (may be
 * NULL) gets the reply parsed. Returns the status. */
static long call(srv_daemon *d, const char *method, const char *path, const char *body,
                 const char *const *hdrs, json_t **json)
{
    hc_opts o = {.headers = hdrs};
    hc_response r;
    hc_request(d, method, path, NULL, body, body ? -1 : 0, &o, &r);
    long s = r.status;
    if (json)
        *json = hc_json(&r);
    hc_response_free(&r);
    return s;
}

static long req(srv_daemon *d, const char *method, const char *path, const char *body)
{
    return call(d, method, path, body, NULL, NULL);
}

static bool schema(const char *root_schema, const json_t *j, const char *what)
{
    char why[512];
    return CHECK(v2_schema_check(triton_repository_schemas, TRITON_REPOSITORY_SCHEMAS_COUNT,
                                 root_schema, j, why, sizeof why),
                 "%s: %s per extension_model_repository.md: %s", what, root_schema, why);
}

/* A repository error: status want, {"error": "..."} as the document's error schema (the index,
 * load and unload error responses share one form), the message holding part (may be NULL). */
static void check_error(srv_daemon *d, const char *method, const char *path, const char *body,
                        const char *const *hdrs, long want, const char *part)
{
    hc_opts o = {.headers = hdrs};
    hc_response r;
    hc_request(d, method, path, NULL, body, body ? -1 : 0, &o, &r);
    long s = r.status;
    json_t *j = hc_json(&r);
    const char *msg = json_string_value(json_object_get(j, "error"));
    CHECK(s == want && msg && (!part || strstr(msg, part)),
          "%s %s %.60s: want %ld with an error naming '%s'; got %ld %s", method, path,
          body ? body : "", want, part ? part : "", s, msg ? msg : "(no error)");
    /* attnd adds the request's id (its X-Request-Id) to the protocol's error; Triton's clients
     * read "error" only. The rest is checked against the document. */
    char id[160] = "";
    hc_header(&r, "X-Request-Id", id, sizeof id);
    CHECK(id[0] && !strcmp(json_string_value(json_object_get(j, "request_id")) ?: "-", id),
          "%s %s: request_id is the X-Request-Id", method, path);
    json_object_del(j, "request_id");
    if (j)
        schema("$repository_load_error_response", j, path);
    json_decref(j);
    hc_response_free(&r);
}

/* The index (POST with body), checked against the document; a new reference. */
static json_t *index_of(srv_daemon *d, const char *body)
{
    json_t *j = NULL;
    long s = call(d, "POST", "/v2/repository/index", body, NULL, &j);
    CHECK(s == 200 && json_is_array(j), "index: %ld", s);
    schema("$repository_index_response", j, "index");
    return j;
}

/* The index entry of name (borrowed), or NULL. */
static const json_t *entry(const json_t *index, const char *name)
{
    size_t i;
    const json_t *e;
    json_array_foreach((json_t *)index, i, e)
    {
        if (!strcmp(json_string_value(json_object_get(e, "name")), name))
            return e;
    }
    return NULL;
}

static const char *field(const json_t *o, const char *k)
{
    const char *s = json_string_value(json_object_get(o, k));
    return s ? s : "";
}

/* State and reason of name in the index ("" when it is not listed). */
static void state_of(srv_daemon *d, const char *name, char *state, char *reason, char *version)
{
    json_t *ix = index_of(d, NULL);
    const json_t *e = entry(ix, name);
    snprintf(state, 32, "%s", e ? field(e, "state") : "");
    if (reason)
        snprintf(reason, 320, "%s", e ? field(e, "reason") : "");
    if (version)
        snprintf(version, 32, "%s", e ? field(e, "version") : "");
    json_decref(ix);
}

static long long inference_count(srv_daemon *d, const char *name)
{
    char path[128];
    snprintf(path, sizeof path, "/v2/models/%s/stats", name);
    json_t *j = NULL;
    long long n = -1;
    if (call(d, "GET", path, NULL, NULL, &j) == 200)
        n = json_integer_value(json_object_get(json_array_get(json_object_get(j, "model_stats"), 0),
                                               "inference_count"));
    json_decref(j);
    return n;
}

static void test_server_metadata(void)
{
    srv_daemon *d = hc_start(NULL);
    if (!CHECK(d, "daemon"))
        return;
    json_t *j = NULL;
    CHECK(call(d, "GET", "/v2", NULL, NULL, &j) == 200, "GET /v2");
    static const char *const want[] = {"binary_tensor_data", "model_repository",
                                       "model_repository(unload_dependents)", "statistics",
                                       "model_configuration"};
    const json_t *ext = json_object_get(j, "extensions");
    for (size_t k = 0; k < sizeof want / sizeof *want; k++) {
        bool has = false;
        for (size_t i = 0; i < json_array_size(ext); i++)
            has |= !strcmp(json_string_value(json_array_get(ext, i)), want[k]);
        CHECK(has, "GET /v2 lists the extension %s", want[k]);
    }
    CHECK(json_array_size(ext) == sizeof want / sizeof *want, "and no other");
    json_decref(j);
    hc_stop(d);
}

/* The schema reader on this document's texts (trailing comma, unicode ellipsis, $parameters). */
static void test_documents(void)
{
    char name[64], why[256];
    for (int i = 0; i < TRITON_REPOSITORY_SCHEMAS_COUNT; i++) {
        json_t *j = v2_schema_parse(triton_repository_schemas[i], name);
        CHECK(j != NULL, "schema text %d (%s) reads", i, name);
        json_decref(j);
    }
    static const struct {
        const char *schema, *body;
        bool ok;
    } cases[] = {
        {"$repository_index_request", "{}", true},
        {"$repository_index_request", "{\"ready\": true}", true},
        {"$repository_index_request", "{\"ready\": \"true\"}", false},
        {"$repository_index_response", "[]", true},
        {"$repository_index_response",
         "[{\"name\":\"a\",\"version\":\"1\",\"state\":\"READY\",\"reason\":\"\"},"
         "{\"name\":\"b\",\"state\":\"UNAVAILABLE\",\"reason\":\"x\"}]",
         true},
        {"$repository_index_response", "[{\"name\":\"a\",\"state\":\"READY\"}]", false},
        {"$repository_index_response",
         "[{\"name\":\"a\",\"version\":1,\"state\":\"READY\",\"reason\":\"\"}]", false},
        {"$repository_index_response", "{\"models\":[]}", false},
        {"$repository_unload_request", "{\"parameters\":{\"unload_dependents\":false}}", true},
        {"$repository_unload_request", "{\"parameters\":[]}", false},
        {"$repository_load_error_response", "{\"error\":\"x\"}", true},
        {"$repository_load_error_response", "{\"error\":{\"message\":\"x\"}}", false},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        json_t *j = json_loads(cases[i].body, JSON_DECODE_ANY, NULL);
        bool ok = v2_schema_check(triton_repository_schemas, TRITON_REPOSITORY_SCHEMAS_COUNT,
                                  cases[i].schema, j, why, sizeof why);
        CHECK(ok == cases[i].ok, "%s %s %s (%s)", cases[i].schema, cases[i].body,
              cases[i].ok ? "conforms" : "does not conform", why);
        json_decref(j);
    }
}

/* The body of the document's load example: what follows its request line and Host header. */
static const char *example_body(void)
{
    const char *s = TRITON_LOAD_EXAMPLE;
    const char *b = strstr(s, "\n{");
    return b ? b + 1 : s;
}

static void test_in_memory(void)
{
    srv_options opt;
    hc_options(&opt);
    opt.demo = true;
    srv_daemon *d = hc_start(&opt);
    if (!CHECK(d, "daemon with --demo, no data dir"))
        return;
    CHECK(req(d, "PUT", "/v1/layers/m", LAYER_A) == 201, "PUT m");
    CHECK(req(d, "POST", "/v2/models/m/infer", INFER8) == 200, "infer m");

    /* the index, with every body the client sends: none, "", {}, {"ready": ...} */
    json_t *ix = index_of(d, NULL);
    CHECK(json_array_size(ix) == 2 && !strcmp(field(json_array_get(ix, 0), "name"), "demo") &&
              !strcmp(field(entry(ix, "m"), "state"), "READY") &&
              !strcmp(field(entry(ix, "m"), "reason"), "") &&
              json_is_string(json_object_get(entry(ix, "m"), "version")),
          "index: demo and m, READY, sorted");
    json_decref(ix);
    ix = index_of(d, "");
    CHECK(json_array_size(ix) == 2, "index with an empty body");
    json_decref(ix);
    const char *ready_body = "{\"ready\": true}";
    json_t *rb = json_loads(ready_body, 0, NULL);
    schema("$repository_index_request", rb, "the index request sent");
    json_decref(rb);

    char version[32], state[32], reason[320];
    state_of(d, "m", state, reason, version);
    /* unload: not served, not forgotten */
    const char *unload_body = "{\"parameters\": {\"unload_dependents\": false}}";
    json_t *ub = json_loads(unload_body, 0, NULL);
    schema("$repository_unload_request", ub, "the unload request sent");
    json_decref(ub);
    json_t *ok = NULL;
    CHECK(call(d, "POST", "/v2/repository/models/m/unload", unload_body, NULL, &ok) == 200,
          "unload m");
    json_decref(ok);
    char st2[32], v2[32];
    state_of(d, "m", st2, reason, v2);
    CHECK(!strcmp(st2, "UNAVAILABLE") && !strcmp(reason, "unloaded") && !strcmp(v2, version),
          "index: m UNAVAILABLE, unloaded, its version (%s %s %s)", st2, reason, v2);
    ix = index_of(d, ready_body);
    CHECK(json_array_size(ix) == 1 && entry(ix, "demo"), "{\"ready\": true}: only demo");
    json_decref(ix);
    check_error(d, "GET", "/v2/models/m/ready", NULL, NULL, 400, "unloaded");
    check_error(d, "GET", "/v2/models/m", NULL, NULL, 400, "unloaded");
    check_error(d, "GET", "/v2/models/m/config", NULL, NULL, 400, "unloaded");
    check_error(d, "POST", "/v2/models/m/infer", INFER8, NULL, 400, "not ready");
    json_t *v1 = NULL;
    CHECK(call(d, "POST", "/v1/layers/m/forward", "{\"query\": " Q8 "}", NULL, &v1) == 404 &&
              strstr(field(json_object_get(v1, "error"), "message"), "unloaded"),
          "/v1 forward: 404 saying m is unloaded");
    json_decref(v1);
    hc_response lr;
    hc_request(d, "GET", "/v1/layers", NULL, NULL, 0, NULL, &lr);
    CHECK(lr.status == 200 && lr.body && strstr(lr.body, "\"demo\"") && !strstr(lr.body, "\"m\""),
          "/v1/layers no longer lists m: %s", lr.body);
    hc_response_free(&lr);
    CHECK(inference_count(d, "m") == 1, "m's statistics stay while unloaded");
    check_error(d, "GET", "/v2/models/nope/ready", NULL, NULL, 404, "nope");

    /* unload twice, of an unknown model: nothing happens (as Triton); a bad name is a 400 */
    CHECK(req(d, "POST", "/v2/repository/models/m/unload", NULL) == 200, "unload m again: 200");
    CHECK(req(d, "POST", "/v2/repository/models/nope/unload", "{}") == 200, "unload unknown: 200");
    check_error(d, "POST", "/v2/repository/models/.m/unload", NULL, NULL, 400, "name");
    check_error(d, "POST", "/v2/repository/models/m/unload",
                "{\"parameters\": {\"unload_dependents\": \"yes\"}}", NULL, 400,
                "unload_dependents");
    check_error(d, "POST", "/v2/repository/models/m/unload", "{\"parameters\": {\"x\": 1}}", NULL,
                400, "x");

    /* load: the same entry, the same version, counting on */
    CHECK(req(d, "POST", "/v2/repository/models/m/load", "{}") == 200, "load m");
    state_of(d, "m", st2, reason, v2);
    CHECK(!strcmp(st2, "READY") && !strcmp(v2, version), "m READY again at version %s (%s)",
          version, v2);
    CHECK(req(d, "GET", "/v2/models/m/ready", NULL) == 200, "m ready");
    CHECK(req(d, "POST", "/v2/models/m/infer", INFER8) == 200, "infer m again");
    CHECK(inference_count(d, "m") == 2, "counted on: 2 (%lld)", inference_count(d, "m"));
    CHECK(req(d, "POST", "/v2/repository/models/demo/load", NULL) == 200,
          "load of a layer served from memory: a no-op");
    state_of(d, "demo", st2, NULL, v2);
    CHECK(!strcmp(st2, "READY"), "demo still READY");

    /* load errors */
    check_error(d, "POST", "/v2/repository/models/nope/load", NULL, NULL, 400, "nope");
    check_error(d, "POST", "/v2/repository/models/m/load", example_body(), NULL, 400, "JSON");
    check_error(d, "POST", "/v2/repository/models/m/load",
                "{\"parameters\": {\"config\": \"{\\\"name\\\": \\\"mymodel\\\", \\\"backend\\\": "
                "\\\"onnxruntime\\\"}\", \"file:1/model.onnx\": \"AAAA\"}}",
                NULL, 400, "PUT /v1/layers");
    check_error(d, "POST", "/v2/repository/models/m/load", "{\"parameters\": {\"file:1/w\": \"\"}}",
                NULL, 400, "file:1/w");
    check_error(d, "POST", "/v2/repository/models/m/load", "{\"parameters\": 1}", NULL, 400,
                "parameters");
    check_error(d, "POST", "/v2/repository/models/m/load", "{\"params\": {}}", NULL, 400, "params");
    check_error(d, "POST", "/v2/repository/models/m/load", "[]", NULL, 400, "object");
    check_error(d, "POST", "/v2/repository/index", "{\"ready\": \"yes\"}", NULL, 400, "ready");
    check_error(d, "POST", "/v2/repository/index", "{\"repository_name\": \"\"}", NULL, 400,
                "repository_name");
    check_error(d, "POST", "/v2/repository/index", "{\"ready\": tru", NULL, 400, "JSON");
    check_error(d, "GET", "/v2/repository/index", NULL, NULL, 405, NULL);
    check_error(d, "GET", "/v2/repository/models/m/load", NULL, NULL, 405, NULL);
    check_error(d, "PUT", "/v2/repository/models/m/unload", NULL, NULL, 405, NULL);
    char *big = malloc(70000);
    memset(big, ' ', 69998);
    big[0] = '{', big[69998] = '}', big[69999] = '\0';
    check_error(d, "POST", "/v2/repository/models/m/load", big, NULL, 413, "at most");
    free(big);

    /* an unloaded layer is deleted by DELETE, and served again by PUT (counting on) */
    CHECK(req(d, "POST", "/v2/repository/models/m/unload", NULL) == 200, "unload m");
    CHECK(req(d, "PUT", "/v1/layers/m", LAYER_A) == 201, "PUT m while unloaded: created");
    state_of(d, "m", st2, NULL, NULL);
    CHECK(!strcmp(st2, "READY") && inference_count(d, "m") == 2, "PUT serves it, counting on");
    CHECK(req(d, "POST", "/v2/repository/models/demo/unload", NULL) == 200, "unload demo");
    CHECK(req(d, "DELETE", "/v1/layers/demo", NULL) == 204, "DELETE an unloaded layer: 204");
    state_of(d, "demo", st2, NULL, NULL);
    CHECK(!st2[0] && inference_count(d, "demo") == -1, "demo is gone, with its statistics");
    CHECK(req(d, "POST", "/v2/repository/models/demo/load", NULL) == 400, "and cannot be loaded");
    hc_stop(d);
}

static void test_auth(void)
{
    srv_options opt;
    hc_options(&opt);
    opt.demo = true;
    snprintf(opt.api_key, sizeof opt.api_key, "k3y");
    srv_daemon *d = hc_start(&opt);
    if (!CHECK(d, "daemon with a key"))
        return;
    const char *const key[] = {"Authorization: Bearer k3y", NULL};
    const char *const wrong[] = {"Authorization: Bearer k3x", NULL};
    check_error(d, "POST", "/v2/repository/models/demo/unload", NULL, NULL, 401, NULL);
    check_error(d, "POST", "/v2/repository/models/demo/unload", NULL, wrong, 401, NULL);
    check_error(d, "POST", "/v2/repository/models/demo/load", NULL, NULL, 401, NULL);
    CHECK(call(d, "POST", "/v2/repository/index", NULL, NULL, NULL) == 200,
          "the index is a read: no key needed");
    CHECK(call(d, "POST", "/v2/repository/models/demo/unload", NULL, key, NULL) == 200 &&
              call(d, "POST", "/v2/repository/models/demo/load", NULL, key, NULL) == 200,
          "with the key: unload and load");
    hc_stop(d);

    hc_options(&opt);
    opt.demo = true;
    opt.read_only = true;
    d = hc_start(&opt);
    if (!CHECK(d, "read-only daemon"))
        return;
    check_error(d, "POST", "/v2/repository/models/demo/unload", NULL, NULL, 403, NULL);
    check_error(d, "POST", "/v2/repository/models/demo/load", NULL, NULL, 403, NULL);
    CHECK(req(d, "POST", "/v2/repository/index", NULL) == 200, "--read-only: the index answers");
    CHECK(req(d, "GET", "/v2/models/demo/ready", NULL) == 200, "demo still served");
    hc_stop(d);
}

static srv_daemon *start_dir(const char *dir)
{
    srv_options opt;
    hc_options(&opt);
    snprintf(opt.data_dir, sizeof opt.data_dir, "%s", dir);
    return hc_start(&opt);
}

static int copy_layer(const char *dir, const char *from, const char *to)
{
    char a[512], b[512];
    snprintf(b, sizeof b, "%s/layers/%s", dir, to);
    mkdir(b, 0755);
    int rc = 0;
    static const char *const files[] = {"config.json", "weights.safetensors"};
    for (int i = 0; i < 2; i++) {
        snprintf(a, sizeof a, "%s/layers/%s/%s", dir, from, files[i]);
        snprintf(b, sizeof b, "%s/layers/%s/%s", dir, to, files[i]);
        rc |= td_copy_file(b, a);
    }
    return rc;
}

static long long embed_dim(srv_daemon *d, const char *name)
{
    char path[128];
    snprintf(path, sizeof path, "/v2/models/%s/config", name);
    json_t *j = NULL;
    long long e = -1;
    if (call(d, "GET", path, NULL, NULL, &j) == 200)
        e = strtoll(
            field(json_object_get(json_object_get(j, "parameters"), "embed_dim"), "string_value"),
            NULL, 10);
    json_decref(j);
    return e;
}

static void test_data_dir(void)
{
    char dir[128];
    snprintf(dir, sizeof dir, "%s/repo", root);
    srv_daemon *d = start_dir(dir);
    if (!CHECK(d, "daemon with a data dir"))
        return;
    CHECK(req(d, "PUT", "/v1/layers/a", LAYER_A) == 201 &&
              req(d, "PUT", "/v1/layers/b", LAYER_A) == 201 &&
              req(d, "PUT", "/v1/layers/x", LAYER_X) == 201,
          "PUT a, b, x");
    hc_stop(d);
    char p[512];
    snprintf(p, sizeof p, "%s/layers/b/weights.safetensors", dir);
    CHECK(truncate(p, 64) == 0, "damage b's weights");
    d = start_dir(dir);
    if (!CHECK(d, "restart"))
        return;

    /* the damaged layer: UNAVAILABLE, and why - without a server path or the file's bytes */
    char st[32], reason[320], version[32];
    state_of(d, "b", st, reason, version);
    CHECK(!strcmp(st, "UNAVAILABLE") && reason[0] && !version[0], "b UNAVAILABLE: %s", reason);
    CHECK(strstr(reason, "weights") && !strstr(reason, root) && !strstr(reason, "/tmp"),
          "the reason names the file's problem, not the server's path: %s", reason);
    json_t *err = NULL;
    CHECK(call(d, "POST", "/v2/repository/models/b/load", NULL, NULL, &err) == 400, "load b: 400");
    const char *msg = field(err, "error");
    CHECK(strstr(msg, "weights") && !strstr(msg, root), "the load error says why: %s", msg);
    json_decref(err);
    check_error(d, "GET", "/v2/models/b/ready", NULL, NULL, 400, "could not be loaded");
    CHECK(copy_layer(dir, "a", "b") == 0, "repair b by hand");
    CHECK(req(d, "POST", "/v2/repository/models/b/load", NULL) == 200, "load b once repaired");
    state_of(d, "b", st, reason, NULL);
    CHECK(!strcmp(st, "READY") && !reason[0], "b READY (%s %s)", st, reason);

    /* a layer written after start: listed, not loaded until a load */
    CHECK(copy_layer(dir, "x", "y") == 0, "write y by hand");
    state_of(d, "y", st, reason, NULL);
    CHECK(!strcmp(st, "UNAVAILABLE") && strstr(reason, "not loaded"), "y not loaded: %s %s", st,
          reason);
    /* known to the repository, so not ready (400), as unloaded and damaged ones; not unknown */
    check_error(d, "GET", "/v2/models/y/ready", NULL, NULL, 400, "not loaded");
    CHECK(req(d, "POST", "/v2/repository/models/y/load", NULL) == 200 &&
              req(d, "GET", "/v2/models/y/ready", NULL) == 200,
          "load y: served");

    /* load re-reads the files, of a served layer too */
    CHECK(embed_dim(d, "a") == 8, "a has embed_dim 8");
    CHECK(copy_layer(dir, "x", "a") == 0, "a's files replaced by hand");
    CHECK(embed_dim(d, "a") == 8, "not read until a load");
    CHECK(req(d, "POST", "/v2/repository/models/a/load", NULL) == 200, "load a");
    CHECK(embed_dim(d, "a") == 4, "a now has the files' embed_dim 4");

    /* unload keeps the files; load brings the layer back from them */
    CHECK(req(d, "POST", "/v2/repository/models/a/unload", NULL) == 200, "unload a");
    snprintf(p, sizeof p, "%s/layers/a/weights.safetensors", dir);
    CHECK(access(p, F_OK) == 0, "a's files stay");
    check_error(d, "GET", "/v2/models/a/ready", NULL, NULL, 400, "unloaded");
    CHECK(req(d, "POST", "/v2/repository/models/a/load", NULL) == 200 &&
              req(d, "GET", "/v2/models/a/ready", NULL) == 200 && embed_dim(d, "a") == 4,
          "load a: served from its files");

    /* an unload lasts for the process: a restart loads every layer of the data dir */
    CHECK(req(d, "POST", "/v2/repository/models/y/unload", NULL) == 200, "unload y");
    hc_stop(d);
    d = start_dir(dir);
    if (!CHECK(d, "restart"))
        return;
    CHECK(req(d, "GET", "/v2/models/y/ready", NULL) == 200, "after a restart y is served");

    /* DELETE of an unloaded layer deletes its files */
    CHECK(req(d, "POST", "/v2/repository/models/y/unload", NULL) == 200, "unload y");
    CHECK(req(d, "DELETE", "/v1/layers/y", NULL) == 204, "DELETE y");
    snprintf(p, sizeof p, "%s/layers/y", dir);
    CHECK(access(p, F_OK) != 0, "y's files are gone");
    state_of(d, "y", st, NULL, NULL);
    CHECK(!st[0], "y is no longer in the index");
    check_error(d, "POST", "/v2/repository/models/y/load", NULL, NULL, 400, "data dir");
    hc_stop(d);
}

static bool wait_state(srv_daemon *d, const char *name, const char *want, int ms)
{
    char st[32];
    for (int t = 0; t < ms; t += 20) {
        state_of(d, name, st, NULL, NULL);
        if (!strcmp(st, want))
            return true;
        usleep(20 * 1000);
    }
    return false;
}

static void test_watch(void)
{
    char dir[128];
    snprintf(dir, sizeof dir, "%s/shared", root);
    srv_daemon *a = start_dir(dir), *b = start_dir(dir);
    if (!CHECK(a && b, "two replicas on one data dir")) {
        hc_stop(a);
        hc_stop(b);
        return;
    }
    srv_app *ba = srv_daemon_app(b);
    CHECK(req(a, "PUT", "/v1/layers/u", LAYER_A) == 201 &&
              req(a, "PUT", "/v1/layers/w", LAYER_A) == 201,
          "PUT u and w on A");
    srv_persist_sync(ba->persist, ba->registry, &ba->limits);
    CHECK(req(b, "POST", "/v2/models/u/infer", INFER8) == 200, "B serves u");

    /* unloaded on B, files unchanged: every sync step leaves it unloaded */
    CHECK(req(b, "POST", "/v2/repository/models/u/unload", NULL) == 200, "unload u on B");
    char v0[32], st[32];
    state_of(b, "u", st, NULL, v0);
    for (int i = 0; i < 3; i++)
        CHECK(srv_persist_sync(ba->persist, ba->registry, &ba->limits) == 0,
              "sync %d: nothing to do", i);
    state_of(b, "u", st, NULL, NULL);
    CHECK(!strcmp(st, "UNAVAILABLE"), "u stays unloaded while its files are unchanged");

    /* A writes u: the files changed, so B serves the new version, counting on */
    CHECK(req(a, "PUT", "/v1/layers/u", LAYER_X) == 200, "A replaces u");
    CHECK(srv_persist_sync(ba->persist, ba->registry, &ba->limits) == 1, "B's sync loads u");
    char v1[32];
    state_of(b, "u", st, NULL, v1);
    CHECK(!strcmp(st, "READY") && strcmp(v0, v1) != 0, "u READY on B at A's new version (%s -> %s)",
          v0, v1);
    CHECK(embed_dim(b, "u") == 4 && inference_count(b, "u") == 1,
          "the new files, the counters carried on");

    /* A deletes w while B has it unloaded: B forgets it */
    CHECK(req(b, "POST", "/v2/repository/models/w/unload", NULL) == 200, "unload w on B");
    CHECK(req(a, "DELETE", "/v1/layers/w", NULL) == 204, "A deletes w");
    CHECK(srv_persist_sync(ba->persist, ba->registry, &ba->limits) == 1, "B's sync sees it");
    state_of(b, "w", st, NULL, NULL);
    CHECK(!st[0] && inference_count(b, "w") == -1, "w is gone from B's index and statistics");
    hc_stop(b);

    /* the real watching thread: unloaded stays so across its steps, a write loads it */
    srv_options opt;
    hc_options(&opt);
    snprintf(opt.data_dir, sizeof opt.data_dir, "%s", dir);
    opt.watch = true;
    opt.watch_interval_ms = 20;
    srv_daemon *c = hc_start(&opt);
    if (!CHECK(c, "replica with --watch")) {
        hc_stop(a);
        return;
    }
    CHECK(req(c, "POST", "/v2/repository/models/u/unload", NULL) == 200, "unload u on C");
    srv_app *ca = srv_daemon_app(c);
    srv_watch_stats s0 = srv_watch_get_stats(ca->watch);
    for (int t = 0; t < 2000 && srv_watch_get_stats(ca->watch).scans < s0.scans + 5; t += 10)
        usleep(10 * 1000);
    state_of(c, "u", st, NULL, NULL);
    CHECK(srv_watch_get_stats(ca->watch).scans >= s0.scans + 5 && !strcmp(st, "UNAVAILABLE"),
          "u stays unloaded across 5 watch steps (%s)", st);
    CHECK(req(a, "PUT", "/v1/layers/u", LAYER_A) == 200, "A replaces u");
    CHECK(wait_state(c, "u", "READY", 5000), "the watcher loads the new u");
    hc_stop(c);
    hc_stop(a);
}

int main(void)
{
    if (td_make(root, sizeof root, "v2repo") != 0)
        return 1;
    test_documents();
    test_server_metadata();
    test_in_memory();
    test_auth();
    test_data_dir();
    test_watch();
    td_rm_rf(root);
    return check_report();
}
