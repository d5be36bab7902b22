/*
 * test_engine_kernels.c - the attention core and projections (lib/mha_attention.c, mha_proj.c) on
 * every kernel path this CPU has, against the naive double-accumulating reference
 * (tests/support/mha_ref.c), on shapes that hit every edge of the blocking: head_dim 8 to 256 and
 * off a multiple of 16, S = 1, L and S off the 64-row and 256-key blocks, appended keys (bias_kv,
 * zero_attn) on a block boundary, GQA, windows, causal, masks, weights per head and averaged, both
 * layouts. Paths: ATTND_ISA generic (cblas), avx2 and avx512, each with the JIT kernels and with
 * the hand kernels only (ATTND_JIT=0); a path the CPU lacks is reported as SKIP.
 *
 * And what must hold bit for bit: the output with and without weights (per head and averaged),
 * on one thread and on two; the output and weights with the JIT kernels and with the hand kernels
 * (head_dim a multiple of 16) over many lengths, two threads passing at once; then the row
 * division/scaling/summing against scalar arithmetic.
 */
#include "check.h"
#include "mha_core.h"
#include "mha_ref.h"

#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static uint64_t seed = 12345; /* the main thread's generator */

/* A value in [-1, 1) from generator *state. */
static float rnd_from(uint64_t *state)
{
    *state = *state * 6364136223846793005ull + 1442695040888963407ull;
    return (float)((double)(*state >> 40) / (double)(1 << 24) * 2.0 - 1.0);
}

static float rnd(void)
{
    return rnd_from(&seed);
}

static float *rnd_array_from(uint64_t *state, int64_t n)
{
    float *x = aligned_alloc(64, (size_t)((n + 15) / 16 * 16) * sizeof(float));
    for (int64_t i = 0; i < n; i++)
        x[i] = rnd_from(state);
    return x;
}

static float *rnd_array(int64_t n)
{
    return rnd_array_from(&seed, n);
}

/* The row operations of lib/mha_rows.c (divide, scale, scaled add, scaled streaming copy, into
 * place or another buffer), each instruction set this CPU has: the scalar IEEE result bit for bit
 * (products rounded before sums), nothing past n touched. */
static void test_row_ops(int64_t rows, int64_t n)
{
    static const char *const isa_name[MHA_ISA_COUNT] = {"portable", "AVX2", "AVX-512"};
    const int64_t rs = n + 9;
    float *x0 = rnd_array(rows * rs), *mul = rnd_array(rows);
    float *x = malloc((size_t)(rows * rs) * sizeof(float));
    float *d0 = rnd_array(rows * rs), *d = malloc((size_t)(rows * rs) * sizeof(float));
    const float div = sqrtf(48.0f);
    for (int isa = 0; isa < MHA_ISA_COUNT; isa++) {
        for (int op = 0; op < 3; op++) { /* divide, multiply, multiply by 1 (mul NULL) */
            memcpy(x, x0, (size_t)(rows * rs) * sizeof(float));
            if (!mha_div_mul_rows_isa((mha_isa)isa, x, rs, rows, n, op ? 0.0f : div,
                                      op == 1 ? mul : NULL))
                continue; /* not on this CPU */
            bool ok = true;
            for (int64_t i = 0; i < rows * rs; i++)
                ok &= x[i] == (i % rs >= n || op == 2 ? x0[i]
                               : op                   ? x0[i] * mul[i / rs]
                                                      : x0[i] / div);
            CHECK(ok, "%s rows=%lld n=%lld (%s): exact, columns past n untouched",
                  op == 2 ? "mul_rows by 1" : op ? "mul_rows" : "div_rows", (long long)rows,
                  (long long)n, isa_name[isa]);
        }
        for (int add = 0; add < 2; add++) {
            memcpy(d, d0, (size_t)(rows * rs) * sizeof(float));
            if (!mha_scaled_add_rows_isa((mha_isa)isa, d, rs, x0, rs, rows, n, mul, add))
                continue;
            bool ok = true;
            for (int64_t i = 0; i < rows * rs; i++) {
                const float p = x0[i] * mul[i / rs];
                ok &= d[i] == (i % rs >= n ? d0[i] : add ? d0[i] + p : p);
            }
            CHECK(ok, "scaled_add_rows rows=%lld n=%lld add=%d (%s): exact, columns past n "
                  "untouched", (long long)rows, (long long)n, add, isa_name[isa]);
        }
        if (!mha_isa_usable((mha_isa)isa))
            continue;
        for (int off = 0; off < 2; off++) { /* the weights' streaming copy; aligned or not */
            float *mem = aligned_alloc(64, (size_t)((rows * rs + 31) / 16 * 16) * sizeof(float));
            float *w = mem + off * 3;
            memcpy(w, d0, (size_t)(rows * rs) * sizeof(float));
            mha_scale_rows_stream_isa((mha_isa)isa, w, rs, x0, rs, rows, n, mul);
            mha_copy_stream_fence();
            bool ok = true;
            for (int64_t i = 0; i < rows * rs; i++)
                ok &= w[i] == (i % rs >= n ? d0[i] : x0[i] * mul[i / rs]);
            CHECK(ok, "scale_rows_stream rows=%lld n=%lld (%s, %s): exact, nothing past n",
                  (long long)rows, (long long)n, isa_name[isa], off ? "unaligned" : "aligned");
            free(mem);
        }
        memcpy(x, d0, (size_t)(rows * rs) * sizeof(float)); /* into another buffer */
        mha_div_mul_rows_to_isa((mha_isa)isa, x, rs, x0, rs, rows, n, div, NULL);
        bool ok = true;
        for (int64_t i = 0; i < rows * rs; i++)
            ok &= x[i] == (i % rs >= n ? d0[i] : x0[i] / div);
        CHECK(ok, "div_rows into another buffer rows=%lld n=%lld (%s): exact", (long long)rows,
              (long long)n, isa_name[isa]);
    }
    free(x0);
    free(x);
    free(d0);
    free(d);
    free(mul);
}

/* ---------------------------------------------------------------------------------------------- */
/* Whole passes                                                                                   */

/* count floats of NaN: anything the pass does not write shows up as a mismatch. */
static float *nan_floats(int64_t count)
{
    float *x = malloc((size_t)(count > 0 ? count : 1) * sizeof(float));
    for (int64_t i = 0; i < count; i++)
        x[i] = NAN;
    return x;
}

/* A bool or float mask of shape (ndim, shape), entries masked with probability pct/100. */
static void *make_mask(mha_mask *m, int ndim, const int64_t *shape, bool as_bool, int pct)
{
    int64_t n = 1;
    m->ndim = ndim;
    for (int d = 0; d < ndim; d++)
        n *= m->shape[d] = shape[d];
    m->type = as_bool ? MHA_MASK_BOOL : MHA_MASK_FLOAT;
    void *data = malloc((size_t)n * (as_bool ? 1 : sizeof(float)));
    for (int64_t i = 0; i < n; i++) {
        const bool hit = (rnd() + 1.0f) * 50.0f < (float)pct;
        if (as_bool)
            ((uint8_t *)data)[i] = hit;
        else
            ((float *)data)[i] = hit ? -INFINITY : rnd();
    }
    m->data = data;
    return data;
}

typedef struct shape {
    int64_t E, H, hd, Hkv, N, L, S0;
    int64_t window;
} shape;

typedef struct path {
    const char *isa; /* ATTND_ISA */
    bool jit;
} path;

static void set_path(const path *p)
{
    setenv("ATTND_ISA", p->isa, 1);
    if (p->jit)
        unsetenv("ATTND_JIT");
    else
        setenv("ATTND_JIT", "0", 1);
}

static void clear_path(void)
{
    unsetenv("ATTND_ISA");
    unsetenv("ATTND_JIT");
}

static const char *const isa_names[MHA_ISA_COUNT] = {"generic", "avx2", "avx512"};

/* Shape x in option variant v (0..7): the reference once, then the engine on every path this CPU
 * has (JIT and hand kernels), on pool (NULL: the caller's thread). */
static void run_passes(const shape *x, int v, mha_pool *pool)
{
    mha_config cfg;
    mha_config_init(&cfg, x->E, x->H);
    cfg.head_dim = x->hd;
    cfg.num_kv_heads = x->Hkv;
    cfg.window = x->window;
    cfg.batch_first = v % 2;
    cfg.add_bias_kv = v == 2 || v == 5 || v == 7;
    cfg.add_zero_attn = v == 3 || v == 5 || v == 6;
    cfg.alibi = v == 4;
    mha_error err;
    mha_layer *layer = mha_layer_create(&cfg, NULL, &err);
    if (!CHECK(layer, "layer: %s", err.message))
        return;
    mha_layer_init(layer, "xavier_uniform", (uint64_t)(v + 1), &err);
    for (int i = 0; i < mha_layer_param_count(layer); i++) { /* biases random too */
        const mha_param_info *pi = mha_layer_param_info(layer, i);
        if (pi->ndim != 2) {
            float *r = rnd_array(pi->count);
            mha_layer_set_param(layer, pi->name, r, pi->ndim, pi->shape, &err);
            free(r);
        }
    }
    const int64_t N = x->N, L = x->L, S0 = x->S0, E = x->E, H = x->H;
    const bool self = L == S0 && v < 4;
    float *q = rnd_array(N * L * E), *k = self ? NULL : rnd_array(N * S0 * E);
    mha_inputs in = {0};
    in.query = cfg.batch_first ? (mha_tensor){q, 3, {N, L, E}} : (mha_tensor){q, 3, {L, N, E}};
    if (!self)
        in.key = cfg.batch_first ? (mha_tensor){k, 3, {N, S0, E}} : (mha_tensor){k, 3, {S0, N, E}};
    void *am = NULL, *kpm = NULL;
    if (v == 1 || v == 4 || v == 7) /* float [L,S0], bool [N·H,L,S0] */
        am = v == 4 ? make_mask(&in.attn_mask, 3, (int64_t[]){N * H, L, S0}, true, 20)
                    : make_mask(&in.attn_mask, 2, (int64_t[]){L, S0}, false, 20);
    if (v == 2 || v == 4 || v == 6)
        kpm = make_mask(&in.key_padding_mask, 2, (int64_t[]){N, S0}, v != 6, 15);
    in.is_causal = v == 3 || v == 6 || v == 7;
    in.need_weights = v >= 2;
    in.average_attn_weights = v % 3 == 0;
    mha_plan plan;
    if (!CHECK(mha_plan_forward(layer, &in, NULL, &plan, &err) == MHA_OK, "plan: %s", err.message))
        goto done;
    float *ref = nan_floats(plan.out_count);
    float *ref_w = in.need_weights ? nan_floats(plan.weights_count) : NULL;
    ref_mha_forward(layer, &in, ref, ref_w, NULL);
    for (int isa = 0; isa < MHA_ISA_COUNT; isa++) {
        if (!mha_isa_usable((mha_isa)isa))
            continue;
        for (int jit = isa == 0 ? 0 : 1; jit >= 0; jit--) {
            const path p = {isa_names[isa], jit};
            char what[200];
            snprintf(what, sizeof what,
                     "E=%lld H=%lld hd=%lld Hkv=%lld N=%lld L=%lld S0=%lld window=%lld variant %d, "
                     "%s%s, %s",
                     (long long)E, (long long)H, (long long)x->hd, (long long)x->Hkv, (long long)N,
                     (long long)L, (long long)S0, (long long)x->window, v, p.isa,
                     p.jit ? "" : " hand kernels", pool ? "pool" : "no pool");
            set_path(&p);
            mha_status st = mha_plan_forward(layer, &in, NULL, &plan, &err);
            clear_path();
            if (!CHECK(st == MHA_OK, "plan %s: %s", what, err.message))
                continue;
            float *out = nan_floats(plan.out_count);
            float *w = in.need_weights ? nan_floats(plan.weights_count) : NULL;
            CHECK(mha_forward(layer, &in, &plan, out, w, NULL, pool, &err) == MHA_OK,
                  "forward %s: %s", what, err.message);
            char name[260];
            snprintf(name, sizeof name, "output of %s", what);
            check_close_array(__FILE__, __LINE__, name, out, ref, plan.out_count, NULL);
            if (w) {
                snprintf(name, sizeof name, "weights of %s", what);
                check_close_array(__FILE__, __LINE__, name, w, ref_w, plan.weights_count, NULL);
            }
            free(out);
            free(w);
        }
    }
    free(ref);
    free(ref_w);
done:
    free(q);
    free(k);
    free(am);
    free(kpm);
    mha_layer_free(layer);
}

static void test_passes(void)
{
    mha_pool *pool = mha_pool_create(2, NULL);
    /* E, H, hd, Hkv, N, L, S0, window: head sizes 8 to 256 (off a multiple of 16: 24, 40, 72,
     * 100), S = 1, L and S around the 64-row and 256-key blocks (the appended keys at 255 and 256
     * span two blocks), GQA and multi-query, windows skipping blocks. */
    static const shape shapes[] = {
        {64, 8, 8, 0, 3, 17, 17, 0},       {96, 4, 24, 2, 2, 65, 65, 0},
        {80, 2, 40, 0, 1, 64, 300, 0},     {144, 2, 72, 1, 2, 70, 257, 0},
        {200, 2, 100, 0, 1, 129, 255, 0},  {64, 1, 256, 0, 1, 66, 129, 0},
        {128, 4, 32, 4, 2, 1, 1, 0},       {64, 4, 16, 2, 3, 5, 1, 0},
        {128, 2, 64, 1, 1, 300, 600, 100}, {64, 4, 16, 0, 1, 200, 200, 40},
        {192, 4, 48, 2, 2, 64, 256, 0},    {256, 2, 128, 0, 1, 128, 513, 0},
    };
    for (int isa = 0; isa < MHA_ISA_COUNT; isa++)
        if (!mha_isa_usable((mha_isa)isa))
            printf("SKIP passes on %s: this CPU lacks it\n", isa_names[isa]);
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++)
        for (int v = 0; v < 8; v++)
            run_passes(&shapes[s], v, (v + s) % 3 ? pool : NULL);
    mha_pool_free(pool);
}

/* The output of one pass, bit for bit, whatever else it is asked: per-head weights, averaged
 * weights, none; one thread or two. On every path. */
static void test_bits(void)
{
    mha_pool *pool = mha_pool_create(2, NULL);
    mha_config cfg;
    mha_config_init(&cfg, 256, 4);
    cfg.num_kv_heads = 2;
    mha_error err;
    mha_layer *layer = mha_layer_create(&cfg, NULL, &err);
    mha_layer_init(layer, "xavier_uniform", 9, &err);
    const int64_t N = 2, L = 300, E = 256;
    float *q = rnd_array(N * L * E);
    for (int isa = 0; isa < MHA_ISA_COUNT; isa++) {
        if (!mha_isa_usable((mha_isa)isa))
            continue;
        const path p = {isa_names[isa], true};
        float *outs[4] = {0}, *w = NULL;
        mha_plan plan;
        for (int run = 0; run < 4; run++) { /* nw0 2 threads, per head, averaged, nw0 1 thread */
            mha_inputs in = {0};
            in.query = (mha_tensor){q, 3, {N, L, E}};
            in.is_causal = true;
            in.need_weights = run == 1 || run == 2;
            in.average_attn_weights = run == 2;
            set_path(&p);
            mha_plan_forward(layer, &in, NULL, &plan, &err);
            clear_path();
            outs[run] = nan_floats(plan.out_count);
            free(w);
            w = in.need_weights ? nan_floats(plan.weights_count) : NULL;
            mha_forward(layer, &in, &plan, outs[run], w, NULL, run == 3 ? NULL : pool, &err);
        }
        bool same = true;
        for (int run = 1; run < 4; run++)
            same &= !memcmp(outs[0], outs[run], (size_t)plan.out_count * sizeof(float));
        CHECK(same, "%s: the output has the same bits with per-head, averaged and no weights, "
                    "on 1 and 2 threads", isa_names[isa]);
        for (int run = 0; run < 4; run++)
            free(outs[run]);
        free(w);
    }
    free(q);
    mha_layer_free(layer);
    mha_pool_free(pool);
}

/* rnd() scaled by 2^-4 .. 2^4: sums in another order round differently in most outputs. */
static void wide_values(float *x, int64_t n)
{
    for (int64_t i = 0; i < n; i++)
        x[i] = ldexpf(rnd(), (int)((rnd() + 1.0f) * 4.5f) - 4);
}

/* The edge tiles' JIT code (lib/mha_edge_kernels.c): whatever (m, n) a pass asks for, a kernel
 * it hands out gives the hand kernel's bits on operands of its own; AVX-512 code that does not
 * (one vector of columns, few rows) is not handed out. */
static void test_edge_kernels(void)
{
    mha_config cfg;
    mha_config_init(&cfg, 128, 4); /* hd 32: P·V has JIT code on both ISAs */
    mha_error err;
    for (int isa = MHA_ISA_AVX2; isa < MHA_ISA_COUNT; isa++) {
        mha_layer *layer = mha_layer_create(&cfg, NULL, &err);
        const mha_kernel_set *ks = mha_layer_kernel_set(layer, (mha_isa)isa, true);
        if (!mha_isa_usable((mha_isa)isa) || !ks || !ks->scores.jit) {
            printf("SKIP edge kernels on %s: no JIT code here\n", isa_names[isa]);
            mha_layer_free(layer);
            continue;
        }
        int handed = 0, bad = 0, refused = 0;
        static const int64_t ms[] = {1, 2, 5, 8, 13, 32, 63, 64};
        static const int64_t ns[] = {1, 7, 16, 32, 100, 128};
        for (size_t a = 0; a < sizeof ms / sizeof ms[0]; a++)
            for (size_t b = 0; b < sizeof ns / sizeof ns[0]; b++) { /* 48 shapes: over the cap */
                if (a * (sizeof ns / sizeof ns[0]) + b == 30) { /* a fresh layer: under it */
                    mha_layer_free(layer);
                    layer = mha_layer_create(&cfg, NULL, &err);
                    ks = mha_layer_kernel_set(layer, (mha_isa)isa, true);
                }
                const mha_mm *sc, *pv;
                mha_kernel_set_edge(ks, ms[a], ns[b], &sc, &pv);
                const mha_mm *both[2] = {sc, pv};
                for (int k = 0; k < 2; k++) {
                    const mha_mm *mm = both[k];
                    refused += !mm;
                    if (!mm)
                        continue;
                    const mha_mm_shape *sh = &mm->s;
                    const int64_t nx = sh->rows * sh->ldx, nw = sh->depth * sh->ldw;
                    const int64_t nc = sh->rows * sh->ldc, outs = sh->rows * sh->cols;
                    float *x = malloc((size_t)nx * sizeof(float));
                    float *w = malloc((size_t)nw * sizeof(float));
                    float *c1 = malloc((size_t)nc * sizeof(float));
                    float *c2 = malloc((size_t)nc * sizeof(float));
                    bool same = true;
                    for (int64_t round = 0; round * outs < 8192 && same; round++) {
                        wide_values(x, nx);
                        wide_values(w, nw);
                        wide_values(c1, nc);
                        memcpy(c2, c1, (size_t)nc * sizeof(float));
                        mha_mm_run(mm, c1, x, w);
                        mha_gemm_isa(mm->isa, c2, sh->ldc, x, sh->ldx, w, sh->ldw, sh->rows,
                                     sh->cols, sh->depth, sh->acc);
                        same = !memcmp(c1, c2, (size_t)nc * sizeof(float));
                    }
                    if (!same)
                        printf("  %s edge kernel %lld x %lld x %lld%s: not the hand kernel's bits\n",
                               isa_names[isa], (long long)sh->rows, (long long)sh->cols,
                               (long long)sh->depth, sh->acc ? " (accumulating)" : "");
                    handed++;
                    bad += !same;
                    free(x);
                    free(w);
                    free(c1);
                    free(c2);
                }
            }
        printf("%s: %d edge kernels of JIT code, %d on the hand kernel (their JIT code sums in "
               "another order)\n", isa_names[isa], handed, refused);
        CHECK(handed > 0 && bad == 0,
              "%s: %d of %d edge kernels handed out give the hand kernel's bits", isa_names[isa],
              handed - bad, handed);
        mha_layer_free(layer);
    }
}

/* One layer's passes of many lengths (more edge shapes than a kernel set keeps), on its JIT kernel
 * set and on its hand kernels: the same output, bit for bit, with weights and without, and two
 * threads passing at once (each its own lengths, both making edge kernels). head_dim a multiple
 * of 16: the full tiles' JIT code gives the hand kernel's bits there too. */
typedef struct edge_run {
    mha_layer *layer;
    int first, step; /* lengths L = first, first + step, ... */
    int bad, runs;
} edge_run;

enum { EDGE_LENGTHS = 24 };

static void *edge_passes(void *arg)
{
    edge_run *r = arg;
    const int64_t E = mha_layer_config(r->layer)->embed_dim;
    uint64_t state = (uint64_t)r->first * 7919u; /* its own: rnd()'s is the main thread's */
    for (int i = 0; i < EDGE_LENGTHS; i++) {
        const int64_t L = r->first + i * r->step, S0 = L + 37 * (i % 3);
        float *q = rnd_array_from(&state, L * E), *k = rnd_array_from(&state, S0 * E);
        float *out[2] = {NULL, NULL}, *w[2] = {NULL, NULL};
        mha_plan plan;
        mha_error err;
        for (int jit = 0; jit < 2; jit++) {
            mha_inputs in = {0};
            in.query = (mha_tensor){q, 3, {1, L, E}};
            in.key = (mha_tensor){k, 3, {1, S0, E}};
            in.need_weights = i % 2;
            in.is_causal = i % 4 == 3;
            mha_plan_forward(r->layer, &in, NULL, &plan, &err); /* ATTND_ISA set before */
            plan.jit = jit; /* not ATTND_JIT: the other thread plans meanwhile */
            out[jit] = nan_floats(plan.out_count);
            w[jit] = in.need_weights ? nan_floats(plan.weights_count) : NULL;
            mha_forward(r->layer, &in, &plan, out[jit], w[jit], NULL, NULL, &err);
        }
        r->runs++;
        r->bad += memcmp(out[0], out[1], (size_t)plan.out_count * sizeof(float)) != 0 ||
                  (w[0] && memcmp(w[0], w[1], (size_t)plan.weights_count * sizeof(float)));
        for (int j = 0; j < 2; j++) {
            free(out[j]);
            free(w[j]);
        }
        free(q);
        free(k);
    }
    return NULL;
}

static void test_edge_passes(void)
{
    static const int64_t shapes[][2] = {{64, 4}, {256, 4}}; /* E, H: head_dim 16 and 64 */
    for (int isa = MHA_ISA_AVX2; isa < MHA_ISA_COUNT; isa++) {
        if (!mha_isa_usable((mha_isa)isa))
            continue;
        for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
            mha_config cfg;
            mha_config_init(&cfg, shapes[s][0], shapes[s][1]);
            mha_error err;
            mha_layer *layer = mha_layer_create(&cfg, NULL, &err);
            mha_layer_init(layer, "xavier_uniform", 5, &err);
            edge_run runs[2] = {{layer, 1, 11, 0, 0}, {layer, 3, 13, 0, 0}};
            const path p = {isa_names[isa], true};
            set_path(&p);
            pthread_t other;
            const bool two = pthread_create(&other, NULL, edge_passes, &runs[1]) == 0;
            edge_passes(&runs[0]);
            if (two)
                pthread_join(other, NULL);
            else
                edge_passes(&runs[1]);
            CHECK(runs[0].bad + runs[1].bad == 0 && runs[0].runs + runs[1].runs == 2 * EDGE_LENGTHS,
                  "%s, E=%lld H=%lld: %d passes of %d lengths on two threads, JIT and hand "
                  "kernels give the same bits (%d differ)",
                  isa_names[isa], (long long)shapes[s][0], (long long)shapes[s][1],
                  runs[0].runs + runs[1].runs, 2 * EDGE_LENGTHS, runs[0].bad + runs[1].bad);
            mha_layer_free(layer);
        }
    }
    clear_path();
}

int main(void)
{
    mha_blas_set_threads(1); /* the engine's pool runs the generic path's cblas calls */
    const int64_t rows[][2] = {{1, 1}, {3, 15}, {2, 16}, {33, 16}, {5, 17}, {8, 64}, {2, 771}};
    for (size_t i = 0; i < sizeof rows / sizeof rows[0]; i++)
        test_row_ops(rows[i][0], rows[i][1]);
    test_passes();
    test_bits();
    test_edge_kernels();
    test_edge_passes();
    return check_report();
}
