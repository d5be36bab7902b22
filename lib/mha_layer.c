/*
 * mha_layer.c - layers: every parameter in one allocation, copied in with exact shape and value
 * checks, and initialised as torch's MultiheadAttention._reset_parameters does.
 *
 * The initialiser uses its own generator (splitmix64-seeded xoshiro256**, mha_rng.c; Box-Muller
 * for normals) so that the same seed gives the same weights on every machine, and on any number of
 * threads; it cannot reproduce torch's own random stream, only its distributions.
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
    /* calloc: a large block comes zeroed from the kernel, page by page as it is first written
     * (by the threads of an initialisation, or the copy of given weights), not by a memset here */
    layer->block = calloc(1, (size_t)total * sizeof(float) + 64);
    if (!layer->block) {
        mha_layer_free(layer);
        mha_fail(err, MHA_ERR_NOMEM, "layer", "out of memory allocating %lld parameters",
                 (long long)total);
        return NULL;
    }
    layer->data = (float *)(((uintptr_t)layer->block + 63) & ~(uintptr_t)63);
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
    free(layer->block);
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
/* Initialisation: one stream of draws (mha_rng), parameter after parameter in state_dict order,
 * filled in chunks on the pool's threads. A chunk's first state is found by jumps (mha_rng.c), so
 * every value is the one a single thread drawing in order gives, whatever the threads.            */

#define INIT_CHUNK_LOG2 18                      /* draws per chunk: 262144 (1 MiB of floats)   */
#define INIT_CHUNK ((int64_t)1 << INIT_CHUNK_LOG2)
#define INIT_PARALLEL_MIN ((int64_t)1 << 20)    /* fewer draws than this: in order, no jumps  */

typedef enum init_kind { INIT_ZERO, INIT_UNIFORM, INIT_NORMAL } init_kind;

/* out[i] = (2u - 1)·bound for one draw u each. The draws are taken in batches first (the stream
 * is sequential), then converted in a loop the compiler can pipeline: the same arithmetic on the
 * same numbers as drawing and converting one at a time, so the same values, twice as fast. */
static void fill_uniform(float *out, int64_t n, double bound, mha_rng *r)
{
    uint64_t bits[256];
    for (int64_t i = 0; i < n; i += 256) {
        int m = n - i < 256 ? (int)(n - i) : 256;
        for (int k = 0; k < m; k++)
            bits[k] = mha_rng_next(r) >> 11; /* 53 bits: mha_rng_unit's */
        for (int k = 0; k < m; k++)
            out[i + k] = (float)((2.0 * ((double)(int64_t)bits[k] * 0x1.0p-53) - 1.0) * bound);
    }
}

/* Box-Muller: two draws for each pair of values (the last one of an odd n too). */
static void fill_normal(float *out, int64_t n, double std, mha_rng *r)
{
    for (int64_t i = 0; i < n; i += 2) {
        double u1 = mha_rng_unit(r), u2 = mha_rng_unit(r);
        double rad = sqrt(-2.0 * log(1.0 - u1)); /* 1 - u1 is in (0, 1]: log is finite */
        out[i] = (float)(std * rad * cos(2.0 * M_PI * u2));
        if (i + 1 < n)
            out[i + 1] = (float)(std * rad * sin(2.0 * M_PI * u2));
    }
}

/* One run of values of one parameter: out[0, n) drawn from draw `first` of the stream on. */
typedef struct init_piece {
    float *out;
    int64_t n;
    init_kind kind;
    double scale;  /* bound (uniform) or standard deviation (normal) */
    int64_t first; /* draw index in the stream                       */
} init_piece;

typedef struct init_job {
    init_piece *pieces;
    const mha_rng *starts; /* [chunk]: the state at draw chunk · INIT_CHUNK */
} init_job;

static void fill_piece(const init_piece *p, mha_rng *r)
{
    if (p->kind == INIT_ZERO)
        memset(p->out, 0, (size_t)p->n * sizeof(float));
    else if (p->kind == INIT_UNIFORM)
        fill_uniform(p->out, p->n, p->scale, r);
    else
        fill_normal(p->out, p->n, p->scale, r);
}

static void init_task(void *arg, int64_t t, int slot)
{
    const init_job *j = arg;
    const init_piece *p = &j->pieces[t];
    mha_rng r = {{0}};
    if (p->kind != INIT_ZERO) {
        int64_t chunk = p->first >> INIT_CHUNK_LOG2;
        r = j->starts[chunk];
        mha_rng_advance(&r, (uint64_t)(p->first - (chunk << INIT_CHUNK_LOG2)));
    }
    fill_piece(p, &r);
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
    return mha_layer_init_pool(layer, method, seed, NULL, err);
}

mha_status mha_layer_init_pool(mha_layer *layer, const char *method, uint64_t seed,
                               mha_pool *pool, mha_error *err)
{
    if (!layer || !method)
        return mha_fail(err, MHA_ERR_ARG, "init", "init: NULL argument");
    bool zeros = !strcmp(method, "zeros");
    if (!zeros && strcmp(method, "xavier_uniform"))
        return mha_fail(err, MHA_ERR_CONFIG, "method",
                        "unknown init method \"%s\" (use \"xavier_uniform\" or \"zeros\")", method);
    /* What each parameter is drawn from, and where in the stream, in state_dict order. */
    init_piece whole[MHA_MAX_PARAMS];
    int64_t draws = 0;
    for (int i = 0; i < layer->nparams; i++) {
        const mha_param_info *p = &layer->info[i];
        const char *name = p->name;
        init_piece *w = &whole[i];
        *w = (init_piece){layer->param[i], p->count, INIT_ZERO, 0, draws};
        if (zeros || p->ndim == 1)
            continue; /* biases are zero in torch */
        double fan_in, fan_out;
        fans(p, &fan_in, &fan_out);
        if (!strcmp(name, "out_proj.weight")) {
            /* kaiming_uniform_(a=sqrt(5)): gain sqrt(2/(1+5)), bound gain·sqrt(3/fan_in). */
            *w = (init_piece){w->out, w->n, INIT_UNIFORM, 1.0 / sqrt(fan_in), draws};
            draws += p->count;
        } else if (!strcmp(name, "bias_k") || !strcmp(name, "bias_v")) {
            *w = (init_piece){w->out, w->n, INIT_NORMAL, sqrt(2.0 / (fan_in + fan_out)), draws};
            draws += (p->count + 1) / 2 * 2;
        } else {
            /* in_proj_weight [Dq+2Dkv,E] is one tensor to torch: fan_in E, fan_out Dq+2Dkv. */
            *w = (init_piece){w->out, w->n, INIT_UNIFORM, sqrt(6.0 / (fan_in + fan_out)), draws};
            draws += p->count;
        }
    }

    mha_rng r;
    mha_rng_seed(&r, seed);
    int64_t total = 0;
    for (int i = 0; i < layer->nparams; i++)
        total += whole[i].n;
    if (!pool || mha_pool_threads(pool) < 2 || total < INIT_PARALLEL_MIN) {
        for (int i = 0; i < layer->nparams; i++) /* in order: the stream as it comes */
            fill_piece(&whole[i], &r);
        return MHA_OK;
    }

    /* Cut every parameter at the stream's chunk boundaries (zeros: at the same size), find each
     * chunk's first state, and fill the pieces in parallel. */
    int64_t nchunks = draws / INIT_CHUNK + 1, npieces = layer->nparams;
    for (int i = 0; i < layer->nparams; i++)
        npieces += whole[i].n / INIT_CHUNK + 1;
    init_piece *pieces = malloc((size_t)npieces * sizeof *pieces);
    mha_rng *starts = malloc((size_t)nchunks * sizeof *starts);
    mha_rng_jump *jump = malloc(sizeof *jump);
    if (!pieces || !starts || !jump) {
        free(pieces);
        free(starts);
        free(jump);
        return mha_fail(err, MHA_ERR_NOMEM, "init", "out of memory initialising a layer");
    }
    int64_t n = 0;
    for (int i = 0; i < layer->nparams; i++) {
        const init_piece *w = &whole[i];
        if (w->kind == INIT_NORMAL) { /* pairs of draws: kept whole (bias_k, bias_v: [1,1,E]) */
            pieces[n++] = *w;
            continue;
        }
        for (int64_t done = 0; done < w->n;) {
            int64_t pos = w->first + done; /* a zero piece draws nothing: cut by size alone */
            int64_t room = w->kind == INIT_ZERO ? INIT_CHUNK : INIT_CHUNK - (pos & (INIT_CHUNK - 1));
            int64_t len = w->n - done < room ? w->n - done : room;
            pieces[n++] = (init_piece){w->out + done, len, w->kind, w->scale, pos};
            done += len;
        }
    }
    mha_rng_jump_make(jump, INIT_CHUNK_LOG2);
    starts[0] = r;
    for (int64_t c = 1; c < nchunks; c++) {
        starts[c] = starts[c - 1];
        mha_rng_jump_apply(jump, &starts[c]);
    }
    init_job job = {pieces, starts};
    mha_pool_run(pool, n, init_task, &job);
    free(pieces);
    free(starts);
    free(jump);
    return MHA_OK;
}
