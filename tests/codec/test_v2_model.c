/*
 * test_v2_model.c - a layer described as a v2 model, without HTTP (server/codec/v2_model.c):
 *
 *   - Triton's model configuration: every field a name model_config.proto declares for its message,
 *     in the JSON form of its type (triton_model_config.h, written from the proto), and the checker
 *     itself refuses what breaks the proto;
 *   - what perf_analyzer reads first: max_batch_size 0, every config input and output also in the
 *     metadata with the same datatype and dims, key/value/masks optional, not decoupled, no cache;
 *   - dims follow the config (embed_dim, kdim, vdim), -1 where a size is the request's;
 *   - parameters: every member of the layer's config object, whatever it holds, as string_value,
 *     and in the metadata as it is (a field added to the config shows in both);
 *   - names that need escaping stay valid JSON.
 */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "codec/v2_codec.h"
#include "triton_model_config.h"

static json_t *write_config(const char *name, const mha_config *cfg, const json_t *params,
                            int instances)
{
    srv_buf b;
    srv_buf_init(&b);
    CHECK(srv_v2_config_write(&b, name, cfg, params, instances) == 0, "config written");
    json_error_t je;
    json_t *j = json_loads(srv_buf_cstr(&b), 0, &je);
    CHECK(j != NULL, "config is JSON: %s (%s)", je.text, srv_buf_cstr(&b));
    srv_buf_free(&b);
    return j;
}

static json_t *write_metadata(const char *name, const mha_config *cfg, const json_t *params)
{
    srv_buf b;
    srv_buf_init(&b);
    CHECK(srv_v2_metadata_write(&b, name, "7", cfg, params) == 0, "metadata written");
    json_t *j = json_loads(srv_buf_cstr(&b), 0, NULL);
    CHECK(j != NULL, "metadata is JSON: %s", srv_buf_cstr(&b));
    srv_buf_free(&b);
    return j;
}

static const char *str(const json_t *o, const char *k)
{
    const char *s = json_string_value(json_object_get(o, k));
    return s ? s : "";
}

/* The tensor called name in the array a (NULL when absent). */
static const json_t *named(const json_t *a, const char *name)
{
    size_t i;
    const json_t *t;
    json_array_foreach((json_t *)a, i, t)
    {
        if (!strcmp(str(t, "name"), name))
            return t;
    }
    return NULL;
}

/* perf_analyzer's reading: every config tensor is in the metadata, with the same type and dims. */
static void check_agree(const json_t *config, const json_t *meta, const char *cfg_key,
                        const char *meta_key)
{
    const json_t *ct = json_object_get(config, cfg_key), *mt = json_object_get(meta, meta_key);
    CHECK(json_array_size(ct) == json_array_size(mt) && json_array_size(ct) > 0,
          "%s: as many as the metadata's %s", cfg_key, meta_key);
    size_t i;
    const json_t *t;
    json_array_foreach((json_t *)ct, i, t)
    {
        const json_t *m = named(mt, str(t, "name"));
        char want[32];
        snprintf(want, sizeof want, "TYPE_%s", str(m, "datatype"));
        CHECK(m && !strcmp(str(t, "data_type"), want) &&
                  json_equal(json_object_get(t, "dims"), json_object_get(m, "shape")),
              "%s %s: data_type %s dims as the metadata's", cfg_key, str(t, "name"),
              str(t, "data_type"));
    }
}

static void test_config(void)
{
    mha_config cfg;
    mha_config_init(&cfg, 8, 2);
    cfg.kdim = 5;
    cfg.vdim = 3;
    cfg.batch_first = false;
    /* the layer's config object, with a field this file knows nothing of (as a variant adds) */
    json_t *params = json_pack("{s:i, s:i, s:i, s:i, s:b, s:f, s:s, s:{s:i}, s:n}", "embed_dim", 8,
                               "num_heads", 2, "kdim", 5, "vdim", 3, "batch_first", 0, "dropout",
                               0.0, "positional", "rope", "rope", "theta", 10000, "window");
    json_t *c = write_config("enc.0", &cfg, params, 3);
    char why[256];
    CHECK(tmc_check(c, why, sizeof why), "a ModelConfig as model_config.proto declares it: %s",
          why);
    CHECK(!strcmp(str(c, "name"), "enc.0") && !strcmp(str(c, "platform"), "attnd_mha") &&
              !strcmp(str(c, "backend"), "attnd"),
          "name, platform, backend");
    CHECK(json_is_integer(json_object_get(c, "max_batch_size")) &&
              json_integer_value(json_object_get(c, "max_batch_size")) == 0,
          "max_batch_size 0: the batch dimension is in the dims");
    CHECK(json_integer_value(json_object_get(
              json_object_get(json_object_get(c, "version_policy"), "latest"), "num_versions")) ==
              1,
          "one version");
    const json_t *in = json_object_get(c, "input"), *out = json_object_get(c, "output");
    static const char *const ins[] = {"query",     "key",       "value",        "key_padding_mask",
                                      "attn_mask", "positions", "key_positions"};
    static const char *const types[] = {"TYPE_FP32", "TYPE_FP32",  "TYPE_FP32", "TYPE_BOOL",
                                        "TYPE_BOOL", "TYPE_INT64", "TYPE_INT64"};
    static const long long last[] = {8, 5, 3, -1, -1, -1, -1};
    static const size_t rank[] = {3, 3, 3, 2, 2, 1, 1};
    CHECK(json_array_size(in) == 7, "seven inputs");
    for (int i = 0; i < 7; i++) {
        const json_t *t = json_array_get(in, (size_t)i), *dims = json_object_get(t, "dims");
        bool minus = true;
        for (size_t k = 0; k + 1 < json_array_size(dims); k++)
            minus &= json_integer_value(json_array_get(dims, k)) == -1;
        CHECK(!strcmp(str(t, "name"), ins[i]) && !strcmp(str(t, "data_type"), types[i]) &&
                  json_array_size(dims) == rank[i] && minus &&
                  json_integer_value(json_array_get(dims, rank[i] - 1)) == last[i] &&
                  json_is_boolean(json_object_get(t, "optional")) &&
                  json_is_true(json_object_get(t, "optional")) == (i > 0),
              "input %s: %s, dims -1 but the feature size, optional unless query", ins[i],
              types[i]);
    }
    CHECK(json_array_size(out) == 4 && !strcmp(str(json_array_get(out, 0), "name"), "output") &&
              json_integer_value(
                  json_array_get(json_object_get(json_array_get(out, 0), "dims"), 2)) == 8 &&
              !strcmp(str(json_array_get(out, 1), "name"), "attn_weights") &&
              !strcmp(str(json_array_get(out, 1), "data_type"), "TYPE_FP32") &&
              !strcmp(str(json_array_get(out, 2), "name"), "attn_topk_indices") &&
              !strcmp(str(json_array_get(out, 2), "data_type"), "TYPE_INT32") &&
              !strcmp(str(json_array_get(out, 3), "name"), "attn_topk_values"),
          "outputs output [-1,-1,8], attn_weights, attn_topk_indices (INT32), attn_topk_values");
    const json_t *g = json_array_get(json_object_get(c, "instance_group"), 0);
    CHECK(!strcmp(str(g, "kind"), "KIND_CPU") &&
              json_integer_value(json_object_get(g, "count")) == 3 &&
              !strcmp(str(g, "name"), "enc.0_0"),
          "one CPU instance group of --max-inflight instances, named as Triton names it");
    CHECK(json_is_false(
              json_object_get(json_object_get(c, "model_transaction_policy"), "decoupled")) &&
              json_is_false(json_object_get(json_object_get(c, "response_cache"), "enable")) &&
              !json_object_get(c, "dynamic_batching") && !json_object_get(c, "sequence_batching"),
          "not decoupled, no response cache, no batcher");

    const json_t *p = json_object_get(c, "parameters");
    struct {
        const char *key, *value;
    } const want[] = {{"embed_dim", "8"},
                      {"num_heads", "2"},
                      {"kdim", "5"},
                      {"vdim", "3"},
                      {"batch_first", "false"},
                      {"dropout", "0.0"},
                      {"positional", "rope"},
                      {"rope", "{\"theta\":10000}"},
                      {"window", "null"}};
    CHECK(json_object_size(p) == json_object_size(params), "every config field is a parameter");
    for (size_t i = 0; i < sizeof want / sizeof *want; i++)
        CHECK(!strcmp(str(json_object_get(p, want[i].key), "string_value"), want[i].value) &&
                  json_object_size(json_object_get(p, want[i].key)) == 1,
              "parameter %s: {\"string_value\": \"%s\"} (got %s)", want[i].key, want[i].value,
              str(json_object_get(p, want[i].key), "string_value"));

    json_t *m = write_metadata("enc.0", &cfg, params);
    check_agree(c, m, "input", "inputs");
    check_agree(c, m, "output", "outputs");
    CHECK(json_equal(json_object_get(m, "parameters"), params),
          "metadata parameters: the config object as it is");
    json_decref(m);
    json_decref(c);

    /* defaults: kdim/vdim 0 mean E; a name that needs escapes; no params */
    mha_config d;
    mha_config_init(&d, 4, 1);
    c = write_config("a\"b\\c", &d, NULL, 0);
    CHECK(tmc_check(c, why, sizeof why), "still a ModelConfig: %s", why);
    CHECK(!strcmp(str(c, "name"), "a\"b\\c") &&
              !strcmp(str(json_array_get(json_object_get(c, "instance_group"), 0), "name"),
                      "a\"b\\c_0"),
          "escaped name");
    for (int i = 0; i < 3; i++)
        CHECK(json_integer_value(json_array_get(
                  json_object_get(json_array_get(json_object_get(c, "input"), (size_t)i), "dims"),
                  2)) == 4,
              "input %d: the feature size is E when kdim/vdim are 0", i);
    CHECK(json_object_size(json_object_get(c, "parameters")) == 0 &&
              json_integer_value(json_object_get(
                  json_array_get(json_object_get(c, "instance_group"), 0), "count")) == 1,
          "no parameters; at least one instance");
    json_decref(c);
    json_decref(params);
}

/* The proto checker refuses what model_config.proto does not allow. */
static void test_checker(void)
{
    static const char *const bad[] = {
        "{\"name\":\"m\",\"inputs\":[]}", /* extension_model_repository.md's example spells it so */
        "{\"max_batch_size\":\"0\"}",
        "{\"input\":[{\"name\":\"q\",\"data_type\":\"FP32\"}]}",
        "{\"input\":[{\"name\":\"q\",\"data_type\":\"TYPE_FP32\",\"dims\":[\"-1\"]}]}",
        "{\"input\":{\"name\":\"q\"}}",
        "{\"output\":[{\"name\":\"o\",\"optional\":true}]}",
        "{\"instance_group\":[{\"kind\":\"KIND_TPU\"}]}",
        "{\"parameters\":{\"x\":{\"value\":\"1\"}}}",
        "{\"parameters\":{\"x\":\"1\"}}",
        "{\"version_policy\":{\"latest\":{\"num_versions\":true}}}",
        "{\"response_cache\":{\"enable\":1}}",
        "[]",
    };
    char why[256];
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        json_t *j = json_loads(bad[i], JSON_DECODE_ANY, NULL);
        CHECK(j && !tmc_check(j, why, sizeof why) && why[0], "refused: %s", bad[i]);
        json_decref(j);
    }
    json_t *ok = json_loads("{\"name\":\"m\",\"input\":[{\"name\":\"q\",\"data_type\":"
                            "\"TYPE_FP32\",\"dims\":[-1,4],\"reshape\":{\"shape\":[4]}}],"
                            "\"parameters\":{\"x\":{\"string_value\":\"1\"}},"
                            "\"dynamic_batching\":{}}",
                            0, NULL);
    CHECK(tmc_check(ok, why, sizeof why), "a small valid config passes: %s", why);
    json_decref(ok);
}

int main(void)
{
    test_config();
    test_checker();
    return check_report();
}
