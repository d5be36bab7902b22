/*
 * mha_softmax_block.h - private to lib/: the online softmax over one block of keys
 * (mha_softmax_block.c) and its exp.
 */
#ifndef ATTND_MHA_SOFTMAX_BLOCK_H
#define ATTND_MHA_SOFTMAX_BLOCK_H

#include "mha_internal.h"

/* One block of keys for rows rows of scores sc (row stride ld, n >= 1 columns; -inf = masked):
 *     m' = max(m[r], max_j sc[r][j]);    alpha[r] = exp(m[r] - m');
 *     sc[r][j] = exp(sc[r][j] - m');     l[r] = l[r]·alpha[r] + Σ_j sc[r][j];    m[r] = m'.
 * A row that has seen no unmasked key yet (m' = -inf) gets sc[r] = 0, alpha 1, and keeps l = 0.
 * Start a row with m = -inf, l = 0. The caller rescales what it accumulated from earlier blocks
 * (the head output) by alpha: exactly 1 when the maximum did not move. tmp: 2·rows floats of
 * scratch. On isa's kernel; false (nothing done) when this CPU lacks it. */
bool mha_softmax_block_isa(mha_isa isa, float *sc, int64_t ld, int64_t rows, int64_t n, float *m,
                           float *l, float *alpha, float *tmp);

/* The same in two steps, for a caller that looks at the block's scores between the maxima and the
 * exps: _max_isa writes m' to tmp[0, rows) and each row's own maximum over the block to bmax[r]
 * (bmax may be NULL); _exp_isa then does the rest from tmp, as mha_softmax_block_isa would have:
 * the same bits. */
bool mha_softmax_block_max_isa(mha_isa isa, const float *sc, int64_t ld, int64_t rows, int64_t n,
                               const float *m, float *tmp, float *bmax);
bool mha_softmax_block_exp_isa(mha_isa isa, float *sc, int64_t ld, int64_t rows, int64_t n,
                               float *m, float *l, float *alpha, float *tmp);

/* out[j] = exp(in[j]) for in[j] <= 0 or -inf, the exp mha_softmax_block_isa uses (out may equal
 * in); below about -87.69 the result is exactly 0. For its tests. false when the CPU lacks isa. */
bool mha_exp_le0_array_isa(mha_isa isa, float *out, const float *in, int64_t n);

#endif
