/*
 * mha_forward_internal.h - private to lib/: what mha_plan.c and mha_forward.c share.
 */
#ifndef ATTND_MHA_FORWARD_INTERNAL_H
#define ATTND_MHA_FORWARD_INTERNAL_H

#include "mha_internal.h"

/* Query rows per attention task: each thread holds one [rows, S] block of scores at a time. */
int64_t mha_row_block(const mha_plan *plan);

/* True when the projections use mha_gemm_avx512 rather than cblas_sgemm: the CPU has AVX-512
 * and OpenBLAS's kernels in use do not (OPENBLAS_CORETYPE pins an older core), so ours are
 * about 1.7x faster (measured on Zen 5, 2026-11-22); with AVX-512 kernels OpenBLAS's are ~10%
 * faster than ours, so it keeps them. */
bool mha_own_gemm(const mha_plan *plan);

/* True when the AVX-512 kernels run and every query row of a batch is in one attention task
 * (L <= mha_row_block): each head's keys are then used by one task only, which packs them into
 * its scratch slot right before use (in cache) instead of a pass packing them all to memory first;
 * for short sequences (L = 8, N = 512) that pass was ~11% of the time. */
bool mha_kpack_in_task(const mha_plan *plan);

/* Floats of one thread's scratch slot: the attention's [rb,S] score block, then rb row inverses
 * (each part rounded up to 16 floats), then one head's packed keys when mha_kpack_in_task, or the projections' packed weights (mha_own_gemm) if
 * that is more (cfg: the layer's, kdim and vdim resolved). For a plan that passed
 * mha_plan_forward's size checks. */
int64_t mha_slot_floats(const mha_plan *plan, const mha_config *cfg);

/* Floats of keys packed for the AVX-512 attention kernels, per (batch, head) and in all (0 when the
 * kernels are not used: mha_attn_avx512_usable(hd) false; the total is 0 too when packed in
 * the tasks: mha_kpack_in_task). */
int64_t mha_kpack_head_floats(const mha_plan *plan);
int64_t mha_kpack_floats(const mha_plan *plan);

/* x[r][j] /= div (div != 0) for rows rows of n floats, row stride rs: the same IEEE division as
 * the scalar loop (bit for bit), vectorised (mha_softmax.c). The attention's q / √hd: scalar, it
 * was ~3% of a short-sequence pass. */
void mha_div_rows(float *x, int64_t rs, int64_t rows, int64_t n, float div);

/* x[r][j] *= mul[r], the same way (the head outputs' softmax 1/sum). */
void mha_mul_rows(float *x, int64_t rs, int64_t rows, int64_t n, const float *mul);

/* dst[r][j] = src[r][j] · mul[r] (add false) or dst[r][j] + src[r][j] · mul[r] (add true) for
 * j < n over rows rows (row strides ld_dst, ld_src): the product rounded before the sum, as the
 * scalar loop, vectorised (the averaged weights: summed over heads, scalar ~6% of an L pass). */
void mha_scaled_add_rows(float *dst, int64_t ld_dst, const float *src, int64_t ld_src, int64_t rows,
                         int64_t n, const float *mul, bool add);

/* The three above with a chosen instruction set, so tests cover every kernel on one machine
 * (div != 0: divide, else multiply by mul[r]); false (nothing done) when this CPU lacks it. */
bool mha_div_mul_rows_isa(mha_isa isa, float *x, int64_t rs, int64_t rows, int64_t n, float div,
                          const float *mul);
bool mha_scaled_add_rows_isa(mha_isa isa, float *dst, int64_t ld_dst, const float *src,
                             int64_t ld_src, int64_t rows, int64_t n, const float *mul, bool add);

#endif
