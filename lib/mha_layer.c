/*
 * mha_layer.c - layers: every parameter in one allocation, copied in with exact shape and value
 * checks, and initialised as torch's MultiheadAttention._reset_parameters does.
 *
 * The initialiser uses its own generator (splitmix64-seeded xoshiro256**, Box-Muller for normals)
 * so that the same seed gives the same weights on every machine; it cannot reproduce torch's own
 * random stream, only its distributions.
 */
#include "mha_internal.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

mha_layer *mha_layer_create(const mha_config *cfg, const mha_limits *limits, mha_error *err)
{
    mha_limits def;
    if (!limits) {
        mha_limits_default(&def);
        limits = &def;
    }
    if (mha_config_check(cfg, limits, err) != MHA_OK)
        return NULL;
    mha_layer *layer = calloc(1, sizeof *layer);
    if (!layer) {
        mha_fail(err, MHA_ERR_NOMEM, "layer", "out of memory creating a layer");
        return NULL;
    }
    layer->cfg = *cfg;
    layer->cfg.kdim = cfg->kdim ? cfg->kdim : cfg->embed_dim;
    layer->cfg.vdim = cfg->vdim ? cfg->vdim : cfg->embed_dim;
    layer->cfg.head_dim = mha_config_head_dim(cfg);
    layer->cfg.num_kv_heads = mha_config_kv_heads(cfg);
    if (!layer->cfg.rope)
        layer->cfg.rope_theta = 0.0; /* one config, one description */
    layer->limits = *limits;
    layer->nparams = mha_param_list(&layer->cfg, layer->info);

    /* Each parameter starts on a 64-byte boundary (16 floats) so GEMMs read aligned rows. */
    int64_t total = 0;
    int64_t offset[MHA_MAX_PARAMS];
    for (int i = 0; i < layer->nparams; i++) {
        offset[i] = total;
        int64_t padded = (layer->info[i].count + 15) / 16 * 16;
        if (!mha_add_ok(total, padded, &total) || total > ((int64_t)1 << 40)) {
            mha_layer_free(layer);
            mha_fail(err, MHA_ERR_LIMIT, "config", "the layer's parameters are too large");
            return NULL;
        }
    }
    layer->data = aligned_alloc(64, (size_t)total * sizeof(float));
    if (!layer->data) {
        mha_layer_free(layer);
        mha_fail(err, MHA_ERR_NOMEM, "layer", "out of memory allocating %lld parameters",
                 (long long)total);
        return NULL;
    }
    memset(layer->data, 0, (size_t)total * sizeof(float));
    for (int i = 0; i < layer->nparams; i++) {
        float *p = layer->data + offset[i];
        const char *name = layer->info[i].name;
        layer->param[i] = p;
        if (!strcmp(name, "in_proj_weight")) { /* q rows [0,Dq), k rows [Dq,Dq+Dkv), then v */
            const int64_t E = layer->cfg.embed_dim, hd = layer->cfg.head_dim;
            const int64_t Dq = layer->cfg.num_heads * hd, Dkv = layer->cfg.num_kv_heads * hd;
            layer->w_in = p;
            layer->w_q = p;
            layer->w_k = p + Dq * E;
            layer->w_v = p + (Dq + Dkv) * E;
        } else if (!strcmp(name, "q_proj_weight")) {
            layer->w_q = p;
        } else if (!strcmp(name, "k_proj_weight")) {
            layer->w_k = p;
        } else if (!strcmp(name, "v_proj_weight")) {
            layer->w_v = p;
        } else if (!strcmp(name, "in_proj_bias")) {
            layer->b_in = p;
        } else if (!strcmp(name, "bias_k")) {
            layer->bias_k = p;
        } else if (!strcmp(name, "bias_v")) {
            layer->bias_v = p;
        } else if (!strcmp(name, "out_proj.weight")) {
            layer->w_out = p;
        } else if (!strcmp(name, "out_proj.bias")) {
            layer->b_out = p;
        }
    }
    return layer;
}

void mha_layer_free(mha_layer *layer)
{
    if (!layer)
        return;
    free(layer->data);
    free(layer);
}

const mha_config *mha_layer_config(const mha_layer *layer)
{
    return &layer->cfg;
}

int mha_layer_param_count(const mha_layer *layer)
{
    return layer->nparams;
}

const mha_param_info *mha_layer_param_info(const mha_layer *layer, int i)
{
    if (i < 0 || i >= layer->nparams)
        return NULL;
    return &layer->info[i];
}

const float *mha_layer_param_data(const mha_layer *layer, int i)
{
    if (i < 0 || i >= layer->nparams)
        return NULL;
    return layer->param[i];
}

int mha_layer_param_find(const mha_layer *layer, const char *name)
{
    if (!name)
        return -1;
    for (int i = 0; i < layer->nparams; i++) {
        if (!strcmp(layer->info[i].name, name))
            return i;
    }
    return -1;
}

static bool known_param_name(const char *name)
{
    static const char *const all[] = {"in_proj_weight", "q_proj_weight",   "k_proj_weight",
                                      "v_proj_weight",  "in_proj_bias",    "bias_k",
                                      "bias_v",         "out_proj.weight", "out_proj.bias"};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) {
        if (!strcmp(all[i], name))
            return true;
    }
    return false;
}

mha_status mha_layer_set_param(mha_layer *layer, const char *name, const float *data, int ndim,
                               const int64_t *shape, mha_error *err)
{
    if (!layer || !name || (!data && ndim > 0) || (ndim > 0 && !shape))
        return mha_fail(err, MHA_ERR_ARG, name ? name : "name", "set_param: NULL argument");
    int i = mha_layer_param_find(layer, name);
    if (i < 0) {
        if (known_param_name(name))
            return mha_fail(err, MHA_ERR_PARAM, name,
                            "this layer has no parameter %s (embed_dim=%lld, kdim=%lld, vdim=%lld, "
                            "bias=%s, add_bias_kv=%s)",
                            name, (long long)layer->cfg.embed_dim, (long long)layer->cfg.kdim,
                            (long long)layer->cfg.vdim, layer->cfg.bias ? "true" : "false",
                            layer->cfg.add_bias_kv ? "true" : "false");
        return mha_fail(err, MHA_ERR_PARAM, name, "unknown parameter name %s", name);
    }
    const mha_param_info *p = &layer->info[i];
    bool same = ndim == p->ndim;
    for (int d = 0; same && d < ndim; d++)
        same = shape[d] == p->shape[d];
    if (!same) {
        char got[96], want[96];
        mha_shape_str(got, sizeof got, ndim < 0 ? 0 : ndim > 8 ? 8 : ndim, shape);
        mha_shape_str(want, sizeof want, p->ndim, p->shape);
        return mha_fail(err, MHA_ERR_SHAPE, name, "%s has shape %s, layer expects %s", name, got,
                        want);
    }
    for (int64_t k = 0; k < p->count; k++) {
        if (!isfinite(data[k]))
            return mha_fail(err, MHA_ERR_VALUE, name, "%s[%lld] is %s; parameters must be finite",
                            name, (long long)k, isnan(data[k]) ? "NaN" : "infinite");
    }
    memcpy(layer->param[i], data, (size_t)p->count * sizeof(float));
    return MHA_OK;
}

/* ---------------------------------------------------------------------------------------------- */
/* Deterministic generator: xoshiro256** seeded through splitmix64.                               */

typedef struct rng {
    uint64_t s[4];
} rng;

static uint64_t splitmix64(uint64_t *x)
{
    uint64_t z = (*x += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

static void rng_seed(rng *r, uint64_t seed)
{
    for (int i = 0; i < 4; i++)
        r->s[i] = splitmix64(&seed);
}

static uint64_t rotl(uint64_t x, int k)
{
    return (x << k) | (x >> (64 - k));
}

static uint64_t rng_next(rng *r)
{
    uint64_t *s = r->s;
    uint64_t result = rotl(s[1] * 5, 7) * 9;
    uint64_t t = s[1] << 17;
    s[2] ^= s[0];
    s[3] ^= s[1];
    s[1] ^= s[2];
    s[0] ^= s[3];
    s[2] ^= t;
    s[3] = rotl(s[3], 45);
    return result;
}

/* Uniform double in [0, 1) with 53 random bits. */
static double rng_unit(rng *r)
{
    return (double)(rng_next(r) >> 11) * 0x1.0p-53;
}

static void fill_uniform(float *out, int64_t n, double bound, rng *r)
{
    for (int64_t i = 0; i < n; i++)
        out[i] = (float)((2.0 * rng_unit(r) - 1.0) * bound);
}

static void fill_normal(float *out, int64_t n, double std, rng *r)
{
    for (int64_t i = 0; i < n; i += 2) {
        double u1 = rng_unit(r), u2 = rng_unit(r);
        double rad = sqrt(-2.0 * log(1.0 - u1)); /* 1 - u1 is in (0, 1]: log is finite */
        out[i] = (float)(std * rad * cos(2.0 * M_PI * u2));
        if (i + 1 < n)
            out[i + 1] = (float)(std * rad * sin(2.0 * M_PI * u2));
    }
}

/* torch.nn.init._calculate_fan_in_and_fan_out: fan_in = shape[1]·receptive, fan_out =
 * shape[0]·receptive, receptive = product of shape[2:]. */
static void fans(const mha_param_info *p, double *fan_in, double *fan_out)
{
    double receptive = 1;
    for (int d = 2; d < p->ndim; d++)
        receptive *= (double)p->shape[d];
    *fan_in = (double)p->shape[1] * receptive;
    *fan_out = (double)p->shape[0] * receptive;
}

mha_status mha_layer_init(mha_layer *layer, const char *method, uint64_t seed, mha_error *err)
{
    if (!layer || !method)
        return mha_fail(err, MHA_ERR_ARG, "init", "init: NULL argument");
    bool zeros = !strcmp(method, "zeros");
    if (!zeros && strcmp(method, "xavier_uniform"))
        return mha_fail(err, MHA_ERR_CONFIG, "method",
                        "unknown init method \"%s\" (use \"xavier_uniform\" or \"zeros\")", method);
    rng r;
    rng_seed(&r, seed);
    /* In state_dict order, each parameter from the same stream. */
    for (int i = 0; i < layer->nparams; i++) {
        const mha_param_info *p = &layer->info[i];
        float *data = layer->param[i];
        const char *name = p->name;
        double fan_in, fan_out;
        if (zeros || p->ndim == 1) {
            memset(data, 0, (size_t)p->count * sizeof(float)); /* biases are zero in torch */
            continue;
        }
        fans(p, &fan_in, &fan_out);
        if (!strcmp(name, "out_proj.weight")) {
            /* kaiming_uniform_(a=sqrt(5)): gain sqrt(2/(1+5)), bound gain·sqrt(3/fan_in). */
            fill_uniform(data, p->count, 1.0 / sqrt(fan_in), &r);
        } else if (!strcmp(name, "bias_k") || !strcmp(name, "bias_v")) {
            fill_normal(data, p->count, sqrt(2.0 / (fan_in + fan_out)), &r);
        } else {
            /* in_proj_weight [Dq+2Dkv,E] is one tensor to torch: fan_in E, fan_out Dq+2Dkv. */
            fill_uniform(data, p->count, sqrt(6.0 / (fan_in + fan_out)), &r);
        }
    }
    return MHA_OK;
}
