/*
 * test_engine_kernels.c - the AVX-512 GEMM kernels (lib/mha_attn_avx512.c) against a plain double
 * reference, on shapes off every tile and block size (rows, 16-key panels, 256-key chunks,
 * 64-column groups, the projection GEMM's 256 x 256 x 48 blocks). Which kernels a forward pass uses
 * depends on the CPU and on OpenBLAS's core, so these are checked here whatever the pass picks.
 * Skipped (with a note) on a CPU without AVX-512F.
 */
#include "check.h"
#include "mha_internal.h"

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

/* C[M,Nc] (ldc) = bias + A[M,K] (lda) · W[Nc,K]ᵀ, C's padding columns untouched. */
static void test_gemm(int64_t M, int64_t Nc, int64_t K)
{
    const int64_t lda = K + 3, ldc = Nc + 5;
    float *A = rnd_array(M * lda), *W = rnd_array(Nc * K), *C = rnd_array(M * ldc);
    float *C0 = malloc((size_t)(M * ldc) * sizeof(float));
    memcpy(C0, C, (size_t)(M * ldc) * sizeof(float));
    float *pack = aligned_alloc(64, (size_t)mha_gemm_pack_floats(Nc, K) * sizeof(float));
    mha_gemm_avx512(C, ldc, A, lda, W, M, Nc, K, pack);
    bool ok = true, untouched = true;
    for (int64_t i = 0; i < M; i++) {
        for (int64_t j = 0; j < ldc; j++) {
            if (j >= Nc) {
                untouched &= C[i * ldc + j] == C0[i * ldc + j];
                continue;
            }
            double want = C0[i * ldc + j], mag = fabs(want);
            for (int64_t k = 0; k < K; k++) {
                want += (double)A[i * lda + k] * W[j * K + k];
                mag += fabs((double)A[i * lda + k] * W[j * K + k]);
            }
            ok &= close_to(C[i * ldc + j], want, mag);
        }
    }
    CHECK(ok, "gemm M=%lld Nc=%lld K=%lld: C += A·Wᵀ", (long long)M, (long long)Nc, (long long)K);
    CHECK(untouched, "gemm M=%lld Nc=%lld K=%lld writes no column past Nc", (long long)M,
          (long long)Nc, (long long)K);
    free(A);
    free(W);
    free(C);
    free(C0);
    free(pack);
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

int main(void)
{
    if (!mha_attn_avx512_usable(16)) {
        printf("(no AVX-512F on this CPU: the kernels are not used, nothing to test)\n");
        CHECK(!mha_attn_avx512_usable(64), "no AVX-512 kernels for any head size either");
        return check_report();
    }
    CHECK(!mha_attn_avx512_usable(24), "head sizes off a multiple of 16 take the cblas path");
    const int64_t gemm[][3] = {{1, 1, 1},      {13, 17, 5},   {12, 32, 64},  {49, 257, 300},
                               {100, 16, 513}, {37, 600, 70}, {96, 48, 256}, {5, 3, 1000}};
    for (size_t i = 0; i < sizeof gemm / sizeof gemm[0]; i++)
        test_gemm(gemm[i][0], gemm[i][1], gemm[i][2]);
    const int64_t attn[][3] = {{1, 1, 16},   {12, 32, 64}, {13, 17, 64},  {29, 300, 64},
                               {7, 513, 16}, {25, 40, 80}, {6, 260, 128}, {3, 5, 48}};
    for (size_t i = 0; i < sizeof attn / sizeof attn[0]; i++)
        test_attention(attn[i][0], attn[i][1], attn[i][2]);
    return check_report();
}
