/*
 * mha_config.c - layer configuration: defaults, validation against the rules and limits, the
 * parameter list under torch's state_dict names (on the head_dim / num_kv_heads shapes), ALiBi
 * slopes, FLOP counts, status and stage names, and the error helper the rest of lib/ uses.
 */
#include "mha_internal.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

const char *mha_status_name(mha_status status)
{
    switch (status) {
    case MHA_OK:
        return "ok";
    case MHA_ERR_CONFIG:
        return "config";
    case MHA_ERR_SHAPE:
        return "shape";
    case MHA_ERR_VALUE:
        return "value";
    case MHA_ERR_PARAM:
        return "param";
    case MHA_ERR_LIMIT:
        return "limit";
    case MHA_ERR_NOMEM:
        return "nomem";
    case MHA_ERR_ARG:
        return "arg";
    case MHA_ERR_CANCELLED:
        return "cancelled";
    }
    return "unknown";
}

mha_status mha_fail(mha_error *err, mha_status status, const char *field, const char *fmt, ...)
{
    if (!err)
        return status;
    err->status = status;
    snprintf(err->field, sizeof err->field, "%s", field ? field : "");
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err->message, sizeof err->message, fmt, ap);
    va_end(ap);
    return status;
}

const char *mha_shape_str(char *buf, size_t size, int ndim, const int64_t *shape)
{
    size_t used = 0;
    if (size == 0)
        return buf;
    buf[0] = '\0';
    used += (size_t)snprintf(buf + used, size - used, "[");
    for (int i = 0; i < ndim && used < size; i++)
        used +=
            (size_t)snprintf(buf + used, size - used, i ? ",%lld" : "%lld", (long long)shape[i]);
    if (used < size)
        snprintf(buf + used, size - used, "]");
    return buf;
}

void mha_limits_default(mha_limits *limits)
{
    limits->max_dim = (int64_t)1 << 20;
    limits->max_elements = (int64_t)1 << 28;
    limits->max_workspace_bytes = (int64_t)1 << 31;
}

void mha_config_init(mha_config *cfg, int64_t embed_dim, int64_t num_heads)
{
    memset(cfg, 0, sizeof *cfg);
    cfg->embed_dim = embed_dim;
    cfg->num_heads = num_heads;
    cfg->bias = true;
    cfg->batch_first = true;
}

static int64_t resolved(int64_t dim, int64_t embed_dim)
{
    return dim == 0 ? embed_dim : dim;
}

bool mha_config_packed(const mha_config *cfg)
{
    return resolved(cfg->kdim, cfg->embed_dim) == cfg->embed_dim &&
           resolved(cfg->vdim, cfg->embed_dim) == cfg->embed_dim;
}

int64_t mha_config_head_dim(const mha_config *cfg)
{
    if (cfg->head_dim)
        return cfg->head_dim;
    return cfg->num_heads > 0 ? cfg->embed_dim / cfg->num_heads : 0;
}

int64_t mha_config_kv_heads(const mha_config *cfg)
{
    return cfg->num_kv_heads ? cfg->num_kv_heads : cfg->num_heads;
}

mha_status mha_config_check(const mha_config *cfg, const mha_limits *limits, mha_error *err)
{
    mha_limits def;
    if (!cfg)
        return mha_fail(err, MHA_ERR_ARG, "config", "no config given");
    if (!limits) {
        mha_limits_default(&def);
        limits = &def;
    }
    const struct {
        const char *name;
        int64_t value;
        bool zero_ok;
    } dims[] = {
        {"embed_dim", cfg->embed_dim, false}, {"num_heads", cfg->num_heads, false},
        {"kdim", cfg->kdim, true},            {"vdim", cfg->vdim, true},
        {"head_dim", cfg->head_dim, true},    {"num_kv_heads", cfg->num_kv_heads, true},
    };
    for (size_t i = 0; i < sizeof dims / sizeof dims[0]; i++) {
        if (dims[i].value < 0 || (dims[i].value == 0 && !dims[i].zero_ok))
            return mha_fail(err, MHA_ERR_CONFIG, dims[i].name,
                            "%s must be a positive integer, got %lld", dims[i].name,
                            (long long)dims[i].value);
        if (dims[i].value > limits->max_dim)
            return mha_fail(err, MHA_ERR_LIMIT, dims[i].name, "%s=%lld is over the limit of %lld",
                            dims[i].name, (long long)dims[i].value, (long long)limits->max_dim);
    }
    const int64_t E = cfg->embed_dim, H = cfg->num_heads;
    if (cfg->head_dim == 0 && E % H != 0)
        return mha_fail(err, MHA_ERR_CONFIG, "num_heads",
                        "embed_dim=%lld is not divisible by num_heads=%lld (or give head_dim)",
                        (long long)E, (long long)H);
    const int64_t hd = mha_config_head_dim(cfg), Hkv = mha_config_kv_heads(cfg);
    if (Hkv > H || H % Hkv != 0)
        return mha_fail(err, MHA_ERR_CONFIG, "num_kv_heads",
                        "num_kv_heads=%lld must divide num_heads=%lld (each kv head serves "
                        "num_heads/num_kv_heads query heads)",
                        (long long)Hkv, (long long)H);
    if (!(cfg->dropout >= 0.0 && cfg->dropout <= 1.0))
        return mha_fail(err, MHA_ERR_CONFIG, "dropout", "dropout must be in [0, 1], got %g",
                        cfg->dropout);
    if (cfg->rope && !(cfg->rope_theta > 0.0 && isfinite(cfg->rope_theta)))
        return mha_fail(err, MHA_ERR_CONFIG, "rope.theta",
                        "rope.theta must be a finite number > 0 (Llama uses 10000), got %g",
                        cfg->rope_theta);
    if (cfg->rope && hd % 2 != 0)
        return mha_fail(err, MHA_ERR_CONFIG, "head_dim",
                        "rope rotates pairs of dimensions: head_dim must be even, got %lld%s",
                        (long long)hd, cfg->head_dim ? "" : " (embed_dim/num_heads)");
    float worst;
    if (cfg->rope && !mha_rope_theta_fits(hd, cfg->rope_theta, &worst))
        return mha_fail(err, MHA_ERR_CONFIG, "rope.theta",
                        "rope.theta=%g gives head_dim %lld a rotary frequency of %g, whose angles "
                        "overflow float32 by position 2^24 - 1 (the rotation would be NaN): take "
                        "a larger theta (Llama uses 10000)",
                        cfg->rope_theta, (long long)hd, (double)worst);
    if (cfg->window < 0)
        return mha_fail(err, MHA_ERR_CONFIG, "window",
                        "window must be an integer >= 1 (keys within window positions), got %lld",
                        (long long)cfg->window);

    /* Every parameter tensor must fit the element limit (mha_layer_create checks their sum). */
    const int64_t kd = resolved(cfg->kdim, E), vd = resolved(cfg->vdim, E);
    const bool packed = kd == E && vd == E;
    int64_t Dq, Dkv, rows;
    if (!mha_mul_ok(H, hd, &Dq) || !mha_mul_ok(Hkv, hd, &Dkv) || !mha_add_ok(Dq, Dkv, &rows) ||
        !mha_add_ok(rows, Dkv, &rows))
        return mha_fail(err, MHA_ERR_LIMIT, "head_dim",
                        "num_heads=%lld x head_dim=%lld overflows", (long long)H, (long long)hd);
    const char *size_field = cfg->head_dim ? "head_dim" : "embed_dim"; /* what set Dq */
    const struct {
        const char *field, *param;
        int64_t rows, cols;
    } w[] = {
        {size_field, packed ? "in_proj_weight" : "q_proj_weight", packed ? rows : Dq, E},
        {"kdim", "k_proj_weight", Dkv, kd},
        {"vdim", "v_proj_weight", Dkv, vd},
        {size_field, "out_proj.weight", E, Dq},
    };
    for (int i = 0; i < 4; i++) {
        int64_t n;
        if (!mha_mul_ok(w[i].rows, w[i].cols, &n) || n > limits->max_elements)
            return mha_fail(err, MHA_ERR_LIMIT, w[i].field,
                            "%s [%lld,%lld] is over the limit of %lld elements", w[i].param,
                            (long long)w[i].rows, (long long)w[i].cols,
                            (long long)limits->max_elements);
    }
    return MHA_OK;
}

float mha_alibi_slope(int64_t h, int64_t H)
{
    int64_t n = 1;
    while (n * 2 <= H)
        n *= 2;
    if (h < n)
        return (float)exp2(-8.0 * (double)(h + 1) / (double)n);
    return (float)exp2(-4.0 * (double)(2 * (h - n) + 1) / (double)n);
}

double mha_flops(const mha_config *cfg, int64_t N, int64_t L, int64_t S0)
{
    double E = (double)cfg->embed_dim;
    double kd = (double)resolved(cfg->kdim, cfg->embed_dim);
    double vd = (double)resolved(cfg->vdim, cfg->embed_dim);
    double Dq = (double)cfg->num_heads * (double)mha_config_head_dim(cfg);
    double Dkv = (double)mha_config_kv_heads(cfg) * (double)mha_config_head_dim(cfg);
    double S = (double)S0 + (cfg->add_bias_kv ? 1 : 0) + (cfg->add_zero_attn ? 1 : 0);
    double n = (double)N, l = (double)L, s0 = (double)S0;
    return 2 * n * l * E * Dq + 2 * n * s0 * kd * Dkv + 2 * n * s0 * vd * Dkv + 4 * n * l * S * Dq +
           2 * n * l * Dq * E;
}

static void set_info(mha_param_info *p, const char *name, int ndim, int64_t a, int64_t b, int64_t c)
{
    p->name = name;
    p->ndim = ndim;
    p->shape[0] = a;
    p->shape[1] = b;
    p->shape[2] = c;
    p->count = a * (ndim > 1 ? b : 1) * (ndim > 2 ? c : 1);
    for (int i = ndim; i < 3; i++)
        p->shape[i] = 0;
}

int mha_param_list(const mha_config *cfg, mha_param_info out[MHA_MAX_PARAMS])
{
    const int64_t E = cfg->embed_dim, hd = mha_config_head_dim(cfg);
    const int64_t Dq = cfg->num_heads * hd, Dkv = mha_config_kv_heads(cfg) * hd;
    int n = 0;
    if (mha_config_packed(cfg)) {
        set_info(&out[n++], "in_proj_weight", 2, Dq + 2 * Dkv, E, 0);
    } else {
        set_info(&out[n++], "q_proj_weight", 2, Dq, E, 0);
        set_info(&out[n++], "k_proj_weight", 2, Dkv, resolved(cfg->kdim, E), 0);
        set_info(&out[n++], "v_proj_weight", 2, Dkv, resolved(cfg->vdim, E), 0);
    }
    if (cfg->bias)
        set_info(&out[n++], "in_proj_bias", 1, Dq + 2 * Dkv, 0, 0);
    if (cfg->add_bias_kv) {
        set_info(&out[n++], "bias_k", 3, 1, 1, Dkv);
        set_info(&out[n++], "bias_v", 3, 1, 1, Dkv);
    }
    set_info(&out[n++], "out_proj.weight", 2, E, Dq, 0);
    if (cfg->bias)
        set_info(&out[n++], "out_proj.bias", 1, E, 0, 0);
    return n;
}

int64_t mha_param_total(const mha_config *cfg)
{
    mha_param_info info[MHA_MAX_PARAMS];
    int n = mha_param_list(cfg, info);
    int64_t total = 0;
    for (int i = 0; i < n; i++)
        total += info[i].count;
    return total;
}

const char *mha_trace_stage_name(mha_trace_stage stage)
{
    static const char *const names[MHA_TRACE_NSTAGES] = {
        "q_proj", "k_proj",       "v_proj",       "q_heads", "k_heads", "v_heads",
        "scores", "attn_weights", "head_outputs", "concat",  "output",
    };
    if ((int)stage < 0 || stage >= MHA_TRACE_NSTAGES)
        return "unknown";
    return names[stage];
}

int mha_trace_stage_shape(const mha_plan *plan, mha_trace_stage stage, int64_t shape[4],
                          int64_t *count)
{
    int64_t N = plan->N, L = plan->L, S0 = plan->S0, S = plan->S, E = plan->E, H = plan->H,
            hd = plan->hd, Hkv = plan->Hkv;
    int64_t s[4] = {N, 0, 0, 0};
    int ndim = 3;
    switch (stage) {
    case MHA_TRACE_Q_PROJ:
    case MHA_TRACE_CONCAT:
        s[1] = L;
        s[2] = H * hd;
        break;
    case MHA_TRACE_OUTPUT:
        s[1] = L;
        s[2] = E;
        break;
    case MHA_TRACE_K_PROJ:
    case MHA_TRACE_V_PROJ:
        s[1] = S0;
        s[2] = Hkv * hd;
        break;
    case MHA_TRACE_Q_HEADS:
    case MHA_TRACE_HEAD_OUTPUTS:
        ndim = 4;
        s[1] = H;
        s[2] = L;
        s[3] = hd;
        break;
    case MHA_TRACE_K_HEADS:
    case MHA_TRACE_V_HEADS:
        ndim = 4;
        s[1] = Hkv;
        s[2] = S;
        s[3] = hd;
        break;
    case MHA_TRACE_SCORES:
    case MHA_TRACE_ATTN_WEIGHTS:
        ndim = 4;
        s[1] = H;
        s[2] = L;
        s[3] = S;
        if (plan->selected) /* the selection, per head */
            memcpy(s, plan->sel_shape, sizeof s);
        break;
    default:
        ndim = 0;
        break;
    }
    int64_t c = ndim ? 1 : 0;
    for (int i = 0; i < ndim; i++) {
        if (!mha_mul_ok(c, s[i], &c))
            c = INT64_MAX;
    }
    for (int i = 0; i < 4; i++)
        shape[i] = s[i];
    if (count)
        *count = c;
    return ndim;
}
