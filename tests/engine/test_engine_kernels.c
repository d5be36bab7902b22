/*
 * test_engine_kernels.c - the AVX-512 GEMM kernels (lib/mha_attn_avx512.c) against a plain double
 * reference, on shapes off every tile and block size (rows, 16-key panels, 256-key chunks,
 * 64-column groups, the projection GEMM's 256 x 256 x 48 blocks), the key packing against its
 * layout, and the row division/scaling/summing against scalar arithmetic. Which kernels a forward
 * pass uses depends on the CPU and on OpenBLAS's core, so these are checked here whatever the pass
 * picks.
 * Skipped (with a note) on a CPU without AVX-512F.
 *
 * Then whole passes on both sides of mha_kpack_in_task (keys packed by each attention task when a
 * batch's rows are all in one task, else by a pass before), against the naive reference
 * (tests/support/mha_ref.c): short sequences with large batches, masks, appended keys, causal,
 * weights per head and averaged, both layouts.
 */
#include "check.h"
#include "mha_forward_internal.h"
#include "mha_ref.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static uint64_t seed = 12345;

static float rnd(void)
{
    seed = seed * 6364136223846793005ull + 1442695040888963407ull;
    return (float)((double)(seed >> 40) / (double)(1 << 24) * 2.0 - 1.0);
}

static float *rnd_array(int64_t n)
{
    float *x = aligned_alloc(64, (size_t)((n + 15) / 16 * 16) * sizeof(float));
    for (int64_t i = 0; i < n; i++)
        x[i] = rnd();
    return x;
}

/* |got - want| within 1e-5 of the sum of |terms| (float rounding of a dot product). */
static bool close_to(float got, double want, double magnitude)
{
    return fabs(got - want) <= 1e-5 * magnitude + 1e-6;
}

/* C[M,Nc] (ldc) = bias + A[M,K] (lda) · W[Nc,K]ᵀ (bias NULL: 0), C's padding columns untouched. */
static void test_gemm(int64_t M, int64_t Nc, int64_t K, bool with_bias)
{
    const int64_t lda = K + 3, ldc = Nc + 5;
    float *A = rnd_array(M * lda), *W = rnd_array(Nc * K), *C = rnd_array(M * ldc);
    float *bias = with_bias ? rnd_array(Nc) : NULL;
    float *C0 = malloc((size_t)(M * ldc) * sizeof(float));
    memcpy(C0, C, (size_t)(M * ldc) * sizeof(float));
    float *pack = aligned_alloc(64, (size_t)mha_gemm_pack_floats(Nc, K) * sizeof(float));
    mha_gemm_avx512(C, ldc, bias, A, lda, W, M, Nc, K, pack);
    bool ok = true, untouched = true;
    for (int64_t i = 0; i < M; i++) {
        for (int64_t j = 0; j < ldc; j++) {
            if (j >= Nc) {
                untouched &= C[i * ldc + j] == C0[i * ldc + j];
                continue;
            }
            double want = bias ? bias[j] : 0.0, mag = fabs(want);
            for (int64_t k = 0; k < K; k++) {
                want += (double)A[i * lda + k] * W[j * K + k];
                mag += fabs((double)A[i * lda + k] * W[j * K + k]);
            }
            ok &= close_to(C[i * ldc + j], want, mag);
        }
    }
    CHECK(ok, "gemm M=%lld Nc=%lld K=%lld: C = %sA·Wᵀ", (long long)M, (long long)Nc, (long long)K,
          bias ? "bias + " : "");
    CHECK(untouched, "gemm M=%lld Nc=%lld K=%lld writes no column past Nc", (long long)M,
          (long long)Nc, (long long)K);
    free(A);
    free(W);
    free(C);
    free(C0);
    free(bias);
    free(pack);
}

/* mha_pack_keys writes panels of 16 keys, each [hd][16], keys past kn zero: checked exactly. */
static void test_pack(int64_t kn, int64_t hd)
{
    const int64_t k_rs = 3 * hd + 5, nf = mha_packed_keys_floats(kn, hd);
    float *k = rnd_array(kn * k_rs), *kp = aligned_alloc(64, (size_t)nf * sizeof(float));
    for (int64_t i = 0; i < nf; i++)
        kp[i] = NAN;
    mha_pack_keys(kp, k, k_rs, kn, hd);
    bool ok = nf == (kn + 15) / 16 * 16 * hd;
    for (int64_t p = 0; p * 16 < kn; p++)
        for (int64_t d = 0; d < hd; d++)
            for (int64_t j = 0; j < 16; j++) {
                const int64_t key = p * 16 + j;
                const float want = key < kn ? k[key * k_rs + d] : 0.0f;
                ok &= kp[(p * hd + d) * 16 + j] == want; /* NaN (not written) never matches */
            }
    CHECK(ok, "pack_keys kn=%lld hd=%lld: panels [hd][16], padding keys 0", (long long)kn,
          (long long)hd);
    free(k);
    free(kp);
}

/* mha_div_rows / mha_mul_rows / mha_scaled_add_rows, each instruction set this CPU has: the scalar
 * IEEE result bit for bit (products rounded before sums), nothing past n touched. */
static void test_row_ops(int64_t rows, int64_t n)
{
    static const char *const isa_name[MHA_ISA_COUNT] = {"portable", "AVX2", "AVX-512"};
    const int64_t rs = n + 9;
    float *x0 = rnd_array(rows * rs), *mul = rnd_array(rows);
    float *x = malloc((size_t)(rows * rs) * sizeof(float));
    float *d0 = rnd_array(rows * rs), *d = malloc((size_t)(rows * rs) * sizeof(float));
    const float div = sqrtf(48.0f);
    for (int isa = 0; isa < MHA_ISA_COUNT; isa++) {
        for (int op = 0; op < 2; op++) { /* divide, multiply */
            memcpy(x, x0, (size_t)(rows * rs) * sizeof(float));
            if (!mha_div_mul_rows_isa((mha_isa)isa, x, rs, rows, n, op ? 0.0f : div, mul))
                continue; /* not on this CPU */
            bool ok = true;
            for (int64_t i = 0; i < rows * rs; i++)
                ok &= x[i] == (i % rs >= n ? x0[i] : op ? x0[i] * mul[i / rs] : x0[i] / div);
            CHECK(ok, "%s rows=%lld n=%lld (%s): exact, columns past n untouched",
                  op ? "mul_rows" : "div_rows", (long long)rows, (long long)n, isa_name[isa]);
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
    }
    free(x0);
    free(x);
    free(d0);
    free(d);
    free(mul);
}

/* scores[m,kn] = q·kᵀ through packed keys, then out[m,hd] = scores·v. */
static void test_attention(int64_t m, int64_t kn, int64_t hd)
{
    const int64_t q_rs = hd + 16, k_rs = 3 * hd, v_rs = 2 * hd + 16, ld = kn + 7, o_rs = hd + 32;
    float *q = rnd_array(m * q_rs), *k = rnd_array(kn * k_rs), *v = rnd_array(kn * v_rs);
    float *sc = rnd_array(m * ld), *out = rnd_array(m * o_rs);
    float *sc0 = malloc((size_t)(m * ld) * sizeof(float)), *out0 = malloc((size_t)(m * o_rs) * 4);
    memcpy(sc0, sc, (size_t)(m * ld) * sizeof(float));
    memcpy(out0, out, (size_t)(m * o_rs) * sizeof(float));
    float *kp = aligned_alloc(64, (size_t)mha_packed_keys_floats(kn, hd) * sizeof(float));
    mha_pack_keys(kp, k, k_rs, kn, hd);
    mha_scores_avx512(sc, ld, q, q_rs, kp, m, kn, hd);
    bool ok = true, untouched = true;
    for (int64_t i = 0; i < m; i++) {
        for (int64_t j = 0; j < ld; j++) {
            if (j >= kn) {
                untouched &= sc[i * ld + j] == sc0[i * ld + j];
                continue;
            }
            double want = 0, mag = 0;
            for (int64_t d = 0; d < hd; d++) {
                want += (double)q[i * q_rs + d] * k[j * k_rs + d];
                mag += fabs((double)q[i * q_rs + d] * k[j * k_rs + d]);
            }
            ok &= close_to(sc[i * ld + j], want, mag);
        }
    }
    CHECK(ok, "scores m=%lld kn=%lld hd=%lld", (long long)m, (long long)kn, (long long)hd);
    CHECK(untouched, "scores m=%lld kn=%lld hd=%lld write no column past kn", (long long)m,
          (long long)kn, (long long)hd);
    /* the weights too, scaled by one inverse per row, 3 floats off alignment */
    float *inv = rnd_array(m),
          *wmem = aligned_alloc(64, (size_t)((m * ld + 31) / 16 * 16) * sizeof(float));
    float *w = wmem + 3;
    for (int64_t i = 0; i < m * ld; i++)
        w[i] = -7.0f;
    mha_pv_avx512(out, o_rs, sc, ld, v, v_rs, m, kn, hd, w, ld, inv);
    mha_copy_stream_fence();
    bool wexact = true;
    for (int64_t i = 0; i < m; i++)
        for (int64_t j = 0; j < ld; j++)
            wexact &= w[i * ld + j] == (j < kn ? sc[i * ld + j] * inv[i] : -7.0f);
    CHECK(wexact, "weights·v m=%lld kn=%lld hd=%lld writes exactly P·inv to the weights",
          (long long)m, (long long)kn, (long long)hd);
    free(inv);
    free(wmem);
    if (m % 2) /* and without weights, the same output */
        mha_pv_avx512(out, o_rs, sc, ld, v, v_rs, m, kn, hd, NULL, 0, NULL);
    ok = untouched = true;
    for (int64_t i = 0; i < m; i++) {
        for (int64_t d = 0; d < o_rs; d++) {
            if (d >= hd) {
                untouched &= out[i * o_rs + d] == out0[i * o_rs + d];
                continue;
            }
            double want = 0, mag = 0;
            for (int64_t j = 0; j < kn; j++) {
                want += (double)sc[i * ld + j] * v[j * v_rs + d];
                mag += fabs((double)sc[i * ld + j] * v[j * v_rs + d]);
            }
            ok &= close_to(out[i * o_rs + d], want, mag);
        }
    }
    CHECK(ok, "weights·v m=%lld kn=%lld hd=%lld", (long long)m, (long long)kn, (long long)hd);
    CHECK(untouched, "weights·v m=%lld kn=%lld hd=%lld writes only hd columns", (long long)m,
          (long long)kn, (long long)hd);
    free(q);
    free(k);
    free(v);
    free(sc);
    free(out);
    free(sc0);
    free(out0);
    free(kp);
}

/* ---------------------------------------------------------------------------------------------- */
/* Whole passes around the in-task key packing                                                    */

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

/* One pass of (E, H, N, L, S0) in option variant v (0..7) through the engine on pool (NULL: the
 * caller's thread) and the reference; returns mha_kpack_in_task for its plan. */
static bool run_pass(int64_t E, int64_t H, int64_t N, int64_t L, int64_t S0, int v, mha_pool *pool)
{
    mha_config cfg;
    mha_config_init(&cfg, E, H);
    cfg.batch_first = v % 2;
    cfg.add_bias_kv = v == 2 || v == 5 || v == 7;
    cfg.add_zero_attn = v == 3 || v == 5 || v == 6;
    mha_error err;
    mha_layer *layer = mha_layer_create(&cfg, NULL, &err);
    mha_layer_init(layer, "xavier_uniform", (uint64_t)(v + 1), &err);
    for (int i = 0; i < mha_layer_param_count(layer); i++) { /* biases random too */
        const mha_param_info *p = mha_layer_param_info(layer, i);
        if (p->ndim != 2) {
            float *x = rnd_array(p->count);
            mha_layer_set_param(layer, p->name, x, p->ndim, p->shape, &err);
            free(x);
        }
    }
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
    bool in_task = false;
    char what[160];
    snprintf(what, sizeof what, "E=%lld H=%lld N=%lld L=%lld S0=%lld variant %d %s",
             (long long)E, (long long)H, (long long)N, (long long)L, (long long)S0, v,
             pool ? "pool" : "no pool");
    if (CHECK(mha_plan_forward(layer, &in, NULL, &plan, &err) == MHA_OK, "plan %s: %s", what,
              err.message)) {
        in_task = mha_kpack_in_task(&plan);
        float *out = nan_floats(plan.out_count), *ref = nan_floats(plan.out_count);
        float *w = in.need_weights ? nan_floats(plan.weights_count) : NULL;
        float *ref_w = in.need_weights ? nan_floats(plan.weights_count) : NULL;
        CHECK(mha_forward(layer, &in, &plan, out, w, NULL, pool, &err) == MHA_OK, "forward %s: %s",
              what, err.message);
        ref_mha_forward(layer, &in, ref, ref_w, NULL);
        char name[200];
        snprintf(name, sizeof name, "output of %s (keys packed %s)", what,
                 in_task ? "in the tasks" : "before");
        check_close_array(__FILE__, __LINE__, name, out, ref, plan.out_count, NULL);
        if (w) {
            snprintf(name, sizeof name, "weights of %s (keys packed %s)", what,
                     in_task ? "in the tasks" : "before");
            check_close_array(__FILE__, __LINE__, name, w, ref_w, plan.weights_count, NULL);
        }
        free(out);
        free(ref);
        free(w);
        free(ref_w);
    }
    free(q);
    free(k);
    free(am);
    free(kpm);
    mha_layer_free(layer);
    return in_task;
}

static void test_passes(void)
{
    mha_pool *pool = mha_pool_create(2, NULL);
    /* E, H, N, L, S0: short sequences in large batches (kn <= 16: one panel), then L around the
     * 128-row block (in the tasks up to 128 rows, before past it; N = 1 with L·S·E >= 2^20 splits
     * the rows for two threads, so packs before from 64 rows on). */
    const int64_t shapes[][5] = {{128, 2, 40, 8, 8},    {96, 2, 17, 5, 16},  {64, 4, 9, 3, 17},
                                 {128, 2, 6, 16, 33},   {64, 4, 2, 128, 128}, {64, 4, 3, 128, 128},
                                 {64, 4, 3, 129, 129},  {128, 8, 1, 64, 130}, {64, 1, 1, 63, 300},
                                 {32, 2, 2, 130, 12}};
    int seen[2] = {0, 0};
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++)
        for (int v = 0; v < 8; v++) {
            const int64_t *x = shapes[s];
            seen[run_pass(x[0], x[1], x[2], x[3], x[4], v, v % 3 ? pool : NULL)]++;
        }
    CHECK(seen[0] > 0 && seen[1] > 0, "passes on both sides: %d pack before, %d in the tasks",
          seen[0], seen[1]);
    mha_pool_free(pool);
}

int main(void)
{
    if (!mha_attn_avx512_usable(16)) {
        printf("(no AVX-512F on this CPU: the kernels are not used, nothing to test)\n");
        CHECK(!mha_attn_avx512_usable(64), "no AVX-512 kernels for any head size either");
        return check_report();
    }
    CHECK(!mha_attn_avx512_usable(24), "head sizes off a multiple of 16 take the cblas path");
    const int64_t gemm[][3] = {{1, 1, 1},      {13, 17, 5},   {12, 32, 64},  {49, 257, 300},
                               {100, 16, 513}, {37, 600, 70}, {96, 48, 256}, {5, 3, 1000},
                               {20, 40, 33},   {44, 512, 260}};
    for (size_t i = 0; i < sizeof gemm / sizeof gemm[0]; i++)
        test_gemm(gemm[i][0], gemm[i][1], gemm[i][2], i % 3 != 1);
    const int64_t attn[][3] = {{1, 1, 16},   {12, 32, 64}, {13, 17, 64},  {29, 300, 64},
                               {7, 513, 16}, {25, 40, 80}, {6, 260, 128}, {3, 5, 48}};
    for (size_t i = 0; i < sizeof attn / sizeof attn[0]; i++)
        test_attention(attn[i][0], attn[i][1], attn[i][2]);
    /* short sequences: one lone panel (kn <= 16), 8- and 12-row tiles and their remainders */
    const int64_t short_attn[][3] = {{8, 8, 64},  {8, 16, 64}, {20, 17, 64}, {9, 1, 16},
                                     {24, 33, 48}, {31, 15, 32}, {8, 8, 128}};
    for (size_t i = 0; i < sizeof short_attn / sizeof short_attn[0]; i++)
        test_attention(short_attn[i][0], short_attn[i][1], short_attn[i][2]);
    const int64_t pack[][2] = {{1, 16}, {7, 64}, {8, 64}, {16, 64}, {17, 48},
                               {33, 16}, {40, 37}, {5, 5}, {20, 70}};
    for (size_t i = 0; i < sizeof pack / sizeof pack[0]; i++)
        test_pack(pack[i][0], pack[i][1]);
    const int64_t rows[][2] = {{1, 1}, {3, 15}, {2, 16}, {5, 17}, {8, 64}, {2, 771}};
    for (size_t i = 0; i < sizeof rows / sizeof rows[0]; i++)
        test_row_ops(rows[i][0], rows[i][1]);
    test_passes();
    return check_report();
}
