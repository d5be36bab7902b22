/*
 * mha_softmax.c - the row softmax of the attention core, with its own vectorised expf.
 *
 * Hand-written because it is the hot path that is not a GEMM: one exp per score (N·H·L·S of them,
 * 67 million for L = S = 2048, H = 16), where glibc's scalar expf would cost more than the GEMMs
 * around it. exp(x) = 2^n · p(r), n = round(x·log2 e), r = x - n·ln 2 (two-part ln 2), p the Cephes
 * degree-6 polynomial: about 1 ulp on the range the softmax uses (x <= 0). Results below
 * FLT_MIN (x < -87.33) are flushed to 0, so masked scores (-inf) give exactly 0.
 *
 * The AVX2/FMA kernel is compiled with a target attribute and picked at run time; every other
 * CPU runs the portable version of the same arithmetic. No -ffast-math: -inf must stay -inf.
 */
#include "mha_internal.h"

#include <math.h>
#include <string.h>

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#define MHA_HAVE_AVX2_KERNEL 1
#endif

#define EXP_HI 88.0f          /* inputs are clamped here: exp(88) is finite in float     */
#define EXP_LO -87.336544f    /* ln(FLT_MIN): below this the result is flushed to 0       */
#define LOG2E 1.44269504088896341f
#define LN2_HI 0.693359375f
#define LN2_LO -2.12194440e-4f
#define P0 1.9875691500e-4f
#define P1 1.3981999507e-3f
#define P2 8.3334519073e-3f
#define P3 4.1665795894e-2f
#define P4 1.6666665459e-1f
#define P5 5.0000001201e-1f

static inline float expf_portable(float x)
{
    if (!(x >= EXP_LO)) /* also catches -inf (and NaN, which never reaches here) */
        return 0.0f;
    if (x > EXP_HI)
        x = EXP_HI;
    float n = floorf(x * LOG2E + 0.5f);
    float r = x - n * LN2_HI;
    r = r - n * LN2_LO;
    float p = P0;
    p = p * r + P1;
    p = p * r + P2;
    p = p * r + P3;
    p = p * r + P4;
    p = p * r + P5;
    p = p * r * r + r + 1.0f;
    union { uint32_t u; float f; } two = {.u = (uint32_t)((int32_t)n + 127) << 23};
    return p * two.f;
}

static void softmax_rows_portable(float *x, int64_t rows, int64_t n, int64_t ld)
{
    for (int64_t r = 0; r < rows; r++) {
        float *row = x + r * ld;
        float max = -INFINITY;
        for (int64_t j = 0; j < n; j++)
            max = row[j] > max ? row[j] : max;
        if (max == -INFINITY) {
            memset(row, 0, (size_t)n * sizeof(float));
            continue;
        }
        float sum = 0.0f;
        for (int64_t j = 0; j < n; j++) {
            row[j] = expf_portable(row[j] - max);
            sum += row[j];
        }
        float inv = 1.0f / sum;
        for (int64_t j = 0; j < n; j++)
            row[j] *= inv;
    }
}

#ifdef MHA_HAVE_AVX2_KERNEL
__attribute__((target("avx2,fma"))) static inline __m256 exp_avx2(__m256 x)
{
    __m256 keep = _mm256_cmp_ps(x, _mm256_set1_ps(EXP_LO), _CMP_GE_OQ);
    x = _mm256_min_ps(x, _mm256_set1_ps(EXP_HI));
    x = _mm256_max_ps(x, _mm256_set1_ps(EXP_LO));
    __m256 n = _mm256_round_ps(_mm256_mul_ps(x, _mm256_set1_ps(LOG2E)),
                               _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m256 r = _mm256_fnmadd_ps(n, _mm256_set1_ps(LN2_HI), x);
    r = _mm256_fnmadd_ps(n, _mm256_set1_ps(LN2_LO), r);
    __m256 p = _mm256_set1_ps(P0);
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(P1));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(P2));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(P3));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(P4));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(P5));
    p = _mm256_fmadd_ps(_mm256_mul_ps(p, r), r, _mm256_add_ps(r, _mm256_set1_ps(1.0f)));
    __m256i e = _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23);
    return _mm256_and_ps(_mm256_mul_ps(p, _mm256_castsi256_ps(e)), keep);
}

__attribute__((target("avx2,fma"))) static void softmax_rows_avx2(float *x, int64_t rows, int64_t n,
                                                                   int64_t ld)
{
    for (int64_t r = 0; r < rows; r++) {
        float *row = x + r * ld;
        int64_t j = 0;
        __m256 vmax = _mm256_set1_ps(-INFINITY);
        for (; j + 8 <= n; j += 8)
            vmax = _mm256_max_ps(vmax, _mm256_loadu_ps(row + j));
        __m128 m4 = _mm_max_ps(_mm256_castps256_ps128(vmax), _mm256_extractf128_ps(vmax, 1));
        m4 = _mm_max_ps(m4, _mm_movehl_ps(m4, m4));
        m4 = _mm_max_ss(m4, _mm_shuffle_ps(m4, m4, 1));
        float max = _mm_cvtss_f32(m4);
        for (; j < n; j++)
            max = row[j] > max ? row[j] : max;
        if (max == -INFINITY) {
            memset(row, 0, (size_t)n * sizeof(float));
            continue;
        }
        __m256 vm = _mm256_set1_ps(max);
        __m256 vsum = _mm256_setzero_ps();
        for (j = 0; j + 8 <= n; j += 8) {
            __m256 e = exp_avx2(_mm256_sub_ps(_mm256_loadu_ps(row + j), vm));
            _mm256_storeu_ps(row + j, e);
            vsum = _mm256_add_ps(vsum, e);
        }
        if (j < n) { /* tail through a padded lane block: same arithmetic as the body */
            float tmp[8];
            int64_t rest = n - j;
            for (int k = 0; k < 8; k++)
                tmp[k] = k < rest ? row[j + k] - max : -INFINITY;
            __m256 e = exp_avx2(_mm256_loadu_ps(tmp));
            _mm256_storeu_ps(tmp, e);
            vsum = _mm256_add_ps(vsum, e);
            for (int k = 0; k < rest; k++)
                row[j + k] = tmp[k];
        }
        __m128 s4 = _mm_add_ps(_mm256_castps256_ps128(vsum), _mm256_extractf128_ps(vsum, 1));
        s4 = _mm_add_ps(s4, _mm_movehl_ps(s4, s4));
        s4 = _mm_add_ss(s4, _mm_shuffle_ps(s4, s4, 1));
        __m256 inv = _mm256_set1_ps(1.0f / _mm_cvtss_f32(s4));
        for (j = 0; j + 8 <= n; j += 8)
            _mm256_storeu_ps(row + j, _mm256_mul_ps(_mm256_loadu_ps(row + j), inv));
        for (; j < n; j++)
            row[j] *= _mm256_cvtss_f32(inv);
    }
}

__attribute__((target("avx2,fma"))) static void expf_array_avx2(float *out, const float *in, int64_t n)
{
    int64_t j = 0;
    for (; j + 8 <= n; j += 8)
        _mm256_storeu_ps(out + j, exp_avx2(_mm256_loadu_ps(in + j)));
    if (j < n) {
        float tmp[8];
        for (int k = 0; k < 8; k++)
            tmp[k] = j + k < n ? in[j + k] : 0.0f;
        _mm256_storeu_ps(tmp, exp_avx2(_mm256_loadu_ps(tmp)));
        for (int k = 0; j + k < n; k++)
            out[j + k] = tmp[k];
    }
}

__attribute__((target("avx2"))) static void copy_stream_avx2(float *dst, const float *src, int64_t n)
{
    int64_t j = 0;
    while (j < n && ((uintptr_t)(dst + j) & 31)) { /* up to the first 32-byte boundary */
        dst[j] = src[j];
        j++;
    }
    for (; j + 8 <= n; j += 8)
        _mm256_stream_ps(dst + j, _mm256_loadu_ps(src + j));
    for (; j < n; j++)
        dst[j] = src[j];
}

static bool have_avx2(void)
{
    /* __builtin_cpu_supports reads state libgcc fills once at start-up: no mutable global here. */
    return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
}
#endif

void mha_softmax_rows(float *x, int64_t rows, int64_t n, int64_t ld)
{
#ifdef MHA_HAVE_AVX2_KERNEL
    if (have_avx2()) {
        softmax_rows_avx2(x, rows, n, ld);
        return;
    }
#endif
    softmax_rows_portable(x, rows, n, ld);
}

void mha_copy_stream(float *dst, const float *src, int64_t n)
{
#ifdef MHA_HAVE_AVX2_KERNEL
    if (have_avx2() && ((uintptr_t)dst & 3) == 0) {
        copy_stream_avx2(dst, src, n);
        return;
    }
#endif
    memcpy(dst, src, (size_t)n * sizeof(float));
}

/* Orders the streaming stores above before anything another thread reads after the pass. */
void mha_copy_stream_fence(void)
{
#ifdef MHA_HAVE_AVX2_KERNEL
    _mm_sfence();
#endif
}

void mha_expf_array(float *out, const float *in, int64_t n)
{
#ifdef MHA_HAVE_AVX2_KERNEL
    if (have_avx2()) {
        expf_array_avx2(out, in, n);
        return;
    }
#endif
    for (int64_t j = 0; j < n; j++)
        out[j] = expf_portable(in[j]);
}
