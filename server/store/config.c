/*
 * config.c - layer configs between JSON and mha_config (see config.h).
 */
#include "config.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

#include "base/error.h"

typedef enum cfg_kind { K_DIM, K_DIM_OR_NULL, K_BOOL, K_DROPOUT, K_ROPE } cfg_kind;

static const struct {
    const char *name;
    cfg_kind kind;
} fields[] = {
    {"embed_dim", K_DIM},      {"num_heads", K_DIM},        {"kdim", K_DIM_OR_NULL},
    {"vdim", K_DIM_OR_NULL},   {"bias", K_BOOL},            {"add_bias_kv", K_BOOL},
    {"add_zero_attn", K_BOOL}, {"batch_first", K_BOOL},     {"dropout", K_DROPOUT},
    /* the extensions beyond torch (docs/api.md, "The attention of today's models") */
    {"head_dim", K_DIM_OR_NULL}, {"num_kv_heads", K_DIM_OR_NULL}, {"rope", K_ROPE},
    {"alibi", K_BOOL},         {"window", K_DIM_OR_NULL},   {"is_causal", K_BOOL},
};
#define NFIELDS (sizeof fields / sizeof fields[0])

#define CONFIG_FIELDS                                                                             \
    "embed_dim, num_heads, kdim, vdim, bias, add_bias_kv, add_zero_attn, batch_first, dropout, "  \
    "head_dim, num_kv_heads, rope, alibi, window, is_causal"

bool srv_config_field_known(const char *name)
{
    for (size_t i = 0; i < NFIELDS; i++)
        if (strcmp(fields[i].name, name) == 0)
            return true;
    return false;
}

static int get_dim(const json_t *v, const char *path, int64_t *out, srv_error *err)
{
    if (!json_is_integer(v))
        return srv_error_set(err, SRV_E_INVALID_CONFIG, path, "%s must be a whole number", path);
    json_int_t x = json_integer_value(v);
    if (x <= 0)
        return srv_error_set(err, SRV_E_INVALID_CONFIG, path, "%s must be positive, got %lld",
                             path, (long long)x);
    *out = x;
    return 0;
}

/* The dimension a K_DIM_OR_NULL field sets. */
static int64_t *dim_field(mha_config *cfg, const char *name)
{
    if (!strcmp(name, "kdim"))
        return &cfg->kdim;
    if (!strcmp(name, "vdim"))
        return &cfg->vdim;
    if (!strcmp(name, "head_dim"))
        return &cfg->head_dim;
    if (!strcmp(name, "num_kv_heads"))
        return &cfg->num_kv_heads;
    return &cfg->window;
}

/* "rope": null (none) or {"theta": number}; theta's range is the engine's to check. */
static int get_rope(mha_config *cfg, const json_t *v, const char *path, srv_error *err)
{
    char sub[192];
    if (json_is_null(v))
        return 0;
    if (!json_is_object(v))
        return srv_error_set(err, SRV_E_INVALID_CONFIG, path,
                             "%s must be an object like {\"theta\": 10000}, or null for none",
                             path);
    const char *key;
    json_t *m;
    json_object_foreach((json_t *)v, key, m)
    {
        if (strcmp(key, "theta") != 0) {
            snprintf(sub, sizeof sub, "%s.%.60s", path, key);
            return srv_error_set(err, SRV_E_UNKNOWN_FIELD, sub,
                                 "unknown field '%s'; rope has theta", sub);
        }
    }
    snprintf(sub, sizeof sub, "%s.theta", path);
    const json_t *t = json_object_get(v, "theta");
    if (!t)
        return srv_error_set(err, SRV_E_INVALID_CONFIG, sub,
                             "%s is required (the rotary base; Llama uses 10000)", sub);
    if (!json_is_number(t))
        return srv_error_set(err, SRV_E_INVALID_CONFIG, sub, "%s must be a number", sub);
    cfg->rope = true;
    cfg->rope_theta = json_number_value(t);
    return 0;
}

int srv_config_from_json(mha_config *cfg, const json_t *obj, const mha_limits *limits,
                         const char *field, srv_error *err)
{
    char path[96];
    if (!json_is_object(obj))
        return srv_error_set(err, SRV_E_BAD_REQUEST, field, "%s must be a JSON object", field);

    const char *key;
    json_t *v;
    json_object_foreach((json_t *)obj, key, v)
    {
        size_t i = 0;
        while (i < NFIELDS && strcmp(fields[i].name, key) != 0)
            i++;
        if (i == NFIELDS) {
            snprintf(path, sizeof path, "%s.%.60s", field, key);
            return srv_error_set(err, SRV_E_UNKNOWN_FIELD, path,
                                 "unknown field '%s'; a config has " CONFIG_FIELDS, path);
        }
    }

    const json_t *e = json_object_get(obj, "embed_dim"), *h = json_object_get(obj, "num_heads");
    snprintf(path, sizeof path, "%s.embed_dim", field);
    if (!e)
        return srv_error_set(err, SRV_E_INVALID_CONFIG, path, "%s is required", path);
    int64_t E, H;
    if (get_dim(e, path, &E, err) < 0)
        return -1;
    snprintf(path, sizeof path, "%s.num_heads", field);
    if (!h)
        return srv_error_set(err, SRV_E_INVALID_CONFIG, path, "%s is required", path);
    if (get_dim(h, path, &H, err) < 0)
        return -1;
    mha_config_init(cfg, E, H);

    for (size_t i = 0; i < NFIELDS; i++) {
        v = json_object_get(obj, fields[i].name);
        if (!v)
            continue;
        snprintf(path, sizeof path, "%s.%s", field, fields[i].name);
        const char *n = fields[i].name;
        switch (fields[i].kind) {
        case K_DIM:
            break; /* embed_dim, num_heads: read above */
        case K_DIM_OR_NULL: /* null: the default (E, E/H, H, no window) */
            if (!json_is_null(v) && get_dim(v, path, dim_field(cfg, n), err) < 0)
                return -1;
            break;
        case K_BOOL: {
            if (!json_is_boolean(v))
                return srv_error_set(err, SRV_E_INVALID_CONFIG, path,
                                     "%s must be true or false", path);
            bool b = json_is_true(v);
            if (!strcmp(n, "bias"))
                cfg->bias = b;
            else if (!strcmp(n, "add_bias_kv"))
                cfg->add_bias_kv = b;
            else if (!strcmp(n, "add_zero_attn"))
                cfg->add_zero_attn = b;
            else if (!strcmp(n, "alibi"))
                cfg->alibi = b;
            else if (!strcmp(n, "is_causal"))
                cfg->is_causal = b;
            else
                cfg->batch_first = b;
            break;
        }
        case K_DROPOUT: {
            if (!json_is_number(v))
                return srv_error_set(err, SRV_E_INVALID_CONFIG, path, "%s must be a number", path);
            double p = json_number_value(v);
            /* torch takes any probability, 1 included (nn.Dropout's check is 0 <= p <= 1) */
            if (!(p >= 0 && p <= 1))
                return srv_error_set(err, SRV_E_INVALID_CONFIG, path,
                                     "%s must be in [0, 1], got %g (it is never applied: "
                                     "inference runs in eval mode)",
                                     path, p);
            cfg->dropout = p;
            break;
        }
        case K_ROPE:
            if (get_rope(cfg, v, path, err) < 0)
                return -1;
            break;
        }
    }

    mha_error me = {0};
    if (mha_config_check(cfg, limits, &me) != MHA_OK) {
        /* whatever the engine calls it, a bad config is a 422; an error the caller already holds
         * stays (first error wins, and err may be NULL) */
        char prefix[80];
        srv_error engine = {0};
        snprintf(prefix, sizeof prefix, "%s.", field);
        srv_error_from_mha(&engine, &me, prefix);
        return srv_error_set(err, SRV_E_INVALID_CONFIG, engine.field, "%s", engine.message);
    }
    return 0;
}

json_t *srv_config_to_json(const mha_config *cfg)
{
    json_t *c = json_pack(
        "{s:I, s:I, s:I, s:I, s:b, s:b, s:b, s:b, s:f, s:I, s:I, s:n, s:b, s:n, s:b}", "embed_dim",
        (json_int_t)cfg->embed_dim, "num_heads", (json_int_t)cfg->num_heads, "kdim",
        (json_int_t)(cfg->kdim ? cfg->kdim : cfg->embed_dim), "vdim",
        (json_int_t)(cfg->vdim ? cfg->vdim : cfg->embed_dim), "bias", cfg->bias, "add_bias_kv",
        cfg->add_bias_kv, "add_zero_attn", cfg->add_zero_attn, "batch_first", cfg->batch_first,
        "dropout", cfg->dropout, "head_dim", (json_int_t)mha_config_head_dim(cfg), "num_kv_heads",
        (json_int_t)mha_config_kv_heads(cfg), "rope", "alibi", cfg->alibi, "window", "is_causal",
        cfg->is_causal);
    if (c && cfg->rope)
        json_object_set_new(c, "rope", json_pack("{s:f}", "theta", cfg->rope_theta));
    if (c && cfg->window)
        json_object_set_new(c, "window", json_integer(cfg->window));
    return c;
}

srv_layer *srv_layer_build_init(const char *name, const mha_config *cfg, const mha_limits *limits,
                                const char *method, uint64_t seed, mha_pool *pool, srv_error *err)
{
    mha_error me = {0};
    mha_layer *layer = mha_layer_create(cfg, limits, &me);
    if (!layer) {
        srv_error_from_mha(err, &me, "config.");
        return NULL;
    }
    if (mha_layer_init_pool(layer, method, seed, pool, &me) != MHA_OK) {
        mha_layer_free(layer);
        srv_error_from_mha(err, &me, "init.");
        return NULL;
    }
    json_t *cj = srv_config_to_json(mha_layer_config(layer));
    srv_layer *l = cj ? srv_layer_new(name, layer, cj) : (mha_layer_free(layer), NULL);
    if (!l)
        srv_error_set(err, SRV_E_NOMEM, "", "out of memory creating layer '%s'", name);
    return l;
}
