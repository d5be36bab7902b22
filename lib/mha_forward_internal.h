/*
 * mha_forward_internal.h - private to lib/: what mha_plan.c and mha_forward.c share.
 */
#ifndef ATTND_MHA_FORWARD_INTERNAL_H
#define ATTND_MHA_FORWARD_INTERNAL_H

#include "mha_internal.h"

/* Where a pass's positions come from (mha_inputs.positions / key_positions, or their defaults). The
 * forward pass turns them into float rows [N,L] and [N,S0] (exact: positions < 2^24) and, with
 * RoPE, into cos/sin tables of hd/2 columns, one row per distinct row of positions. */
typedef struct mha_pos_layout {
    bool q_given, k_given; /* the request gave them                                        */
    bool k_is_q;           /* the keys at the query positions (mha_keys_at_queries)       */
    int64_t q_rows;        /* RoPE table rows for queries: N·L when [N,L] given, else L    */
    int64_t k_rows;        /* ... for keys (0 when k_is_q: the query table serves)         */
} mha_pos_layout;

void mha_pos_layout_of(const mha_plan *plan, const mha_inputs *in, mha_pos_layout *pl);

/* Floats of the positions rows (N·L + N·S0, rounded up to 16 each) and of the RoPE tables
 * ((q_rows + k_rows)·hd, cos and sin side by side, then inv_freq; 0 without RoPE). */
int64_t mha_pos_floats(const mha_plan *plan);
int64_t mha_rope_floats(const mha_plan *plan, const mha_config *cfg, const mha_pos_layout *pl);

/* Whether keys without positions sit at the query positions: in self-attention (key left out, or
 * given with the query's shape and bits) when S0 == L; else they are at 0..S0-1 (mha.h). When the
 * queries have no positions either, both rules give 0..L-1: true for every S0 == L. */
bool mha_keys_at_queries(const mha_plan *plan, const mha_inputs *in);

/* Positions in the attention core (mha_positions.c). Fills qpos [N,L] and kpos [N,S0] with the
 * inputs' positions or their defaults, as floats (exact below MHA_MAX_POSITION); returns true when
 * every batch's key positions are nondecreasing (then the core skips keys by binary search). */
bool mha_positions_fill(float *qpos, float *kpos, const mha_plan *plan, const mha_inputs *in);

/* [*lo, *hi): the keys (of sorted positions kp [S0]) that some query of a block at positions
 * qp [m] may attend under causal and window; every key outside is masked for every row of the
 * block. Unsorted keys, or neither rule: [0, S0). */
void mha_key_range(int64_t *lo, int64_t *hi, const float *qp, int64_t m, const float *kp,
                   int64_t S0, bool sorted, bool causal, int64_t window);

/* The window W as a float the rules compare with: exact, or 2^25 for a larger one (which every
 * pair of positions is within). */
float mha_window_f(int64_t window);

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

/* Row operations (mha_rows.c), on isa's kernel; false (nothing done) when this CPU lacks it. Each
 * gives the scalar loop's bits.
 *   mha_div_mul_rows_isa: x[r][j] /= div (div != 0; the attention's q / √hd), else x[r][j] *=
 *   mul[r] (the head outputs' 1/sum), rows rows of n floats at row stride rs.
 *   mha_scaled_add_rows_isa: dst[r][j] = src[r][j] · mul[r] (add false) or dst[r][j] + src[r][j] ·
 *   mul[r] (add true), the product rounded before the sum (the averaged weights). */
bool mha_div_mul_rows_isa(mha_isa isa, float *x, int64_t rs, int64_t rows, int64_t n, float div,
                          const float *mul);
bool mha_scaled_add_rows_isa(mha_isa isa, float *dst, int64_t ld_dst, const float *src,
                             int64_t ld_src, int64_t rows, int64_t n, const float *mul, bool add);

/* mha_div_mul_rows_isa into another buffer: y[r][j] (row stride ys) = x[r][j] / div, or ·mul[r]
 * (div 0); the same bits as dividing or scaling in place. */
bool mha_div_mul_rows_to_isa(mha_isa isa, float *y, int64_t ys, const float *x, int64_t rs,
                             int64_t rows, int64_t n, float div, const float *mul);

#endif
