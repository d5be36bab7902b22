/*
 * mha_pack.h - private to lib/: operands laid out for the GEMM kernels (mha_pack.c).
 */
#ifndef ATTND_MHA_PACK_H
#define ATTND_MHA_PACK_H

#include "mha_internal.h"

/* dst[c][r] = src[r][c] for r < rows, c < cols (a transposed copy; row strides ld_src, ld_dst),
 * and dst[c][r] = 0 for rows <= r < rows_pad (ld_dst >= rows_pad). Register transposes on isa
 * when this CPU has it, else one float at a time; the same result either way. */
void mha_pack_transposed(mha_isa isa, float *dst, int64_t ld_dst, const float *src,
                         int64_t ld_src, int64_t rows, int64_t cols, int64_t rows_pad);

/* dst[r][c] = src[r][c] for r < rows, c < cols; zero for cols <= c < cols_pad and for every
 * rows <= r < rows_pad (row strides ld_src, ld_dst >= cols_pad). */
void mha_pack_rows(float *dst, int64_t ld_dst, const float *src, int64_t ld_src, int64_t rows,
                   int64_t cols, int64_t rows_pad, int64_t cols_pad);

#endif
