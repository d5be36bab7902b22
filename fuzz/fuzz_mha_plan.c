/*
 * fuzz_mha_plan.c - mha_plan_forward with fuzzed configs, shapes, masks, positions and limits;
 * small passes run mha_forward too.
 *
 * The input is read as a stream of bytes (zeros once it runs out): a config (E <= 64, H <= 8,
 * kdim/vdim, flags; head_dim, num_kv_heads, rope theta, alibi and window from a further byte, with
 * hostile values among them), limits (max_elements <= 2^16 so that every buffer the plan may read can be
 * allocated here at its declared size), batch/sequence sizes, then the rank and dimensions of each
 * input; each dimension is either the consistent one or, when its byte's top bit is set, one from a
 * table of hostile values (0, -1, 2^31, 2^40, INT64_MAX, ...). Buffers have exactly the declared
 * size, so ASan sees any read the plan or the pass makes past them.
 * A plan that succeeds must keep its promises (counts = products of shapes, within max_elements,
 * workspace within max_workspace_bytes). A pass that is small enough is run (with and without the
 * pool, weights, trace): every output must be finite, every attention weight in [0, 1], and each
 * weights row must sum to 1 or (fully masked) 0.
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mha.h"
#include "fuzz_fail.h"


#define CAP (1 << 16) /* largest buffer allocated for an input */

typedef struct rd {
    const uint8_t *p, *end;
} rd;

static unsigned byte(rd *r)
{
    return r->p < r->end ? *r->p++ : 0;
}

static const int64_t hostile[16] = {0, -1, 1, 2, 3, 5, 1 << 16, 1 << 20, INT64_C(1) << 31,
                                    INT64_C(1) << 32, INT64_C(1) << 40, INT64_MAX, INT64_MIN,
                                    65537, 3 << 20, 4097};

static int64_t dim(rd *r, int64_t consistent)
{
    unsigned b = byte(r);
    return b & 0x80 ? hostile[b & 15] : consistent;
}

static int64_t product(int ndim, const int64_t *shape)
{
    int64_t c = 1;
    for (int d = 0; d < ndim; d++) {
        if (shape[d] < 0 || (shape[d] > 0 && c > CAP / shape[d]))
            return -1;
        c *= shape[d];
    }
    return c;
}

/* A buffer for a tensor of the given shape, or a 1-element one when the shape is too big or bad
 * (the plan must refuse it before reading it). Values from the stream: finite, in [-4, 4]. */
static float *fill(rd *r, int ndim, const int64_t *shape, bool mask)
{
    int64_t n = product(ndim, shape);
    if (n <= 0)
        n = 1;
    float *x = malloc((size_t)n * sizeof *x);
    for (int64_t i = 0; i < n; i++) {
        unsigned b = byte(r);
        x[i] = mask && b >= 0xF0 ? -INFINITY : ((float)b - 128.0f) / 32.0f;
    }
    return x;
}

static uint8_t *fill_bool(rd *r, int ndim, const int64_t *shape)
{
    int64_t n = product(ndim, shape);
    if (n <= 0)
        n = 1;
    uint8_t *x = malloc((size_t)n);
    for (int64_t i = 0; i < n; i++)
        x[i] = byte(r) >= 0xC0;
    return x;
}

static mha_pool *shared_pool(void)
{
    static mha_pool *pool;
    if (!pool) {
        mha_blas_set_threads(1);
        pool = mha_pool_create(2, NULL);
    }
    return pool;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    rd r = {data, data + size};
    unsigned f = byte(&r);
    mha_config cfg;
    int64_t E = byte(&r) % 65, H = byte(&r) % 9;
    mha_config_init(&cfg, E, H);
    cfg.kdim = f & 1 ? byte(&r) % 65 : 0;
    cfg.vdim = f & 2 ? byte(&r) % 65 : 0;
    cfg.bias = !(f & 4);
    cfg.add_bias_kv = f & 8;
    cfg.add_zero_attn = f & 16;
    cfg.batch_first = !(f & 32);
    bool batched = !(f & 64);
    static const double thetas[8] = {10000, 500000, 1, 1e-3, 0, -1, INFINITY, NAN};
    static const int64_t windows[8] = {1, 2, 3, 7, 0, -1, INT64_C(1) << 40, INT64_MAX};
    unsigned x = byte(&r);
    if (x & 1)
        cfg.head_dim = x & 2 ? hostile[byte(&r) & 15] : byte(&r) % 17;
    if (x & 4)
        cfg.num_kv_heads = x & 8 ? hostile[byte(&r) & 15] : byte(&r) % 9;
    if (x & 16) {
        cfg.rope = true;
        cfg.rope_theta = thetas[byte(&r) & 7];
    }
    cfg.alibi = x & 32;
    if (x & 64)
        cfg.window = windows[byte(&r) & 7];

    mha_limits lim;
    mha_limits_default(&lim);
    unsigned l = byte(&r);
    static const int64_t max_dims[4] = {16, 1 << 12, 1 << 20, INT64_MAX};
    static const int64_t max_el[4] = {1, 64, 4096, CAP};
    static const int64_t max_ws[4] = {64, 1 << 12, 1 << 20, INT64_C(1) << 31};
    lim.max_dim = max_dims[l & 3];
    lim.max_elements = max_el[(l >> 2) & 3];
    lim.max_workspace_bytes = max_ws[(l >> 4) & 3];

    mha_error err;
    mha_layer *layer = mha_layer_create(&cfg, &lim, &err);
    if (!layer)
        return 0;
    if (mha_layer_init(layer, "xavier_uniform", f, &err) != MHA_OK)
        FAIL("init: %s", err.message);
    const mha_config *c = mha_layer_config(layer);
    const int64_t Kd = c->kdim, Vd = c->vdim;

    int64_t N = 1 + byte(&r) % 4, L = 1 + byte(&r) % 8, S0 = 1 + byte(&r) % 8;
    unsigned g = byte(&r);
    mha_inputs in = {0};
    in.need_weights = g & 1;
    in.average_attn_weights = !(g & 2);
    in.is_causal = g & 4;
    bool with_key = g & 8, with_value = g & 16, with_kpm = g & 32, with_am = g & 64;
    bool bool_masks = g & 128;
    unsigned h = byte(&r);
    bool use_pool = h & 1, trace_all = h & 2, am3 = h & 4;

    /* query / key / value */
    int nd = batched ? 3 : 2;
    if (h & 8) /* a wrong rank now and then */
        nd = (int)(byte(&r) % 6);
    int nd_eff = nd < 0 ? 0 : nd > 4 ? 4 : nd;
    mha_tensor *t[3] = {&in.query, &in.key, &in.value};
    int64_t seq[3] = {L, with_key ? S0 : L, S0};
    int64_t feat[3] = {E, Kd, Vd};
    if (!with_key)
        seq[2] = L;
    float *buf[3] = {0};
    for (int i = 0; i < 3; i++) {
        if ((i == 1 && !with_key) || (i == 2 && !with_value))
            continue;
        t[i]->ndim = nd;
        int64_t want[3];
        if (nd == 3) {
            want[0] = cfg.batch_first ? N : seq[i];
            want[1] = cfg.batch_first ? seq[i] : N;
            want[2] = feat[i];
        } else {
            want[0] = seq[i];
            want[1] = feat[i];
            want[2] = 1;
        }
        for (int d = 0; d < nd_eff; d++)
            t[i]->shape[d] = dim(&r, d < 3 ? want[d] : 1);
        buf[i] = fill(&r, nd_eff, t[i]->shape, false);
        t[i]->data = buf[i];
    }
    if (!with_key)
        S0 = L;
    int64_t Nq = batched ? N : 1;

    /* masks */
    void *mbuf[2] = {0};
    if (with_kpm) {
        mha_mask *m = &in.key_padding_mask;
        m->type = bool_masks ? MHA_MASK_BOOL : MHA_MASK_FLOAT;
        m->ndim = batched ? 2 : 1;
        int64_t want[2] = {batched ? Nq : S0, S0};
        for (int d = 0; d < m->ndim; d++)
            m->shape[d] = dim(&r, want[d]);
        mbuf[0] = bool_masks ? (void *)fill_bool(&r, m->ndim, m->shape)
                             : (void *)fill(&r, m->ndim, m->shape, true);
        m->data = mbuf[0];
    }
    if (with_am) {
        mha_mask *m = &in.attn_mask;
        m->type = bool_masks ? MHA_MASK_BOOL : MHA_MASK_FLOAT;
        m->ndim = am3 ? 3 : 2;
        int64_t want[3] = {Nq * c->num_heads, L, S0};
        for (int d = 0; d < m->ndim; d++)
            m->shape[d] = dim(&r, am3 ? want[d] : want[d + 1]);
        mbuf[1] = bool_masks ? (void *)fill_bool(&r, m->ndim, m->shape)
                             : (void *)fill(&r, m->ndim, m->shape, true);
        m->data = mbuf[1];
    }

    /* positions: the consistent shape or a hostile one; values from the stream, out of range
     * (negative, past 2^24) now and then */
    int64_t *pbuf[2] = {0};
    for (int k = 0; k < 2; k++) {
        if (!(h & (16 << k)))
            continue;
        mha_positions *p = k ? &in.key_positions : &in.positions;
        const int64_t len = k ? S0 : L;
        p->ndim = byte(&r) & 1 ? 2 : 1;
        if (p->ndim == 2)
            p->shape[0] = dim(&r, Nq);
        p->shape[p->ndim - 1] = dim(&r, len);
        int64_t n = product(p->ndim, p->shape);
        n = n <= 0 ? 1 : n;
        pbuf[k] = malloc((size_t)n * sizeof(int64_t));
        for (int64_t i = 0; i < n; i++) {
            unsigned b = byte(&r);
            pbuf[k][i] = b == 0xFF ? -1 : b == 0xFE ? MHA_MAX_POSITION : b == 0xFD ? INT64_MAX : b;
        }
        p->data = pbuf[k];
    }

    mha_plan plan;
    mha_status st = mha_plan_forward(layer, &in, &lim, &plan, &err);
    if (st == MHA_OK) {
        if (product(plan.out_ndim, plan.out_shape) != plan.out_count || plan.out_count <= 0 ||
            plan.out_count > lim.max_elements)
            FAIL("out_count %lld", (long long)plan.out_count);
        if (in.need_weights &&
            (product(plan.weights_ndim, plan.weights_shape) != plan.weights_count ||
             plan.weights_count <= 0 || plan.weights_count > lim.max_elements))
            FAIL("weights_count %lld", (long long)plan.weights_count);
        if ((int64_t)plan.workspace_bytes > lim.max_workspace_bytes)
            FAIL("workspace %zu over the limit %lld", plan.workspace_bytes,
                 (long long)lim.max_workspace_bytes);
        if (plan.workspace_bytes <= (1 << 22) && plan.flops < 2e7) {
            float *out = malloc((size_t)plan.out_count * sizeof *out);
            float *w = in.need_weights ? malloc((size_t)plan.weights_count * sizeof *w) : NULL;
            mha_trace tr = {0};
            if (trace_all)
                for (int s = 0; s < MHA_TRACE_NSTAGES; s++) {
                    int64_t shape[4], cnt;
                    mha_trace_stage_shape(&plan, (mha_trace_stage)s, shape, &cnt);
                    tr.stage[s] = malloc((size_t)cnt * sizeof(float));
                }
            st = mha_forward(layer, &in, &plan, out, w, trace_all ? &tr : NULL,
                             use_pool ? shared_pool() : NULL, &err);
            /* the pool's further threads each take one more score block than the plan counts
             * (mha_forward.c), so a plan right at the workspace limit may still be refused */
            if (st == MHA_ERR_LIMIT && use_pool)
                goto done;
            /* a trace's weights without need_weights add one thread's slab that the plan did not
             * count (mha.h: plan with need_weights to have it counted, as the daemon does) */
            if (st == MHA_ERR_LIMIT && trace_all && !in.need_weights)
                goto done;
            if (st != MHA_OK)
                FAIL("forward failed after a good plan: %s", err.message);
            for (int64_t i = 0; i < plan.out_count; i++)
                if (!isfinite(out[i]))
                    FAIL("output[%lld] = %g", (long long)i, out[i]);
            if (w) {
                int64_t S = plan.S, rows = plan.weights_count / S;
                for (int64_t i = 0; i < rows; i++) {
                    double sum = 0;
                    for (int64_t j = 0; j < S; j++) {
                        float wv = w[i * S + j];
                        if (!(wv >= 0 && wv <= 1.0f + 1e-6f))
                            FAIL("weight row %lld col %lld = %g", (long long)i, (long long)j, wv);
                        sum += wv;
                    }
                    /* averaged rows mix heads: a row whose heads are all masked sums to 0, one
                     * where only some are sums to a multiple of 1/H */
                    double H_ = in.average_attn_weights ? (double)plan.H : 1.0;
                    double k = sum * H_;
                    if (fabs(k - nearbyint(k)) > 1e-3 * H_ || sum > 1 + 1e-4)
                        FAIL("weights row %lld sums to %g", (long long)i, sum);
                }
            }
            for (int s = 0; s < MHA_TRACE_NSTAGES; s++) {
                if (!tr.stage[s])
                    continue;
                int64_t shape[4], cnt;
                mha_trace_stage_shape(&plan, (mha_trace_stage)s, shape, &cnt);
                for (int64_t i = 0; i < cnt; i++)
                    if (!isfinite(tr.stage[s][i]) &&
                        !(s == MHA_TRACE_SCORES && tr.stage[s][i] == -INFINITY))
                        FAIL("trace %s[%lld] = %g", mha_trace_stage_name((mha_trace_stage)s),
                             (long long)i, tr.stage[s][i]);
            }
        done:
            for (int s = 0; s < MHA_TRACE_NSTAGES; s++)
                free(tr.stage[s]);
            free(out);
            free(w);
        }
    } else if (st != MHA_ERR_SHAPE && st != MHA_ERR_LIMIT && st != MHA_ERR_VALUE) {
        FAIL("plan: unexpected status %s: %s", mha_status_name(st), err.message);
    }
    for (int i = 0; i < 3; i++)
        free(buf[i]);
    free(mbuf[0]);
    free(mbuf[1]);
    free(pbuf[0]);
    free(pbuf[1]);
    mha_layer_free(layer);
    return 0;
}
