/*
 * mha_select_runs.c - the weights sink's loops over runs of keys (mha_select.h): which keys of a
 * run could enter a top-k row, the largest value of a run, its sum in double, and the averaged
 * block's sums. A top-k row looks at every key of every chosen row and head, and
 * a pooled map sums every key: scalar, these loops cost more than a quarter of the attention at
 * 16k keys, vectorised a few percent.
 *
 * AVX-512F and AVX2 kernels are compiled with target attributes and picked by the plan's kernel set
 * (mha_isa_active: the CPU's best, capped by ATTND_ISA); the portable loops are the reference.
 * The max is exact whatever the order; the sum's grouping (lanes, then their total) depends on the
 * kernel set, which moves a pooled mean by at most a few units in the last place of a double. The
 * averaged block's d += x·f (the product rounded, then the sum: never a fused multiply-add) and d /
 * h' are the full averaged map's own arithmetic, bit for bit, in every kernel set.
 */
#include "mha_select.h"

#include <math.h>

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#define HAVE_X86_KERNELS 1
#endif

static float max_portable(const float *x, int64_t n)
{
    float m = -INFINITY;
    for (int64_t j = 0; j < n; j++)
        m = x[j] > m ? x[j] : m;
    return m;
}

static double sum_portable(const float *x, int64_t n)
{
    double s = 0.0;
    for (int64_t j = 0; j < n; j++)
        s += (double)x[j];
    return s;
}

static void add_scaled_portable(float *d, const float *x, int64_t n, float f)
{
    for (int64_t j = 0; j < n; j++)
        d[j] += x[j] * f;
}

static void div_portable(float *x, int64_t n, float div)
{
    for (int64_t j = 0; j < n; j++)
        x[j] /= div;
}

/* x offered to kt [kst], ascending: the smallest of the kst + 1 goes. Each place takes
 * min(max(x, kt[i]), kt[i + 1]), kt[kst] = +inf: the places below x move down one, x takes its
 * place, the ones above it stay. No branch depends on x (the AVX2 kernel's own arithmetic). */
static void offer_sorted(float *kt, int64_t kst, float x)
{
    for (int64_t i = 0; i + 1 < kst; i++) {
        const float a = x > kt[i] ? x : kt[i];
        kt[i] = a < kt[i + 1] ? a : kt[i + 1];
    }
    kt[kst - 1] = x > kt[kst - 1] ? x : kt[kst - 1];
}

static int64_t topk_scan_portable(mha_cand *cand, float *kt, int64_t kst, const float *x,
                                  int64_t n, float thr, int64_t j0, int64_t nv)
{
    int64_t c = 0;
    for (int64_t j = 0; j < n; j++)
        if (x[j] >= thr) {
            cand[c++] = (mha_cand){x[j], (int32_t)(j0 + j), (int32_t)nv};
            offer_sorted(kt, kst, x[j]);
        }
    return c;
}

/* The k-th largest of the G group maxima M (-inf when fewer than k are above -inf): the largest
 * M[i] that at least k of them reach, each counted by compares (no sort: the same bits on every
 * ISA, whatever the ties). */
static float kth_of_maxima_portable(const float *M, int64_t G, int64_t k)
{
    float best = -INFINITY;
    for (int64_t i = 0; i < G; i++) {
        int64_t reach = 0;
        for (int64_t j = 0; j < G; j++)
            reach += M[j] >= M[i];
        best = reach >= k && M[i] > best ? M[i] : best;
    }
    return best + 0.0f; /* -0 as +0, whichever of the two came first */
}

static float topk_bound_portable(const float *x, int64_t n, int64_t k, int64_t kst)
{
    const int64_t G = mha_topk_bound_groups(kst);
    float M[MHA_TOPK_BOUND_MAX_GROUPS];
    for (int64_t i = 0; i < G; i++)
        M[i] = -INFINITY;
    for (int64_t j = 0; j < n; j++)
        M[j % G] = x[j] > M[j % G] ? x[j] : M[j % G];
    return kth_of_maxima_portable(M, G, k);
}

/* Row i's place among v [n] (keys j, distinct): how many beat it, the larger value, or of equal
 * values the lower key. */
static void best_of_portable(float *vals, int32_t *idx, int64_t k, const float *v,
                             const int32_t *j, int64_t n)
{
    for (int64_t i = 0; i < n; i++) {
        int64_t at = 0;
        for (int64_t c = 0; c < n; c++)
            at += v[c] > v[i] || (v[c] == v[i] && j[c] < j[i]);
        if (at < k) {
            vals[at] = v[i];
            idx[at] = j[i];
        }
    }
}

/* A streamed pool's visited block into a pooled row's partial sums: acc[c] += d[c]·f in double
 * (the product rounded first), or with max acc[c] = the larger of acc[c] and (float)d[c]·f. */
static void pool_accumulate_portable(double *acc, const double *d, int64_t n, float f, bool max)
{
    for (int64_t c = 0; c < n; c++) {
        if (max) {
            const float w = (float)d[c] * f;
            acc[c] = w > acc[c] ? w : acc[c];
        } else {
            acc[c] += d[c] * (double)f;
        }
    }
}

static int64_t above_portable(int32_t *idx, const float *x, int64_t n, float thr)
{
    int64_t c = 0;
    for (int64_t j = 0; j < n; j++)
        if (x[j] >= thr)
            idx[c++] = (int32_t)j;
    return c;
}

#ifdef HAVE_X86_KERNELS
/* The bits of 8 keys x[0..8) that reach vt. */
__attribute__((target("avx2"))) static inline uint64_t reach8_avx2(const float *x, __m256 vt)
{
    return (uint64_t)(uint32_t)_mm256_movemask_ps(
        _mm256_cmp_ps(_mm256_loadu_ps(x), vt, _CMP_GE_OQ));
}

/* x (in every lane) offered to the kst = 8·nr largest held in v[0, nr), ascending across the
 * registers: offer_sorted's min(max(x, v), next), next being each place's upper neighbour (the
 * next register's first lane, +inf above the last). */
__attribute__((target("avx2"), always_inline)) static inline void offer_sorted_avx2(__m256 *v,
                                                                                  const int nr,
                                                                                  __m256 x)
{
    const __m256i up = _mm256_setr_epi32(1, 2, 3, 4, 5, 6, 7, 7);
    __m256 next[4];
#pragma GCC unroll 4
    for (int i = 0; i < nr; i++) {
        const __m256 above = i + 1 < nr ? _mm256_broadcastss_ps(_mm256_castps256_ps128(v[i + 1]))
                                        : _mm256_set1_ps(INFINITY);
        next[i] = _mm256_blend_ps(_mm256_permutevar8x32_ps(v[i], up), above, 0x80);
    }
#pragma GCC unroll 4
    for (int i = 0; i < nr; i++)
        v[i] = _mm256_min_ps(_mm256_max_ps(x, v[i]), next[i]);
}

/* The keys of x [n] (n <= 256) that reach thr, a run of 64 keys a word: bit t of mk[r] for key
 * 64·r + t. AVX2: eight compares and movemasks a run; AVX-512: four compares (on the AVX2 kernel
 * these were 40% of a top-8 scan's time at 2048 keys). NaN never reaches. */
__attribute__((target("avx2"))) static void reach_masks_avx2(uint64_t *mk, const float *x,
                                                             int64_t n, float thr)
{
    const __m256 vt = _mm256_set1_ps(thr);
    for (int64_t j = 0; j < n; j += 64) {
        const int64_t e = n - j < 64 ? n - j : 64;
        uint64_t m = 0;
        if (e == 64) {
#pragma GCC unroll 8
            for (int q = 0; q < 8; q++)
                m |= reach8_avx2(x + j + 8 * q, vt) << (8 * q);
        } else {
            int64_t t = 0;
            for (; t + 8 <= e; t += 8)
                m |= reach8_avx2(x + j + t, vt) << t;
            for (; t < e; t++)
                m |= (uint64_t)(x[j + t] >= thr) << t;
        }
        mk[j / 64] = m;
    }
}

__attribute__((target("avx512f"))) static void reach_masks_avx512(uint64_t *mk, const float *x,
                                                                  int64_t n, float thr)
{
    const __m512 vt = _mm512_set1_ps(thr);
    for (int64_t j = 0; j < n; j += 64) {
        uint64_t m = 0;
        for (int64_t t = 0; t < 64 && t < n - j; t += 16) { /* lanes past n neither read nor set */
            const __mmask16 live =
                n - j - t >= 16 ? (__mmask16)0xFFFF : (__mmask16)((1u << (n - j - t)) - 1);
            m |= (uint64_t)_mm512_mask_cmp_ps_mask(live, _mm512_maskz_loadu_ps(live, x + j + t), vt,
                                                   _CMP_GE_OQ)
                 << t;
        }
        mk[j / 64] = m;
    }
}

/* reach_masks_avx512 or _avx2, as isa says (one of the two). */
static void reach_masks(mha_isa isa, uint64_t *mk, const float *x, int64_t n, float thr)
{
    if (isa == MHA_ISA_AVX512)
        reach_masks_avx512(mk, x, n, thr);
    else
        reach_masks_avx2(mk, x, n, thr);
}

/* topk_scan_portable on the runs' masks mk (reach_masks_*), with the kst largest in nr
 * registers: only a run's set bits cost more (on long rows most runs have none). */
__attribute__((target("avx2"), always_inline)) static inline int64_t
take_runs_n(mha_cand *cand, float *kt, const int nr, const float *x, int64_t n,
            const uint64_t *mk, int64_t j0, int64_t nv)
{
    __m256 v[4];
#pragma GCC unroll 4
    for (int i = 0; i < nr; i++)
        v[i] = _mm256_loadu_ps(kt + 8 * i);
    int64_t c = 0;
    for (int64_t j = 0; j < n; j += 64)
        for (uint64_t m = mk[j / 64]; m; m &= m - 1) {
            const int64_t t = j + __builtin_ctzll(m);
            cand[c++] = (mha_cand){x[t], (int32_t)(j0 + t), (int32_t)nv};
            offer_sorted_avx2(v, nr, _mm256_set1_ps(x[t]));
        }
#pragma GCC unroll 4
    for (int i = 0; i < nr; i++)
        _mm256_storeu_ps(kt + 8 * i, v[i]);
    return c;
}

/* kth_of_maxima_portable for G = 32 or 64 maxima: each lane's count of the maxima that reach it
 * kept in 32-bit lanes, 32 maxima at a time (G broadcasts and compares each), then the largest
 * maximum counted at least k times. */
__attribute__((target("avx2"))) static inline float max_avx2(const float *x, int64_t n);
__attribute__((target("avx2"))) static float kth_of_maxima_avx2(const float *M, int64_t G, int64_t k)
{
    if (k == 1) /* the largest: no counts */
        return max_avx2(M, G) + 0.0f;
    __m256 best = _mm256_set1_ps(-INFINITY);
    const __m256i km1 = _mm256_set1_epi32((int)k - 1);
    for (int64_t h = 0; h < G; h += 32) {
        __m256 mv[4];
        __m256i cnt[4];
#pragma GCC unroll 4
        for (int r = 0; r < 4; r++) {
            mv[r] = _mm256_loadu_ps(M + h + 8 * r);
            cnt[r] = _mm256_setzero_si256();
        }
        for (int64_t j = 0; j < G; j++) {
            const __m256 b = _mm256_broadcast_ss(M + j);
#pragma GCC unroll 4
            for (int r = 0; r < 4; r++) /* lane i: M[j] >= M[i] adds 1 (a mask is -1) */
                cnt[r] = _mm256_sub_epi32(cnt[r], _mm256_castps_si256(
                                                      _mm256_cmp_ps(b, mv[r], _CMP_GE_OQ)));
        }
#pragma GCC unroll 4
        for (int r = 0; r < 4; r++)
            best = _mm256_max_ps(best, _mm256_blendv_ps(_mm256_set1_ps(-INFINITY), mv[r],
                                                        _mm256_castsi256_ps(_mm256_cmpgt_epi32(
                                                            cnt[r], km1))));
    }
    float lane[8];
    _mm256_storeu_ps(lane, best);
    return max_avx2(lane, 8) + 0.0f;
}

/* topk_bound_portable with key j in lane j mod 8 of register (j mod G) / 8: one max per 8 keys
 * (the max is exact: the same bits). nr = G / 8 registers, a constant where it is inlined: the
 * maxima stay in registers. */
__attribute__((target("avx2"), always_inline)) static inline float
topk_bound_avx2_n(const float *x, int64_t n, int64_t k, const int nr)
{
    const int64_t G = 8 * nr;
    __m256 acc[8];
#pragma GCC unroll 8
    for (int a = 0; a < nr; a++)
        acc[a] = _mm256_set1_ps(-INFINITY);
    int64_t j = 0;
    for (; j + G <= n; j += G)
#pragma GCC unroll 8
        for (int a = 0; a < nr; a++) /* a NaN key leaves the maximum as it was */
            acc[a] = _mm256_max_ps(_mm256_loadu_ps(x + j + 8 * a), acc[a]);
    float M[MHA_TOPK_BOUND_MAX_GROUPS];
#pragma GCC unroll 8
    for (int a = 0; a < nr; a++)
        _mm256_storeu_ps(M + 8 * a, acc[a]);
    for (int64_t i = 0; j < n; j++, i++)
        M[i] = x[j] > M[i] ? x[j] : M[i];
    return kth_of_maxima_avx2(M, G, k);
}

__attribute__((target("avx2"))) static float topk_bound_avx2(const float *x, int64_t n, int64_t k,
                                                             int64_t kst)
{
    if (mha_topk_bound_groups(kst) == 32)
        return topk_bound_avx2_n(x, n, k, 4);
    return topk_bound_avx2_n(x, n, k, 8);
}

/* best_of_portable for 8 values at a time, each counting the n that beat it in its lane (v and j
 * padded to a multiple of 8 with values that beat none and are placed nowhere). */
__attribute__((target("avx2"))) static void best_of_avx2(float *vals, int32_t *idx, int64_t k,
                                                         const float *v, const int32_t *j,
                                                         int64_t n)
{
    for (int64_t i = 0; i < n; i += 8) {
        const __m256 vi = _mm256_loadu_ps(v + i);
        const __m256i ji = _mm256_loadu_si256((const __m256i *)(j + i));
        __m256i at = _mm256_setzero_si256();
        for (int64_t c = 0; c < n; c++) {
            const __m256 vc = _mm256_broadcast_ss(v + c);
            const __m256i lower = _mm256_cmpgt_epi32(ji, _mm256_set1_epi32(j[c]));
            const __m256 beats =
                _mm256_or_ps(_mm256_cmp_ps(vc, vi, _CMP_GT_OQ),
                             _mm256_and_ps(_mm256_cmp_ps(vc, vi, _CMP_EQ_OQ),
                                           _mm256_castsi256_ps(lower)));
            at = _mm256_sub_epi32(at, _mm256_castps_si256(beats)); /* a mask is -1 */
        }
        int32_t place[8];
        _mm256_storeu_si256((__m256i *)place, at);
        for (int64_t q = 0; q < 8 && i + q < n; q++)
            if (place[q] < k) {
                vals[place[q]] = v[i + q];
                idx[place[q]] = j[i + q];
            }
    }
}

__attribute__((target("avx2"))) static void max_into_avx2(float *m, const float *x, int64_t n)
{
    int64_t j = 0;
    for (; j + 8 <= n; j += 8) /* max(x, m): m where x is NaN */
        _mm256_storeu_ps(m + j, _mm256_max_ps(_mm256_loadu_ps(x + j), _mm256_loadu_ps(m + j)));
    for (; j < n; j++)
        m[j] = x[j] > m[j] ? x[j] : m[j];
}

/* pool_accumulate_portable, 4 columns at a time: the product rounded, then the sum (never fused),
 * or the float product compared in double: the same bits. */
__attribute__((target("avx2"))) static void pool_accumulate_avx2(double *acc, const double *d,
                                                                 int64_t n, float f, bool max)
{
    int64_t c = 0;
    if (max) {
        const __m128 vf = _mm_set1_ps(f);
        for (; c + 4 <= n; c += 4) {
            const __m256d w = _mm256_cvtps_pd(_mm_mul_ps(_mm256_cvtpd_ps(_mm256_loadu_pd(d + c)), vf));
            const __m256d a = _mm256_loadu_pd(acc + c);
            _mm256_storeu_pd(acc + c, _mm256_blendv_pd(a, w, _mm256_cmp_pd(w, a, _CMP_GT_OQ)));
        }
    } else {
        const __m256d vf = _mm256_set1_pd((double)f);
        for (; c + 4 <= n; c += 4)
            _mm256_storeu_pd(acc + c, _mm256_add_pd(_mm256_loadu_pd(acc + c),
                                                    _mm256_mul_pd(_mm256_loadu_pd(d + c), vf)));
    }
    /* the last few here, not by a tail call to the portable loop: legacy SSE code entered with
     * the upper halves of the ymm registers in use cost ~300 cycles a call on Zen 3 (GCC puts no
     * vzeroupper before a sibling call) */
    for (; c < n; c++) {
        if (max) {
            const float w = (float)d[c] * f;
            acc[c] = w > acc[c] ? w : acc[c];
        } else {
            acc[c] += d[c] * (double)f;
        }
    }
}

/* The keys of x [n] (n <= 256) that reach thr, from their masks mk: take_runs_n for the
 * kst / 8 registers of the row's largest (the same candidates, in the same order, and the same
 * offers whichever kernel made the masks). */
__attribute__((target("avx2"))) static int64_t take_runs_avx2(mha_cand *cand, float *kt,
                                                              int64_t kst, const float *x,
                                                              int64_t n, const uint64_t *mk,
                                                              int64_t j0, int64_t nv)
{
    switch (kst / 8) {
    case 1:
        return take_runs_n(cand, kt, 1, x, n, mk, j0, nv);
    case 2:
        return take_runs_n(cand, kt, 2, x, n, mk, j0, nv);
    case 3:
        return take_runs_n(cand, kt, 3, x, n, mk, j0, nv);
    default:
        return take_runs_n(cand, kt, 4, x, n, mk, j0, nv);
    }
}

__attribute__((target("avx512f"))) static void add_scaled_avx512(float *d, const float *x, int64_t n,
                                                                 float f)
{
    const __m512 vf = _mm512_set1_ps(f);
    int64_t j = 0;
    for (; j + 16 <= n; j += 16)
        _mm512_storeu_ps(d + j, _mm512_add_ps(_mm512_loadu_ps(d + j),
                                              _mm512_mul_ps(_mm512_loadu_ps(x + j), vf)));
    if (j < n) {
        const __mmask16 tail = (__mmask16)((1u << (n - j)) - 1);
        const __m512 p = _mm512_mul_ps(_mm512_maskz_loadu_ps(tail, x + j), vf);
        _mm512_mask_storeu_ps(d + j, tail, _mm512_add_ps(_mm512_maskz_loadu_ps(tail, d + j), p));
    }
}

__attribute__((target("avx512f"))) static void div_avx512(float *x, int64_t n, float div)
{
    const __m512 v = _mm512_set1_ps(div);
    int64_t j = 0;
    for (; j + 16 <= n; j += 16)
        _mm512_storeu_ps(x + j, _mm512_div_ps(_mm512_loadu_ps(x + j), v));
    for (; j < n; j++)
        x[j] /= div;
}

__attribute__((target("avx2"))) static void add_scaled_avx2(float *d, const float *x, int64_t n,
                                                            float f)
{
    const __m256 vf = _mm256_set1_ps(f);
    int64_t j = 0;
    for (; j + 8 <= n; j += 8)
        _mm256_storeu_ps(d + j, _mm256_add_ps(_mm256_loadu_ps(d + j),
                                              _mm256_mul_ps(_mm256_loadu_ps(x + j), vf)));
    for (; j < n; j++)
        d[j] += x[j] * f;
}

__attribute__((target("avx2"))) static void div_avx2(float *x, int64_t n, float div)
{
    const __m256 v = _mm256_set1_ps(div);
    int64_t j = 0;
    for (; j + 8 <= n; j += 8)
        _mm256_storeu_ps(x + j, _mm256_div_ps(_mm256_loadu_ps(x + j), v));
    for (; j < n; j++)
        x[j] /= div;
}

__attribute__((target("avx512f"))) static inline float max_avx512(const float *x, int64_t n)
{
    __m512 m0 = _mm512_set1_ps(-INFINITY), m1 = m0;
    int64_t j = 0;
    for (; j + 32 <= n; j += 32) {
        m0 = _mm512_max_ps(m0, _mm512_loadu_ps(x + j));
        m1 = _mm512_max_ps(m1, _mm512_loadu_ps(x + j + 16));
    }
    for (; j + 16 <= n; j += 16)
        m0 = _mm512_max_ps(m0, _mm512_loadu_ps(x + j));
    if (j < n) {
        const __mmask16 tail = (__mmask16)((1u << (n - j)) - 1);
        m1 = _mm512_mask_max_ps(m1, tail, m1, _mm512_maskz_loadu_ps(tail, x + j));
    }
    return _mm512_reduce_max_ps(_mm512_max_ps(m0, m1));
}

__attribute__((target("avx512f"))) static inline double sum_avx512(const float *x, int64_t n)
{
    __m512d s0 = _mm512_setzero_pd(), s1 = s0;
    int64_t j = 0;
    for (; j + 16 <= n; j += 16) {
        s0 = _mm512_add_pd(s0, _mm512_cvtps_pd(_mm256_loadu_ps(x + j)));
        s1 = _mm512_add_pd(s1, _mm512_cvtps_pd(_mm256_loadu_ps(x + j + 8)));
    }
    double s = _mm512_reduce_add_pd(_mm512_add_pd(s0, s1));
    for (; j < n; j++)
        s += (double)x[j];
    return s;
}

__attribute__((target("avx2"))) static inline float max_avx2(const float *x, int64_t n)
{
    __m256 m0 = _mm256_set1_ps(-INFINITY), m1 = m0;
    int64_t j = 0;
    for (; j + 16 <= n; j += 16) {
        m0 = _mm256_max_ps(m0, _mm256_loadu_ps(x + j));
        m1 = _mm256_max_ps(m1, _mm256_loadu_ps(x + j + 8));
    }
    m0 = _mm256_max_ps(m0, m1);
    __m128 h = _mm_max_ps(_mm256_castps256_ps128(m0), _mm256_extractf128_ps(m0, 1));
    h = _mm_max_ps(h, _mm_movehl_ps(h, h));
    h = _mm_max_ss(h, _mm_shuffle_ps(h, h, 1));
    float m = _mm_cvtss_f32(h);
    for (; j < n; j++)
        m = x[j] > m ? x[j] : m;
    return m;
}

__attribute__((target("avx2"))) static inline double sum_avx2(const float *x, int64_t n)
{
    __m256d s0 = _mm256_setzero_pd(), s1 = s0;
    int64_t j = 0;
    for (; j + 8 <= n; j += 8) {
        s0 = _mm256_add_pd(s0, _mm256_cvtps_pd(_mm_loadu_ps(x + j)));
        s1 = _mm256_add_pd(s1, _mm256_cvtps_pd(_mm_loadu_ps(x + j + 4)));
    }
    __m256d t = _mm256_add_pd(s0, s1);
    __m128d h = _mm_add_pd(_mm256_castpd256_pd128(t), _mm256_extractf128_pd(t, 1));
    double s = _mm_cvtsd_f64(_mm_add_sd(h, _mm_unpackhi_pd(h, h)));
    for (; j < n; j++)
        s += (double)x[j];
    return s;
}
#endif

/* The columns [cf, cl] of a pooled block, each its run's sum or max with one kernel set's loops
 * (inlined: a call and a dispatch per column cost as much as a short column's own work). */
#define POOL_COLUMNS(SUM, MAX)                                                                     \
    const int64_t cf = (ja - k0) / pb, cl = (jb - 1 - k0) / pb;                                    \
    for (int64_t c = cf; c <= cl; c++) {                                                           \
        const int64_t e0 = k0 + c * pb, e1 = e0 + pb;                                              \
        const int64_t js = ja > e0 ? ja : e0, je = jb < e1 ? jb : e1;                              \
        out[c - cf] = max ? (double)MAX(x + js, je - js) : SUM(x + js, je - js);                   \
    }

static void pool_columns_portable(double *out, const float *x, int64_t ja, int64_t jb, int64_t k0,
                                  int64_t pb, bool max)
{
    POOL_COLUMNS(sum_portable, max_portable)
}

#ifdef HAVE_X86_KERNELS
__attribute__((target("avx512f"))) static void pool_columns_avx512(double *out, const float *x,
                                                                   int64_t ja, int64_t jb,
                                                                   int64_t k0, int64_t pb, bool max)
{
    POOL_COLUMNS(sum_avx512, max_avx512)
}

__attribute__((target("avx2"))) static void pool_columns_avx2(double *out, const float *x,
                                                              int64_t ja, int64_t jb, int64_t k0,
                                                              int64_t pb, bool max)
{
    POOL_COLUMNS(sum_avx2, max_avx2)
}

/* Columns of 2 or 4 keys, 4 whole columns at a time in the lanes of a vector: the keys' k-th of
 * each column side by side (a transpose), then summed in double in key order from 0, or maxed.
 * Every kernel set sums fewer than 8 keys one at a time from 0 (sum_portable, the tails of
 * sum_avx2 and sum_avx512): the same bits on each, so this serves all three. A column per call
 * cost ~15 cycles at pb = 4, most of a pooled map's cost at L = 1024 with 256 columns. */
__attribute__((target("avx2"))) static void pool_columns_2_4_avx2(double *out, const float *x,
                                                                  int64_t ja, int64_t jb,
                                                                  int64_t k0, int64_t pb, bool max)
{
    const int64_t cf = (ja - k0) / pb, cl = (jb - 1 - k0) / pb;
    const int64_t first = (ja - k0 + pb - 1) / pb; /* the first column that starts at or after ja */
    const int64_t last = (jb - k0) / pb - 1;       /* the last that ends at or before jb */
    int64_t c = cf;
    for (; c < first && c <= cl; c++) { /* a partial column before */
        const int64_t js = ja, je = k0 + (c + 1) * pb < jb ? k0 + (c + 1) * pb : jb;
        out[c - cf] = max ? (double)max_portable(x + js, je - js) : sum_portable(x + js, je - js);
    }
    for (; c + 3 <= last; c += 4) {
        const float *p = x + k0 + c * pb;
        __m128 e[4];
        if (pb == 4) { /* 4 columns of 4: transpose, e[t] = the t-th key of each */
            __m128 r0 = _mm_loadu_ps(p), r1 = _mm_loadu_ps(p + 4), r2 = _mm_loadu_ps(p + 8),
                   r3 = _mm_loadu_ps(p + 12);
            _MM_TRANSPOSE4_PS(r0, r1, r2, r3);
            e[0] = r0, e[1] = r1, e[2] = r2, e[3] = r3;
        } else { /* 4 columns of 2: the even keys, then the odd */
            const __m128 a = _mm_loadu_ps(p), b = _mm_loadu_ps(p + 4);
            e[0] = _mm_shuffle_ps(a, b, _MM_SHUFFLE(2, 0, 2, 0));
            e[1] = _mm_shuffle_ps(a, b, _MM_SHUFFLE(3, 1, 3, 1));
        }
        if (max) {
            __m128 m = _mm_max_ps(e[0], e[1]);
            if (pb == 4)
                m = _mm_max_ps(_mm_max_ps(m, e[2]), e[3]);
            _mm256_storeu_pd(out + (c - cf), _mm256_cvtps_pd(m));
        } else {
            __m256d sum = _mm256_add_pd(_mm256_setzero_pd(), _mm256_cvtps_pd(e[0]));
            for (int t = 1; t < pb; t++)
                sum = _mm256_add_pd(sum, _mm256_cvtps_pd(e[t]));
            _mm256_storeu_pd(out + (c - cf), sum);
        }
    }
    for (; c <= cl; c++) { /* the whole columns left, and a partial one after */
        const int64_t e0 = k0 + c * pb, e1 = e0 + pb;
        const int64_t js = ja > e0 ? ja : e0, je = jb < e1 ? jb : e1;
        out[c - cf] = max ? (double)max_portable(x + js, je - js) : sum_portable(x + js, je - js);
    }
}
#endif

void mha_run_pool_columns(mha_isa isa, double *out, const float *x, int64_t ja, int64_t jb,
                          int64_t k0, int64_t pb, bool max)
{
#ifdef HAVE_X86_KERNELS
    if ((isa == MHA_ISA_AVX512 || isa == MHA_ISA_AVX2) && (pb == 2 || pb == 4)) {
        pool_columns_2_4_avx2(out, x, ja, jb, k0, pb, max);
        return;
    }
    if (isa == MHA_ISA_AVX512) {
        pool_columns_avx512(out, x, ja, jb, k0, pb, max);
        return;
    }
    if (isa == MHA_ISA_AVX2) {
        pool_columns_avx2(out, x, ja, jb, k0, pb, max);
        return;
    }
#endif
    (void)isa;
    pool_columns_portable(out, x, ja, jb, k0, pb, max);
}

float mha_run_max(mha_isa isa, const float *x, int64_t n)
{
#ifdef HAVE_X86_KERNELS
    if (isa == MHA_ISA_AVX512)
        return max_avx512(x, n);
    if (isa == MHA_ISA_AVX2)
        return max_avx2(x, n);
#endif
    (void)isa;
    return max_portable(x, n);
}

double mha_run_sum(mha_isa isa, const float *x, int64_t n)
{
#ifdef HAVE_X86_KERNELS
    if (isa == MHA_ISA_AVX512)
        return sum_avx512(x, n);
    if (isa == MHA_ISA_AVX2)
        return sum_avx2(x, n);
#endif
    (void)isa;
    return sum_portable(x, n);
}

void mha_run_add_scaled(mha_isa isa, float *d, const float *x, int64_t n, float f)
{
#ifdef HAVE_X86_KERNELS
    if (isa == MHA_ISA_AVX512) {
        add_scaled_avx512(d, x, n, f);
        return;
    }
    if (isa == MHA_ISA_AVX2) {
        add_scaled_avx2(d, x, n, f);
        return;
    }
#endif
    (void)isa;
    add_scaled_portable(d, x, n, f);
}

void mha_run_div(mha_isa isa, float *x, int64_t n, float div)
{
#ifdef HAVE_X86_KERNELS
    if (isa == MHA_ISA_AVX512) {
        div_avx512(x, n, div);
        return;
    }
    if (isa == MHA_ISA_AVX2) {
        div_avx2(x, n, div);
        return;
    }
#endif
    (void)isa;
    div_portable(x, n, div);
}

int64_t mha_run_above(mha_isa isa, int32_t *idx, const float *x, int64_t n, float thr)
{
#ifdef HAVE_X86_KERNELS
    if (isa == MHA_ISA_AVX512 || isa == MHA_ISA_AVX2) { /* 256 keys at a time, a mask a run */
        int64_t c = 0;
        for (int64_t c0 = 0; c0 < n; c0 += 256) {
            const int64_t e = n - c0 < 256 ? n - c0 : 256;
            uint64_t mk[4];
            reach_masks(isa, mk, x + c0, e, thr);
            for (int64_t j = 0; j < e; j += 64) /* most runs have no key that reaches thr */
                for (uint64_t m = mk[j / 64]; m; m &= m - 1)
                    idx[c++] = (int32_t)(c0 + j + __builtin_ctzll(m));
        }
        return c;
    }
#endif
    (void)isa;
    return above_portable(idx, x, n, thr);
}

int64_t mha_run_topk_scan(mha_isa isa, mha_cand *cand, float *kt, int64_t kst, const float *x,
                          int64_t n, float thr, int64_t j0, int64_t nv)
{
#ifdef HAVE_X86_KERNELS
    if (isa == MHA_ISA_AVX512 || isa == MHA_ISA_AVX2) { /* 256 keys at a time */
        int64_t c = 0;
        for (int64_t c0 = 0; c0 < n; c0 += 256) {
            const int64_t e = n - c0 < 256 ? n - c0 : 256;
            uint64_t mk[4];
            reach_masks(isa, mk, x + c0, e, thr);
            c += take_runs_avx2(cand + c, kt, kst, x + c0, e, mk, j0 + c0, nv);
        }
        return c;
    }
#endif
    (void)isa;
    return topk_scan_portable(cand, kt, kst, x, n, thr, j0, nv);
}

int64_t mha_run_best_of(mha_isa isa, float *vals, int32_t *idx, int64_t k, float *v, int32_t *j,
                        int64_t n)
{
#ifdef HAVE_X86_KERNELS
    if (isa == MHA_ISA_AVX512 || isa == MHA_ISA_AVX2) { /* a few dozen a row: AVX2 is enough */
        for (int64_t c = n; c % 8; c++) { /* beats none: below every weight, the last key */
            v[c] = -INFINITY;
            j[c] = INT32_MAX;
        }
        best_of_avx2(vals, idx, k, v, j, n);
        return n < k ? n : k;
    }
#endif
    (void)isa;
    best_of_portable(vals, idx, k, v, j, n);
    return n < k ? n : k;
}

void mha_run_max_into(mha_isa isa, float *m, const float *x, int64_t n)
{
#ifdef HAVE_X86_KERNELS
    if (isa == MHA_ISA_AVX512 || isa == MHA_ISA_AVX2) { /* memory-bound: AVX2 is enough */
        max_into_avx2(m, x, n);
        return;
    }
#endif
    (void)isa;
    for (int64_t j = 0; j < n; j++)
        m[j] = x[j] > m[j] ? x[j] : m[j];
}

void mha_run_pool_accumulate(mha_isa isa, double *acc, const double *d, int64_t n, float f,
                             bool max)
{
#ifdef HAVE_X86_KERNELS
    if (isa == MHA_ISA_AVX512 || isa == MHA_ISA_AVX2) { /* a pass over a few columns: AVX2 */
        pool_accumulate_avx2(acc, d, n, f, max);
        return;
    }
#endif
    (void)isa;
    pool_accumulate_portable(acc, d, n, f, max);
}

float mha_run_topk_bound(mha_isa isa, const float *x, int64_t n, int64_t k, int64_t kst)
{
#ifdef HAVE_X86_KERNELS
    if (isa == MHA_ISA_AVX512 || isa == MHA_ISA_AVX2) /* a few maxima per row: AVX2 is enough */
        return topk_bound_avx2(x, n, k, kst);
#endif
    (void)isa;
    return topk_bound_portable(x, n, k, kst);
}
