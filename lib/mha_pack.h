/*
 * mha_pack.h - private to lib/: operands laid out for the GEMM kernels (mha_pack.c).
 */
#ifndef ATTND_MHA_PACK_H
#define ATTND_MHA_PACK_H

#include "mha_internal.h"

#include <string.h>

/* dst[0, n) = src[0, n) for short rows (a tile's row, a head's row: at most 64 floats). GCC turns
 * a memcpy of a variable size that small into `rep movsq`, or a call: two of them per tile row
 * were 2% of XL's pass on Zen 3, and a call per head row of V 2% of S's on Zen 4. Fixed 16-byte
 * copies are plain vector moves. */
static inline void mha_copy_floats(float *dst, const float *src, int64_t n)
{
    int64_t j = 0;
    for (; j + 4 <= n; j += 4)
        memcpy(dst + j, src + j, 4 * sizeof(float));
    for (; j < n; j++)
        dst[j] = src[j];
}

/* dst[c][r] = src[r][c] for r < rows, c < cols (a transposed copy; row strides ld_src, ld_dst),
 * and dst[c][r] = 0 for rows <= r < rows_pad (ld_dst >= rows_pad). Register transposes on isa
 * when this CPU has it, else one float at a time; the same result either way. */
void mha_pack_transposed(mha_isa isa, float *dst, int64_t ld_dst, const float *src,
                         int64_t ld_src, int64_t rows, int64_t cols, int64_t rows_pad);

/* dst[r][c] = src[r][c] for r < rows, c < cols; zero for cols <= c < cols_pad and for every
 * rows <= r < rows_pad (row strides ld_src, ld_dst >= cols_pad). Rows of at most 64 floats are
 * copied in isa's vectors when this CPU has it; the same result either way. */
void mha_pack_rows(mha_isa isa, float *dst, int64_t ld_dst, const float *src, int64_t ld_src,
                   int64_t rows, int64_t cols, int64_t rows_pad, int64_t cols_pad);

#endif
