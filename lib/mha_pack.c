/*
 * mha_pack.c - operands laid out for the GEMM kernels (mha_kernels.h): a transposed copy with
 * zero padding. The attention's keys become Kᵀ blocks [hd][BN] (keys contiguous, so the scores'
 * W operand is read a row of keys at a time), and a layer's projection weights W [Nc][K] become
 * panels Wᵀ [K][64] (mha_weights.c).
 *
 * Transposes go through registers 16 x 16 (AVX-512) or 8 x 8 (AVX2): a scalar transpose stores one
 * float per instruction at a stride of a whole row, the cost of packing a pass's keys several times
 * over. Edges (the last rows and columns that do not fill a block) are copied one float at a time.
 * The transposes' loops are unrolled by pragma: GCC kept their arrays of vectors on the stack
 * otherwise, and those spills were 35-45% of the time to pack a pass's keys (Zen 4, L's shape).
 */
#include "mha_kernels.h"
#include "mha_pack.h"

#include <string.h>

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#define HAVE_X86_KERNELS 1
#endif

/* dst[c][r] = src[r][c] for r in [r0, r1), c in [c0, c1), one at a time. */
static void transpose_scalar(float *dst, int64_t ld_dst, const float *src, int64_t ld_src,
                             int64_t r0, int64_t r1, int64_t c0, int64_t c1)
{
    for (int64_t r = r0; r < r1; r++)
        for (int64_t c = c0; c < c1; c++)
            dst[c * ld_dst + r] = src[r * ld_src + c];
}

#ifdef HAVE_X86_KERNELS
/* One 16 x 16 block: rows r of src (16 floats each) become columns of dst. */
__attribute__((target("avx512f"))) static void transpose16(float *dst, int64_t ld_dst,
                                                           const float *src, int64_t ld_src)
{
    __m512 r[16], t[16], u[16];
#pragma GCC unroll 16
    for (int j = 0; j < 16; j++)
        r[j] = _mm512_loadu_ps(src + j * ld_src);
#pragma GCC unroll 8
    for (int j = 0; j < 16; j += 2) { /* pairs of rows interleaved within 128-bit lanes */
        t[j] = _mm512_unpacklo_ps(r[j], r[j + 1]);
        t[j + 1] = _mm512_unpackhi_ps(r[j], r[j + 1]);
    }
#pragma GCC unroll 4
    for (int j = 0; j < 16; j += 4) { /* quads of rows: columns 4l+c of lane l in u[j+c] */
        u[j] = _mm512_shuffle_ps(t[j], t[j + 2], _MM_SHUFFLE(1, 0, 1, 0));
        u[j + 1] = _mm512_shuffle_ps(t[j], t[j + 2], _MM_SHUFFLE(3, 2, 3, 2));
        u[j + 2] = _mm512_shuffle_ps(t[j + 1], t[j + 3], _MM_SHUFFLE(1, 0, 1, 0));
        u[j + 3] = _mm512_shuffle_ps(t[j + 1], t[j + 3], _MM_SHUFFLE(3, 2, 3, 2));
    }
#pragma GCC unroll 4
    for (int c = 0; c < 4; c++) { /* columns c, c+4, c+8, c+12: 128-bit lanes regrouped */
        const __m512 v0 = _mm512_shuffle_f32x4(u[c], u[4 + c], 0x88);
        const __m512 v1 = _mm512_shuffle_f32x4(u[c], u[4 + c], 0xdd);
        const __m512 v2 = _mm512_shuffle_f32x4(u[8 + c], u[12 + c], 0x88);
        const __m512 v3 = _mm512_shuffle_f32x4(u[8 + c], u[12 + c], 0xdd);
        _mm512_storeu_ps(dst + c * ld_dst, _mm512_shuffle_f32x4(v0, v2, 0x88));
        _mm512_storeu_ps(dst + (c + 4) * ld_dst, _mm512_shuffle_f32x4(v1, v3, 0x88));
        _mm512_storeu_ps(dst + (c + 8) * ld_dst, _mm512_shuffle_f32x4(v0, v2, 0xdd));
        _mm512_storeu_ps(dst + (c + 12) * ld_dst, _mm512_shuffle_f32x4(v1, v3, 0xdd));
    }
}

/* One 8 x 8 block. */
__attribute__((target("avx2"))) static void transpose8(float *dst, int64_t ld_dst, const float *src,
                                                       int64_t ld_src)
{
    __m256 r[8], t[8], u[8];
#pragma GCC unroll 8
    for (int j = 0; j < 8; j++)
        r[j] = _mm256_loadu_ps(src + j * ld_src);
#pragma GCC unroll 4
    for (int j = 0; j < 8; j += 2) {
        t[j] = _mm256_unpacklo_ps(r[j], r[j + 1]);
        t[j + 1] = _mm256_unpackhi_ps(r[j], r[j + 1]);
    }
#pragma GCC unroll 2
    for (int j = 0; j < 8; j += 4) {
        u[j] = _mm256_shuffle_ps(t[j], t[j + 2], _MM_SHUFFLE(1, 0, 1, 0));
        u[j + 1] = _mm256_shuffle_ps(t[j], t[j + 2], _MM_SHUFFLE(3, 2, 3, 2));
        u[j + 2] = _mm256_shuffle_ps(t[j + 1], t[j + 3], _MM_SHUFFLE(1, 0, 1, 0));
        u[j + 3] = _mm256_shuffle_ps(t[j + 1], t[j + 3], _MM_SHUFFLE(3, 2, 3, 2));
    }
#pragma GCC unroll 4
    for (int c = 0; c < 4; c++) { /* column c from rows 0-3 (u[c]) and 4-7 (u[4+c]), lanes joined */
        _mm256_storeu_ps(dst + c * ld_dst, _mm256_permute2f128_ps(u[c], u[4 + c], 0x20));
        _mm256_storeu_ps(dst + (c + 4) * ld_dst, _mm256_permute2f128_ps(u[c], u[4 + c], 0x31));
    }
}
#endif

void mha_pack_transposed(mha_isa isa, float *dst, int64_t ld_dst, const float *src,
                         int64_t ld_src, int64_t rows, int64_t cols, int64_t rows_pad)
{
    int64_t rb = 0, cb = 0; /* rows and columns covered by whole register blocks */
#ifdef HAVE_X86_KERNELS
    const int B = isa == MHA_ISA_AVX512 && mha_isa_usable(isa) ? 16
                  : isa != MHA_ISA_PORTABLE && mha_isa_usable(MHA_ISA_AVX2) ? 8
                                                                           : 0;
    if (B) {
        rb = rows / B * B;
        cb = cols / B * B;
        for (int64_t r = 0; r < rb; r += B)
            for (int64_t c = 0; c < cb; c += B) {
                if (B == 16)
                    transpose16(dst + c * ld_dst + r, ld_dst, src + r * ld_src + c, ld_src);
                else
                    transpose8(dst + c * ld_dst + r, ld_dst, src + r * ld_src + c, ld_src);
            }
    }
#else
    (void)isa;
#endif
    transpose_scalar(dst, ld_dst, src, ld_src, 0, rb, cb, cols); /* the right edge */
    transpose_scalar(dst, ld_dst, src, ld_src, rb, rows, 0, cols); /* the bottom edge */
    if (rows_pad > rows)
        for (int64_t c = 0; c < cols; c++)
            memset(dst + c * ld_dst + rows, 0, (size_t)(rows_pad - rows) * sizeof(float));
}

#ifdef HAVE_X86_KERNELS
/* dst[r][0, cols) = src[r][0, cols) for r < rows, in whole vectors (the last one masked): a head's
 * rows of V come from the projection's tile, just stored by the GEMM kernel in whole vectors, and
 * loads of a vector's parts waited for those stores to reach the cache (2% of S's pass, Zen 4). */
__attribute__((target("avx512f"))) static void copy_rows_avx512(float *dst, int64_t ld_dst,
                                                                const float *src, int64_t ld_src,
                                                                int64_t rows, int64_t cols)
{
    const int64_t body = cols / 16 * 16;
    const __mmask16 k = (__mmask16)((1u << (cols - body)) - 1);
    for (int64_t r = 0; r < rows; r++) {
        for (int64_t j = 0; j < body; j += 16)
            _mm512_storeu_ps(dst + r * ld_dst + j, _mm512_loadu_ps(src + r * ld_src + j));
        if (k)
            _mm512_mask_storeu_ps(dst + r * ld_dst + body, k,
                                  _mm512_maskz_loadu_ps(k, src + r * ld_src + body));
    }
}

__attribute__((target("avx2"))) static void copy_rows_avx2(float *dst, int64_t ld_dst,
                                                           const float *src, int64_t ld_src,
                                                           int64_t rows, int64_t cols)
{
    const int64_t body = cols / 8 * 8;
    for (int64_t r = 0; r < rows; r++) {
        for (int64_t j = 0; j < body; j += 8)
            _mm256_storeu_ps(dst + r * ld_dst + j, _mm256_loadu_ps(src + r * ld_src + j));
        for (int64_t j = body; j < cols; j++)
            dst[r * ld_dst + j] = src[r * ld_src + j];
    }
}
#endif

/* The copy of mha_pack_rows: short rows (a head's, at most 64 floats) in isa's vectors when this
 * CPU has it, else fixed 16-byte copies; longer rows by memcpy. */
static void copy_rows(mha_isa isa, float *dst, int64_t ld_dst, const float *src, int64_t ld_src,
                      int64_t rows, int64_t cols)
{
#ifdef HAVE_X86_KERNELS
    if (cols <= 64 && isa == MHA_ISA_AVX512 && mha_isa_usable(isa)) {
        copy_rows_avx512(dst, ld_dst, src, ld_src, rows, cols);
        return;
    }
    if (cols <= 64 && isa == MHA_ISA_AVX2 && mha_isa_usable(isa)) {
        copy_rows_avx2(dst, ld_dst, src, ld_src, rows, cols);
        return;
    }
#else
    (void)isa;
#endif
    for (int64_t r = 0; r < rows; r++) {
        if (cols > 64)
            memcpy(dst + r * ld_dst, src + r * ld_src, (size_t)cols * sizeof(float));
        else
            mha_copy_floats(dst + r * ld_dst, src + r * ld_src, cols);
    }
}

void mha_pack_rows(mha_isa isa, float *dst, int64_t ld_dst, const float *src, int64_t ld_src,
                   int64_t rows, int64_t cols, int64_t rows_pad, int64_t cols_pad)
{
    copy_rows(isa, dst, ld_dst, src, ld_src, rows, cols);
    for (int64_t r = 0; r < rows && cols_pad > cols; r++)
        memset(dst + r * ld_dst + cols, 0, (size_t)(cols_pad - cols) * sizeof(float));
    for (int64_t r = rows; r < rows_pad; r++)
        memset(dst + r * ld_dst, 0, (size_t)cols_pad * sizeof(float));
}
