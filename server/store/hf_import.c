/*
 * hf_import.c - the family mapping: a Hugging Face model's layer I -> an attnd layer (hf_import.h).
 *
 * Three steps: the family's config.json keys are read into dims (refusing what attnd cannot
 * reproduce); the layer's tensors are listed with the role each plays and the shape the config
 * implies, located (shard headers checked) and read; then they are laid out as torch's
 * nn.MultiheadAttention parameters (in_proj_weight [Dq+2Dkv,E] = q rows, k rows, v rows).
 */
#include "hf_import.h"

#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---------------------------------------------------------------------------------------------- */
/* Families                                                                                       */

typedef enum fam_kind { FAM_BERT, FAM_GPT2, FAM_LLAMA, FAM_MISTRAL, FAM_QWEN2, FAM_BLOOM } fam_kind;

static const struct {
    const char *model_type; /* config.json "model_type"                                       */
    const char *arch;       /* "architectures" entries start with this, then "Model" or "For" */
    fam_kind kind;
} FAMILIES[] = {
    {"bert", "Bert", FAM_BERT},         {"roberta", "Roberta", FAM_BERT},
    {"gpt2", "GPT2", FAM_GPT2},         {"llama", "Llama", FAM_LLAMA},
    {"mistral", "Mistral", FAM_MISTRAL}, {"qwen2", "Qwen2", FAM_QWEN2},
    {"bloom", "Bloom", FAM_BLOOM},
};
#define NFAMILIES (sizeof FAMILIES / sizeof FAMILIES[0])
#define FAMILY_LIST "bert, roberta, gpt2, llama, mistral, qwen2, bloom"

/* The wrapper prefixes a head class puts before the base model's names. */
static const char *const PREFIXES[] = {"", "bert.", "roberta.", "transformer.", "model."};
#define NPREFIXES (sizeof PREFIXES / sizeof PREFIXES[0])

/* What the config says about the attention block. */
typedef struct dims {
    int64_t E, H, hd, Hkv, layers;
    bool in_bias, out_bias;  /* the model has q/k/v biases; an output bias                      */
    double rope_theta;       /* 0: no RoPE                                                      */
    bool alibi, is_causal;
    int64_t window;          /* 0: none                                                         */
} dims;

static int bad_config(srv_error *err, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static int bad_config(srv_error *err, const char *fmt, ...)
{
    char m[sizeof err->message];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(m, sizeof m, fmt, ap);
    va_end(ap);
    return srv_error_set(err, SRV_E_INVALID_CONFIG, "checkpoint", "config.json: %s", m);
}

/* The first of keys (NULL-terminated) present and not null in cfg, or NULL; *key gets its name. */
static const json_t *get_any(const json_t *cfg, const char *const *keys, const char **key)
{
    for (; *keys; keys++) {
        const json_t *v = json_object_get(cfg, *keys);
        if (v && !json_is_null(v)) {
            *key = *keys;
            return v;
        }
    }
    *key = NULL;
    return NULL;
}

/* A positive integer under one of keys; def when none is given (0: required). */
static int get_dim(const json_t *cfg, const char *const *keys, int64_t def, int64_t *out,
                   srv_error *err)
{
    const char *key;
    const json_t *v = get_any(cfg, keys, &key);
    if (!v) {
        if (def > 0) {
            *out = def;
            return 0;
        }
        return bad_config(err, "%s is missing", keys[0]);
    }
    if (!json_is_integer(v) || json_integer_value(v) < 1 || json_integer_value(v) > (INT64_C(1) << 31))
        return bad_config(err, "%s must be a positive integer", key);
    *out = json_integer_value(v);
    return 0;
}

/* A boolean under key; def when absent or null. */
static int get_bool(const json_t *cfg, const char *key, bool def, bool *out, srv_error *err)
{
    const json_t *v = json_object_get(cfg, key);
    if (!v || json_is_null(v)) {
        *out = def;
        return 0;
    }
    if (!json_is_boolean(v))
        return bad_config(err, "%s must be true or false", key);
    *out = json_is_true(v);
    return 0;
}

#define KEYS(...) ((const char *const[]){__VA_ARGS__, NULL})

/* E, H and the layer count under the names the family uses; hd = E/H (H must divide E). */
static int read_mha_dims(const json_t *cfg, dims *d, srv_error *err)
{
    if (get_dim(cfg, KEYS("hidden_size", "n_embd", "n_embed"), 0, &d->E, err) < 0 ||
        get_dim(cfg, KEYS("num_attention_heads", "n_head"), 0, &d->H, err) < 0 ||
        get_dim(cfg, KEYS("num_hidden_layers", "n_layer"), 0, &d->layers, err) < 0)
        return -1;
    d->Hkv = d->H;
    d->hd = d->E / d->H;
    return 0;
}

static int need_divisible(const dims *d, srv_error *err)
{
    if (d->E % d->H != 0)
        return bad_config(err, "hidden_size %" PRId64 " is not a multiple of num_attention_heads %" PRId64,
                          d->E, d->H);
    return 0;
}

/* RoPE: the default rotary embedding only (rope_theta; rope_scaling / rope_parameters of type
 * "default" or none; the whole head rotated). */
static int read_rope(const json_t *cfg, dims *d, srv_error *err)
{
    d->rope_theta = 10000.0;
    const json_t *th = json_object_get(cfg, "rope_theta");
    const char *const objs[] = {"rope_scaling", "rope_parameters"};
    for (int i = 0; i < 2; i++) {
        const json_t *o = json_object_get(cfg, objs[i]);
        if (!o || json_is_null(o))
            continue;
        if (!json_is_object(o))
            return bad_config(err, "%s must be an object or null", objs[i]);
        const json_t *t = json_object_get(o, "rope_type");
        if (!t)
            t = json_object_get(o, "type");
        if (t && (!json_is_string(t) || strcmp(json_string_value(t), "default") != 0))
            return bad_config(err,
                              "%s of type %.40s is not supported: attnd implements the default "
                              "rotary embedding only (no linear, dynamic, yarn, longrope or llama3 "
                              "scaling)", objs[i], json_is_string(t) ? json_string_value(t) : "?");
        if (!t && i == 0)
            return bad_config(err, "rope_scaling without a type is not supported");
        const json_t *pt = json_object_get(o, "rope_theta");
        if (pt && !json_is_null(pt))
            th = pt;
        const json_t *pf = json_object_get(o, "partial_rotary_factor");
        if (pf && !json_is_null(pf) && (!json_is_number(pf) || json_number_value(pf) != 1.0))
            return bad_config(err, "partial rotary embeddings (partial_rotary_factor) are not supported");
    }
    if (th && !json_is_null(th)) {
        if (!json_is_number(th) || !(json_number_value(th) > 0) || !isfinite(json_number_value(th)))
            return bad_config(err, "rope_theta must be a positive number");
        d->rope_theta = json_number_value(th);
    }
    const json_t *pf = json_object_get(cfg, "partial_rotary_factor");
    if (pf && !json_is_null(pf) && (!json_is_number(pf) || json_number_value(pf) != 1.0))
        return bad_config(err, "partial rotary embeddings (partial_rotary_factor) are not supported");
    return 0;
}

/* The sliding window of Qwen2's layer I: layer_types[I] when config.json lists them, else
 * (transformers' rule) layers from max_window_layers on, when use_sliding_window is set. */
static int read_qwen2_window(const json_t *cfg, int64_t layer, dims *d, srv_error *err)
{
    bool use = false;
    int64_t w, maxw;
    if (get_bool(cfg, "use_sliding_window", false, &use, err) < 0 ||
        get_dim(cfg, KEYS("sliding_window"), 4096, &w, err) < 0 ||
        get_dim(cfg, KEYS("max_window_layers"), 28, &maxw, err) < 0)
        return -1;
    const json_t *sw = json_object_get(cfg, "sliding_window");
    bool has_window = use && !(sw && json_is_null(sw));
    const json_t *types = json_object_get(cfg, "layer_types");
    bool sliding;
    if (types && !json_is_null(types)) {
        const json_t *t = json_array_get(types, (size_t)layer);
        if (!json_is_array(types) || (int64_t)json_array_size(types) != d->layers || !json_is_string(t))
            return bad_config(err, "layer_types must list one type per layer");
        if (!strcmp(json_string_value(t), "sliding_attention"))
            sliding = true;
        else if (!strcmp(json_string_value(t), "full_attention"))
            sliding = false;
        else
            return bad_config(err, "layer_types[%" PRId64 "] is %.40s: attnd knows full_attention and "
                              "sliding_attention", layer, json_string_value(t));
        if (sliding && !has_window)
            return bad_config(err, "layer_types[%" PRId64 "] is sliding_attention but the model has no "
                              "sliding window (use_sliding_window, sliding_window)", layer);
    } else {
        sliding = has_window && layer >= maxw;
    }
    d->window = sliding ? w : 0;
    return 0;
}

static int read_dims(fam_kind kind, const json_t *cfg, int64_t layer, dims *d, srv_error *err)
{
    memset(d, 0, sizeof *d);
    if (read_mha_dims(cfg, d, err) < 0)
        return -1;
    switch (kind) {
    case FAM_BERT: {
        const json_t *pe = json_object_get(cfg, "position_embedding_type");
        if (pe && !json_is_null(pe) && !(json_is_string(pe) && !strcmp(json_string_value(pe), "absolute")))
            return bad_config(err, "position_embedding_type %.40s is not supported: attnd imports BERT "
                              "with absolute position embeddings only (relative ones change the scores)",
                              json_is_string(pe) ? json_string_value(pe) : "?");
        d->in_bias = d->out_bias = true;
        /* a BERT built as a decoder masks the future in its extended attention mask */
        return need_divisible(d, err) < 0 ? -1 : get_bool(cfg, "is_decoder", false, &d->is_causal, err);
    }
    case FAM_GPT2: {
        bool scaled = true, inverse = false;
        if (get_bool(cfg, "scale_attn_weights", true, &scaled, err) < 0 ||
            get_bool(cfg, "scale_attn_by_inverse_layer_idx", false, &inverse, err) < 0)
            return -1;
        if (!scaled)
            return bad_config(err, "scale_attn_weights is false (scores not divided by sqrt(head_dim)): "
                              "attnd always scales them");
        /* layer I's scores are divided by I + 1 as well: the same only for layer 0 */
        if (inverse && layer > 0)
            return bad_config(err, "scale_attn_by_inverse_layer_idx divides layer %" PRId64 "'s scores "
                              "by %" PRId64 ", which attnd does not do (only layer 0 can be imported)",
                              layer, layer + 1);
        /* reorder_and_upcast_attn only changes the order of float32 operations */
        d->in_bias = d->out_bias = d->is_causal = true;
        return need_divisible(d, err);
    }
    case FAM_LLAMA:
    case FAM_MISTRAL:
    case FAM_QWEN2: {
        if (get_dim(cfg, KEYS("num_key_value_heads"), d->H, &d->Hkv, err) < 0)
            return -1;
        const json_t *hd = json_object_get(cfg, "head_dim");
        if (hd && !json_is_null(hd)) {
            if (get_dim(cfg, KEYS("head_dim"), 0, &d->hd, err) < 0)
                return -1;
        } else if (need_divisible(d, err) < 0) {
            return -1;
        }
        if (d->H % d->Hkv != 0)
            return bad_config(err, "num_attention_heads %" PRId64 " is not a multiple of "
                              "num_key_value_heads %" PRId64, d->H, d->Hkv);
        if (read_rope(cfg, d, err) < 0)
            return -1;
        d->is_causal = true;
        if (kind == FAM_LLAMA) {
            if (get_bool(cfg, "attention_bias", false, &d->in_bias, err) < 0)
                return -1;
            d->out_bias = d->in_bias;
        } else if (kind == FAM_QWEN2) {
            d->in_bias = true; /* Qwen2: q/k/v biases, none on o_proj */
            if (read_qwen2_window(cfg, layer, d, err) < 0)
                return -1;
        } else {
            /* Mistral: no biases; sliding_window (4096 when absent, none when null) */
            const json_t *sw = json_object_get(cfg, "sliding_window");
            if (!(sw && json_is_null(sw)) && get_dim(cfg, KEYS("sliding_window"), 4096, &d->window, err) < 0)
                return -1;
        }
        return 0;
    }
    case FAM_BLOOM:
        d->in_bias = d->out_bias = d->alibi = d->is_causal = true;
        return need_divisible(d, err);
    }
    return srv_error_set(err, SRV_E_INTERNAL, "", "unknown family");
}

/* The family of config.json: its model_type, or without one an architectures entry. */
static int find_family(const json_t *cfg, int *out, srv_error *err)
{
    const json_t *mt = json_object_get(cfg, "model_type");
    if (json_is_string(mt)) {
        for (size_t i = 0; i < NFAMILIES; i++)
            if (!strcmp(json_string_value(mt), FAMILIES[i].model_type)) {
                *out = (int)i;
                return 0;
            }
        return bad_config(err, "model_type %.40s is not supported: attnd imports " FAMILY_LIST,
                          json_string_value(mt));
    }
    const json_t *arch = json_object_get(cfg, "architectures");
    for (size_t a = 0; a < json_array_size(arch); a++) {
        const char *s = json_string_value(json_array_get(arch, a));
        for (size_t i = 0; s && i < NFAMILIES; i++) {
            size_t n = strlen(FAMILIES[i].arch);
            if (!strncmp(s, FAMILIES[i].arch, n) && (!strncmp(s + n, "Model", 5) || !strncmp(s + n, "For", 3))) {
                *out = (int)i;
                return 0;
            }
        }
    }
    return bad_config(err, "no model_type, and no architectures entry attnd knows: attnd imports "
                      FAMILY_LIST);
}

/* ---------------------------------------------------------------------------------------------- */
/* The layer's tensors                                                                            */

typedef enum role {
    R_Q_W, R_K_W, R_V_W,   /* nn.Linear weights [Dq,E], [Dkv,E], [Dkv,E]                           */
    R_QKV_W_T,             /* GPT-2 Conv1D [E,3E]: x·W, q|k|v along the columns                    */
    R_QKV_W_HEADS,         /* BLOOM [3E,E]: rows [H,3,hd]                                          */
    R_O_W,                 /* nn.Linear [E,Dq]                                                     */
    R_O_W_T,               /* Conv1D [E,E]                                                         */
    R_Q_B, R_K_B, R_V_B,   /* [Dq], [Dkv], [Dkv]                                                   */
    R_QKV_B,               /* [3E], q|k|v                                                          */
    R_QKV_B_HEADS,         /* [3E], [H,3,hd]                                                       */
    R_O_B,                 /* [E]                                                                  */
} role;

typedef struct source {
    char name[192];
    role role;
    int ndim;
    int64_t shape[2];
    srv_ckpt_tensor loc;
    float *data;
} source;

#define MAX_SOURCES 8

static void add_source(source *s, int *n, const char *prefix, const char *fmt, int64_t layer,
                       role r, int ndim, int64_t d0, int64_t d1)
{
    char rel[160];
    snprintf(rel, sizeof rel, fmt, layer);
    snprintf(s[*n].name, sizeof s[*n].name, "%s%s", prefix, rel);
    s[*n].role = r;
    s[*n].ndim = ndim;
    s[*n].shape[0] = d0;
    s[*n].shape[1] = d1;
    (*n)++;
}

/* The name of the layer's first tensor, relative to the prefix (to find the prefix). */
static const char *first_name(fam_kind k)
{
    switch (k) {
    case FAM_BERT: return "encoder.layer.%" PRId64 ".attention.self.query.weight";
    case FAM_GPT2: return "h.%" PRId64 ".attn.c_attn.weight";
    case FAM_BLOOM: return "h.%" PRId64 ".self_attention.query_key_value.weight";
    default: return "layers.%" PRId64 ".self_attn.q_proj.weight";
    }
}

static int list_sources(fam_kind k, const dims *d, const char *p, int64_t I, source *s)
{
    int n = 0;
    int64_t E = d->E, Dq = d->H * d->hd, Dkv = d->Hkv * d->hd;
    switch (k) {
    case FAM_BERT:
        add_source(s, &n, p, "encoder.layer.%" PRId64 ".attention.self.query.weight", I, R_Q_W, 2, E, E);
        add_source(s, &n, p, "encoder.layer.%" PRId64 ".attention.self.query.bias", I, R_Q_B, 1, E, 0);
        add_source(s, &n, p, "encoder.layer.%" PRId64 ".attention.self.key.weight", I, R_K_W, 2, E, E);
        add_source(s, &n, p, "encoder.layer.%" PRId64 ".attention.self.key.bias", I, R_K_B, 1, E, 0);
        add_source(s, &n, p, "encoder.layer.%" PRId64 ".attention.self.value.weight", I, R_V_W, 2, E, E);
        add_source(s, &n, p, "encoder.layer.%" PRId64 ".attention.self.value.bias", I, R_V_B, 1, E, 0);
        add_source(s, &n, p, "encoder.layer.%" PRId64 ".attention.output.dense.weight", I, R_O_W, 2, E, E);
        add_source(s, &n, p, "encoder.layer.%" PRId64 ".attention.output.dense.bias", I, R_O_B, 1, E, 0);
        break;
    case FAM_GPT2:
        add_source(s, &n, p, "h.%" PRId64 ".attn.c_attn.weight", I, R_QKV_W_T, 2, E, 3 * E);
        add_source(s, &n, p, "h.%" PRId64 ".attn.c_attn.bias", I, R_QKV_B, 1, 3 * E, 0);
        add_source(s, &n, p, "h.%" PRId64 ".attn.c_proj.weight", I, R_O_W_T, 2, E, E);
        add_source(s, &n, p, "h.%" PRId64 ".attn.c_proj.bias", I, R_O_B, 1, E, 0);
        break;
    case FAM_BLOOM:
        add_source(s, &n, p, "h.%" PRId64 ".self_attention.query_key_value.weight", I, R_QKV_W_HEADS, 2, 3 * E, E);
        add_source(s, &n, p, "h.%" PRId64 ".self_attention.query_key_value.bias", I, R_QKV_B_HEADS, 1, 3 * E, 0);
        add_source(s, &n, p, "h.%" PRId64 ".self_attention.dense.weight", I, R_O_W, 2, E, E);
        add_source(s, &n, p, "h.%" PRId64 ".self_attention.dense.bias", I, R_O_B, 1, E, 0);
        break;
    default:
        add_source(s, &n, p, "layers.%" PRId64 ".self_attn.q_proj.weight", I, R_Q_W, 2, Dq, E);
        add_source(s, &n, p, "layers.%" PRId64 ".self_attn.k_proj.weight", I, R_K_W, 2, Dkv, E);
        add_source(s, &n, p, "layers.%" PRId64 ".self_attn.v_proj.weight", I, R_V_W, 2, Dkv, E);
        add_source(s, &n, p, "layers.%" PRId64 ".self_attn.o_proj.weight", I, R_O_W, 2, E, Dq);
        if (d->in_bias) {
            add_source(s, &n, p, "layers.%" PRId64 ".self_attn.q_proj.bias", I, R_Q_B, 1, Dq, 0);
            add_source(s, &n, p, "layers.%" PRId64 ".self_attn.k_proj.bias", I, R_K_B, 1, Dkv, 0);
            add_source(s, &n, p, "layers.%" PRId64 ".self_attn.v_proj.bias", I, R_V_B, 1, Dkv, 0);
        }
        if (d->out_bias)
            add_source(s, &n, p, "layers.%" PRId64 ".self_attn.o_proj.bias", I, R_O_B, 1, E, 0);
        break;
    }
    return n;
}

static void shape_text(char *buf, size_t size, int ndim, const int64_t *shape)
{
    int o = snprintf(buf, size, "[");
    for (int i = 0; i < ndim && o > 0 && (size_t)o < size; i++)
        o += snprintf(buf + o, size - (size_t)o, i ? ", %" PRId64 : "%" PRId64, shape[i]);
    if (o > 0 && (size_t)o < size)
        snprintf(buf + o, size - (size_t)o, "]");
}

/* ---------------------------------------------------------------------------------------------- */
/* Laying the tensors out as nn.MultiheadAttention's                                              */

typedef struct dest {
    float *in_w;   /* [Dq+2Dkv, E] */
    float *in_b;   /* [Dq+2Dkv]    */
    float *out_w;  /* [E, Dq]      */
    float *out_b;  /* [E]          */
} dest;

static void place(dest *t, const dims *d, const source *s)
{
    int64_t E = d->E, H = d->H, hd = d->hd, Dq = H * hd, Dkv = d->Hkv * hd;
    const float *x = s->data;
    switch (s->role) {
    case R_Q_W: memcpy(t->in_w, x, (size_t)(Dq * E) * sizeof *x); break;
    case R_K_W: memcpy(t->in_w + Dq * E, x, (size_t)(Dkv * E) * sizeof *x); break;
    case R_V_W: memcpy(t->in_w + (Dq + Dkv) * E, x, (size_t)(Dkv * E) * sizeof *x); break;
    case R_QKV_W_T: /* x [E, 3E] (in, out) -> in_w [3E, E] (out, in) */
        for (int64_t r = 0; r < 3 * E; r++)
            for (int64_t c = 0; c < E; c++)
                t->in_w[r * E + c] = x[c * 3 * E + r];
        break;
    case R_QKV_W_HEADS: /* x row (h·3 + j)·hd + i -> in_w row j·E + h·hd + i (j = q, k, v) */
        for (int64_t h = 0; h < H; h++)
            for (int64_t j = 0; j < 3; j++)
                memcpy(t->in_w + (j * E + h * hd) * E, x + ((h * 3 + j) * hd) * E,
                       (size_t)(hd * E) * sizeof *x);
        break;
    case R_O_W: memcpy(t->out_w, x, (size_t)(E * Dq) * sizeof *x); break;
    case R_O_W_T: /* x [E, E] (in, out) -> out_w [E, E] (out, in) */
        for (int64_t r = 0; r < E; r++)
            for (int64_t c = 0; c < E; c++)
                t->out_w[r * E + c] = x[c * E + r];
        break;
    case R_Q_B: memcpy(t->in_b, x, (size_t)Dq * sizeof *x); break;
    case R_K_B: memcpy(t->in_b + Dq, x, (size_t)Dkv * sizeof *x); break;
    case R_V_B: memcpy(t->in_b + Dq + Dkv, x, (size_t)Dkv * sizeof *x); break;
    case R_QKV_B: memcpy(t->in_b, x, (size_t)(3 * E) * sizeof *x); break;
    case R_QKV_B_HEADS:
        for (int64_t h = 0; h < H; h++)
            for (int64_t j = 0; j < 3; j++)
                memcpy(t->in_b + j * E + h * hd, x + (h * 3 + j) * hd, (size_t)hd * sizeof *x);
        break;
    case R_O_B: memcpy(t->out_b, x, (size_t)E * sizeof *x); break;
    }
}

/* Adds a zeroed float32 tensor to st (count elements, shape given). NULL when out of memory. */
static float *add_tensor(srv_st *st, const char *name, int ndim, int64_t d0, int64_t d1)
{
    srv_st_tensor *t = &st->tensors[st->n];
    int64_t count = ndim == 1 ? d0 : d0 * d1;
    t->name = strdup(name);
    t->data = calloc((size_t)count, sizeof(float));
    t->ndim = ndim;
    t->shape[0] = d0;
    t->shape[1] = d1;
    t->count = count;
    st->n++;
    return t->name && t->data ? t->data : NULL;
}

/* The attnd config for dims: only what differs from the defaults, so that a daemon without the
 * extensions still reads a BERT's config. */
static json_t *config_json(const dims *d)
{
    json_t *c = json_pack("{s:I, s:I}", "embed_dim", (json_int_t)d->E, "num_heads", (json_int_t)d->H);
    if (!c)
        return NULL;
    if (!d->in_bias && !d->out_bias)
        json_object_set_new(c, "bias", json_false());
    if (d->E % d->H != 0 || d->hd != d->E / d->H)
        json_object_set_new(c, "head_dim", json_integer(d->hd));
    if (d->Hkv != d->H)
        json_object_set_new(c, "num_kv_heads", json_integer(d->Hkv));
    if (d->rope_theta > 0)
        json_object_set_new(c, "rope", json_pack("{s:f}", "theta", d->rope_theta));
    if (d->alibi)
        json_object_set_new(c, "alibi", json_true());
    if (d->window)
        json_object_set_new(c, "window", json_integer(d->window));
    if (d->is_causal)
        json_object_set_new(c, "is_causal", json_true());
    return c;
}

/* ---------------------------------------------------------------------------------------------- */

typedef struct reading {
    srv_hf_progress_fn fn;
    void *ctx;
    srv_hf_progress p;
} reading;

static void on_chunk(void *ctx, uint64_t bytes)
{
    reading *r = ctx;
    r->p.bytes_done += bytes;
    if (r->fn)
        r->fn(r->ctx, &r->p);
}

/* The family (index into FAMILIES) and dimensions of layer `layer` of ck, checked against the
 * model's layer count and the limits. 0, or -1 with err (as srv_hf_import). */
static int layer_dims(srv_ckpt *ck, int64_t layer, const mha_limits *limits, int *fam, dims *d,
                      srv_error *err)
{
    const json_t *cfg = srv_ckpt_config(ck);
    if (find_family(cfg, fam, err) < 0)
        return -1;
    if (layer < 0)
        return srv_error_set(err, SRV_E_BAD_REQUEST, "layer", "layer must be 0 or more");
    if (read_dims(FAMILIES[*fam].kind, cfg, layer, d, err) < 0)
        return -1;
    if (layer >= d->layers)
        return srv_error_set(err, SRV_E_BAD_REQUEST, "layer",
                             "layer %" PRId64 " is past the model's %" PRId64 " layers "
                             "(num_hidden_layers; layers are 0..%" PRId64 ")", layer, d->layers,
                             d->layers - 1);
    mha_limits lim;
    if (limits)
        lim = *limits;
    else
        mha_limits_default(&lim);
    int64_t Dq = d->H * d->hd, Dkv = d->Hkv * d->hd, Din = Dq + 2 * Dkv;
    if (d->E > lim.max_dim || d->H > lim.max_dim || d->hd > lim.max_dim ||
        Din > lim.max_elements / d->E)
        return srv_error_set(err, SRV_E_TOO_LARGE, "checkpoint",
                             "layer of hidden_size %" PRId64 " and %" PRId64 " heads of %" PRId64
                             " is past this daemon's limits (--max-tensor-elements)", d->E, d->H,
                             d->hd);
    return 0;
}

json_t *srv_hf_import_config(srv_ckpt *ck, int64_t layer, const mha_limits *limits,
                             srv_error *err)
{
    int fam = 0;
    dims d;
    if (layer_dims(ck, layer, limits, &fam, &d, err) < 0)
        return NULL;
    json_t *c = config_json(&d);
    if (!c)
        srv_error_set(err, SRV_E_NOMEM, "checkpoint", "out of memory");
    return c;
}

int srv_hf_import(srv_ckpt *ck, int64_t layer, const mha_limits *limits,
                  srv_hf_progress_fn progress, void *ctx, srv_hf_layer *out, srv_error *err)
{
    memset(out, 0, sizeof *out);
    int fam = 0;
    dims d;
    if (layer_dims(ck, layer, limits, &fam, &d, err) < 0)
        return -1;
    fam_kind kind = FAMILIES[fam].kind;
    snprintf(out->family, sizeof out->family, "%s", FAMILIES[fam].model_type);
    int64_t Dq = d.H * d.hd, Dkv = d.Hkv * d.hd, Din = Dq + 2 * Dkv;

    /* the prefix: the one under which the layer's first tensor is found */
    char rel[160];
    snprintf(rel, sizeof rel, first_name(kind), layer);
    int found = -1;
    for (size_t i = 0; i < NPREFIXES; i++) {
        char full[200];
        snprintf(full, sizeof full, "%s%s", PREFIXES[i], rel);
        if (srv_ckpt_has(ck, full)) {
            if (found >= 0)
                return srv_error_set(err, SRV_E_BAD_REQUEST, "checkpoint",
                                     "the checkpoint has layer %" PRId64 " twice, as \"%s%s\" and \"%s\"",
                                     layer, PREFIXES[found], rel, full);
            found = (int)i;
        }
    }
    if (found < 0)
        return srv_error_set(err, SRV_E_BAD_REQUEST, "checkpoint",
                             "the checkpoint has no tensor \"%s\" (nor with a prefix bert., roberta., "
                             "transformer. or model.): not a %s checkpoint, or no layer %" PRId64,
                             rel, out->family, layer);
    snprintf(out->prefix, sizeof out->prefix, "%s", PREFIXES[found]);

    source src[MAX_SOURCES];
    memset(src, 0, sizeof src);
    int nsrc = list_sources(kind, &d, out->prefix, layer, src);
    reading rd = {progress, ctx, {0}};
    rd.p.tensors_total = nsrc;
    for (int i = 0; i < nsrc; i++) {
        if (srv_ckpt_locate(ck, src[i].name, &src[i].loc, err) < 0)
            return -1;
        const srv_st_entry *e = src[i].loc.entry;
        if (e->ndim != src[i].ndim || e->shape[0] != src[i].shape[0] ||
            (src[i].ndim == 2 && e->shape[1] != src[i].shape[1])) {
            char got[64], want[64];
            shape_text(got, sizeof got, e->ndim, e->shape);
            shape_text(want, sizeof want, src[i].ndim, src[i].shape);
            return srv_error_set(err, SRV_E_BAD_REQUEST, "checkpoint",
                                 "%s: tensor \"%s\" has shape %s, config.json implies %s",
                                 src[i].loc.file, src[i].name, got, want);
        }
        if (e->dtype != SRV_ST_F32 && e->dtype != SRV_ST_F16 && e->dtype != SRV_ST_BF16)
            return srv_error_set(err, SRV_E_BAD_REQUEST, "checkpoint",
                                 "%s: tensor \"%s\" has dtype %s; attnd imports F32, F16 and BF16",
                                 src[i].loc.file, src[i].name, e->dtype_name);
        rd.p.bytes_total += e->end - e->begin;
        out->model_params += e->count;
    }

    bool bias = d.in_bias || d.out_bias;
    out->weights.tensors = calloc(4, sizeof *out->weights.tensors);
    dest t = {0};
    if (!out->weights.tensors || !(t.in_w = add_tensor(&out->weights, "in_proj_weight", 2, Din, d.E)) ||
        (bias && !(t.in_b = add_tensor(&out->weights, "in_proj_bias", 1, Din, 0))) ||
        !(t.out_w = add_tensor(&out->weights, "out_proj.weight", 2, d.E, Dq)) ||
        (bias && !(t.out_b = add_tensor(&out->weights, "out_proj.bias", 1, d.E, 0)))) {
        srv_error_set(err, SRV_E_NOMEM, "checkpoint", "out of memory for the layer's weights");
        goto error;
    }
    for (int i = 0; i < nsrc; i++) {
        source *s = &src[i];
        s->data = malloc((size_t)s->loc.entry->count * sizeof(float));
        if (!s->data) {
            srv_error_set(err, SRV_E_NOMEM, "checkpoint", "out of memory reading \"%s\"", s->name);
            goto error;
        }
        rd.p.file = s->loc.file;
        rd.p.tensor = s->name;
        if (srv_ckpt_read(ck, &s->loc, s->data, on_chunk, &rd, err) < 0)
            goto error;
        place(&t, &d, s);
        free(s->data);
        s->data = NULL;
        rd.p.tensors_done++;
        out->tensors++;
        out->bytes += s->loc.entry->end - s->loc.entry->begin;
    }
    if (progress)
        progress(ctx, &rd.p);
    if (!(out->config = config_json(&d))) {
        srv_error_set(err, SRV_E_NOMEM, "checkpoint", "out of memory");
        goto error;
    }
    return 0;

error:
    for (int i = 0; i < nsrc; i++)
        free(src[i].data);
    srv_hf_layer_free(out);
    return -1;
}

void srv_hf_layer_free(srv_hf_layer *l)
{
    if (!l)
        return;
    json_decref(l->config);
    srv_st_free(&l->weights);
    memset(l, 0, sizeof *l);
}
