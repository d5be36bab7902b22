/*
 * test_http_variants.c - the extensions beyond torch over HTTP (docs/api.md: head_dim,
 * num_kv_heads, rope, alibi, window, is_causal as a layer default, request positions), against an
 * in-process daemon on port 0: the config in and out (PUT, list, describe with every query head's
 * and kv head's rows, FLOPs), 422s naming the config field, weights of the wrong shape, positions in
 * the three tensor forms and their 400s, the layer's is_causal default, a decode step, /v2 metadata
 * and positions, a safetensors round trip, a restart on a data dir and a second daemon picking the
 * layers up with --watch, If-Match. The numbers themselves are checked against torch by the golden
 * replays (test_http_golden, test_v2 over tests/golden_variants/); here against those same files.
 */
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "check.h"
#include "golden.h"
#include "http_client.h"
#include "tensor_json.h"
#include "tmpdir.h"

#define VARIANTS "tests/golden_variants"

static hc_response req(srv_daemon *d, const char *method, const char *path, const char *body)
{
    hc_response r;
    hc_request(d, method, path, NULL, body, -1, NULL, &r);
    return r;
}

/* Loads the first case of tests/golden_variants whose name is `name`; false when none. */
static bool load_case(golden_case *c, const char *name)
{
    char **paths;
    int n = golden_list(&paths, VARIANTS);
    bool found = false;
    for (int i = 0; i < n && !found; i++) {
        const char *base = strrchr(paths[i], '/');
        base = base ? base + 5 : paths[i]; /* after "NNN_" */
        if (strncmp(base, name, strlen(name)) || strcmp(base + strlen(name), ".json"))
            continue;
        char msg[512];
        found = CHECK(golden_load(c, paths[i], msg, sizeof msg) == 0, "%s", msg);
    }
    golden_list_free(paths, n);
    return CHECK(found, "golden case %s in " VARIANTS, name);
}

/* PUT {"config": c.config, "weights": c.weights} as layer name; returns the status. */
static long put_case(srv_daemon *d, const golden_case *c, const char *name)
{
    size_t n = strlen(c->config_json) + strlen(c->weights_json) + 64;
    char *body = malloc(n), path[128];
    snprintf(body, n, "{\"config\":%s,\"weights\":%s}", c->config_json, c->weights_json);
    snprintf(path, sizeof path, "/v1/layers/%s", name);
    hc_response r = req(d, "PUT", path, body);
    long st = r.status;
    CHECK(st == 201 || st == 200, "%s: PUT %s %ld %.300s", c->name, name, st, r.body);
    hc_response_free(&r);
    free(body);
    return st;
}

/* POSTs body (a JSON object text) to /v1/layers/name/forward with "encoding": "base64" added;
 * output (and weights when asked for) into out / w (tj_free them). The status. */
static long forward(srv_daemon *d, const char *name, const char *body, tj_tensor *out,
                    tj_tensor *w, hc_response *keep)
{
    size_t n = strlen(body) + 64;
    char *b = malloc(n), path[128];
    snprintf(b, n, "{\"encoding\":\"base64\",%s", body + 1);
    snprintf(path, sizeof path, "/v1/layers/%s/forward", name);
    hc_response r = req(d, "POST", path, b);
    free(b);
    memset(out, 0, sizeof *out);
    if (w)
        memset(w, 0, sizeof *w);
    long st = r.status;
    if (st == 200) {
        json_t *j = hc_json(&r);
        tj_read(out, json_object_get(j, "output"));
        if (w && json_object_get(j, "attn_weights"))
            tj_read(w, json_object_get(j, "attn_weights"));
        json_decref(j);
    }
    if (keep)
        *keep = r;
    else
        hc_response_free(&r);
    return st;
}

static void check_vs(const char *label, const tj_tensor *got, const golden_tensor *want)
{
    if (CHECK(got->count == want->count, "%s: %" PRId64 " values, torch has %" PRId64, label,
              got->count, want->count))
        check_close_array(__FILE__, __LINE__, label, got->data, want->data, want->count, NULL);
}

static bool same_bits(const tj_tensor *a, const tj_tensor *b)
{
    return a->count == b->count && a->count > 0 &&
           memcmp(a->data, b->data, (size_t)a->count * sizeof(float)) == 0;
}

/* ---------------------------------------------------------------------------------------------- */
/* Config in and out, describe                                                                    */

static const char *const LLAMA_CONFIG =
    "{\"config\":{\"embed_dim\":20,\"num_heads\":6,\"head_dim\":4,\"num_kv_heads\":2,"
    "\"rope\":{\"theta\":10000},\"alibi\":true,\"window\":3,\"is_causal\":true,\"kdim\":7,"
    "\"add_bias_kv\":true},\"init\":{\"method\":\"xavier_uniform\",\"seed\":3}}";

static void test_config_and_describe(srv_daemon *d)
{
    hc_response r = req(d, "PUT", "/v1/layers/llama", LLAMA_CONFIG);
    CHECK(r.status == 201, "PUT a layer with every extension: %ld %.300s", r.status, r.body);
    json_t *j = hc_json(&r);
    json_t *cfg = json_object_get(j, "config");
    CHECK(json_integer_value(json_object_get(cfg, "head_dim")) == 4 &&
              json_integer_value(json_object_get(cfg, "num_kv_heads")) == 2 &&
              json_real_value(json_object_get(json_object_get(cfg, "rope"), "theta")) == 10000.0 &&
              json_is_true(json_object_get(cfg, "alibi")) &&
              json_integer_value(json_object_get(cfg, "window")) == 3 &&
              json_is_true(json_object_get(cfg, "is_causal")) &&
              json_integer_value(json_object_get(cfg, "kdim")) == 7,
          "the PUT reply's config has every extension: %.400s", r.body);
    /* parameters: q [24,20], k [8,7], v [8,20], bias [40], bias_k/v [1,1,8], out [20,24] */
    const int64_t want_count = 24 * 20 + 8 * 7 + 8 * 20 + 40 + 8 + 8 + 20 * 24 + 20;
    CHECK(json_integer_value(json_object_get(j, "parameter_count")) == want_count,
          "parameter_count %" PRId64, want_count);
    json_decref(j);
    hc_response_free(&r);

    r = req(d, "GET", "/v1/layers/llama?L=5&S=9&N=2", NULL);
    j = hc_json(&r);
    CHECK(r.status == 200 && json_integer_value(json_object_get(j, "head_dim")) == 4 &&
              json_integer_value(json_object_get(j, "num_kv_heads")) == 2,
          "describe: %ld %.300s", r.status, r.body);
    json_t *params = json_object_get(j, "parameters");
    const char *names[] = {"q_proj_weight", "k_proj_weight", "v_proj_weight", "in_proj_bias",
                           "bias_k",        "bias_v",        "out_proj.weight", "out_proj.bias"};
    const int64_t shapes[][3] = {{24, 20}, {8, 7}, {8, 20}, {40}, {1, 1, 8}, {1, 1, 8}, {20, 24}, {20}};
    bool ok = json_array_size(params) == 8;
    for (size_t i = 0; ok && i < 8; i++) {
        json_t *p = json_array_get(params, i), *sh = json_object_get(p, "shape");
        ok = !strcmp(json_string_value(json_object_get(p, "name")), names[i]);
        for (size_t k = 0; ok && k < json_array_size(sh); k++)
            ok = json_integer_value(json_array_get(sh, k)) == shapes[i][k];
    }
    CHECK(ok, "describe lists the parameters with their GQA shapes");
    /* query head 5 reads kv head 1: q rows [20,24), k rows [4,8), bias rows [32,36) for v */
    json_t *h5 = json_array_get(json_object_get(j, "heads"), 5);
    json_t *q = json_object_get(json_object_get(h5, "q"), "rows");
    json_t *v = json_object_get(json_object_get(h5, "v"), "bias");
    CHECK(json_integer_value(json_object_get(h5, "kv_head")) == 1 &&
              json_integer_value(json_array_get(q, 0)) == 20 &&
              json_integer_value(json_array_get(q, 1)) == 24 &&
              json_integer_value(json_array_get(json_object_get(v, "rows"), 0)) == 24 + 8 + 4 &&
              json_real_value(json_object_get(h5, "alibi_slope")) == (double)mha_alibi_slope(5, 6),
          "head 5: kv head 1, q rows [20,24), v bias rows [36,40), its ALiBi slope");
    json_t *kv1 = json_array_get(json_object_get(j, "kv_heads"), 1);
    json_t *qh = json_object_get(kv1, "query_heads");
    json_t *krows = json_object_get(json_object_get(kv1, "k"), "rows");
    CHECK(json_array_size(json_object_get(j, "kv_heads")) == 2 &&
              json_integer_value(json_array_get(qh, 0)) == 3 &&
              json_integer_value(json_array_get(qh, 1)) == 6 &&
              !strcmp(json_string_value(json_object_get(json_object_get(kv1, "k"), "param")),
                      "k_proj_weight") &&
              json_integer_value(json_array_get(krows, 0)) == 4 &&
              json_integer_value(json_array_get(krows, 1)) == 8 &&
              json_object_get(kv1, "bias_k") != NULL,
          "kv head 1 serves query heads [3,6), k rows [4,8)");
    json_t *fl = json_object_get(j, "flops");
    mha_config c;
    mha_config_init(&c, 20, 6);
    c.head_dim = 4;
    c.num_kv_heads = 2;
    c.kdim = 7;
    c.add_bias_kv = true;
    CHECK(json_real_value(json_object_get(fl, "value")) == mha_flops(&c, 2, 5, 9) &&
              strstr(json_string_value(json_object_get(fl, "formula")), "Dkv=num_kv_heads*head_dim=8"),
          "FLOPs value and formula for N=2, L=5, S=9: %.300s",
          json_string_value(json_object_get(fl, "formula")));
    json_decref(j);
    hc_response_free(&r);

    r = req(d, "GET", "/v1/layers", NULL);
    CHECK(r.status == 200 && strstr(r.body, "\"num_kv_heads\":2") &&
              strstr(r.body, "\"rope\":{\"theta\":10000"),
          "the list shows the config: %.300s", r.body);
    hc_response_free(&r);

    /* a plain layer spells the extensions out at their defaults */
    r = req(d, "PUT", "/v1/layers/plain", "{\"config\":{\"embed_dim\":8,\"num_heads\":2}}");
    CHECK(r.status == 201 && strstr(r.body, "\"head_dim\":4,\"num_kv_heads\":2,\"rope\":null,"
                                            "\"alibi\":false,\"window\":null,\"is_causal\":false"),
          "defaults written out: %.400s", r.body);
    hc_response_free(&r);
    /* and null means the default on the way in */
    r = req(d, "PUT", "/v1/layers/plain",
            "{\"config\":{\"embed_dim\":8,\"num_heads\":2,\"head_dim\":null,\"num_kv_heads\":null,"
            "\"rope\":null,\"window\":null,\"alibi\":false,\"is_causal\":false}}");
    CHECK(r.status == 200, "null extensions are their defaults: %ld %.200s", r.status, r.body);
    hc_response_free(&r);
}

/* Every rule of a config answers 422 (or 400 for a field that does not exist) naming the field. */
static void test_config_errors(srv_daemon *d)
{
    const struct {
        const char *config;
        long status;
        const char *code, *field;
    } cases[] = {
        {"{\"embed_dim\":8,\"num_heads\":4,\"num_kv_heads\":3}", 422, "invalid_config",
         "config.num_kv_heads"},
        {"{\"embed_dim\":8,\"num_heads\":4,\"num_kv_heads\":8}", 422, "invalid_config",
         "config.num_kv_heads"},
        {"{\"embed_dim\":8,\"num_heads\":4,\"num_kv_heads\":0}", 422, "invalid_config",
         "config.num_kv_heads"},
        {"{\"embed_dim\":9,\"num_heads\":3,\"rope\":{\"theta\":10000}}", 422, "invalid_config",
         "config.head_dim"},
        {"{\"embed_dim\":8,\"num_heads\":2,\"head_dim\":5,\"rope\":{\"theta\":1}}", 422,
         "invalid_config", "config.head_dim"},
        {"{\"embed_dim\":8,\"num_heads\":2,\"rope\":{\"theta\":0}}", 422, "invalid_config",
         "config.rope.theta"},
        {"{\"embed_dim\":8,\"num_heads\":2,\"rope\":{\"theta\":-1e4}}", 422, "invalid_config",
         "config.rope.theta"},
        /* head_dim 4: inv_freq 1e150, inf in float32 (the rotation would be NaN) */
        {"{\"embed_dim\":8,\"num_heads\":2,\"rope\":{\"theta\":1e-300}}", 422, "invalid_config",
         "config.rope.theta"},
        {"{\"embed_dim\":8,\"num_heads\":2,\"rope\":{\"theta\":\"1e4\"}}", 422, "invalid_config",
         "config.rope.theta"},
        {"{\"embed_dim\":8,\"num_heads\":2,\"rope\":{}}", 422, "invalid_config",
         "config.rope.theta"},
        {"{\"embed_dim\":8,\"num_heads\":2,\"rope\":10000}", 422, "invalid_config", "config.rope"},
        {"{\"embed_dim\":8,\"num_heads\":2,\"rope\":{\"theta\":1,\"scaling\":2}}", 400,
         "unknown_field", "config.rope.scaling"},
        {"{\"embed_dim\":8,\"num_heads\":2,\"window\":0}", 422, "invalid_config", "config.window"},
        {"{\"embed_dim\":8,\"num_heads\":2,\"window\":-3}", 422, "invalid_config", "config.window"},
        {"{\"embed_dim\":8,\"num_heads\":2,\"window\":2.5}", 422, "invalid_config",
         "config.window"},
        {"{\"embed_dim\":8,\"num_heads\":2,\"head_dim\":0}", 422, "invalid_config",
         "config.head_dim"},
        {"{\"embed_dim\":8,\"num_heads\":2,\"head_dim\":2097152}", 422, "invalid_config",
         "config.head_dim"},
        {"{\"embed_dim\":1024,\"num_heads\":64,\"head_dim\":65536}", 422, "invalid_config",
         "config.head_dim"},
        {"{\"embed_dim\":10,\"num_heads\":4}", 422, "invalid_config", "config.num_heads"},
        {"{\"embed_dim\":8,\"num_heads\":2,\"alibi\":1}", 422, "invalid_config", "config.alibi"},
        {"{\"embed_dim\":8,\"num_heads\":2,\"is_causal\":\"yes\"}", 422, "invalid_config",
         "config.is_causal"},
        {"{\"embed_dim\":8,\"num_heads\":2,\"sliding_window\":4}", 400, "unknown_field",
         "config.sliding_window"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char body[512];
        snprintf(body, sizeof body, "{\"config\":%s}", cases[i].config);
        hc_response r = req(d, "PUT", "/v1/layers/bad", body);
        HC_CHECK_ERROR(r, (int)cases[i].status, cases[i].code, cases[i].field);
        if (r.status != cases[i].status)
            printf("  for config %s: %.300s\n", cases[i].config, r.body);
        hc_response_free(&r);
    }
    hc_response r = req(d, "GET", "/v1/layers/bad", NULL);
    CHECK(r.status == 404, "no bad config left a layer behind");
    hc_response_free(&r);

    /* a weight of torch's shape on a GQA layer: 400 naming the weight and both shapes */
    r = req(d, "PUT", "/v1/layers/gqa",
            "{\"config\":{\"embed_dim\":4,\"num_heads\":2,\"num_kv_heads\":1},"
            "\"init\":{\"method\":\"zeros\"}}");
    hc_response_free(&r);
    char w[4096];
    size_t k = (size_t)snprintf(w, sizeof w, "{\"in_proj_weight\":[");
    for (int i = 0; i < 12; i++)
        k += (size_t)snprintf(w + k, sizeof w - k, "%s[0,0,0,0]", i ? "," : "");
    snprintf(w + k, sizeof w - k,
             "],\"in_proj_bias\":[0,0,0,0,0,0,0,0],\"out_proj.weight\":[[0,0,0,0],[0,0,0,0],"
             "[0,0,0,0],[0,0,0,0]],\"out_proj.bias\":[0,0,0,0]}");
    r = req(d, "PUT", "/v1/layers/gqa/weights", w);
    HC_CHECK_ERROR(r, 400, "shape_mismatch", "in_proj_weight");
    CHECK(r.body && strstr(r.body, "[12,4]") && strstr(r.body, "[8,4]"),
          "the message names both shapes: %.300s", r.body);
    hc_response_free(&r);
}

/* ---------------------------------------------------------------------------------------------- */
/* Positions                                                                                      */

/* The inputs of c with "positions" replaced by text (the case must give positions). */
static char *with_positions(const golden_case *c, const char *key, const char *text)
{
    json_t *in = json_loads(c->inputs_json, 0, NULL);
    json_t *v = json_loads(text, JSON_DECODE_ANY, NULL);
    json_object_set_new(in, key, v);
    char *s = json_dumps(in, JSON_COMPACT);
    json_decref(in);
    return s;
}

/* "[a,b,...]" / "[[..],[..]]" of positions p as shape and flat lists, and as base64 of int64 /
 * int32 little-endian. */
static void positions_forms(const golden_positions *p, char *flat, char *b64_64, char *b64_32,
                            size_t size)
{
    const int64_t count = p->shape[0] * (p->ndim == 2 ? p->shape[1] : 1);
    char shape[64], data[2048] = "";
    if (p->ndim == 2)
        snprintf(shape, sizeof shape, "[%" PRId64 ",%" PRId64 "]", p->shape[0], p->shape[1]);
    else
        snprintf(shape, sizeof shape, "[%" PRId64 "]", p->shape[0]);
    size_t k = 0;
    for (int64_t i = 0; i < count; i++)
        k += (size_t)snprintf(data + k, sizeof data - k, i ? ",%" PRId64 : "%" PRId64, p->data[i]);
    snprintf(flat, size, "{\"shape\":%s,\"data\":[%s],\"dtype\":\"int64\"}", shape, data);
    static const char tbl[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    for (int width = 8; width >= 4; width -= 4) {
        uint8_t raw[1024];
        size_t n = 0;
        for (int64_t i = 0; i < count; i++) {
            int32_t x = (int32_t)p->data[i];
            memcpy(raw + n, width == 8 ? (const void *)&p->data[i] : (const void *)&x, (size_t)width);
            n += (size_t)width;
        }
        char enc[2048];
        size_t e = 0;
        for (size_t i = 0; i < n; i += 3) {
            uint32_t v = (uint32_t)raw[i] << 16 | (i + 1 < n ? (uint32_t)raw[i + 1] << 8 : 0) |
                         (i + 2 < n ? raw[i + 2] : 0);
            enc[e++] = tbl[v >> 18 & 63];
            enc[e++] = tbl[v >> 12 & 63];
            enc[e++] = i + 1 < n ? tbl[v >> 6 & 63] : '=';
            enc[e++] = i + 2 < n ? tbl[v & 63] : '=';
        }
        enc[e] = '\0';
        snprintf(width == 8 ? b64_64 : b64_32, size,
                 "{\"shape\":%s,\"dtype\":\"int%d\",\"base64\":\"%s\"}", shape, width * 8, enc);
    }
}

/* The same positions in every form give the same bits; torch's numbers in each. */
static void test_position_forms(srv_daemon *d)
{
    const char *names[] = {"v5_llama_pos_batch", "v5_everything_keypos", "v5_bloom_pos_shuffled"};
    for (int n = 0; n < 3; n++) {
        golden_case c;
        if (!load_case(&c, names[n]))
            continue;
        char layer[32];
        snprintf(layer, sizeof layer, "pf%d", n);
        put_case(d, &c, layer);
        tj_tensor base, w;
        CHECK(forward(d, layer, c.inputs_json, &base, &w, NULL) == 200, "%s: forward", c.name);
        check_vs(c.name, &base, &c.output);
        tj_free(&w);
        for (int which = 0; which < 2; which++) {
            const golden_positions *p = which ? &c.key_positions : &c.positions;
            if (!p->present)
                continue;
            char flat[4096], b64[4096], b32[4096];
            positions_forms(p, flat, b64, b32, sizeof flat);
            const char *forms[3] = {flat, b64, b32};
            for (int f = 0; f < 3; f++) {
                char *body = with_positions(&c, which ? "key_positions" : "positions", forms[f]);
                tj_tensor o;
                long st = forward(d, layer, body, &o, NULL, NULL);
                CHECK(st == 200 && same_bits(&o, &base), "%s: %s as %s: %ld, same bits", c.name,
                      which ? "key_positions" : "positions", forms[f], st);
                tj_free(&o);
                free(body);
            }
        }
        tj_free(&base);
        golden_free(&c);
    }
}

/* Bad positions: 400 naming positions / key_positions, in /v1 and /v2. */
static void test_position_errors(srv_daemon *d)
{
    hc_response r = req(d, "PUT", "/v1/layers/pe",
                        "{\"config\":{\"embed_dim\":4,\"num_heads\":2,\"rope\":{\"theta\":10000}}}");
    CHECK(r.status == 201, "PUT pe");
    hc_response_free(&r);
    const char *q = "\"query\":[[1,2,3,4],[5,6,7,8],[9,1,2,3]]";
    const struct {
        const char *member;
        const char *code, *field;
    } cases[] = {
        {"\"positions\":[0,-1,2]", "bad_request", "positions"},
        {"\"positions\":[0,1.5,2]", "bad_request", "positions"},
        {"\"positions\":[0,\"1\",2]", "bad_request", "positions"},
        {"\"positions\":[0,1,16777216]", "bad_request", "positions"},
        {"\"positions\":[0,1,99999999999999999999]", "bad_request", "positions"},
        {"\"positions\":[0,1]", "shape_mismatch", "positions"},
        {"\"positions\":[[0,1,2],[3,4,5]]", "shape_mismatch", "positions"},
        {"\"positions\":[[[0,1,2]]]", "shape_mismatch", "positions"},
        {"\"positions\":[[0,1,2],[3,4]]", "shape_mismatch", "positions"},
        {"\"positions\":[]", "shape_mismatch", "positions"},
        {"\"positions\":7", "bad_request", "positions"},
        {"\"positions\":{\"shape\":[3],\"data\":[0,1]}", "shape_mismatch", "positions"},
        {"\"positions\":{\"shape\":[3],\"dtype\":\"float32\",\"data\":[0,1,2]}", "bad_request",
         "positions"},
        {"\"positions\":{\"shape\":[3],\"base64\":\"AAAAAAAAAAAAAAAA\"}", "bad_request",
         "positions"},
        {"\"positions\":{\"shape\":[3],\"dtype\":\"int32\",\"base64\":\"AAAAAP////8BAAAA\"}",
         "bad_request", "positions"},
        {"\"positions\":{\"shape\":[3],\"data\":[0,1,2],\"scale\":1}", "unknown_field",
         "positions.scale"},
        {"\"key_positions\":[0,1,-2]", "bad_request", "key_positions"},
        {"\"key_positions\":[0,1,2,3]", "shape_mismatch", "key_positions"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char body[512];
        snprintf(body, sizeof body, "{%s,%s}", q, cases[i].member);
        r = req(d, "POST", "/v1/layers/pe/forward", body);
        HC_CHECK_ERROR(r, 400, cases[i].code, cases[i].field);
        if (r.status != 400)
            printf("  for %s: %.300s\n", cases[i].member, r.body);
        hc_response_free(&r);
    }
    char body[512];
    snprintf(body, sizeof body, "{%s,\"positions\":[0,1,16777215],\"key_positions\":null}", q);
    r = req(d, "POST", "/v1/layers/pe/forward", body);
    CHECK(r.status == 200, "2^24 - 1 is a position, null key_positions are absent: %ld %.200s",
          r.status, r.body);
    hc_response_free(&r);
    r = req(d, "POST", "/v1/layers/pe/trace", "{\"query\":[[1,2,3,4]],\"positions\":[-4]}");
    HC_CHECK_ERROR(r, 400, "bad_request", "positions");
    hc_response_free(&r);

    /* /v2: INT64 data, negative; FP32 positions; binary INT32 past 2^24 */
    const char *v2_bad[] = {
        "{\"inputs\":[{\"name\":\"query\",\"datatype\":\"FP32\",\"shape\":[1,4],\"data\":[1,2,3,4]},"
        "{\"name\":\"positions\",\"datatype\":\"INT64\",\"shape\":[1],\"data\":[-1]}]}",
        "{\"inputs\":[{\"name\":\"query\",\"datatype\":\"FP32\",\"shape\":[1,4],\"data\":[1,2,3,4]},"
        "{\"name\":\"positions\",\"datatype\":\"FP32\",\"shape\":[1],\"data\":[1]}]}",
        "{\"inputs\":[{\"name\":\"query\",\"datatype\":\"FP32\",\"shape\":[1,4],\"data\":[1,2,3,4]},"
        "{\"name\":\"positions\",\"datatype\":\"INT64\",\"shape\":[2],\"data\":[1,2]}]}",
        "{\"inputs\":[{\"name\":\"query\",\"datatype\":\"FP32\",\"shape\":[1,4],\"data\":[1,2,3,4]},"
        "{\"name\":\"key_positions\",\"datatype\":\"INT32\",\"shape\":[1,1,1],\"data\":[1]}]}",
    };
    const char *v2_words[] = {"whole numbers", "INT64 or INT32", "positions", "[L] or [N,L]"};
    for (int i = 0; i < 4; i++) {
        r = req(d, "POST", "/v2/models/pe/infer", v2_bad[i]);
        CHECK(r.status == 400 && r.body && strstr(r.body, v2_words[i]),
              "/v2 bad positions %d: %ld %.300s", i, r.status, r.body);
        hc_response_free(&r);
    }
    /* binary INT32 position 2^24: refused like JSON */
    const char *hdr = "{\"inputs\":[{\"name\":\"query\",\"datatype\":\"FP32\",\"shape\":[1,4],"
                      "\"data\":[1,2,3,4]},{\"name\":\"positions\",\"datatype\":\"INT32\","
                      "\"shape\":[1],\"parameters\":{\"binary_data_size\":4}}]}";
    char bin[512];
    size_t hl = strlen(hdr);
    memcpy(bin, hdr, hl);
    int32_t big = 1 << 24;
    memcpy(bin + hl, &big, 4);
    char line[64];
    snprintf(line, sizeof line, "Inference-Header-Content-Length: %zu", hl);
    const char *hdrs[] = {line, NULL};
    hc_opts o = {.headers = hdrs};
    hc_request(d, "POST", "/v2/models/pe/infer", "application/octet-stream", bin, (long)hl + 4, &o,
               &r);
    CHECK(r.status == 400 && r.body && strstr(r.body, "16777216"),
          "/v2 binary INT32 position 2^24: %ld %.200s", r.status, r.body);
    hc_response_free(&r);
}

/* The layer's is_causal is the default of a request's; a request may set it either way. */
static void test_causal_default(srv_daemon *d)
{
    hc_response r = req(d, "PUT", "/v1/layers/cd",
                        "{\"config\":{\"embed_dim\":4,\"num_heads\":2,\"is_causal\":true},"
                        "\"init\":{\"method\":\"xavier_uniform\",\"seed\":1}}");
    hc_response_free(&r);
    const char *q = "{\"query\":[[1,2,3,4],[5,6,7,8],[9,1,2,3]],\"need_weights\":true";
    char b[256];
    tj_tensor o[3], w[3];
    for (int i = 0; i < 3; i++) {
        snprintf(b, sizeof b, "%s%s}", q,
                 i == 0 ? "" : i == 1 ? ",\"is_causal\":true" : ",\"is_causal\":false");
        CHECK(forward(d, "cd", b, &o[i], &w[i], NULL) == 200, "forward %d", i);
    }
    CHECK(same_bits(&w[0], &w[1]) && w[0].count == 9 && w[0].data[1] == 0.0f &&
              w[0].data[2] == 0.0f && w[0].data[5] == 0.0f,
          "left out: causal, as the layer says");
    CHECK(!same_bits(&w[0], &w[2]) && w[2].data[1] > 0.0f, "is_causal false overrides it");
    for (int i = 0; i < 3; i++) {
        tj_free(&o[i]);
        tj_free(&w[i]);
    }
    /* /v2 too: no parameters.is_causal means the layer's */
    r = req(d, "POST", "/v2/models/cd/infer",
            "{\"inputs\":[{\"name\":\"query\",\"datatype\":\"FP32\",\"shape\":[3,4],"
            "\"data\":[1,2,3,4,5,6,7,8,9,1,2,3]}],\"outputs\":[{\"name\":\"attn_weights\"}]}");
    json_t *j = hc_json(&r);
    json_t *data = json_object_get(json_array_get(json_object_get(j, "outputs"), 0), "data");
    CHECK(r.status == 200 && json_array_size(data) == 9 &&
              json_number_value(json_array_get(data, 1)) == 0.0,
          "/v2 without is_causal: the layer's default (%.200s)", r.body);
    json_decref(j);
    hc_response_free(&r);
}

/* A decode step over HTTP: one query at position p against the p+1 keys, = row p of the full pass. */
static void test_decode(srv_daemon *d)
{
    golden_case c;
    if (!load_case(&c, "v2_mistral_self"))
        return;
    put_case(d, &c, "dec");
    const int64_t L = c.query.shape[1], E = c.query.shape[2]; /* [N,L,E] batch-first */
    tj_tensor full;
    CHECK(forward(d, "dec", c.inputs_json, &full, NULL, NULL) == 200, "full pass");
    for (int64_t p = 0; p < L; p++) {
        char body[8192];
        size_t k = (size_t)snprintf(body, sizeof body, "{\"query\":[[");
        for (int64_t e = 0; e < E; e++) /* batch 1's row p */
            k += (size_t)snprintf(body + k, sizeof body - k, "%s%.9g", e ? "," : "",
                                  (double)c.query.data[(L + p) * E + e]);
        k += (size_t)snprintf(body + k, sizeof body - k, "]],\"key\":[");
        for (int64_t j = 0; j <= p; j++) {
            k += (size_t)snprintf(body + k, sizeof body - k, "%s[", j ? "," : "");
            for (int64_t e = 0; e < E; e++)
                k += (size_t)snprintf(body + k, sizeof body - k, "%s%.9g", e ? "," : "",
                                      (double)c.query.data[(L + j) * E + e]);
            k += (size_t)snprintf(body + k, sizeof body - k, "]");
        }
        snprintf(body + k, sizeof body - k, "],\"positions\":[%" PRId64 "],\"is_causal\":true}", p);
        tj_tensor o;
        long st = forward(d, "dec", body, &o, NULL, NULL);
        if (CHECK(st == 200 && o.count == E, "decode step %" PRId64 ": %ld", p, st))
            check_close_array(__FILE__, __LINE__, "decode step = row p of the full pass", o.data,
                              full.data + (L + p) * E, E, NULL);
        tj_free(&o);
    }
    tj_free(&full);
    golden_free(&c);
}

/* /v2 model metadata: the shapes the layer takes and its config. */
static void test_v2_metadata(srv_daemon *d)
{
    hc_response r = req(d, "GET", "/v2/models/llama", NULL);
    json_t *j = hc_json(&r);
    json_t *ins = json_object_get(j, "inputs"), *p = json_object_get(j, "parameters");
    json_t *q = json_object_get(json_array_get(ins, 0), "shape");
    json_t *k = json_object_get(json_array_get(ins, 1), "shape");
    json_t *pos = json_array_get(ins, 5);
    json_t *out = json_object_get(json_array_get(json_object_get(j, "outputs"), 0), "shape");
    CHECK(r.status == 200 && json_integer_value(json_array_get(q, 2)) == 20 &&
              json_integer_value(json_array_get(k, 2)) == 7 &&
              !strcmp(json_string_value(json_object_get(pos, "name")), "positions") &&
              !strcmp(json_string_value(json_object_get(pos, "datatype")), "INT64") &&
              json_integer_value(json_array_get(out, 2)) == 20 &&
              json_integer_value(json_object_get(p, "head_dim")) == 4 &&
              json_integer_value(json_object_get(p, "num_kv_heads")) == 2 &&
              json_number_value(json_object_get(json_object_get(p, "rope"), "theta")) == 10000.0 &&
              json_is_true(json_object_get(p, "alibi")) &&
              json_integer_value(json_object_get(p, "window")) == 3 &&
              json_is_true(json_object_get(p, "is_causal")),
          "/v2 metadata of llama: %ld %.600s", r.status, r.body);
    json_decref(j);
    hc_response_free(&r);
}

/* ---------------------------------------------------------------------------------------------- */
/* Safetensors, data dir, --watch, If-Match                                                      */

static const char *const OCTET[] = {"Accept: application/octet-stream", NULL};

static char *get_safetensors(srv_daemon *d, const char *name, size_t *len)
{
    char path[128];
    snprintf(path, sizeof path, "/v1/layers/%s/weights", name);
    hc_opts o = {.headers = OCTET};
    hc_response r;
    hc_request(d, "GET", path, NULL, NULL, 0, &o, &r);
    char *body = NULL;
    if (CHECK(r.status == 200, "GET %s as safetensors: %ld", path, r.status)) {
        body = r.body;
        *len = r.len;
        r.body = NULL;
    }
    hc_response_free(&r);
    return body;
}

static const char *const ROUND_TRIP[] = {"v2_everything_kvdim", "v3_llama_bias0_bkv1_za1",
                                         "v6_mistral_decode_p9", "v1_headdim_sf_heads"};

/* file (a safetensors file) with config_json put into its __metadata__ as "config": a malloc'd
 * file of *len bytes, the header padded with spaces to 8 bytes as the format's writers do. */
static char *with_config_metadata(const char *file, size_t flen, const char *config_json,
                                  size_t *len)
{
    uint64_t hl;
    memcpy(&hl, file, 8);
    json_t *h = json_loadb(file + 8, (size_t)hl, 0, NULL);
    json_t *meta = json_object_get(h, "__metadata__");
    json_object_set_new(meta, "config", json_string(config_json));
    char *hs = json_dumps(h, JSON_COMPACT);
    json_decref(h);
    size_t n = strlen(hs), padded = (n + 7) / 8 * 8;
    size_t data = flen - 8 - (size_t)hl;
    char *out = malloc(8 + padded + data);
    uint64_t nl = padded;
    memcpy(out, &nl, 8);
    memcpy(out + 8, hs, n);
    memset(out + 8 + n, ' ', padded - n);
    memcpy(out + 8 + padded, file + 8 + hl, data);
    free(hs);
    *len = 8 + padded + data;
    return out;
}

/* A variant layer's weights out as safetensors and in again: into a layer of the same config
 * (PUT .../weights), and as a whole new layer whose file carries the config in __metadata__:
 * same config, same bits. */
static void test_safetensors_round_trip(srv_daemon *d)
{
    for (int n = 0; n < 4; n++) {
        golden_case c;
        if (!load_case(&c, ROUND_TRIP[n]))
            continue;
        put_case(d, &c, "st_a");
        size_t len = 0;
        char *file = get_safetensors(d, "st_a", &len);
        char body[2048];
        snprintf(body, sizeof body, "{\"config\":%s,\"init\":{\"method\":\"zeros\"}}",
                 c.config_json);
        hc_response r = req(d, "PUT", "/v1/layers/st_b", body);
        hc_response_free(&r);
        hc_request(d, "PUT", "/v1/layers/st_b/weights", "application/octet-stream", file,
                   (long)len, NULL, &r);
        CHECK(r.status == 200, "%s: PUT the file as st_b's weights: %ld %.300s", c.name, r.status,
              r.body);
        hc_response_free(&r);
        size_t wlen = 0;
        char *whole = file ? with_config_metadata(file, len, c.config_json, &wlen) : NULL;
        hc_request(d, "PUT", "/v1/layers/st_c", "application/octet-stream", whole, (long)wlen,
                   NULL, &r);
        CHECK(r.status == 201 || r.status == 200, "%s: PUT a whole layer from the file: %ld %.300s",
              c.name, r.status, r.body);
        hc_response_free(&r);
        hc_response ra = req(d, "GET", "/v1/layers/st_a", NULL), rc = req(d, "GET", "/v1/layers/st_c", NULL);
        json_t *ja = hc_json(&ra), *jc = hc_json(&rc);
        CHECK(json_equal(json_object_get(ja, "config"), json_object_get(jc, "config")),
              "%s: the config travels in the file's metadata", c.name);
        json_decref(ja);
        json_decref(jc);
        hc_response_free(&ra);
        hc_response_free(&rc);
        tj_tensor oa, ob, oc, wa;
        forward(d, "st_a", c.inputs_json, &oa, &wa, NULL);
        forward(d, "st_b", c.inputs_json, &ob, NULL, NULL);
        forward(d, "st_c", c.inputs_json, &oc, NULL, NULL);
        CHECK(same_bits(&oa, &ob) && same_bits(&oa, &oc), "%s: same output bit for bit", c.name);
        check_vs(c.name, &ob, &c.output);
        size_t len2 = 0;
        char *again = get_safetensors(d, "st_c", &len2);
        CHECK(again && len2 == len && !memcmp(again, file, len), "%s: the same file out again",
              c.name);
        free(again);
        tj_free(&oa);
        tj_free(&ob);
        tj_free(&oc);
        tj_free(&wa);
        free(file);
        free(whole);
        golden_free(&c);
    }
}

static srv_daemon *start_dir(const char *dir, bool watch)
{
    srv_options opt;
    hc_options(&opt);
    snprintf(opt.data_dir, sizeof opt.data_dir, "%s", dir);
    opt.watch = watch;
    opt.watch_interval_ms = 50;
    return hc_start(&opt);
}

/* Layers of every extension survive a restart, and a second daemon with --watch serves them too. */
static void test_data_dir(void)
{
    char root[64];
    if (td_make(root, sizeof root, "variants") != 0)
        return;
    char dir[128];
    snprintf(dir, sizeof dir, "%s/data", root);
    srv_daemon *d = start_dir(dir, false);
    srv_daemon *w = start_dir(dir, true);
    if (!CHECK(d && w, "two daemons on a data dir")) {
        hc_stop(d);
        hc_stop(w);
        td_rm_rf(root);
        return;
    }
    golden_case cs[4];
    bool ok[4];
    for (int n = 0; n < 4; n++) {
        ok[n] = load_case(&cs[n], ROUND_TRIP[n]);
        char name[16];
        snprintf(name, sizeof name, "dd%d", n);
        if (ok[n])
            put_case(d, &cs[n], name);
    }
    /* If-Match: a change with the current version passes, with a stale one is a 409 */
    hc_response r = req(d, "GET", "/v1/layers/dd0", NULL);
    char etag[64] = "", line[96];
    hc_header(&r, "ETag", etag, sizeof etag);
    hc_response_free(&r);
    snprintf(line, sizeof line, "If-Match: %s", etag);
    const char *hdrs[] = {line, NULL};
    hc_opts o = {.headers = hdrs};
    size_t n0 = strlen(cs[0].config_json) + strlen(cs[0].weights_json) + 64;
    char *put0 = malloc(n0);
    snprintf(put0, n0, "{\"config\":%s,\"weights\":%s}", cs[0].config_json, cs[0].weights_json);
    hc_request(d, "PUT", "/v1/layers/dd0", NULL, put0, -1, &o, &r);
    CHECK(r.status == 200, "PUT dd0 with If-Match %s: %ld %.200s", etag, r.status, r.body);
    hc_response_free(&r);
    hc_request(d, "PUT", "/v1/layers/dd0", NULL, put0, -1, &o, &r);
    HC_CHECK_ERROR(r, 409, "conflict", NULL);
    hc_response_free(&r);
    free(put0);

    /* the watching daemon picks them up (inotify or its 50 ms rescan) */
    bool seen = false;
    for (int t = 0; t < 200 && !seen; t++) {
        r = req(w, "GET", "/v1/layers/dd3", NULL);
        seen = r.status == 200;
        hc_response_free(&r);
        if (!seen)
            usleep(20000);
    }
    CHECK(seen, "the --watch daemon serves the layers written by the other");
    hc_stop(d);
    d = start_dir(dir, false); /* a restart */
    CHECK(d != NULL, "restart on the data dir");
    for (int n = 0; n < 4 && d; n++) {
        if (!ok[n])
            continue;
        char name[16];
        snprintf(name, sizeof name, "dd%d", n);
        tj_tensor o1, o2, w1;
        CHECK(forward(d, name, cs[n].inputs_json, &o1, &w1, NULL) == 200, "%s after restart",
              name);
        check_vs(cs[n].name, &o1, &cs[n].output);
        if (cs[n].need_weights)
            check_vs(cs[n].name, &w1, &cs[n].attn_weights);
        if (seen) {
            CHECK(forward(w, name, cs[n].inputs_json, &o2, NULL, NULL) == 200, "%s on --watch",
                  name);
            CHECK(same_bits(&o1, &o2), "%s: the watching daemon gives the same bits", name);
            tj_free(&o2);
        }
        tj_free(&o1);
        tj_free(&w1);
        hc_response rd = req(d, "GET", "/v1/layers", NULL);
        CHECK(rd.body && strstr(rd.body, "\"num_kv_heads\""), "config.json keeps the extensions");
        hc_response_free(&rd);
        golden_free(&cs[n]);
    }
    hc_stop(d);
    hc_stop(w);
    td_rm_rf(root);
}

int main(void)
{
    srv_daemon *d = hc_start(NULL);
    if (!CHECK(d != NULL, "daemon"))
        return check_report();
    test_config_and_describe(d);
    test_config_errors(d);
    test_position_forms(d);
    test_position_errors(d);
    test_causal_default(d);
    test_decode(d);
    test_v2_metadata(d);
    test_safetensors_round_trip(d);
    hc_stop(d);
    test_data_dir();
    return check_report();
}
