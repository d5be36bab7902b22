/*
 * mha_attn_avx512.c - the two GEMMs of the attention core, hand-written for AVX-512F.
 *
 * Why not cblas_sgemm: the attention's GEMMs have one tiny dimension (scores = q·kᵀ has K = hd,
 * weights·v has N = hd, hd = 64 typically) and are called once per (row block, head). OpenBLAS
 * then repacks both operands on every call (the whole [rows, S] weights block included) and runs
 * at 55-70% of its square-GEMM speed on these shapes (measured on Zen 4, 2026-11-22). Here:
 *   - keys are packed once per pass, per head, into panels of 16 keys ([hd][16], mha_pack_keys),
 *     so the scores kernel reads 16 keys of one dimension with one aligned load;
 *   - the scores kernel broadcasts q (already scaled) and keeps a 12-row x 32-key tile in 24
 *     registers over the whole hd (a lone last panel of 16 keys, all of them when S <= 16, in
 *     a 16-key tile rather than computed twice);
 *   - the weights·v kernel reads the weights block where it is (no packing) and v rows as they lie
 *     in the projection buffer; a 6-row x 64-column tile in 24 registers, keys in chunks so the v
 *     rows stay in cache while every row group of the block passes over them.
 * Independent of OPENBLAS_CORETYPE: these run at AVX-512 speed whatever kernels OpenBLAS uses.
 * Only for CPUs with AVX-512F and hd a multiple of 16 (mha_attn_avx512_usable); everything else
 * takes the cblas path in mha_forward.c. Sums run in a different order than OpenBLAS's, so the
 * last bits differ from that path (well inside the golden tolerances).
 *
 * The same scores tile, accumulating into C, is also a plain GEMM (mha_gemm_avx512: weights
 * packed 256 columns x 256 of K at a time, rows in blocks of 48; the first block of K starts from
 * the bias row in registers, so C is not filled with the bias first): the projections use it when
 * OpenBLAS runs an older core than the CPU (OPENBLAS_CORETYPE=Haswell on an AVX-512 CPU), where it
 * measured 1.7x OpenBLAS's Haswell kernels and 0.9x its AVX-512 ones (Zen 5, 2026-11-22).
 */
#include "mha_internal.h"

#include <string.h>

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#define HAVE_KERNELS 1
#endif

#define SCORE_ROWS 12 /* rows of the scores tile (2 x 16 keys each: 24 accumulators)       */
#define PV_ROWS 6     /* rows of the weights·v tile (4 x 16 columns each: 24 accumulators) */
#define PV_KEYS 256   /* keys per chunk of weights·v: 64 KiB of v rows at hd = 64           */
#define GEMM_NB 256   /* projection GEMM: output columns packed at a time                   */
#define GEMM_KB 256   /* ... times this many of K: 256 KiB of packed weights (L2)            */
#define GEMM_MB 48    /* ... rows of A per pass over them: 48 KiB (L2)                      */

bool mha_attn_avx512_usable(int64_t hd)
{
#ifdef HAVE_KERNELS
    return hd % 16 == 0 && __builtin_cpu_supports("avx512f");
#else
    (void)hd;
    return false;
#endif
}

int64_t mha_gemm_pack_floats(int64_t Nc, int64_t K)
{
    return mha_packed_keys_floats(Nc < GEMM_NB ? Nc : GEMM_NB, K < GEMM_KB ? K : GEMM_KB);
}

int64_t mha_packed_keys_floats(int64_t kn, int64_t hd)
{
    return (kn + 15) / 16 * 16 * hd;
}

/* Dimensions [d0, hd) of one panel of n <= 16 keys, one float at a time. */
static void pack_panel_scalar(float *dst, const float *k, int64_t k_rs, int64_t n, int64_t d0,
                              int64_t hd)
{
    for (int64_t j = 0; j < n; j++) {
        const float *src = k + j * k_rs;
        for (int64_t d = d0; d < hd; d++)
            dst[d * 16 + j] = src[d];
    }
    for (int64_t j = n; j < 16; j++) /* padding keys score 0 and are never stored */
        for (int64_t d = d0; d < hd; d++)
            dst[d * 16 + j] = 0.0f;
}

#ifdef HAVE_KERNELS
/* One panel of n <= 16 keys: each 16 x 16 block (16 keys x 16 dimensions) is loaded as 16 rows
 * (zeros for the missing keys) and transposed in registers, 4 shuffle stages; the last hd % 16
 * dimensions scalar. The scalar loop this replaces stored one float per instruction with a 64-byte
 * stride, the largest part of a short-sequence pass's attention (L = 8: ~10% of the pass). */
__attribute__((target("avx512f"))) static void pack_panel_avx512(float *dst, const float *k,
                                                                 int64_t k_rs, int64_t n,
                                                                 int64_t hd)
{
    int64_t d0 = 0;
    for (; d0 + 16 <= hd; d0 += 16) {
        __m512 r[16], t[16], u[16];
        for (int j = 0; j < 16; j++)
            r[j] = j < n ? _mm512_loadu_ps(k + j * k_rs + d0) : _mm512_setzero_ps();
        for (int j = 0; j < 16; j += 2) { /* pairs of keys interleaved within 128-bit lanes */
            t[j] = _mm512_unpacklo_ps(r[j], r[j + 1]);
            t[j + 1] = _mm512_unpackhi_ps(r[j], r[j + 1]);
        }
        for (int j = 0; j < 16; j += 4) { /* quads of keys: dims 4l+c of lane l in u[j+c] */
            u[j] = _mm512_shuffle_ps(t[j], t[j + 2], _MM_SHUFFLE(1, 0, 1, 0));
            u[j + 1] = _mm512_shuffle_ps(t[j], t[j + 2], _MM_SHUFFLE(3, 2, 3, 2));
            u[j + 2] = _mm512_shuffle_ps(t[j + 1], t[j + 3], _MM_SHUFFLE(1, 0, 1, 0));
            u[j + 3] = _mm512_shuffle_ps(t[j + 1], t[j + 3], _MM_SHUFFLE(3, 2, 3, 2));
        }
        for (int c = 0; c < 4; c++) { /* dims c, c+4, c+8, c+12: 128-bit lanes regrouped */
            const __m512 v0 = _mm512_shuffle_f32x4(u[c], u[4 + c], 0x88);
            const __m512 v1 = _mm512_shuffle_f32x4(u[c], u[4 + c], 0xdd);
            const __m512 v2 = _mm512_shuffle_f32x4(u[8 + c], u[12 + c], 0x88);
            const __m512 v3 = _mm512_shuffle_f32x4(u[8 + c], u[12 + c], 0xdd);
            float *o = dst + (d0 + c) * 16;
            _mm512_store_ps(o, _mm512_shuffle_f32x4(v0, v2, 0x88));
            _mm512_store_ps(o + 4 * 16, _mm512_shuffle_f32x4(v1, v3, 0x88));
            _mm512_store_ps(o + 8 * 16, _mm512_shuffle_f32x4(v0, v2, 0xdd));
            _mm512_store_ps(o + 12 * 16, _mm512_shuffle_f32x4(v1, v3, 0xdd));
        }
    }
    if (d0 < hd)
        pack_panel_scalar(dst, k, k_rs, n, d0, hd);
}
#endif

void mha_pack_keys(float *kp, const float *k, int64_t k_rs, int64_t kn, int64_t hd)
{
#ifdef HAVE_KERNELS
    const bool vec = __builtin_cpu_supports("avx512f");
#else
    const bool vec = false;
#endif
    for (int64_t p = 0; p * 16 < kn; p++) {
        float *dst = kp + p * hd * 16;
        const float *src = k + p * 16 * k_rs;
        const int64_t n = kn - p * 16 < 16 ? kn - p * 16 : 16;
#ifdef HAVE_KERNELS
        if (vec) {
            pack_panel_avx512(dst, src, k_rs, n, hd);
            continue;
        }
#endif
        (void)vec;
        pack_panel_scalar(dst, src, k_rs, n, 0, hd);
    }
}

#ifdef HAVE_KERNELS
/* How a tile's sums start: from 0, from the tile's own values (a further block of K), or from one
 * row of bias for every row (the projections' first block of K: torch's addmm, bias first). */
enum { FROM_ZERO, FROM_C, FROM_BIAS };

/* R rows x P (1 or 2) panels of 16 keys over the whole hd; stores masked to the keys that exist
 * (m1 unused when P is 1). bias: the row FROM_BIAS starts from (16 · P floats, masked). */
__attribute__((target("avx512f"), always_inline)) static inline void
score_tile(float *sc, int64_t ld, const float *q, int64_t q_rs, const float *k0, const float *k1,
           int64_t hd, __mmask16 m0, __mmask16 m1, const float *bias, const int R, const int P,
           const int from)
{
    __m512 a0[SCORE_ROWS], a1[SCORE_ROWS];
    const __m512 b0 = from == FROM_BIAS ? _mm512_maskz_loadu_ps(m0, bias) : _mm512_setzero_ps();
    const __m512 b1 =
        from == FROM_BIAS && P == 2 ? _mm512_maskz_loadu_ps(m1, bias + 16) : _mm512_setzero_ps();
#pragma GCC unroll 12
    for (int i = 0; i < R; i++) {
        a0[i] = from == FROM_C ? _mm512_maskz_loadu_ps(m0, sc + i * ld) : b0;
        if (P == 2)
            a1[i] = from == FROM_C ? _mm512_maskz_loadu_ps(m1, sc + i * ld + 16) : b1;
    }
    for (int64_t d = 0; d < hd; d++) {
        const __m512 w0 = _mm512_load_ps(k0 + d * 16);
        const __m512 w1 = P == 2 ? _mm512_load_ps(k1 + d * 16) : w0;
#pragma GCC unroll 12
        for (int i = 0; i < R; i++) {
            const __m512 x = _mm512_set1_ps(q[i * q_rs + d]);
            a0[i] = _mm512_fmadd_ps(x, w0, a0[i]);
            if (P == 2)
                a1[i] = _mm512_fmadd_ps(x, w1, a1[i]);
        }
    }
#pragma GCC unroll 12
    for (int i = 0; i < R; i++) {
        _mm512_mask_storeu_ps(sc + i * ld, m0, a0[i]);
        if (P == 2)
            _mm512_mask_storeu_ps(sc + i * ld + 16, m1, a1[i]);
    }
}

/* Rows [0,m) against one or two panels (P), in tiles of 12, 8, 4 and 1 rows. */
__attribute__((target("avx512f"), always_inline)) static inline void
score_rows(float *sc, int64_t ld, const float *q, int64_t q_rs, const float *k0, const float *k1,
           int64_t m, int64_t hd, __mmask16 m0, __mmask16 m1, const float *bias, const int P,
           const int from)
{
    int64_t r = 0;
#define SCORE_TILE(R)                                                                              \
    score_tile(sc + r * ld, ld, q + r * q_rs, q_rs, k0, k1, hd, m0, m1, bias, R, P, from)
    for (; r + SCORE_ROWS <= m; r += SCORE_ROWS)
        SCORE_TILE(SCORE_ROWS);
    if (r + 8 <= m) {
        SCORE_TILE(8);
        r += 8;
    }
    for (; r + 4 <= m; r += 4)
        SCORE_TILE(4);
    for (; r < m; r++)
        SCORE_TILE(1);
#undef SCORE_TILE
}

static __mmask16 keys_mask(int64_t rest)
{
    return rest >= 16 ? (__mmask16)0xffff : rest <= 0 ? 0 : (__mmask16)((1u << rest) - 1);
}

__attribute__((target("avx512f"))) void mha_scores_avx512(float *sc, int64_t ld, const float *q,
                                                          int64_t q_rs, const float *kp, int64_t m,
                                                          int64_t kn, int64_t hd)
{
    for (int64_t p = 0; p * 16 < kn; p += 2) {
        const float *k0 = kp + p * hd * 16;
        const __mmask16 m0 = keys_mask(kn - p * 16);
        if ((p + 1) * 16 < kn) /* a lone last panel (kn <= 16: short sequences) on its own */
            score_rows(sc + p * 16, ld, q, q_rs, k0, k0 + hd * 16, m, hd, m0,
                       keys_mask(kn - p * 16 - 16), NULL, 2, FROM_ZERO);
        else
            score_rows(sc + p * 16, ld, q, q_rs, k0, k0, m, hd, m0, 0, NULL, 1, FROM_ZERO);
    }
}

/* One block of the projection GEMM: C rows [0,mb) x columns of the packed block (nb x kb),
 * sums starting from (FROM_C, else FROM_BIAS with bias, or FROM_ZERO). */
__attribute__((target("avx512f"), always_inline)) static inline void
gemm_block(float *C, int64_t ldc, const float *A, int64_t lda, const float *pack, const float *bias,
           int64_t mb, int64_t nb, int64_t kb, const int from)
{
    for (int64_t p = 0; p * 16 < nb; p += 2) {
        const float *w0 = pack + p * kb * 16;
        const __mmask16 k0m = keys_mask(nb - p * 16);
        float *c = C + p * 16;
        const float *bp = bias ? bias + p * 16 : NULL;
        if ((p + 1) * 16 < nb)
            score_rows(c, ldc, A, lda, w0, w0 + kb * 16, mb, kb, k0m, keys_mask(nb - p * 16 - 16),
                       bp, 2, from);
        else
            score_rows(c, ldc, A, lda, w0, w0, mb, kb, k0m, 0, bp, 1, from);
    }
}

__attribute__((target("avx512f"))) void mha_gemm_avx512(float *C, int64_t ldc, const float *bias,
                                                        const float *A, int64_t lda,
                                                        const float *W, int64_t M, int64_t Nc,
                                                        int64_t K, float *pack)
{
    for (int64_t n0 = 0; n0 < Nc; n0 += GEMM_NB) {
        const int64_t nb = Nc - n0 < GEMM_NB ? Nc - n0 : GEMM_NB;
        for (int64_t k0 = 0; k0 < K; k0 += GEMM_KB) {
            const int64_t kb = K - k0 < GEMM_KB ? K - k0 : GEMM_KB;
            mha_pack_keys(pack, W + n0 * K + k0, K, nb, kb);
            for (int64_t m0 = 0; m0 < M; m0 += GEMM_MB) {
                const int64_t mb = M - m0 < GEMM_MB ? M - m0 : GEMM_MB;
                float *c = C + m0 * ldc + n0;
                const float *a = A + m0 * lda + k0;
                if (k0 > 0)
                    gemm_block(c, ldc, a, lda, pack, NULL, mb, nb, kb, FROM_C);
                else if (bias)
                    gemm_block(c, ldc, a, lda, pack, bias + n0, mb, nb, kb, FROM_BIAS);
                else
                    gemm_block(c, ldc, a, lda, pack, NULL, mb, nb, kb, FROM_ZERO);
            }
        }
    }
}

/* R rows x NV vectors of 16 columns, over keys [j0, j1); first: start from 0, else from out.
 * wd (NULL: none): also writes P · winv[i] to row i of wd (row stride wld), 16 keys at a time
 * between the FMAs, so those stores drain while the kernel computes. */
__attribute__((target("avx512f"), always_inline)) static inline void
pv_tile(float *out, int64_t o_rs, const float *P, int64_t ld, const float *v, int64_t v_rs,
        int64_t j0, int64_t j1, bool first, float *wd, int64_t wld, const float *winv, const int R,
        const int NV)
{
    __m512 acc[PV_ROWS][4];
#pragma GCC unroll 6
    for (int i = 0; i < R; i++)
#pragma GCC unroll 4
        for (int c = 0; c < NV; c++)
            acc[i][c] = first ? _mm512_setzero_ps() : _mm512_loadu_ps(out + i * o_rs + c * 16);
    for (int64_t jb = j0; jb < j1; jb += 16) {
        const int64_t je = jb + 16 < j1 ? jb + 16 : j1;
        if (wd) {
            const __mmask16 mk = keys_mask(je - jb);
#pragma GCC unroll 6
            for (int i = 0; i < R; i++) {
                float *d = wd + i * wld + jb;
                const __m512 x = _mm512_mul_ps(_mm512_maskz_loadu_ps(mk, P + i * ld + jb),
                                               _mm512_set1_ps(winv[i]));
                if (mk == 0xffff && ((uintptr_t)d & 63) == 0)
                    _mm512_stream_ps(d, x);
                else
                    _mm512_mask_storeu_ps(d, mk, x);
            }
        }
        for (int64_t j = jb; j < je; j++) {
            const float *vr = v + j * v_rs;
            __m512 b[4];
#pragma GCC unroll 4
            for (int c = 0; c < NV; c++)
                b[c] = _mm512_loadu_ps(vr + c * 16);
#pragma GCC unroll 6
            for (int i = 0; i < R; i++) {
                const __m512 x = _mm512_set1_ps(P[i * ld + j]);
#pragma GCC unroll 4
                for (int c = 0; c < NV; c++)
                    acc[i][c] = _mm512_fmadd_ps(x, b[c], acc[i][c]);
            }
        }
    }
#pragma GCC unroll 6
    for (int i = 0; i < R; i++)
#pragma GCC unroll 4
        for (int c = 0; c < NV; c++)
            _mm512_storeu_ps(out + i * o_rs + c * 16, acc[i][c]);
}

/* Rows [0,m) of one column group of NV vectors, keys [j0,j1). */
__attribute__((target("avx512f"), always_inline)) static inline void
pv_rows(float *out, int64_t o_rs, const float *P, int64_t ld, const float *v, int64_t v_rs,
        int64_t m, int64_t j0, int64_t j1, bool first, float *wd, int64_t wld, const float *winv,
        const int NV)
{
    int64_t r = 0;
#define PV_TILE(R)                                                                                 \
    pv_tile(out + r * o_rs, o_rs, P + r * ld, ld, v, v_rs, j0, j1, first,                          \
            wd ? wd + r * wld : NULL, wld, wd ? winv + r : NULL, R, NV)
    for (; r + PV_ROWS <= m; r += PV_ROWS)
        PV_TILE(PV_ROWS);
    for (; r + 2 <= m; r += 2)
        PV_TILE(2);
    for (; r < m; r++)
        PV_TILE(1);
#undef PV_TILE
}

__attribute__((target("avx512f"))) void mha_pv_avx512(float *out, int64_t o_rs, const float *P,
                                                      int64_t ld, const float *v, int64_t v_rs,
                                                      int64_t m, int64_t kn, int64_t hd,
                                                      float *wdst, int64_t wld, const float *inv)
{
    for (int64_t j0 = 0; j0 < kn; j0 += PV_KEYS) {
        const int64_t j1 = j0 + PV_KEYS < kn ? j0 + PV_KEYS : kn;
        for (int64_t c0 = 0; c0 < hd; c0 += 64) {
            float *o = out + c0, *wd = c0 == 0 ? wdst : NULL; /* weights with the first group */
            const float *vc = v + c0;
            switch ((hd - c0) / 16) {
            case 1:
                pv_rows(o, o_rs, P, ld, vc, v_rs, m, j0, j1, j0 == 0, wd, wld, inv, 1);
                break;
            case 2:
                pv_rows(o, o_rs, P, ld, vc, v_rs, m, j0, j1, j0 == 0, wd, wld, inv, 2);
                break;
            case 3:
                pv_rows(o, o_rs, P, ld, vc, v_rs, m, j0, j1, j0 == 0, wd, wld, inv, 3);
                break;
            default:
                pv_rows(o, o_rs, P, ld, vc, v_rs, m, j0, j1, j0 == 0, wd, wld, inv, 4);
            }
        }
    }
}
#else
void mha_scores_avx512(float *sc, int64_t ld, const float *q, int64_t q_rs, const float *kp,
                       int64_t m, int64_t kn, int64_t hd)
{
    (void)sc, (void)ld, (void)q, (void)q_rs, (void)kp, (void)m, (void)kn, (void)hd;
}

void mha_pv_avx512(float *out, int64_t o_rs, const float *P, int64_t ld, const float *v,
                   int64_t v_rs, int64_t m, int64_t kn, int64_t hd, float *wdst, int64_t wld,
                   const float *inv)
{
    (void)out, (void)o_rs, (void)P, (void)ld, (void)v, (void)v_rs, (void)m, (void)kn, (void)hd;
    (void)wdst, (void)wld, (void)inv;
}

void mha_gemm_avx512(float *C, int64_t ldc, const float *bias, const float *A, int64_t lda,
                     const float *W, int64_t M, int64_t Nc, int64_t K, float *pack)
{
    (void)C, (void)ldc, (void)bias, (void)A, (void)lda, (void)W, (void)M, (void)Nc, (void)K;
    (void)pack;
}
#endif
