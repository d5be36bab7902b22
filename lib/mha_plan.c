/*
 * mha_plan.c - checks a forward pass's inputs against the layer and computes every size it needs,
 * with overflow checks and limits, before anything is allocated (STYLE point 8).
 *
 * Shape rules are torch's (F._mha_shape_check and multi_head_attention_forward); messages name the
 * input at fault and both shapes.
 */
#include "mha_core.h"
#include "mha_select.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Formats "[a,b,c]" into a caller buffer. */
#define SHAPE(buf, t) mha_shape_str((buf), sizeof(buf), clamp_nd((t)->ndim), (t)->shape)

/* A rank usable to print a shape[4] array, whatever the caller put in ndim. */
static int clamp_nd(int ndim)
{
    return ndim < 0 ? 0 : ndim > 4 ? 4 : ndim;
}

static mha_status check_rank(const char *field, int ndim, int min, int max, mha_error *err)
{
    if (ndim < min || ndim > max || ndim > 4)
        return mha_fail(err, MHA_ERR_SHAPE, field, "%s has %d dimensions, expected %d%s%d", field,
                        ndim, min, min == max ? "" : " or ", max);
    return MHA_OK;
}

/* Whether any of x[0, n) is inf or NaN: one branch-free pass (exponent bits all ones) that the
 * compiler vectorises. An L query (3.1 M floats) took ~1 ms with the early-exit loop below, which
 * now runs only to name the element when there is one. */
static bool any_nonfinite(const float *x, int64_t n)
{
    uint32_t special = 0;
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) {
        uint32_t u[8];
        memcpy(u, x + i, sizeof u);
        for (int k = 0; k < 8; k++)
            special |= (u[k] & 0x7F800000u) == 0x7F800000u;
    }
    for (; i < n; i++) {
        uint32_t u;
        memcpy(&u, x + i, sizeof u);
        special |= (u & 0x7F800000u) == 0x7F800000u;
    }
    return special != 0;
}

static mha_status check_finite(const char *field, const float *x, int64_t n, mha_error *err)
{
    if (!any_nonfinite(x, n))
        return MHA_OK;
    for (int64_t i = 0; i < n; i++) {
        if (!isfinite(x[i]))
            return mha_fail(err, MHA_ERR_VALUE, field, "%s[%lld] is %s; inputs must be finite",
                            field, (long long)i, isnan(x[i]) ? "NaN" : "infinite");
    }
    return MHA_OK;
}

/* Element count of a shape, checked for overflow and against the limit. */
static mha_status count_of(const char *field, int ndim, const int64_t *shape, const mha_limits *lim,
                           int64_t *count, mha_error *err)
{
    int64_t c = 1;
    for (int d = 0; d < ndim; d++) {
        if (shape[d] < 1)
            return mha_fail(err, MHA_ERR_SHAPE, field,
                            "%s has an empty or negative dimension %d (%lld)", field, d,
                            (long long)shape[d]);
        if (shape[d] > lim->max_dim)
            return mha_fail(err, MHA_ERR_LIMIT, field,
                            "%s dimension %d is %lld, over the limit of %lld", field, d,
                            (long long)shape[d], (long long)lim->max_dim);
        if (!mha_mul_ok(c, shape[d], &c) || c > lim->max_elements)
            return mha_fail(err, MHA_ERR_LIMIT, field, "%s has more than %lld elements", field,
                            (long long)lim->max_elements);
    }
    *count = c;
    return MHA_OK;
}

static mha_status check_mask_values(const char *field, const mha_mask *m, int64_t n, mha_error *err)
{
    if (m->type == MHA_MASK_BOOL)
        return MHA_OK;
    const float *x = m->data;
    for (int64_t i = 0; i < n; i++) {
        if (isnan(x[i]) || x[i] == INFINITY)
            return mha_fail(err, MHA_ERR_VALUE, field,
                            "%s[%lld] is %s; a float mask may hold finite numbers and -inf only",
                            field, (long long)i, isnan(x[i]) ? "NaN" : "+inf");
    }
    return MHA_OK;
}

static mha_status check_mask(const char *field, const mha_mask *m, int ndim, const int64_t *want,
                             const mha_limits *lim, mha_error *err)
{
    char got[96], exp[96];
    if (m->type != MHA_MASK_BOOL && m->type != MHA_MASK_FLOAT)
        return mha_fail(err, MHA_ERR_ARG, field, "%s has an unknown mask type %d", field,
                        (int)m->type);
    bool same = m->ndim == ndim;
    for (int d = 0; same && d < ndim; d++)
        same = m->shape[d] == want[d];
    if (!same) {
        mha_shape_str(got, sizeof got, clamp_nd(m->ndim), m->shape);
        mha_shape_str(exp, sizeof exp, ndim, want);
        return mha_fail(err, MHA_ERR_SHAPE, field, "%s has shape %s, expected %s", field, got, exp);
    }
    int64_t n;
    mha_status st = count_of(field, ndim, want, lim, &n, err);
    if (st != MHA_OK)
        return st;
    return check_mask_values(field, m, n, err);
}

static int64_t max64(int64_t a, int64_t b)
{
    return a > b ? a : b;
}

static int64_t round16(int64_t n)
{
    return (n + 15) / 16 * 16;
}

/* JIT kernels allowed: ATTND_JIT unset, or anything but "0" / "off" (docs/configuration.md). */
static bool jit_allowed(void)
{
    const char *v = getenv("ATTND_JIT");
    return !v || (strcmp(v, "0") && strcmp(v, "off"));
}

void mha_pos_layout_of(const mha_plan *plan, const mha_inputs *in, mha_pos_layout *pl)
{
    const int64_t N = plan->N, L = plan->L, S0 = plan->S0;
    pl->q_given = in->positions.data != NULL;
    pl->k_given = in->key_positions.data != NULL;
    pl->k_is_q = mha_keys_at_queries(plan, in);
    pl->q_rows = pl->q_given && in->positions.ndim == 2 ? N * L : L;
    if (pl->k_is_q)
        pl->k_rows = 0;
    else
        pl->k_rows = pl->k_given && in->key_positions.ndim == 2 ? N * S0 : S0;
}

int64_t mha_pos_floats(const mha_plan *plan)
{
    return round16(plan->N * plan->L) + round16(plan->N * plan->S0);
}

int64_t mha_rope_floats(const mha_plan *plan, const mha_config *cfg, const mha_pos_layout *pl)
{
    return cfg->rope ? round16((pl->q_rows + pl->k_rows) * plan->hd) + round16(plan->hd) : 0;
}

/* positions: [len] or [N,len] ([len] unbatched; [1,len] accepted there too), every value in
 * [0, MHA_MAX_POSITION). */
static mha_status check_positions(const char *field, const mha_positions *p, int64_t N,
                                  int64_t len, const char *len_name, mha_error *err)
{
    if (!p->data)
        return MHA_OK;
    char got[64];
    bool ok = (p->ndim == 1 && p->shape[0] == len) ||
              (p->ndim == 2 && p->shape[0] == N && p->shape[1] == len);
    if (!ok) {
        mha_shape_str(got, sizeof got, p->ndim < 0 ? 0 : p->ndim > 2 ? 2 : p->ndim, p->shape);
        return mha_fail(err, MHA_ERR_SHAPE, field, "%s has shape %s, expected [%lld] or [%lld,%lld] (%s)",
                        field, got, (long long)len, (long long)N, (long long)len, len_name);
    }
    const int64_t n = p->ndim == 1 ? len : N * len;
    for (int64_t i = 0; i < n; i++) {
        if (p->data[i] < 0 || p->data[i] >= MHA_MAX_POSITION)
            return mha_fail(err, MHA_ERR_VALUE, field,
                            "%s[%lld] is %lld; positions are integers in [0, %lld)", field,
                            (long long)i, (long long)p->data[i], (long long)MHA_MAX_POSITION);
    }
    return MHA_OK;
}

int64_t mha_pass_slot_floats(const mha_plan *plan, const mha_config *cfg, bool slab, int64_t bm)
{
    const int64_t attn = mha_attn_slot_floats(plan, slab, bm);
    const int64_t proj = mha_proj_slot_floats(cfg, plan->isa);
    return attn > proj ? attn : proj;
}

int64_t mha_plan_slot_floats(const mha_plan *plan, const mha_config *cfg, const mha_inputs *in)
{
    const bool output_only = !in->need_weights && !plan->selected;
    const int64_t bm = mha_attn_bm(plan, output_only, in->is_causal || cfg->window > 0);
    return mha_pass_slot_floats(plan, cfg, in->need_weights, bm);
}

mha_status mha_plan_forward(const mha_layer *layer, const mha_inputs *in, const mha_limits *limits,
                            mha_plan *plan, mha_error *err)
{
    mha_limits def;
    if (!layer || !in || !plan)
        return mha_fail(err, MHA_ERR_ARG, "plan", "plan_forward: NULL argument");
    if (!limits) {
        mha_limits_default(&def);
        limits = &def;
    }
    const mha_config *cfg = &layer->cfg;
    const int64_t E = cfg->embed_dim, H = cfg->num_heads, Kd = cfg->kdim, Vd = cfg->vdim;
    const int64_t hd = cfg->head_dim, Hkv = cfg->num_kv_heads, Dq = H * hd, Dkv = Hkv * hd;
    const bool bf = cfg->batch_first;
    char a[96], b[96];
    mha_status st;
    memset(plan, 0, sizeof *plan);

    /* query: [N,L,E] / [L,N,E] / [L,E] */
    const mha_tensor *q = &in->query;
    if (!q->data)
        return mha_fail(err, MHA_ERR_SHAPE, "query", "query is required");
    if ((st = check_rank("query", q->ndim, 2, 3, err)) != MHA_OK)
        return st;
    const bool batched = q->ndim == 3;
    const int nd = q->ndim;
    int64_t N = 1, L;
    if (batched) {
        N = bf ? q->shape[0] : q->shape[1];
        L = bf ? q->shape[1] : q->shape[0];
    } else {
        L = q->shape[0];
    }
    int64_t qn, kn, vn;
    if ((st = count_of("query", nd, q->shape, limits, &qn, err)) != MHA_OK)
        return st;
    if (q->shape[nd - 1] != E)
        return mha_fail(err, MHA_ERR_SHAPE, "query",
                        "query has %lld features (shape %s), layer expects embed_dim=%lld",
                        (long long)q->shape[nd - 1], SHAPE(a, q), (long long)E);

    /* key: absent = query */
    const mha_tensor *k = in->key.data ? &in->key : q;
    const char *kname = in->key.data ? "key" : "key (= query)";
    if (k->ndim != nd)
        return mha_fail(err, MHA_ERR_SHAPE, "key",
                        "key has shape %s but query has shape %s: both must be %s", SHAPE(a, k),
                        SHAPE(b, q), batched ? "3-D (batched)" : "2-D (unbatched)");
    if ((st = count_of("key", nd, k->shape, limits, &kn, err)) != MHA_OK)
        return st;
    int64_t kN = batched ? (bf ? k->shape[0] : k->shape[1]) : 1;
    int64_t S0 = batched ? (bf ? k->shape[1] : k->shape[0]) : k->shape[0];
    if (kN != N)
        return mha_fail(err, MHA_ERR_SHAPE, "key",
                        "key has batch size %lld (shape %s), query has %lld (shape %s)",
                        (long long)kN, SHAPE(a, k), (long long)N, SHAPE(b, q));
    if (k->shape[nd - 1] != Kd)
        return mha_fail(err, MHA_ERR_SHAPE, "key",
                        "%s has %lld features (shape %s), layer expects kdim=%lld", kname,
                        (long long)k->shape[nd - 1], SHAPE(a, k), (long long)Kd);

    /* value: absent = key */
    const mha_tensor *v = in->value.data ? &in->value : k;
    const char *vname = in->value.data ? "value"
                        : in->key.data ? "value (= key)"
                                       : "value (= query)";
    if (v->ndim != nd)
        return mha_fail(err, MHA_ERR_SHAPE, "value",
                        "value has shape %s but query has shape %s: both must be %s", SHAPE(a, v),
                        SHAPE(b, q), batched ? "3-D (batched)" : "2-D (unbatched)");
    if ((st = count_of("value", nd, v->shape, limits, &vn, err)) != MHA_OK)
        return st;
    for (int d = 0; d < nd - 1; d++) {
        if (v->shape[d] != k->shape[d])
            return mha_fail(
                err, MHA_ERR_SHAPE, "value",
                "value has shape %s, key has shape %s: their sequence and batch sizes must match",
                SHAPE(a, v), SHAPE(b, k));
    }
    if (v->shape[nd - 1] != Vd)
        return mha_fail(err, MHA_ERR_SHAPE, "value",
                        "%s has %lld features (shape %s), layer expects vdim=%lld", vname,
                        (long long)v->shape[nd - 1], SHAPE(a, v), (long long)Vd);

    const int64_t S = S0 + (cfg->add_bias_kv ? 1 : 0) + (cfg->add_zero_attn ? 1 : 0);

    /* key_padding_mask: [N,S0] / [S0] */
    if (in->key_padding_mask.data) {
        int64_t want[2] = {batched ? N : S0, S0};
        if ((st = check_mask("key_padding_mask", &in->key_padding_mask, batched ? 2 : 1,
                             batched ? want : want + 1, limits, err)) != MHA_OK)
            return st;
    }
    /* attn_mask: [L,S0] or [N·H,L,S0] / [H,L,S0] */
    if (in->attn_mask.data) {
        const mha_mask *m = &in->attn_mask;
        int64_t want2[2] = {L, S0};
        int64_t want3[3] = {0, L, S0};
        if (!mha_mul_ok(N, H, &want3[0]))
            return mha_fail(err, MHA_ERR_LIMIT, "attn_mask", "N·H overflows");
        if (m->ndim == 3)
            st = check_mask("attn_mask", m, 3, want3, limits, err);
        else if (m->ndim == 2)
            st = check_mask("attn_mask", m, 2, want2, limits, err);
        else {
            mha_shape_str(a, sizeof a, clamp_nd(m->ndim), m->shape);
            mha_shape_str(b, sizeof b, 3, want3);
            st = mha_fail(err, MHA_ERR_SHAPE, "attn_mask",
                          "attn_mask has shape %s, expected [%lld,%lld] or %s", a, (long long)L,
                          (long long)S0, b);
        }
        if (st != MHA_OK)
            return st;
    }

    if ((st = check_positions("positions", &in->positions, N, L, "L, the query length", err)) !=
            MHA_OK ||
        (st = check_positions("key_positions", &in->key_positions, N, S0, "S, the key length",
                              err)) != MHA_OK)
        return st;

    /* Output, weights and workspace sizes. */
    plan->batched = batched;
    plan->N = N;
    plan->L = L;
    plan->S0 = S0;
    plan->S = S;
    plan->E = E;
    plan->H = H;
    plan->hd = hd;
    plan->Hkv = Hkv;
    plan->isa = mha_isa_active();
    plan->jit = jit_allowed();
    plan->out_ndim = nd;
    for (int d = 0; d < nd; d++)
        plan->out_shape[d] = q->shape[d];
    plan->out_count = qn;
    int64_t LS, w;
    if (!mha_mul_ok(L, S, &LS))
        return mha_fail(err, MHA_ERR_LIMIT, "query", "L·S overflows");
    if (in->select) { /* the chosen weights instead of torch's (and the trace's per head) */
        if ((st = mha_select_plan(plan, in->select, in->need_weights, in->average_attn_weights,
                                  limits, err)) != MHA_OK)
            return st;
    } else if (in->need_weights) {
        bool avg = in->average_attn_weights;
        int n = 0;
        if (batched)
            plan->weights_shape[n++] = N;
        if (!avg)
            plan->weights_shape[n++] = H;
        plan->weights_shape[n++] = L;
        plan->weights_shape[n++] = S;
        plan->weights_ndim = n;
        if (!mha_mul_ok(LS, N, &w) || (!avg && !mha_mul_ok(w, H, &w)) || w > limits->max_elements) {
            char shape[96] = "", count[32] = "more than 2^63";
            for (int d = 0, at = 0; d < n && at < (int)sizeof shape; d++)
                at += snprintf(shape + at, sizeof shape - (size_t)at, "%s%lld", d ? ", " : "",
                               (long long)plan->weights_shape[d]);
            if (mha_mul_ok(LS, N, &w) && (avg || mha_mul_ok(w, H, &w)))
                snprintf(count, sizeof count, "%lld", (long long)w);
            return mha_fail(err, MHA_ERR_LIMIT, "need_weights",
                            "the attention weights, [%s]%s, would be %s elements, over the limit "
                            "of %lld; a selection of them (some heads, query or key ranges, top_k "
                            "or pool) can be returned instead",
                            shape, avg ? " averaged over heads" : " per head", count,
                            (long long)limits->max_elements);
        }
        plan->weights_count = w;
    }

    /* cblas takes int sizes and strides: the largest is a row count times a row width of the
     * buffers (N·L·(Dq+2Dkv) for a self-attention's q|k|v), whatever limits the caller chose. */
    int64_t widest = max64(max64(E, Dq + 2 * Dkv), max64(Kd, Vd)), rows_max = max64(L, S0), big;
    if (!mha_mul_ok(N, rows_max, &big) || !mha_mul_ok(big, widest, &big) || big > INT32_MAX)
        return mha_fail(err, MHA_ERR_LIMIT, "query",
                        "N=%lld, L=%lld, S=%lld with %lld features is too large for one pass",
                        (long long)N, (long long)L, (long long)S0, (long long)widest);

    /* Workspace (floats): projections (the concat then reuses q's) + packed keys and values +
     * positions (+ RoPE
     * tables) + one thread's slot (with the weights slab when weights are asked for; at least the
     * projections' room, mha_pass_slot_floats), each buffer
     * rounded up to 16 floats; see mha_forward.c and mha_attention.c. The sizes are small enough
     * here (the check above) for plain arithmetic in the helpers. */
    mha_pos_layout pl;
    mha_pos_layout_of(plan, in, &pl);
    int64_t NL, NS0, proj, cat, total, kv, kvp, NH;
    bool ok = mha_mul_ok(N, L, &NL) && mha_mul_ok(N, S0, &NS0) && mha_mul_ok(NL, Dq, &cat);
    ok = ok && mha_mul_ok(NS0, Dkv, &kv) && mha_mul_ok(kv, 2, &kv) && mha_add_ok(cat, kv, &proj);
    ok = ok && mha_mul_ok(N, Hkv, &NH) && mha_mul_ok(NH, mha_attn_kv_floats(plan), &kvp);
    ok = ok && mha_add_ok(proj, kvp, &total) && /* the concat reuses q's room */
         mha_add_ok(total, mha_plan_slot_floats(plan, cfg, in), &total) &&
         mha_add_ok(total, mha_pos_floats(plan), &total) &&
         mha_add_ok(total, mha_rope_floats(plan, cfg, &pl), &total) &&
         mha_add_ok(total, 16 * 10, &total) && mha_mul_ok(total, (int64_t)sizeof(float), &total);
    if (!ok || total > limits->max_workspace_bytes)
        return mha_fail(
            err, MHA_ERR_LIMIT, "query",
            "this pass needs more than %lld bytes of scratch (N=%lld, L=%lld, S=%lld, E=%lld)",
            (long long)limits->max_workspace_bytes, (long long)N, (long long)L, (long long)S,
            (long long)E);
    plan->workspace_bytes = (size_t)total;
    plan->flops = mha_flops(cfg, N, L, S0);

    /* Values last: shapes are cheaper to check and more often wrong. */
    if ((st = check_finite("query", q->data, qn, err)) != MHA_OK)
        return st;
    if (in->key.data && in->key.data != q->data &&
        (st = check_finite("key", k->data, kn, err)) != MHA_OK)
        return st;
    if (in->value.data && in->value.data != k->data && in->value.data != q->data &&
        (st = check_finite("value", v->data, vn, err)) != MHA_OK)
        return st;
    return MHA_OK;
}
