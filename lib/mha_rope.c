/*
 * mha_rope.c - rotary position embedding (RoPE) as Hugging Face's Llama applies it.
 *
 * HF (modeling_llama.py): inv_freq[d] = theta^(-2d/hd) for d < hd/2; the angle of position p is
 * the float32 product inv_freq[d]·p; emb = cat(freqs, freqs); q' = q·cos(emb) + rotate_half(q)·
 * sin(emb), rotate_half(x) = cat(-x2, x1) with x1, x2 the two halves of the head. So dimension d
 * and d + hd/2 form a pair rotated by angle d:
 *     x'[d]        = x[d]·cos - x[d+hd/2]·sin
 *     x'[d + hd/2] = x[d+hd/2]·cos + x[d]·sin
 * each product rounded, then the sum (no FMA: the build is ISO C, -ffp-contract=off), as torch.
 * Where the float32 constants come from: inv_freq is computed in double and rounded once (HF
 * computes it in float32 ops, which can land one ulp away for some d); the angle is HF's float32
 * product; cos and sin are computed in double from that float32 angle and rounded once, i.e. the
 * correctly rounded values (torch's float32 cos is within an ulp of them).
 */
#include "mha_forward_internal.h"

#include <math.h>

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#define HAVE_X86_KERNELS 1
#endif

/* inv_freq[d] = theta^(-2d/hd), in double, rounded once. */
static float inv_freq_of(int64_t d, int64_t hd, double theta)
{
    return (float)(1.0 / pow(theta, (double)(2 * d) / (double)hd));
}

void mha_rope_inv_freq(float *inv_freq, int64_t hd, double theta)
{
    for (int64_t d = 0; d < hd / 2; d++)
        inv_freq[d] = inv_freq_of(d, hd, theta);
}

bool mha_rope_theta_fits(int64_t hd, double theta, float *worst)
{
    const float pmax = (float)(MHA_MAX_POSITION - 1);
    /* inv_freq_of is monotone in d (a monotone exponent, pow correctly rounded, a reciprocal
     * rounded once): the largest frequency is at d = 0 (1) or at the last d. Only those two are
     * computed, so that a head_dim of a million (the default --max-dim) costs two pow calls, not
     * half a million (a config check per PUT, and a fuzzed max_dim of 2^31 took 27 s). */
    *worst = 1.0f; /* d = 0 */
    if (hd / 2 > 1) {
        const float last = inv_freq_of(hd / 2 - 1, hd, theta);
        *worst = last > *worst ? last : *worst;
    }
    return isfinite(*worst * pmax); /* the largest angle, HF's float32 product */
}

void mha_rope_table_row(float *cs, const float *inv_freq, int64_t half, float p)
{
    for (int64_t d = 0; d < half; d++) {
        const float angle = inv_freq[d] * p;
        double s, c;
        sincos((double)angle, &s, &c);
        cs[d] = (float)c;
        cs[half + d] = (float)s;
    }
}

/* Pairs [d0, half) the scalar way. */
static void rotate_scalar(float *x, const float *cs, int64_t half, int64_t d0)
{
    const float *cosv = cs, *sinv = cs + half;
    float *x1 = x, *x2 = x + half;
    for (int64_t d = d0; d < half; d++) {
        const float a = x1[d], b = x2[d];
        const float ac = a * cosv[d], bs = b * sinv[d], bc = b * cosv[d], as = a * sinv[d];
        x1[d] = ac - bs;
        x2[d] = bc + as;
    }
}

#ifdef HAVE_X86_KERNELS
/* The same products and sums as rotate_scalar, 16 or 8 pairs at a time (no FMA). */
__attribute__((target("avx512f"))) static void rotate_avx512(float *x, const float *cs,
                                                             int64_t half)
{
    int64_t d = 0;
    for (; d + 16 <= half; d += 16) {
        const __m512 a = _mm512_loadu_ps(x + d), b = _mm512_loadu_ps(x + half + d);
        const __m512 c = _mm512_loadu_ps(cs + d), s = _mm512_loadu_ps(cs + half + d);
        _mm512_storeu_ps(x + d, _mm512_sub_ps(_mm512_mul_ps(a, c), _mm512_mul_ps(b, s)));
        _mm512_storeu_ps(x + half + d, _mm512_add_ps(_mm512_mul_ps(b, c), _mm512_mul_ps(a, s)));
    }
    _mm256_zeroupper(); /* see rotate_avx2 */
    rotate_scalar(x, cs, half, d);
}

__attribute__((target("avx2"))) static void rotate_avx2(float *x, const float *cs, int64_t half)
{
    int64_t d = 0;
    for (; d + 8 <= half; d += 8) {
        const __m256 a = _mm256_loadu_ps(x + d), b = _mm256_loadu_ps(x + half + d);
        const __m256 c = _mm256_loadu_ps(cs + d), s = _mm256_loadu_ps(cs + half + d);
        _mm256_storeu_ps(x + d, _mm256_sub_ps(_mm256_mul_ps(a, c), _mm256_mul_ps(b, s)));
        _mm256_storeu_ps(x + half + d, _mm256_add_ps(_mm256_mul_ps(b, c), _mm256_mul_ps(a, s)));
    }
    /* the scalar tail is legacy SSE code: entered with the ymm registers' upper halves in use it
     * cost ~300 cycles a call on Zen 3, and GCC puts no vzeroupper before a sibling call */
    _mm256_zeroupper();
    rotate_scalar(x, cs, half, d);
}
#endif

void mha_rope_rotate(mha_isa isa, float *x, const float *cs, int64_t half)
{
#ifdef HAVE_X86_KERNELS
    if (isa == MHA_ISA_AVX512) {
        rotate_avx512(x, cs, half);
        return;
    }
    if (isa == MHA_ISA_AVX2) {
        rotate_avx2(x, cs, half);
        return;
    }
#endif
    (void)isa;
    rotate_scalar(x, cs, half, 0);
}
