/*
 * mha_softmax.c - the row softmax of the attention core, with its own vectorised expf.
 *
 * Hand-written because it is the hot path that is not a GEMM: one exp per score (N·H·L·S of them,
 * 67 million for L = S = 2048, H = 16), where glibc's scalar expf would cost more than the GEMMs
 * around it. exp(x) = 2^n · p(r), n = round(x·log2 e), r = x - n·ln 2 (two-part ln 2), p the Cephes
 * degree-6 polynomial: about 1 ulp on the range the softmax uses (x <= 0). Results below
 * FLT_MIN (x < -87.33) are flushed to 0, so masked scores (-inf) give exactly 0.
 *
 * The AVX-512F and AVX2/FMA kernels are compiled with target attributes and picked at run time;
 * every other CPU runs the portable version of the same arithmetic. No -ffast-math: -inf must
 * stay -inf.
 */
#include "mha_forward_internal.h"

#include <math.h>
#include <string.h>

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#define MHA_HAVE_AVX2_KERNEL 1
#endif

#define EXP_HI 88.0f       /* inputs are clamped here: exp(88) is finite in float     */
#define EXP_LO -87.336544f /* ln(FLT_MIN): below this the result is flushed to 0       */
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
    union {
        uint32_t u;
        float f;
    } two = {.u = (uint32_t)((int32_t)n + 127) << 23};
    return p * two.f;
}

/* Every kernel: with inv NULL, the softmax (and the copy to dst); with inv, only the exponentials
 * x = exp(x - max) and inv[r] = 1 / sum (0 for a row with every key masked, whose x become 0). */
static void softmax_rows_portable(float *x, int64_t rows, int64_t n, int64_t ld, float *dst,
                                  float *inv_out)
{
    for (int64_t r = 0; r < rows; r++) {
        float *row = x + r * ld;
        float max = -INFINITY;
        for (int64_t j = 0; j < n; j++)
            max = row[j] > max ? row[j] : max;
        if (max == -INFINITY) {
            memset(row, 0, (size_t)n * sizeof(float));
            if (dst)
                memset(dst + r * ld, 0, (size_t)n * sizeof(float));
            if (inv_out)
                inv_out[r] = 0.0f;
            continue;
        }
        float sum = 0.0f;
        for (int64_t j = 0; j < n; j++) {
            row[j] = expf_portable(row[j] - max);
            sum += row[j];
        }
        float inv = 1.0f / sum;
        if (inv_out) {
            inv_out[r] = inv;
            continue;
        }
        for (int64_t j = 0; j < n; j++)
            row[j] *= inv;
        if (dst)
            memcpy(dst + r * ld, row, (size_t)n * sizeof(float));
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
    __m256i e =
        _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23);
    return _mm256_and_ps(_mm256_mul_ps(p, _mm256_castsi256_ps(e)), keep);
}

__attribute__((target("avx2,fma"))) static void
softmax_rows_avx2(float *x, int64_t rows, int64_t n, int64_t ld, float *dst, float *inv_out)
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
            if (dst)
                memset(dst + r * ld, 0, (size_t)n * sizeof(float));
            if (inv_out)
                inv_out[r] = 0.0f;
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
        if (inv_out) {
            inv_out[r] = 1.0f / _mm_cvtss_f32(s4);
            continue;
        }
        __m256 inv = _mm256_set1_ps(1.0f / _mm_cvtss_f32(s4));
        float *out = dst ? dst + r * ld : NULL;
        if (out && ((uintptr_t)out & 31) == 0) { /* the weights output: streamed, not cached */
            for (j = 0; j + 8 <= n; j += 8) {
                __m256 v = _mm256_mul_ps(_mm256_loadu_ps(row + j), inv);
                _mm256_storeu_ps(row + j, v);
                _mm256_stream_ps(out + j, v);
            }
        } else {
            for (j = 0; j + 8 <= n; j += 8) {
                __m256 v = _mm256_mul_ps(_mm256_loadu_ps(row + j), inv);
                _mm256_storeu_ps(row + j, v);
                if (out)
                    _mm256_storeu_ps(out + j, v);
            }
        }
        for (; j < n; j++) {
            row[j] *= _mm256_cvtss_f32(inv);
            if (out)
                out[j] = row[j];
        }
    }
}

__attribute__((target("avx2,fma"))) static void expf_array_avx2(float *out, const float *in,
                                                                int64_t n)
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

__attribute__((target("avx2"))) static void copy_stream_avx2(float *dst, const float *src,
                                                             int64_t n)
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

/* The same arithmetic 16 lanes wide, for CPUs with AVX-512F (Zen 4 and later, Intel server parts):
 * about half the time of the AVX2 kernel on the softmax, 5-7% of a large pass. */
__attribute__((target("avx512f"))) static inline __m512 exp_avx512(__m512 x)
{
    __mmask16 keep = _mm512_cmp_ps_mask(x, _mm512_set1_ps(EXP_LO), _CMP_GE_OQ);
    x = _mm512_min_ps(x, _mm512_set1_ps(EXP_HI));
    x = _mm512_max_ps(x, _mm512_set1_ps(EXP_LO));
    __m512 n = _mm512_roundscale_ps(_mm512_mul_ps(x, _mm512_set1_ps(LOG2E)),
                                    _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m512 r = _mm512_fnmadd_ps(n, _mm512_set1_ps(LN2_HI), x);
    r = _mm512_fnmadd_ps(n, _mm512_set1_ps(LN2_LO), r);
    __m512 p = _mm512_set1_ps(P0);
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(P1));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(P2));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(P3));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(P4));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(P5));
    p = _mm512_fmadd_ps(_mm512_mul_ps(p, r), r, _mm512_add_ps(r, _mm512_set1_ps(1.0f)));
    __m512i e =
        _mm512_slli_epi32(_mm512_add_epi32(_mm512_cvtps_epi32(n), _mm512_set1_epi32(127)), 23);
    return _mm512_maskz_mov_ps(keep, _mm512_mul_ps(p, _mm512_castsi512_ps(e)));
}

__attribute__((target("avx512f"))) static void
softmax_rows_avx512(float *x, int64_t rows, int64_t n, int64_t ld, float *dst, float *inv_out)
{
    const int64_t body = n / 16 * 16;
    const __mmask16 tail = (__mmask16)((1u << (n - body)) - 1);
    const __m512 neg_inf = _mm512_set1_ps(-INFINITY);
    for (int64_t r = 0; r < rows; r++) {
        float *row = x + r * ld;
        __m512 vmax = neg_inf;
        for (int64_t j = 0; j < body; j += 16)
            vmax = _mm512_max_ps(vmax, _mm512_loadu_ps(row + j));
        if (tail)
            vmax = _mm512_max_ps(vmax, _mm512_mask_loadu_ps(neg_inf, tail, row + body));
        float max = _mm512_reduce_max_ps(vmax);
        if (max == -INFINITY) {
            memset(row, 0, (size_t)n * sizeof(float));
            if (dst)
                memset(dst + r * ld, 0, (size_t)n * sizeof(float));
            if (inv_out)
                inv_out[r] = 0.0f;
            continue;
        }
        __m512 vm = _mm512_set1_ps(max);
        __m512 vsum = _mm512_setzero_ps();
        for (int64_t j = 0; j < body; j += 16) {
            __m512 e = exp_avx512(_mm512_sub_ps(_mm512_loadu_ps(row + j), vm));
            _mm512_storeu_ps(row + j, e);
            vsum = _mm512_add_ps(vsum, e);
        }
        if (tail) {
            __m512 e =
                exp_avx512(_mm512_sub_ps(_mm512_mask_loadu_ps(neg_inf, tail, row + body), vm));
            _mm512_mask_storeu_ps(row + body, tail, e);
            vsum = _mm512_add_ps(vsum, e); /* masked-off lanes are exp(-inf) = 0 */
        }
        if (inv_out) {
            inv_out[r] = 1.0f / _mm512_reduce_add_ps(vsum);
            continue;
        }
        __m512 inv = _mm512_set1_ps(1.0f / _mm512_reduce_add_ps(vsum));
        float *out = dst ? dst + r * ld : NULL;
        if (out && ((uintptr_t)out & 63) == 0) { /* the weights output: streamed, not cached */
            for (int64_t j = 0; j < body; j += 16) {
                __m512 v = _mm512_mul_ps(_mm512_loadu_ps(row + j), inv);
                _mm512_storeu_ps(row + j, v);
                _mm512_stream_ps(out + j, v);
            }
        } else {
            for (int64_t j = 0; j < body; j += 16) {
                __m512 v = _mm512_mul_ps(_mm512_loadu_ps(row + j), inv);
                _mm512_storeu_ps(row + j, v);
                if (out)
                    _mm512_storeu_ps(out + j, v);
            }
        }
        if (tail) {
            __m512 v = _mm512_mul_ps(_mm512_maskz_loadu_ps(tail, row + body), inv);
            _mm512_mask_storeu_ps(row + body, tail, v);
            if (out)
                _mm512_mask_storeu_ps(out + body, tail, v);
        }
    }
}

__attribute__((target("avx512f"))) static void expf_array_avx512(float *out, const float *in,
                                                                 int64_t n)
{
    int64_t j = 0;
    for (; j + 16 <= n; j += 16)
        _mm512_storeu_ps(out + j, exp_avx512(_mm512_loadu_ps(in + j)));
    if (j < n) {
        __mmask16 tail = (__mmask16)((1u << (n - j)) - 1);
        _mm512_mask_storeu_ps(out + j, tail, exp_avx512(_mm512_maskz_loadu_ps(tail, in + j)));
    }
}

static bool have_avx2(void)
{
    /* __builtin_cpu_supports reads state libgcc fills once at start-up: no mutable global here. */
    return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
}

static bool have_avx512(void)
{
    return __builtin_cpu_supports("avx512f");
}
#endif

static mha_isa best_isa(void)
{
#ifdef MHA_HAVE_AVX2_KERNEL
    if (have_avx512())
        return MHA_ISA_AVX512;
    if (have_avx2())
        return MHA_ISA_AVX2;
#endif
    return MHA_ISA_PORTABLE;
}

static bool softmax_any(mha_isa isa, float *x, int64_t rows, int64_t n, int64_t ld, float *dst,
                        float *inv)
{
    switch (isa) {
#ifdef MHA_HAVE_AVX2_KERNEL
    case MHA_ISA_AVX512:
        if (!have_avx512())
            return false;
        softmax_rows_avx512(x, rows, n, ld, dst, inv);
        return true;
    case MHA_ISA_AVX2:
        if (!have_avx2())
            return false;
        softmax_rows_avx2(x, rows, n, ld, dst, inv);
        return true;
#endif
    case MHA_ISA_PORTABLE:
        softmax_rows_portable(x, rows, n, ld, dst, inv);
        return true;
    default:
        return false;
    }
}

bool mha_softmax_rows_isa(mha_isa isa, float *x, int64_t rows, int64_t n, int64_t ld, float *dst)
{
    return softmax_any(isa, x, rows, n, ld, dst, NULL);
}

void mha_softmax_rows(float *x, int64_t rows, int64_t n, int64_t ld, float *dst)
{
    softmax_any(best_isa(), x, rows, n, ld, dst, NULL);
}

bool mha_softmax_exp_rows_isa(mha_isa isa, float *x, int64_t rows, int64_t n, int64_t ld,
                              float *inv)
{
    return softmax_any(isa, x, rows, n, ld, NULL, inv);
}

void mha_softmax_exp_rows(float *x, int64_t rows, int64_t n, int64_t ld, float *inv)
{
    softmax_any(best_isa(), x, rows, n, ld, NULL, inv);
}

#ifdef MHA_HAVE_AVX2_KERNEL
__attribute__((target("avx512f"))) static void scale_row_avx512(float *dst, const float *src,
                                                                int64_t n, float inv)
{
    int64_t j = 0;
    while (j < n && ((uintptr_t)(dst + j) & 63)) { /* up to the first 64-byte boundary */
        dst[j] = src[j] * inv;
        j++;
    }
    const __m512 v = _mm512_set1_ps(inv);
    for (; j + 16 <= n; j += 16)
        _mm512_stream_ps(dst + j, _mm512_mul_ps(_mm512_loadu_ps(src + j), v));
    for (; j < n; j++)
        dst[j] = src[j] * inv;
}

__attribute__((target("avx2"))) static void scale_row_avx2(float *dst, const float *src, int64_t n,
                                                           float inv)
{
    int64_t j = 0;
    while (j < n && ((uintptr_t)(dst + j) & 31)) {
        dst[j] = src[j] * inv;
        j++;
    }
    const __m256 v = _mm256_set1_ps(inv);
    for (; j + 8 <= n; j += 8)
        _mm256_stream_ps(dst + j, _mm256_mul_ps(_mm256_loadu_ps(src + j), v));
    for (; j < n; j++)
        dst[j] = src[j] * inv;
}
#endif

void mha_scale_rows_stream(float *dst, int64_t ld_dst, const float *src, int64_t ld_src,
                           int64_t rows, int64_t n, const float *inv)
{
    const mha_isa isa = ((uintptr_t)dst & 3) ? MHA_ISA_PORTABLE : best_isa();
    for (int64_t r = 0; r < rows; r++) {
        float *d = dst + r * ld_dst;
        const float *x = src + r * ld_src;
        switch (isa) {
#ifdef MHA_HAVE_AVX2_KERNEL
        case MHA_ISA_AVX512:
            scale_row_avx512(d, x, n, inv[r]);
            break;
        case MHA_ISA_AVX2:
            scale_row_avx2(d, x, n, inv[r]);
            break;
#endif
        default:
            for (int64_t j = 0; j < n; j++)
                d[j] = x[j] * inv[r];
        }
    }
}

#ifdef MHA_HAVE_AVX2_KERNEL
/* y[j] = x[j] / div or x[j] · mul (div 0) for j < n (y may be x): the same IEEE operation per
 * element as the scalar loop, 16 at a time. */
__attribute__((target("avx512f"))) static void div_mul_row_avx512(float *y, const float *x,
                                                                  int64_t n, float div, float mul)
{
    const __m512 vd = _mm512_set1_ps(div), vm = _mm512_set1_ps(mul);
    int64_t j = 0;
    for (; j + 16 <= n; j += 16) {
        const __m512 v = _mm512_loadu_ps(x + j);
        _mm512_storeu_ps(y + j, div != 0.0f ? _mm512_div_ps(v, vd) : _mm512_mul_ps(v, vm));
    }
    if (j < n) {
        const __mmask16 tail = (__mmask16)((1u << (n - j)) - 1);
        const __m512 v = _mm512_maskz_loadu_ps(tail, x + j);
        _mm512_mask_storeu_ps(y + j, tail,
                              div != 0.0f ? _mm512_div_ps(v, vd) : _mm512_mul_ps(v, vm));
    }
}

__attribute__((target("avx2"))) static void div_mul_row_avx2(float *y, const float *x, int64_t n,
                                                             float div, float mul)
{
    const __m256 vd = _mm256_set1_ps(div), vm = _mm256_set1_ps(mul);
    int64_t j = 0;
    for (; j + 8 <= n; j += 8) {
        const __m256 v = _mm256_loadu_ps(x + j);
        _mm256_storeu_ps(y + j, div != 0.0f ? _mm256_div_ps(v, vd) : _mm256_mul_ps(v, vm));
    }
    for (; j < n; j++)
        y[j] = div != 0.0f ? x[j] / div : x[j] * mul;
}
#endif

/* false (nothing done) when this CPU lacks isa's instructions. */
static bool isa_usable(mha_isa isa)
{
    switch (isa) {
#ifdef MHA_HAVE_AVX2_KERNEL
    case MHA_ISA_AVX512:
        return have_avx512();
    case MHA_ISA_AVX2:
        return have_avx2();
#endif
    case MHA_ISA_PORTABLE:
        return true;
    default:
        return false;
    }
}

bool mha_div_mul_rows_to_isa(mha_isa isa, float *y, int64_t ys, const float *x, int64_t rs,
                             int64_t rows, int64_t n, float div, const float *mul)
{
    if (!isa_usable(isa))
        return false;
    for (int64_t r = 0; r < rows; r++) {
        float *out = y + r * ys;
        const float *row = x + r * rs;
        const float m = mul ? mul[r] : 1.0f;
        switch (isa) {
#ifdef MHA_HAVE_AVX2_KERNEL
        case MHA_ISA_AVX512:
            div_mul_row_avx512(out, row, n, div, m);
            break;
        case MHA_ISA_AVX2:
            div_mul_row_avx2(out, row, n, div, m);
            break;
#endif
        default:
            for (int64_t j = 0; j < n; j++)
                out[j] = div != 0.0f ? row[j] / div : row[j] * m;
        }
    }
    return true;
}

bool mha_div_mul_rows_isa(mha_isa isa, float *x, int64_t rs, int64_t rows, int64_t n, float div,
                          const float *mul)
{
    return mha_div_mul_rows_to_isa(isa, x, rs, x, rs, rows, n, div, mul);
}

#ifdef MHA_HAVE_AVX2_KERNEL
__attribute__((target("avx512f"))) static void scaled_add_row_avx512(float *d, const float *x,
                                                                    int64_t n, float mul, bool add)
{
    const __m512 vm = _mm512_set1_ps(mul);
    int64_t j = 0;
    for (; j + 16 <= n; j += 16) {
        const __m512 p = _mm512_mul_ps(_mm512_loadu_ps(x + j), vm);
        _mm512_storeu_ps(d + j, add ? _mm512_add_ps(_mm512_loadu_ps(d + j), p) : p);
    }
    if (j < n) {
        const __mmask16 tail = (__mmask16)((1u << (n - j)) - 1);
        const __m512 p = _mm512_mul_ps(_mm512_maskz_loadu_ps(tail, x + j), vm);
        _mm512_mask_storeu_ps(d + j, tail,
                              add ? _mm512_add_ps(_mm512_maskz_loadu_ps(tail, d + j), p) : p);
    }
}

__attribute__((target("avx2"))) static void scaled_add_row_avx2(float *d, const float *x, int64_t n,
                                                                float mul, bool add)
{
    const __m256 vm = _mm256_set1_ps(mul);
    int64_t j = 0;
    for (; j + 8 <= n; j += 8) {
        const __m256 p = _mm256_mul_ps(_mm256_loadu_ps(x + j), vm);
        _mm256_storeu_ps(d + j, add ? _mm256_add_ps(_mm256_loadu_ps(d + j), p) : p);
    }
    for (; j < n; j++)
        d[j] = add ? d[j] + x[j] * mul : x[j] * mul;
}
#endif

bool mha_scaled_add_rows_isa(mha_isa isa, float *dst, int64_t ld_dst, const float *src,
                             int64_t ld_src, int64_t rows, int64_t n, const float *mul, bool add)
{
    if (!isa_usable(isa))
        return false;
    for (int64_t r = 0; r < rows; r++) {
        float *d = dst + r * ld_dst;
        const float *x = src + r * ld_src;
        switch (isa) {
#ifdef MHA_HAVE_AVX2_KERNEL
        case MHA_ISA_AVX512:
            scaled_add_row_avx512(d, x, n, mul[r], add);
            break;
        case MHA_ISA_AVX2:
            scaled_add_row_avx2(d, x, n, mul[r], add);
            break;
#endif
        default:
            for (int64_t j = 0; j < n; j++)
                d[j] = add ? d[j] + x[j] * mul[r] : x[j] * mul[r];
        }
    }
    return true;
}

void mha_scaled_add_rows(float *dst, int64_t ld_dst, const float *src, int64_t ld_src, int64_t rows,
                         int64_t n, const float *mul, bool add)
{
    mha_scaled_add_rows_isa(best_isa(), dst, ld_dst, src, ld_src, rows, n, mul, add);
}

void mha_div_rows(float *x, int64_t rs, int64_t rows, int64_t n, float div)
{
    mha_div_mul_rows_isa(best_isa(), x, rs, rows, n, div, NULL);
}

void mha_mul_rows(float *x, int64_t rs, int64_t rows, int64_t n, const float *mul)
{
    mha_div_mul_rows_isa(best_isa(), x, rs, rows, n, 0.0f, mul);
}

bool mha_expf_array_isa(mha_isa isa, float *out, const float *in, int64_t n)
{
    switch (isa) {
#ifdef MHA_HAVE_AVX2_KERNEL
    case MHA_ISA_AVX512:
        if (!have_avx512())
            return false;
        expf_array_avx512(out, in, n);
        return true;
    case MHA_ISA_AVX2:
        if (!have_avx2())
            return false;
        expf_array_avx2(out, in, n);
        return true;
#endif
    case MHA_ISA_PORTABLE:
        for (int64_t j = 0; j < n; j++)
            out[j] = expf_portable(in[j]);
        return true;
    default:
        return false;
    }
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
    mha_expf_array_isa(best_isa(), out, in, n);
}
