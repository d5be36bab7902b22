/*
 * test_hf_import.c - Hugging Face checkpoints turned into attnd layers (store/hf_checkpoint.h,
 * store/hf_import.h, store/hf_check.h).
 *
 *   - every checkpoint of tests/data/hf/ (gen_hf_checkpoints.py: each family, prefixes, dtypes,
 *     sharded and not) imports to the config cases.json expects, reads only the layer's tensors, and
 *     the layer gives the model's own attn_output and attn_weights (computed by torch from the
 *     checkpoint's tensors following transformers' modeling code, not through attnd's mapping);
 *   - configs attnd cannot reproduce are refused saying what;
 *   - hostile checkpoints (truncated, header past the file, 2^63 sizes, overlapping offsets, wrong
 *     shapes and dtypes, ../ and absolute shard names, links out of a confined directory, a FIFO)
 *     are refused with a message naming the file and the tensor.
 */
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "check.h"
#include "store/config.h"
#include "store/hf_check.h"
#include "store/hf_checkpoint.h"
#include "store/hf_import.h"
#include "store/persist.h"
#include "tmpdir.h"

#define HF_DIR "tests/data/hf"

typedef struct counter {
    int calls;
    srv_hf_progress last;
} counter;

static void count_progress(void *ctx, const srv_hf_progress *p)
{
    counter *c = ctx;
    c->calls++;
    c->last = *p;
}

static uint64_t dir_bytes(const char *dir)
{
    char cmd[512];
    snprintf(cmd, sizeof cmd, "du -sb --exclude=reference.safetensors %s", dir);
    FILE *f = popen(cmd, "r");
    unsigned long long n = 0;
    if (f) {
        if (fscanf(f, "%llu", &n) != 1)
            n = 0;
        pclose(f);
    }
    return n;
}


/* Runs l on the reference's hidden_states with weights per head and compares with the model's. */
static void compare_forward(const char *name, const srv_layer *l, const srv_st *ref, bool causal)
{
    const srv_st_tensor *x = srv_st_find(ref, "hidden_states");
    const srv_st_tensor *y = srv_st_find(ref, "attn_output");
    const srv_st_tensor *w = srv_st_find(ref, "attn_weights");
    if (!CHECK(x && y && w, "%s: reference has hidden_states, attn_output, attn_weights", name))
        return;
    mha_inputs in;
    memset(&in, 0, sizeof in);
    in.query.data = x->data;
    in.query.ndim = 3;
    memcpy(in.query.shape, x->shape, 3 * sizeof x->shape[0]);
    in.is_causal = causal;
    in.need_weights = true;
    in.average_attn_weights = false;
    mha_plan plan;
    mha_error me = {0};
    if (!CHECK(mha_plan_forward(l->layer, &in, NULL, &plan, &me) == MHA_OK, "%s: plan: %s", name,
               me.message))
        return;
    CHECK(plan.out_count == y->count && plan.weights_count == w->count,
          "%s: output %lld and weights %lld elements, the model's %lld and %lld", name,
          (long long)plan.out_count, (long long)plan.weights_count, (long long)y->count,
          (long long)w->count);
    float *out = malloc((size_t)plan.out_count * sizeof *out);
    float *wt = malloc((size_t)plan.weights_count * sizeof *wt);
    if (mha_forward(l->layer, &in, &plan, out, wt, NULL, NULL, &me) == MHA_OK &&
        plan.out_count == y->count && plan.weights_count == w->count) {
        char what[128];
        snprintf(what, sizeof what, "%s attn_output", name);
        CHECK_CLOSE_ARRAY(what, out, y->data, y->count);
        snprintf(what, sizeof what, "%s attn_weights", name);
        CHECK_CLOSE_ARRAY(what, wt, w->data, w->count);
    } else {
        CHECK(false, "%s: forward: %s", name, me.message);
    }
    free(out);
    free(wt);
}

static void test_golden(void)
{
    size_t len;
    char *text = check_read_file(HF_DIR "/cases.json", &len);
    json_t *doc = text ? json_loadb(text, len, 0, NULL) : NULL;
    free(text);
    if (!CHECK(doc, "read " HF_DIR "/cases.json"))
        return;
    size_t i;
    json_t *c;
    json_array_foreach(json_object_get(doc, "cases"), i, c) {
        const char *name = json_string_value(json_object_get(c, "checkpoint"));
        int64_t layer = json_integer_value(json_object_get(c, "layer"));
        const json_t *want = json_object_get(c, "config");
        char dir[256], refpath[300];
        snprintf(dir, sizeof dir, HF_DIR "/%s", name);
        snprintf(refpath, sizeof refpath, "%s/reference.safetensors", dir);
        srv_error err = {0};
        srv_ckpt *ck = srv_ckpt_open(AT_FDCWD, dir, false, &err);
        if (!CHECK(ck, "%s: open: %s", name, err.message))
            continue;
        counter cnt = {0};
        srv_hf_layer hl;
        if (!CHECK(srv_hf_import(ck, layer, NULL, count_progress, &cnt, &hl, &err) == 0,
                   "%s: import: %s", name, err.message)) {
            srv_ckpt_free(ck);
            continue;
        }
        char *got = json_dumps(hl.config, JSON_SORT_KEYS | JSON_COMPACT);
        char *exp = json_dumps(want, JSON_SORT_KEYS | JSON_COMPACT);
        CHECK(json_equal(hl.config, want), "%s: config %s, expected %s", name, got, exp);
        free(got);
        free(exp);
        CHECK(cnt.calls >= hl.tensors && cnt.last.tensors_done == cnt.last.tensors_total &&
                  cnt.last.bytes_done == cnt.last.bytes_total && cnt.last.bytes_total == hl.bytes,
              "%s: progress ends at %d/%d tensors, %llu/%llu bytes", name, cnt.last.tensors_done,
              cnt.last.tensors_total, (unsigned long long)cnt.last.bytes_done,
              (unsigned long long)cnt.last.bytes_total);
        /* only the layer's tensors, the headers and the JSON files are read */
        uint64_t read = srv_ckpt_bytes_read(ck), all = dir_bytes(dir);
        CHECK(read >= hl.bytes && read - hl.bytes < 16384 && read < all / 2,
              "%s: read %llu bytes for a layer of %llu (checkpoint %llu)", name,
              (unsigned long long)read, (unsigned long long)hl.bytes, (unsigned long long)all);

        /* the layer as the daemon builds it */
        bool causal = json_is_true(json_object_get(hl.config, "is_causal"));
        json_t *cfg = json_deep_copy(hl.config);
        srv_layer *l = srv_persist_build(name, cfg, &hl.weights, NULL, &err);
        srv_st ref = {0};
        char *rb = check_read_file(refpath, &len);
        if (CHECK(l, "%s: build: %s", name, err.message) &&
            CHECK(rb && srv_st_parse(&ref, (const uint8_t *)rb, len, 1 << 24, "ref", &err) == 0,
                  "%s: reference: %s", name, err.message)) {
            compare_forward(name, l, &ref, causal);
            double diff = -1, scale = 0;
            CHECK(srv_hf_check(l, &ref, &diff, &scale, &err) == 0 && diff <= 1e-4 * fmax(1, scale),
                  "%s: srv_hf_check: diff %g (%s)", name, diff, err.message);
        }
        srv_st_free(&ref);
        free(rb);
        srv_layer_release(l);
        json_decref(cfg);
        srv_hf_layer_free(&hl);
        srv_ckpt_free(ck);
    }
    json_decref(doc);
}

/* ---------------------------------------------------------------------------------------------- */
/* Hand-made checkpoints                                                                          */

static char root[128];

/* A safetensors file from a header and n zero data bytes (data may be NULL), with the header
 * length field overridden when hlen_override != 0. */
static void put_st(const char *path, const char *header, size_t n, const void *data,
                   uint64_t hlen_override)
{
    size_t hl = strlen(header);
    size_t total = 8 + hl + n;
    uint8_t *b = calloc(1, total);
    uint64_t h = hlen_override ? hlen_override : hl;
    for (int i = 0; i < 8; i++)
        b[i] = (uint8_t)(h >> (8 * i));
    memcpy(b + 8, header, hl);
    if (data)
        memcpy(b + 8 + hl, data, n);
    td_put_file(path, b, total);
    free(b);
}

static void put_text(const char *path, const char *text)
{
    td_put_file(path, text, strlen(text));
}

/* A fresh checkpoint directory root/name with config.json; returns its path in out. */
static void mk_ckpt(char *out, size_t size, const char *name, const char *config)
{
    snprintf(out, size, "%s/%s", root, name);
    mkdir(out, 0755);
    char p[512];
    snprintf(p, sizeof p, "%s/config.json", out);
    if (config)
        put_text(p, config);
}

#define GPT2_CFG "{\"model_type\":\"gpt2\",\"n_embd\":4,\"n_head\":2,\"n_layer\":1}"
#define BERT_CFG "{\"model_type\":\"bert\",\"hidden_size\":4,\"num_attention_heads\":2,\"num_hidden_layers\":1}"
/* a whole GPT-2 layer of E=4: c_attn [4,12] + [12], c_proj [4,4] + [4], all F32 */
#define GPT2_HDR(dt_attn, shape_attn)                                                                 \
    "{\"h.0.attn.c_attn.bias\":{\"dtype\":\"F32\",\"shape\":[12],\"data_offsets\":[0,48]},"         \
    "\"h.0.attn.c_attn.weight\":{\"dtype\":\"" dt_attn "\",\"shape\":" shape_attn                     \
    ",\"data_offsets\":[48,240]},"                                                                     \
    "\"h.0.attn.c_proj.bias\":{\"dtype\":\"F32\",\"shape\":[4],\"data_offsets\":[240,256]},"        \
    "\"h.0.attn.c_proj.weight\":{\"dtype\":\"F32\",\"shape\":[4,4],\"data_offsets\":[256,320]}}"

/* A checkpoint with config and an empty model.safetensors: for the config checks. */
static void mk_cfg_only(const char *name, const char *config)
{
    char d[512], p[600];
    mk_ckpt(d, sizeof d, name, config);
    snprintf(p, sizeof p, "%s/model.safetensors", d);
    put_st(p, "{}      ", 0, NULL, 0);
}

/* Imports layer 0 of root/name and expects a failure whose message holds every one of want (up
 * to three, NULL ends). */
static void expect_refused(const char *name, int64_t layer, bool beneath, srv_code code,
                           const char *w1, const char *w2, const char *w3)
{
    srv_error err = {0};
    srv_ckpt *ck;
    int rc = -1;
    if (beneath) {
        int base = open(root, O_RDONLY | O_DIRECTORY);
        ck = srv_ckpt_open(base, name, true, &err);
        if (ck) {
            srv_hf_layer hl;
            rc = srv_hf_import(ck, layer, NULL, NULL, NULL, &hl, &err);
            if (rc == 0)
                srv_hf_layer_free(&hl);
        }
        srv_ckpt_free(ck);
        close(base);
    } else {
        char dir[512];
        snprintf(dir, sizeof dir, "%s/%s", root, name);
        ck = srv_ckpt_open(AT_FDCWD, dir, false, &err);
        if (ck) {
            srv_hf_layer hl;
            rc = srv_hf_import(ck, layer, NULL, NULL, NULL, &hl, &err);
            if (rc == 0)
                srv_hf_layer_free(&hl);
        }
        srv_ckpt_free(ck);
    }
    CHECK(rc == -1 && (code == SRV_OK || err.code == code) && (!w1 || strstr(err.message, w1)) &&
              (!w2 || strstr(err.message, w2)) && (!w3 || strstr(err.message, w3)),
          "%s: refused (%s) naming '%s' '%s' '%s'; got rc %d: %s: %s", name, srv_error_name(code),
          w1 ? w1 : "", w2 ? w2 : "", w3 ? w3 : "", rc, srv_error_name(err.code), err.message);
}

static void test_hostile(void)
{
    char d[512], p[600];
    static const uint8_t zeros[1024];

    /* a good GPT-2 layer first: the hostile ones below are this one, damaged */
    mk_ckpt(d, sizeof d, "ok", GPT2_CFG);
    snprintf(p, sizeof p, "%s/model.safetensors", d);
    put_st(p, GPT2_HDR("F32", "[4,12]"), 320, zeros, 0);
    {
        srv_error err = {0};
        srv_ckpt *ck = srv_ckpt_open(AT_FDCWD, d, false, &err);
        srv_hf_layer hl;
        CHECK(ck && srv_hf_import(ck, 0, NULL, NULL, NULL, &hl, &err) == 0, "good checkpoint: %s",
              err.message);
        if (ck)
            srv_hf_layer_free(&hl);
        srv_ckpt_free(ck);
    }

    expect_refused("missing", 0, false, SRV_E_NOT_FOUND, "does not exist", NULL, NULL);
    mk_ckpt(d, sizeof d, "no_config", NULL);
    expect_refused("no_config", 0, false, SRV_E_BAD_REQUEST, "config.json", "does not exist", NULL);
    mk_ckpt(d, sizeof d, "bad_config", "{\"model_type\": ");
    expect_refused("bad_config", 0, false, SRV_E_BAD_REQUEST, "config.json", "not valid JSON", NULL);
    mk_ckpt(d, sizeof d, "no_weights", GPT2_CFG);
    expect_refused("no_weights", 0, false, SRV_E_BAD_REQUEST, "model.safetensors", NULL, NULL);
    mk_ckpt(d, sizeof d, "pickle", GPT2_CFG);
    snprintf(p, sizeof p, "%s/pytorch_model.bin", d);
    put_text(p, "PK");
    expect_refused("pickle", 0, false, SRV_E_BAD_REQUEST, "pytorch_model.bin", "safetensors", NULL);

    /* configs attnd cannot reproduce */
    mk_cfg_only("neox", "{\"model_type\":\"gpt_neox\",\"hidden_size\":4}");
    expect_refused("neox", 0, false, SRV_E_INVALID_CONFIG, "gpt_neox", "not supported", NULL);
    mk_cfg_only("bert_relative", "{\"model_type\":\"bert\",\"hidden_size\":4,\"num_attention_heads\":2,\"num_hidden_layers\":1,"
            "\"position_embedding_type\":\"relative_key\"}");
    expect_refused("bert_relative", 0, false, SRV_E_INVALID_CONFIG, "relative_key", NULL, NULL);
    mk_cfg_only("gpt2_unscaled", "{\"model_type\":\"gpt2\",\"n_embd\":4,\"n_head\":2,\"n_layer\":2,\"scale_attn_weights\":false}");
    expect_refused("gpt2_unscaled", 0, false, SRV_E_INVALID_CONFIG, "scale_attn_weights", NULL, NULL);
    mk_cfg_only("gpt2_inverse", "{\"model_type\":\"gpt2\",\"n_embd\":4,\"n_head\":2,\"n_layer\":2,"
            "\"scale_attn_by_inverse_layer_idx\":true}");
    expect_refused("gpt2_inverse", 1, false, SRV_E_INVALID_CONFIG, "scale_attn_by_inverse_layer_idx",
                   "divides layer 1", NULL);
    mk_cfg_only("llama_linear", "{\"model_type\":\"llama\",\"hidden_size\":8,\"num_attention_heads\":2,\"num_hidden_layers\":1,"
            "\"rope_scaling\":{\"rope_type\":\"linear\",\"factor\":2.0}}");
    expect_refused("llama_linear", 0, false, SRV_E_INVALID_CONFIG, "rope_scaling", "linear", NULL);
    mk_cfg_only("llama_llama3", "{\"model_type\":\"llama\",\"hidden_size\":8,\"num_attention_heads\":2,\"num_hidden_layers\":1,"
            "\"rope_scaling\":{\"type\":\"llama3\",\"factor\":8.0}}");
    expect_refused("llama_llama3", 0, false, SRV_E_INVALID_CONFIG, "llama3", NULL, NULL);
    mk_cfg_only("partial_rotary", "{\"model_type\":\"llama\",\"hidden_size\":8,\"num_attention_heads\":2,\"num_hidden_layers\":1,"
            "\"partial_rotary_factor\":0.5}");
    expect_refused("partial_rotary", 0, false, SRV_E_INVALID_CONFIG, "partial_rotary_factor", NULL, NULL);
    mk_cfg_only("kv_not_dividing", "{\"model_type\":\"llama\",\"hidden_size\":12,\"num_attention_heads\":3,\"num_hidden_layers\":1,"
            "\"num_key_value_heads\":2}");
    expect_refused("kv_not_dividing", 0, false, SRV_E_INVALID_CONFIG, "num_key_value_heads", NULL, NULL);
    mk_cfg_only("heads_string", "{\"model_type\":\"bert\",\"hidden_size\":4,\"num_attention_heads\":\"2\",\"num_hidden_layers\":1}");
    expect_refused("heads_string", 0, false, SRV_E_INVALID_CONFIG, "num_attention_heads", NULL, NULL);

    /* the layer index */
    expect_refused("ok", 1, false, SRV_E_BAD_REQUEST, "layer 1", "past", NULL);
    expect_refused("ok", -1, false, SRV_E_BAD_REQUEST, "layer", NULL, NULL);

    /* damaged safetensors */
    mk_ckpt(d, sizeof d, "truncated", GPT2_CFG);
    snprintf(p, sizeof p, "%s/model.safetensors", d);
    put_st(p, GPT2_HDR("F32", "[4,12]"), 300, zeros, 0);
    expect_refused("truncated", 0, false, SRV_E_BAD_REQUEST, "model.safetensors", "outside", NULL);
    mk_ckpt(d, sizeof d, "header_past_end", GPT2_CFG);
    snprintf(p, sizeof p, "%s/model.safetensors", d);
    put_st(p, GPT2_HDR("F32", "[4,12]"), 320, zeros, 100000);
    expect_refused("header_past_end", 0, false, SRV_E_BAD_REQUEST, "model.safetensors", "past the end", NULL);
    mk_ckpt(d, sizeof d, "header_2_63", GPT2_CFG);
    snprintf(p, sizeof p, "%s/model.safetensors", d);
    put_st(p, GPT2_HDR("F32", "[4,12]"), 320, zeros, (uint64_t)1 << 63);
    expect_refused("header_2_63", 0, false, SRV_E_BAD_REQUEST, "model.safetensors", "over the limit", NULL);
    mk_ckpt(d, sizeof d, "shape_2_63", GPT2_CFG);
    snprintf(p, sizeof p, "%s/model.safetensors", d);
    put_st(p, GPT2_HDR("F32", "[9223372036854775807,2]"), 320, zeros, 0);
    expect_refused("shape_2_63", 0, false, SRV_E_TOO_LARGE, "model.safetensors", "h.0.attn.c_attn.weight", NULL);
    mk_ckpt(d, sizeof d, "offsets_2_63", GPT2_CFG);
    snprintf(p, sizeof p, "%s/model.safetensors", d);
    put_st(p, "{\"h.0.attn.c_attn.bias\":{\"dtype\":\"F32\",\"shape\":[12],\"data_offsets\":"
              "[9223372036854775759,9223372036854775807]}}", 48, zeros, 0);
    expect_refused("offsets_2_63", 0, false, SRV_E_BAD_REQUEST, "model.safetensors", "c_attn.bias", "outside");
    mk_ckpt(d, sizeof d, "overlap", GPT2_CFG);
    snprintf(p, sizeof p, "%s/model.safetensors", d);
    put_st(p, "{\"h.0.attn.c_attn.bias\":{\"dtype\":\"F32\",\"shape\":[12],\"data_offsets\":[0,48]},"
              "\"h.0.attn.c_attn.weight\":{\"dtype\":\"F32\",\"shape\":[4,12],\"data_offsets\":[16,208]}}",
           208, zeros, 0);
    expect_refused("overlap", 0, false, SRV_E_BAD_REQUEST, "model.safetensors", "overlap", "c_attn.weight");
    mk_ckpt(d, sizeof d, "wrong_shape", GPT2_CFG);
    snprintf(p, sizeof p, "%s/model.safetensors", d);
    put_st(p, GPT2_HDR("F32", "[12,4]"), 320, zeros, 0);
    expect_refused("wrong_shape", 0, false, SRV_E_BAD_REQUEST, "model.safetensors",
                   "\"h.0.attn.c_attn.weight\" has shape [12, 4]", "[4, 12]");
    mk_ckpt(d, sizeof d, "wrong_dtype", GPT2_CFG);
    snprintf(p, sizeof p, "%s/model.safetensors", d);
    put_st(p, GPT2_HDR("I32", "[4,12]"), 320, zeros, 0);
    expect_refused("wrong_dtype", 0, false, SRV_E_BAD_REQUEST, "c_attn.weight", "dtype I32", NULL);
    mk_ckpt(d, sizeof d, "unknown_dtype", GPT2_CFG);
    snprintf(p, sizeof p, "%s/model.safetensors", d);
    put_st(p, GPT2_HDR("Q4", "[4,12]"), 320, zeros, 0);
    expect_refused("unknown_dtype", 0, false, SRV_E_BAD_REQUEST, "c_attn.weight", "Q4", NULL);
    {
        uint8_t nan_data[320] = {0};
        float nan = NAN;
        memcpy(nan_data + 60, &nan, 4);
        mk_ckpt(d, sizeof d, "nan", GPT2_CFG);
        snprintf(p, sizeof p, "%s/model.safetensors", d);
        put_st(p, GPT2_HDR("F32", "[4,12]"), 320, nan_data, 0);
        expect_refused("nan", 0, false, SRV_E_BAD_VALUE, "model.safetensors", "c_attn.weight", "NaN");
    }
    mk_ckpt(d, sizeof d, "missing_tensor", BERT_CFG);
    snprintf(p, sizeof p, "%s/model.safetensors", d);
    put_st(p, "{\"encoder.layer.0.attention.self.query.weight\":{\"dtype\":\"F32\",\"shape\":[4,4],"
              "\"data_offsets\":[0,64]}}", 64, zeros, 0);
    expect_refused("missing_tensor", 0, false, SRV_E_BAD_REQUEST, "model.safetensors",
                   "encoder.layer.0.attention.self.query.bias", NULL);
    mk_ckpt(d, sizeof d, "not_this_family", BERT_CFG);
    snprintf(p, sizeof p, "%s/model.safetensors", d);
    put_st(p, GPT2_HDR("F32", "[4,12]"), 320, zeros, 0);
    expect_refused("not_this_family", 0, false, SRV_E_BAD_REQUEST, "encoder.layer.0.attention.self.query.weight",
                   "not a bert checkpoint", NULL);

    /* sharded: names in the index that leave the directory, missing shards, lying indexes */
    static const char *const bad_shards[] = {"../ok/model.safetensors", "/etc/passwd", "..", ".hidden",
                                             "sub/x.safetensors"};
    for (size_t i = 0; i < sizeof bad_shards / sizeof bad_shards[0]; i++) {
        char name[32], idx[512];
        snprintf(name, sizeof name, "index_bad_%zu", i);
        mk_ckpt(d, sizeof d, name, GPT2_CFG);
        snprintf(p, sizeof p, "%s/model.safetensors.index.json", d);
        snprintf(idx, sizeof idx, "{\"weight_map\":{\"h.0.attn.c_attn.weight\":\"%s\"}}", bad_shards[i]);
        put_text(p, idx);
        expect_refused(name, 0, false, SRV_E_BAD_REQUEST, "model.safetensors.index.json",
                       "h.0.attn.c_attn.weight", "not a file name");
    }
    /* errors about a checkpoint's files say what is wrong and where, never the files' bytes: a
     * bad config.json's text near the error, and a file the index names as a shard whose first 8
     * bytes ("hunter2!", read as a header length) were printed as a number */
    {
        srv_error err = {0};
        mk_ckpt(d, sizeof d, "leaky_config", "{\"model_type\":\"gpt2\",\"t\":hfSecretToken}");
        srv_ckpt *ck = srv_ckpt_open(AT_FDCWD, d, false, &err);
        srv_hf_layer hl;
        CHECK((!ck || srv_hf_import(ck, 0, NULL, NULL, NULL, &hl, &err) != 0) &&
                  strstr(err.message, "not valid JSON") && strstr(err.message, "line 1") &&
                  !strstr(err.message, "hfSecret"),
              "a bad config.json is described, not quoted: %s", err.message);
        srv_ckpt_free(ck);
        mk_ckpt(d, sizeof d, "leaky_shard", GPT2_CFG);
        snprintf(p, sizeof p, "%s/model.safetensors.index.json", d);
        put_text(p, "{\"weight_map\":{\"h.0.attn.c_attn.weight\":\"secret.txt\"}}");
        snprintf(p, sizeof p, "%s/secret.txt", d);
        put_text(p, "hunter2! is the password\n");
        memset(&err, 0, sizeof err);
        ck = srv_ckpt_open(AT_FDCWD, d, false, &err);
        CHECK((!ck || srv_hf_import(ck, 0, NULL, NULL, NULL, &hl, &err) != 0) &&
                  strstr(err.message, "secret.txt") && strstr(err.message, "header length") &&
                  !strstr(err.message, "2392100132157814120"),
              "a shard that is no safetensors file: its first bytes are not shown: %s", err.message);
        srv_ckpt_free(ck);
    }
    /* a shard header past 16 MiB is refused unread (jansson takes ~17 times a header's bytes) */
    mk_ckpt(d, sizeof d, "huge_header", GPT2_CFG);
    snprintf(p, sizeof p, "%s/model.safetensors", d);
    put_st(p, "{}", 0, NULL, (uint64_t)17 << 20);
    expect_refused("huge_header", 0, false, SRV_E_BAD_REQUEST, "model.safetensors",
                   "over the limit of 16777216", NULL);
    mk_ckpt(d, sizeof d, "shard_missing", GPT2_CFG);
    snprintf(p, sizeof p, "%s/model.safetensors.index.json", d);
    put_text(p, "{\"weight_map\":{\"h.0.attn.c_attn.weight\":\"model-00001-of-00002.safetensors\","
                "\"h.0.attn.c_attn.bias\":\"model-00002-of-00002.safetensors\"}}");
    expect_refused("shard_missing", 0, false, SRV_E_BAD_REQUEST, "model-00001-of-00002.safetensors",
                   "does not exist", NULL);
    mk_ckpt(d, sizeof d, "index_lies", GPT2_CFG);
    snprintf(p, sizeof p, "%s/model.safetensors.index.json", d);
    put_text(p, "{\"weight_map\":{\"h.0.attn.c_attn.weight\":\"a.safetensors\","
                "\"h.0.attn.c_attn.bias\":\"a.safetensors\",\"h.0.attn.c_proj.weight\":\"a.safetensors\","
                "\"h.0.attn.c_proj.bias\":\"a.safetensors\"}}");
    snprintf(p, sizeof p, "%s/a.safetensors", d);
    put_st(p, "{\"h.0.attn.c_attn.bias\":{\"dtype\":\"F32\",\"shape\":[12],\"data_offsets\":[0,48]}}", 48,
           zeros, 0);
    expect_refused("index_lies", 0, false, SRV_E_BAD_REQUEST, "a.safetensors", "h.0.attn.c_attn.weight",
                   "index.json says");
    mk_ckpt(d, sizeof d, "fifo", GPT2_CFG);
    snprintf(p, sizeof p, "%s/model.safetensors", d);
    CHECK(mkfifo(p, 0644) == 0, "mkfifo: %s", strerror(errno));
    expect_refused("fifo", 0, false, SRV_E_BAD_REQUEST, "model.safetensors", "not a regular file", NULL);

    /* confined (the HTTP route): names and links that leave the checkpoints directory */
    expect_refused("../ok", 0, true, SRV_E_BAD_REQUEST, "relative", NULL, NULL);
    expect_refused("/etc", 0, true, SRV_E_BAD_REQUEST, "relative", NULL, NULL);
    expect_refused("ok/../ok", 0, true, SRV_E_BAD_REQUEST, "relative", NULL, NULL);
    char outside[160], link[600];
    snprintf(outside, sizeof outside, "%s-outside", root);
    mkdir(outside, 0755);
    snprintf(p, sizeof p, "%s/config.json", outside);
    put_text(p, GPT2_CFG);
    snprintf(link, sizeof link, "%s/linked_out", root);
    CHECK(symlink(outside, link) == 0, "symlink: %s", strerror(errno));
    expect_refused("linked_out", 0, true, SRV_E_BAD_REQUEST, "leads out", NULL, NULL);
    mk_ckpt(d, sizeof d, "file_linked_out", NULL);
    snprintf(link, sizeof link, "%s/config.json", d);
    CHECK(symlink(p, link) == 0, "symlink: %s", strerror(errno));
    expect_refused("file_linked_out", 0, true, SRV_E_BAD_REQUEST, "config.json", "leads out", NULL);
    /* a link that stays inside (a Hugging Face cache's snapshots/ -> blobs/) is followed */
    mk_ckpt(d, sizeof d, "linked_in", NULL);
    snprintf(link, sizeof link, "%s/config.json", d);
    CHECK(symlink("../ok/config.json", link) == 0, "symlink: %s", strerror(errno));
    snprintf(link, sizeof link, "%s/model.safetensors", d);
    CHECK(symlink("../ok/model.safetensors", link) == 0, "symlink: %s", strerror(errno));
    {
        int base = open(root, O_RDONLY | O_DIRECTORY);
        srv_error err = {0};
        srv_ckpt *ck = srv_ckpt_open(base, "linked_in", true, &err);
        srv_hf_layer hl;
        CHECK(ck && srv_hf_import(ck, 0, NULL, NULL, NULL, &hl, &err) == 0,
              "a link inside the checkpoints dir is followed: %s", err.message);
        if (ck)
            srv_hf_layer_free(&hl);
        srv_ckpt_free(ck);
        close(base);
    }
    td_rm_rf(outside);
}

int main(void)
{
    test_golden();
    if (td_make(root, sizeof root, "hf") == 0) {
        test_hostile();
        td_rm_rf(root);
    }
    return check_report();
}
