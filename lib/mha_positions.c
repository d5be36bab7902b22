/*
 * mha_positions.c - what positions do in the attention core: ALiBi biases, the causal and window
 * rules, and which keys a block of query rows can reach at all (so the core skips the rest).
 *
 * Positions are floats here: every position is an integer below MHA_MAX_POSITION = 2^24, which
 * float32 holds exactly, so a difference p_i - p_j is exact too and the ALiBi bias
 * slope·(p_j - p_i) is one rounding, as in torch (HF converts position_ids to float32 as well).
 * The rules: causal allows key j for query i iff p_j <= p_i; a window W allows it iff
 * |p_i - p_j| < W; with both, i - W < j <= i in positions (Mistral's sliding window).
 */
#include "mha_forward_internal.h"

#include <math.h>
#include <string.h>

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#define HAVE_X86_KERNELS 1
#endif

/* Large enough that |p_i - p_j| < it for every pair of positions, small enough to stay exact. */
float mha_window_f(int64_t window)
{
    return window > 2 * MHA_MAX_POSITION ? (float)(2 * MHA_MAX_POSITION) : (float)window;
}

/* Whether the keys are the queries: key left out, or given with the query's shape and bits (a
 * torch-style call mha(x, x, x)). */
static bool keys_are_queries(const mha_inputs *in)
{
    const mha_tensor *q = &in->query, *k = &in->key;
    if (!k->data || k->data == q->data)
        return true;
    if (k->ndim != q->ndim)
        return false;
    int64_t n = 1;
    for (int d = 0; d < q->ndim; d++) {
        if (k->shape[d] != q->shape[d])
            return false;
        n *= q->shape[d];
    }
    return memcmp(k->data, q->data, (size_t)n * sizeof(float)) == 0;
}

bool mha_keys_at_queries(const mha_plan *plan, const mha_inputs *in)
{
    return !in->key_positions.data && plan->S0 == plan->L &&
           (!in->positions.data || keys_are_queries(in));
}

bool mha_positions_fill(float *qpos, float *kpos, const mha_plan *plan, const mha_inputs *in)
{
    const int64_t N = plan->N, L = plan->L, S0 = plan->S0;
    const mha_positions *qp = &in->positions, *kp = &in->key_positions;
    const bool at_queries = mha_keys_at_queries(plan, in);
    for (int64_t b = 0; b < N; b++) {
        for (int64_t i = 0; i < L; i++)
            qpos[b * L + i] = !qp->data ? (float)i
                              : qp->ndim == 2 ? (float)qp->data[b * L + i]
                                              : (float)qp->data[i];
        for (int64_t j = 0; j < S0; j++) {
            if (kp->data)
                kpos[b * S0 + j] = kp->ndim == 2 ? (float)kp->data[b * S0 + j] : (float)kp->data[j];
            else
                kpos[b * S0 + j] = at_queries ? qpos[b * L + j] : (float)j;
        }
    }
    for (int64_t b = 0; b < N; b++)
        for (int64_t j = 1; j < S0; j++)
            if (kpos[b * S0 + j] < kpos[b * S0 + j - 1])
                return false;
    return true;
}

/* Number of sorted kp[0,n) that are <= x (first index with kp > x). */
static int64_t count_le(const float *kp, int64_t n, float x)
{
    int64_t lo = 0, hi = n;
    while (lo < hi) {
        int64_t mid = lo + (hi - lo) / 2;
        if (kp[mid] <= x)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

/* Number of sorted kp[0,n) that are < x. */
static int64_t count_lt(const float *kp, int64_t n, float x)
{
    int64_t lo = 0, hi = n;
    while (lo < hi) {
        int64_t mid = lo + (hi - lo) / 2;
        if (kp[mid] < x)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

void mha_key_range(int64_t *lo, int64_t *hi, const float *qp, int64_t m, const float *kp,
                   int64_t S0, bool sorted, bool causal, int64_t window)
{
    *lo = 0;
    *hi = S0;
    if (!sorted || (!causal && !window) || m < 1)
        return;
    float qmin = qp[0], qmax = qp[0];
    for (int64_t r = 1; r < m; r++) {
        qmin = qp[r] < qmin ? qp[r] : qmin;
        qmax = qp[r] > qmax ? qp[r] : qmax;
    }
    const float W = mha_window_f(window);
    if (causal)
        *hi = count_le(kp, S0, qmax); /* keys at p_j <= max p_i */
    else
        *hi = count_lt(kp, S0, qmax + W); /* p_j < max p_i + W */
    if (window)
        *lo = count_le(kp, S0, qmin - W); /* keys at p_j <= min p_i - W are out of every row */
    if (*lo > *hi)
        *lo = *hi;
}

#ifdef HAVE_X86_KERNELS
/* The same operations as the scalar loop below (sub, mul, add: no FMA), 16 or 8 at a time. */
__attribute__((target("avx512f"))) static void alibi_row_avx512(float *row, const float *kp,
                                                                int64_t n, float p, float slope)
{
    const __m512 vp = _mm512_set1_ps(p), vs = _mm512_set1_ps(slope);
    int64_t c = 0;
    for (; c + 16 <= n; c += 16) {
        const __m512 b = _mm512_mul_ps(vs, _mm512_sub_ps(_mm512_loadu_ps(kp + c), vp));
        _mm512_storeu_ps(row + c, _mm512_add_ps(_mm512_loadu_ps(row + c), b));
    }
    if (c < n) {
        const __mmask16 tail = (__mmask16)((1u << (n - c)) - 1);
        const __m512 b = _mm512_mul_ps(vs, _mm512_sub_ps(_mm512_maskz_loadu_ps(tail, kp + c), vp));
        _mm512_mask_storeu_ps(row + c, tail, _mm512_add_ps(_mm512_maskz_loadu_ps(tail, row + c), b));
    }
}

__attribute__((target("avx2"))) static void alibi_row_avx2(float *row, const float *kp, int64_t n,
                                                           float p, float slope)
{
    const __m256 vp = _mm256_set1_ps(p), vs = _mm256_set1_ps(slope);
    int64_t c = 0;
    for (; c + 8 <= n; c += 8) {
        const __m256 b = _mm256_mul_ps(vs, _mm256_sub_ps(_mm256_loadu_ps(kp + c), vp));
        _mm256_storeu_ps(row + c, _mm256_add_ps(_mm256_loadu_ps(row + c), b));
    }
    for (; c < n; c++)
        row[c] += slope * (kp[c] - p);
}
#endif

void mha_alibi_row(mha_isa isa, float *row, const float *kp, int64_t n, float p, float slope)
{
#ifdef HAVE_X86_KERNELS
    if (isa == MHA_ISA_AVX512) {
        alibi_row_avx512(row, kp, n, p, slope);
        return;
    }
    if (isa == MHA_ISA_AVX2) {
        alibi_row_avx2(row, kp, n, p, slope);
        return;
    }
#endif
    (void)isa;
    for (int64_t c = 0; c < n; c++)
        row[c] += slope * (kp[c] - p); /* = -m·(p_i - p_j), the negation exact */
}

void mha_rules_row(float *row, const float *kp, int64_t n, float p, bool causal, int64_t window,
                   bool sorted)
{
    const float W = mha_window_f(window);
    if (sorted) { /* allowed keys are one run [a, z) */
        const int64_t a = window ? count_le(kp, n, p - W) : 0;
        const int64_t z = causal ? count_le(kp, n, p) : window ? count_lt(kp, n, p + W) : n;
        for (int64_t c = 0; c < a && c < n; c++)
            row[c] = -INFINITY;
        for (int64_t c = z > a ? z : a; c < n; c++)
            row[c] = -INFINITY;
        return;
    }
    for (int64_t c = 0; c < n; c++) {
        const float d = p - kp[c];
        const bool ok = (!causal || d >= 0.0f) && (!window || (d < W && -d < W));
        if (!ok)
            row[c] = -INFINITY;
    }
}
