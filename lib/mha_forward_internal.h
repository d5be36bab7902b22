/*
 * mha_forward_internal.h - private to lib/: what mha_plan.c and mha_forward.c share.
 */
#ifndef ATTND_MHA_FORWARD_INTERNAL_H
#define ATTND_MHA_FORWARD_INTERNAL_H

#include "mha_internal.h"

/* True when the attention's GEMMs run on the AVX-512 kernels (mha_attn_avx512.c): the plan's
 * kernel set is AVX-512 and hd a multiple of 16. Else cblas_sgemm. */
bool mha_attn_kernels(const mha_plan *plan);

/* Where a pass's positions come from (mha_inputs.positions / key_positions, or their defaults). The
 * forward pass turns them into float rows [N,L] and [N,S0] (exact: positions < 2^24) and, with
 * RoPE, into cos/sin tables of hd/2 columns, one row per distinct row of positions. */
typedef struct mha_pos_layout {
    bool q_given, k_given; /* the request gave them                                        */
    bool k_is_q;           /* key positions absent and S0 == L: the query positions       */
    int64_t q_rows;        /* RoPE table rows for queries: N·L when [N,L] given, else L    */
    int64_t k_rows;        /* ... for keys (0 when k_is_q: the query table serves)         */
} mha_pos_layout;

void mha_pos_layout_of(const mha_plan *plan, const mha_inputs *in, mha_pos_layout *pl);

/* Floats of the positions rows (N·L + N·S0, rounded up to 16 each) and of the RoPE tables
 * ((q_rows + k_rows)·hd, cos and sin side by side, then inv_freq; 0 without RoPE). */
int64_t mha_pos_floats(const mha_plan *plan);
int64_t mha_rope_floats(const mha_plan *plan, const mha_config *cfg, const mha_pos_layout *pl);

/* Positions in the attention core (mha_positions.c). Fills qpos [N,L] and kpos [N,S0] with the
 * inputs' positions or their defaults, as floats (exact below MHA_MAX_POSITION); returns true when
 * every batch's key positions are nondecreasing (then the core skips keys by binary search). */
bool mha_positions_fill(float *qpos, float *kpos, const mha_plan *plan, const mha_inputs *in);

/* [*lo, *hi): the keys (of sorted positions kp [S0]) that some query of a block at positions
 * qp [m] may attend under causal and window; every key outside is masked for every row of the
 * block. Unsorted keys, or neither rule: [0, S0). */
void mha_key_range(int64_t *lo, int64_t *hi, const float *qp, int64_t m, const float *kp,
                   int64_t S0, bool sorted, bool causal, int64_t window);

/* ALiBi on one row of scores: row[c] += slope·(kp[c] - p) for c < n (= -m·(p_i - p_j)); every
 * isa gives the same bits. */
void mha_alibi_row(mha_isa isa, float *row, const float *kp, int64_t n, float p, float slope);

/* The causal and window rules on one row of n scores for a query at p: row[c] = -inf where key
 * c (at kp[c]) is not allowed. sorted: kp nondecreasing (binary search instead of a test each). */
void mha_rules_row(float *row, const float *kp, int64_t n, float p, bool causal, int64_t window,
                   bool sorted);

/* RoPE (mha_rope.c): inv_freq [hd/2]; one table row cs [hd] (cos [hd/2], then sin [hd/2]) for
 * position p; x [hd] (one head of q or k) rotated in place with such a row. */
void mha_rope_inv_freq(float *inv_freq, int64_t hd, double theta);
void mha_rope_table_row(float *cs, const float *inv_freq, int64_t half, float p);
void mha_rope_rotate(mha_isa isa, float *x, const float *cs, int64_t half);

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
 * (each part rounded up to 16 floats), then one kv head's packed keys when mha_kpack_in_task, or
 * the projections' packed weights (mha_own_gemm) if that is more (cfg: the layer's, kdim and vdim
 * resolved). For a plan that passed mha_plan_forward's size checks. */
int64_t mha_slot_floats(const mha_plan *plan, const mha_config *cfg);

/* Floats of keys packed for the AVX-512 attention kernels, per (batch, kv head) and in all (0 when
 * the kernels are not used: mha_attn_kernels false; the total is 0 too when packed in the tasks:
 * mha_kpack_in_task). */
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
