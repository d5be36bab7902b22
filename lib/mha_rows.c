/*
 * mha_rows.c - vectorised operations on rows of floats that the attention core runs around its
 * GEMMs: division or scaling of each row (q / √hd, the head outputs' 1/sum, the softmax's alpha),
 * scaled sums (the averaged weights), and the weights' scaled copies with non-temporal stores.
 *
 * Each gives the scalar loop's IEEE result bit for bit (one division or product per element, the
 * product rounded before the sum), whatever the instruction set: AVX-512F or AVX2 as the pass's
 * ISA says, the portable loop otherwise.
 */
#include "mha_forward_internal.h"
#include "mha_kernels.h"

#include <string.h>

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#define MHA_HAVE_AVX2_KERNEL 1
#endif

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

void mha_scale_rows_stream_isa(mha_isa isa, float *dst, int64_t ld_dst, const float *src,
                               int64_t ld_src, int64_t rows, int64_t n, const float *inv)
{
    if (((uintptr_t)dst & 3) || !mha_isa_usable(isa))
        isa = MHA_ISA_PORTABLE;
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
/* y[r][j] = x[r][j] / div (by_div), or x[r][j] · mul[r] (mul NULL: 1), for r < rows, j < n (y may
 * be x): the same IEEE operation per element as the scalar loop, 16 at a time. Inlined with by_div
 * and n constant where they can be (below). */
__attribute__((target("avx512f"), always_inline)) static inline void
div_mul_rows_n_avx512(float *y, int64_t ys, const float *x, int64_t rs, int64_t rows, int64_t n,
                      const bool by_div, float div, const float *mul)
{
    const __m512 vd = _mm512_set1_ps(div);
    const int64_t body = n / 16 * 16;
    const __mmask16 tail = (__mmask16)((1u << (n - body)) - 1);
    for (int64_t r = 0; r < rows; r++) {
        float *yr = y + r * ys;
        const float *xr = x + r * rs;
        const __m512 vm = _mm512_set1_ps(mul ? mul[r] : 1.0f);
        for (int64_t j = 0; j < body; j += 16) {
            const __m512 v = _mm512_loadu_ps(xr + j);
            _mm512_storeu_ps(yr + j, by_div ? _mm512_div_ps(v, vd) : _mm512_mul_ps(v, vm));
        }
        if (tail) {
            const __m512 v = _mm512_maskz_loadu_ps(tail, xr + body);
            _mm512_mask_storeu_ps(yr + body, tail,
                                  by_div ? _mm512_div_ps(v, vd) : _mm512_mul_ps(v, vm));
        }
    }
}

/* As div_mul_rows_n_avx512, 8 at a time, the last n mod 8 one at a time. */
__attribute__((target("avx2"), always_inline)) static inline void
div_mul_rows_n_avx2(float *y, int64_t ys, const float *x, int64_t rs, int64_t rows, int64_t n,
                    const bool by_div, float div, const float *mul)
{
    const __m256 vd = _mm256_set1_ps(div);
    for (int64_t r = 0; r < rows; r++) {
        float *yr = y + r * ys;
        const float *xr = x + r * rs;
        const float m = mul ? mul[r] : 1.0f;
        const __m256 vm = _mm256_set1_ps(m);
        int64_t j = 0;
        for (; j + 8 <= n; j += 8) {
            const __m256 v = _mm256_loadu_ps(xr + j);
            _mm256_storeu_ps(yr + j, by_div ? _mm256_div_ps(v, vd) : _mm256_mul_ps(v, vm));
        }
        for (; j < n; j++)
            yr[j] = by_div ? xr[j] / div : xr[j] * m;
    }
}

/* The rows' loop is here, not around a call per row: a tile's short rows (head_dim 16) each paid
 * a call and the ISA's dispatch (S's core: 5.7 -> 5.6 µs, Zen 4). Rows of 16 (a head's row at
 * head_dim 16: the q tile and the output of S's every head) are a load, a multiply and a store
 * each (AVX2: two): the general loop's tests per row were most of their time. */
#define DEFINE_DIV_MUL_ROWS(NAME, ROWS_N, TARGET)                                                  \
    __attribute__((target(TARGET))) static void NAME(float *y, int64_t ys, const float *x,        \
                                                     int64_t rs, int64_t rows, int64_t n,          \
                                                     float div, const float *mul)                  \
    {                                                                                              \
        if (div == 0.0f && n == 16)                                                                \
            ROWS_N(y, ys, x, rs, rows, 16, false, div, mul);                                       \
        else if (div == 0.0f)                                                                      \
            ROWS_N(y, ys, x, rs, rows, n, false, div, mul);                                        \
        else                                                                                       \
            ROWS_N(y, ys, x, rs, rows, n, true, div, mul);                                         \
    }
DEFINE_DIV_MUL_ROWS(div_mul_rows_avx512, div_mul_rows_n_avx512, "avx512f")
DEFINE_DIV_MUL_ROWS(div_mul_rows_avx2, div_mul_rows_n_avx2, "avx2")
#undef DEFINE_DIV_MUL_ROWS
#endif

bool mha_div_mul_rows_to_isa(mha_isa isa, float *y, int64_t ys, const float *x, int64_t rs,
                             int64_t rows, int64_t n, float div, const float *mul)
{
    if (!mha_isa_usable(isa))
        return false;
    switch (isa) {
#ifdef MHA_HAVE_AVX2_KERNEL
    case MHA_ISA_AVX512:
        div_mul_rows_avx512(y, ys, x, rs, rows, n, div, mul);
        return true;
    case MHA_ISA_AVX2:
        div_mul_rows_avx2(y, ys, x, rs, rows, n, div, mul);
        return true;
#endif
    default:
        for (int64_t r = 0; r < rows; r++) {
            float *out = y + r * ys;
            const float *row = x + r * rs;
            const float m = mul ? mul[r] : 1.0f;
            for (int64_t j = 0; j < n; j++)
                out[j] = div != 0.0f ? row[j] / div : row[j] * m;
        }
        return true;
    }
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
    if (!mha_isa_usable(isa))
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

/* Orders the streaming stores before anything another thread reads after the pass. */
void mha_copy_stream_fence(void)
{
#ifdef MHA_HAVE_AVX2_KERNEL
    _mm_sfence();
#endif
}
