/*
 * mha_select.h - private to lib/: a selection's plan, and the weights sink an attention core feeds.
 *
 * The sink turns the final weights of a block of query rows of one head, given as it is computed,
 * into what the selection returns (mha.h, mha_select): the chosen slice, the top k per row kept as
 * the keys stream past, or the pooled map accumulated block by block; with average_attn_weights,
 * the mean over the chosen heads first. It holds no full row beyond one per-thread block, and
 * nothing that depends on the order the core's threads run in: the same inputs give the same bits
 * on any number of threads.
 *
 * How a core feeds it. The core's work is split into blocks of query rows [i0, i0+m) aligned to
 * `rb` (the rb given to mha_sink_init: i0 a multiple of rb, m <= rb). For each block, on one thread
 * (its slot), in this order:
 *
 *   mha_sink_begin(b, i0, m)
 *   for each head h (any order; every chosen head once):
 *       mha_sink_head_begin(b, h, i0, m)
 *       mha_sink_feed(...) / mha_sink_fill(...) over key ranges that together cover every key
 *                                                [0, S) exactly once, in any order
 *       mha_sink_head_end(b, h, i0, m)
 *   mha_sink_end(b, i0, m)
 *
 * Heads the selection does not choose and blocks outside its query rows may be left out (the
 * calls return at once for them; mha_sink_wants_* let the core skip work). Blocks of one batch that
 * share a pooled row are combined in the order of their rows (a block waits for the block above
 * it, which the core must therefore have handed out first: the pool hands out tasks in order).
 * Values are fed as P[r][j] · scale[r] (the product rounded to float32, as the full map's), or P
 * itself (scale NULL: the trace's scores); keys a block never computes (causal skipping) are given
 * with mha_sink_fill, which stands for the sink's fill value (0 for weights, -inf for scores).
 */
#ifndef ATTND_MHA_SELECT_H
#define ATTND_MHA_SELECT_H

#include "mha_internal.h"

#include <string.h>

/* Resolves and checks in->select against a plan whose N, L, S, H and batched are filled, and sets
 * plan's selection fields, and with need_weights weights_ndim/shape/count (average: mean over the
 * chosen heads).
 * MHA_ERR_VALUE naming the member (mha.h, mha_plan_forward), MHA_ERR_LIMIT past max_elements. */
mha_status mha_select_plan(mha_plan *plan, const mha_select *sel, bool need_weights, bool average,
                           const mha_limits *lim, mha_error *err);

typedef enum mha_sink_kind { MHA_SINK_MAP, MHA_SINK_TOPK, MHA_SINK_POOL } mha_sink_kind;

/* A streamed top-k's candidate: its score (masks applied), key and visited block, side by side
 * (one cache line holds five: a row's new candidates touch one line, not three). */
typedef struct mha_cand {
    float x;
    int32_t j, nv;
} mha_cand;

typedef struct mha_sink {
    /* what */
    mha_sink_kind kind;
    mha_isa isa;            /* the pass's kernels (streaming copies, mha_select_runs.c)   */
    int64_t N, L, S, H;
    int64_t nh;             /* head slots of the output: h', or 1 when averaged           */
    int64_t navg;           /* heads averaged (h'), 0 when per head                       */
    int64_t q0, q1, k0, k1; /* the query rows and keys chosen                             */
    int64_t Lq, Sk;         /* L' = q1 - q0, S' = k1 - k0                                 */
    int64_t k;              /* k' (top-k)                                                 */
    int64_t pa, pb, Lp, Sp; /* pool block a x b; pooled rows ⌈L'/a⌉ and columns ⌈S'/b⌉    */
    mha_pool_op op;
    float fill;            /* the value of keys given by mha_sink_fill                    */
    bool rows;             /* given whole rows (mha_sink_takes_rows), never blocks        */
    bool nt_stores;        /* a map of MHA_STREAM_MAP_BYTES or more: non-temporal stores   */
    int64_t *slot_of_head; /* [H]: the output's head slot of head h, -1 not chosen        */
    int64_t rb;            /* rows per block (the core's)                                 */
    const int *cancel;     /* the pass's cancel flag (mha_inputs.cancel), or NULL: a block
                            * waiting for the block above it to add a shared pooled row stops
                            * waiting once it is set (that block may never come)             */
    /* where */
    float *values;    /* [N,nh,L',S'] map, [N,nh,L',k'] top-k, [N,nh,Lp,Sp] pooled   */
    int32_t *indices; /* [N,nh,L',k'] top-k key indices, else NULL                    */
    /* per thread (slot) */
    float *avg;   /* [threads][rb, S'] averaged block, or NULL                   */
    double *part; /* [threads][part_rows, Sp] pooled partials, or NULL            */
    int64_t part_rows;
    float *tkrow; /* [threads][rb, S'] top-k of scores: the block's rows (averaged: the block) */
    float *tkmem; /* [threads][6·S' + S] top-k: a row, its factors, mha_topk_row's room    */
    /* pooled rows that blocks share, combined in row order */
    int64_t *shared_of; /* [Lp]: index among the shared pooled rows, -1 when one block  */
    int64_t nshared;
    double *acc;       /* [N, nh, nshared, Sp]                                         */
    int64_t *next_row; /* [N, nh, nshared]: the next row to add (atomic)               */
    void *mem;         /* one allocation holding the above                            */
    /* streamed from the core's tiles (mha_sink_stream_*), per thread: the rows of one head */
    bool stream;
    int64_t BN, nblk;    /* the core's key blocks                                         */
    int64_t cap;         /* top-k: candidates a row holds                                 */
    int sgroup;          /* stream slots per thread (the per-thread arrays below: per slot) */
    mha_cand *cand;      /* [threads][rb][cap] the candidates                             */
    float *ctmp;         /* [threads][2][cap rounded up to 8] weights, keys (int32)       */
    int64_t *ccnt;       /* [threads][rb] candidates held                                 */
    float *cthr;         /* [threads][rb] the threshold, a score                          */
    int64_t kst;         /* top-k: the largest scores a row keeps, k rounded up to 8      */
    float *ktop;         /* [threads][rb][kst] the kst largest scores so far, ascending,  */
                         /* -inf while fewer were seen (the k-th largest: ktop[kst - k])  */
    uint8_t *cflag;      /* [threads][rb] 1: some key left out, 2: overflowed             */
    int64_t *cseen;      /* [threads][8] keys the head's blocks computed (a line a thread) */
    float *sfac;         /* [threads][nblk][rb] the visited blocks' factors (the core's)  */
    int64_t spb;         /* pool: pooled columns one key block meets, at most             */
    double *pp;          /* [threads][nblk][rb][spb] each visited block's sums or maxima  */
    int64_t *pc0, *pnc;  /* [threads][nblk] the block's first pooled column, and count    */
    void *smem;          /* one allocation holding the above                              */
} mha_sink;

/* Sets up s for a pass planned as plan (plan.selected) on `threads` threads with blocks of rb rows:
 * averaged (mean over the chosen heads) or per head, values of kind weights (fill 0) or scores
 * (fill -inf), written to values [and indices with top-k]. MHA_ERR_NOMEM when its memory cannot be
 * had. Free with mha_sink_free. */
mha_status mha_sink_init(mha_sink *s, const mha_plan *plan, const mha_select *sel, bool average,
                         float fill, float *values, int32_t *indices, int threads, int64_t rb,
                         mha_error *err);
void mha_sink_free(mha_sink *s); /* accepts a zeroed sink */

/* Whether head h is chosen; whether rows [i0, i0+m) meet the chosen ones. */
bool mha_sink_wants_head(const mha_sink *s, int64_t h);
bool mha_sink_wants_rows(const mha_sink *s, int64_t i0, int64_t m);

void mha_sink_begin(mha_sink *s, int slot, int64_t b, int64_t i0, int64_t m);
void mha_sink_head_begin(mha_sink *s, int slot, int64_t b, int64_t h, int64_t i0, int64_t m);
/* Keys [key0, key0+n) of rows [i0, i0+m): row r's value of key key0+j is P[r·ld + j]·scale[r]
 * (scale NULL: P[r·ld + j]). */
void mha_sink_feed(mha_sink *s, int slot, int64_t b, int64_t h, int64_t i0, int64_t m, int64_t key0,
                   int64_t n, const float *P, int64_t ld, const float *scale);
/* Keys [key0, key0+n) of rows [i0, i0+m) hold the fill value. */
void mha_sink_fill(mha_sink *s, int slot, int64_t b, int64_t h, int64_t i0, int64_t m, int64_t key0,
                   int64_t n);
void mha_sink_head_end(mha_sink *s, int slot, int64_t b, int64_t h, int64_t i0, int64_t m);
/* A per-head top-k of weights is instead given whole rows, one at a time (the core holds them in
 * its slab), without head_begin ... head_end: mha_sink_row_room's row [S'] (and room for a factor
 * per key block, *factors, S floats) filled with row i's values over the chosen keys [k0, k1),
 * then mha_sink_row; it has no rows [rb][S'] for blocks (a top-k of scores, fed blocks, does). */
bool mha_sink_takes_rows(const mha_sink *s);
float *mha_sink_row_room(mha_sink *s, int slot, float **factors);
void mha_sink_row(mha_sink *s, int slot, int64_t b, int64_t h, int64_t i, const float *w);
void mha_sink_end(mha_sink *s, int slot, int64_t b, int64_t i0, int64_t m);

/* Streaming: a per-head top-k (k <= 32) or pool (blocks of >= 2 keys) is fed from the core's
 * score tiles as they are made, without the core keeping them in a slab [64][S]. After a key
 * block's online softmax the tile holds x = exp(s - m_now), m_now the row's running maximum; the
 * weight is x·f with f = exp(m_now - m_final) / l, one factor for every key of the block (the one
 * the slab path multiplies by). So:
 *   pool   each visited block's sum (double) or max of x per pooled column is kept, and at the end
 *          multiplied by the block's f: Σx·f and max(x)·f, the slab path's own arithmetic
 *          (stream_block, after the block's softmax);
 *   top-k  the keys that can still be among the k largest are kept as candidates (score, key,
 *          block), taken from the block's scores before its softmax (stream_scores): a weight
 *          grows with its score, so a key whose score is below the k-th largest candidate's, less
 *          a margin far above what the rounding of the exps and factors can undo (2^-16, plus
 *          2^-19 of the magnitudes), cannot be among them. A row whose block maximum stays
 *          below its threshold is passed over after that one compare (about half the rows of a
 *          long row's blocks on random data: each block holds ~k/blocks-so-far keys above it);
 *          the others' keys above it are appended in one scan (mha_run_topk_scan), which also
 *          offers them to the row's largest scores so far (k rounded up to 8, kept in registers
 *          and moved by min/max: no branch on a score), and the threshold is raised to the k-th
 *          of those after each scanned block. At the end the candidates below the final
 *          threshold are dropped, each other one's weight is made as the full map makes it,
 *          exp(score - m after its block)·f, and placed in the row's reply best first
 *          (mha_run_best_of: mha_topk_row's order). When keys were left out (the filter, keys
 *          masked to -inf, keys never computed) the result is exact if the k-th weight is at
 *          least 2^-90 (every weight that could compete is then a normal float within a few ulp
 *          of its real value); otherwise, or when a row's candidates overflow, stream_end says so
 *          and the core feeds the head again from its slab.
 * mha_sink_stream_init after mha_sink_init (NOMEM when its memory cannot be had), with `group`
 * stream slots per thread: the stream calls take a stream slot, thread·group + g, so that a thread
 * can stream up to `group` blocks of rows at once, key block by key block (stream_end then emits
 * through its thread's slot, stream slot / group, one block after the other); then per (block
 * of rows, head): stream_begin; for each visited key block in order (nv = 0, 1, ...)
 * stream_scores before the block's softmax (mprev: the rows' maxima before the block) and
 * stream_block after it; stream_end with every visited block's factor and the rows' maxima after
 * each (mt, [nvis][fld]). */
bool mha_sink_streams(const mha_sink *s);
mha_status mha_sink_stream_init(mha_sink *s, int threads, int group, int64_t BN, int64_t nblk,
                                mha_error *err);
void mha_sink_stream_begin(mha_sink *s, int slot, int64_t b, int64_t h, int64_t i0, int64_t m);
/* Visited block nv: keys [j0 + c0, j0 + c1) were computed, their scores (masks and rules applied)
 * in P[r·ld + c] (c in [c0, c1)), before the block's softmax; mprev: each row's running maximum
 * before the block (-inf at the first); bmax: each row's maximum over the block's columns [c0, c1)
 * (mha_softmax_block_max_isa's). Top-k only. */
void mha_sink_stream_scores(mha_sink *s, int slot, int64_t b, int64_t h, int64_t i0, int64_t m,
                            int64_t nv, int64_t j0, int64_t c0, int64_t c1, const float *P,
                            int64_t ld, const float *mprev, const float *bmax);
/* The same block after its softmax: x in P[r·ld + c]. Pool only. */
void mha_sink_stream_block(mha_sink *s, int slot, int64_t b, int64_t h, int64_t i0, int64_t m,
                           int64_t nv, int64_t j0, int64_t c0, int64_t c1, const float *P,
                           int64_t ld);
/* Room for the factors stream_end takes: [nblk][rb] floats of this stream slot. */
float *mha_sink_stream_factors(mha_sink *s, int slot);
/* fac[nv·fld + r]: visited block nv's factor for row r; mt[nv·fld + r]: row r's running maximum
 * after visited block nv. False when the result could not be made exact (nothing emitted: feed
 * the head again with mha_sink_head_begin ... head_end). */
bool mha_sink_stream_end(mha_sink *s, int slot, int64_t b, int64_t h, int64_t i0, int64_t m,
                         int64_t nvis, const float *fac, const float *mt, int64_t fld);

/* Shared by the sink's two files (mha_select.c, mha_select_stream.c) */

/* Bytes rounded up to a cache line. */
static inline size_t mha_line(size_t bytes)
{
    return (bytes + 63) / 64 * 64;
}

/* A block's rows as the sink sees them. */
typedef struct mha_rows_view {
    int64_t b, hs;
    int64_t br0;    /* the block's first chosen row: per-thread rows count from it  */
    int64_t r0, r1; /* rows given, within the chosen ones                          */
} mha_rows_view;

/* The block's chosen rows of head slot hs; false when it has none. */
bool mha_sink_clip_rows(const mha_sink *s, int64_t b, int64_t hs, int64_t i0, int64_t m,
                        mha_rows_view *v);
/* *mem = a 64-byte aligned block for the sink's state (poisoned for tests: mha_scratch_poison);
 * NOMEM when it cannot be had. */
mha_status mha_sink_state_alloc(void **mem, size_t bytes, mha_error *err);
/* The thread's partial row of pooled row p. */
double *mha_sink_part_row(const mha_sink *s, int slot, const mha_rows_view *v, int64_t p);
/* The k best of v [n] (keys j, distinct), best first (the larger value, of equal values the lower
 * key: mha_topk_row's order) into vals and idx; returns how many, min(n, k). Each one's place is
 * the count of those that beat it (n² compares, vectorised; no branch on a value). For a row's
 * candidates after the final threshold: about k on real rows, never more than the sink's cap
 * (256 + 2k + 16; more overflow to the slab path first), so ties a client builds cost at most a
 * few times an ordinary row's end. v and j have room for n rounded up to 8 (the kernels pad
 * them); v holds no NaN. */
int64_t mha_run_best_of(mha_isa isa, float *vals, int32_t *idx, int64_t k, float *v, int32_t *j,
                        int64_t n);

/* The largest of x[0, n) (-inf for n = 0), and their sum in double, with isa's kernels
 * (mha_select_runs.c; x holds no NaN). */
float mha_run_max(mha_isa isa, const float *x, int64_t n);
double mha_run_sum(mha_isa isa, const float *x, int64_t n);

/* A key block's pooled columns: keys [ja, jb) (x[j] is key j) fall in columns of pb keys from key
 * k0; out[c - cf] = the sum in double (max: the largest) of column c's keys among them, for each
 * column c from cf = (ja - k0) / pb to (jb - 1 - k0) / pb. Each column as mha_run_sum / _max. */
void mha_run_pool_columns(mha_isa isa, double *out, const float *x, int64_t ja, int64_t jb,
                          int64_t k0, int64_t pb, bool max);

/* The positions j < n (ascending, into idx, which has room for n) where x[j] >= thr; returns how
 * many (NaN never). */
int64_t mha_run_above(mha_isa isa, int32_t *idx, const float *x, int64_t n, float thr);

/* A top-k row's scan of n scores x (key j of x is key j0 + j, in visited block nv): every x[j] >=
 * thr (never -inf nor NaN) is appended to cand (room for n) as (x[j], j0 + j, nv), ascending in j,
 * and offered to kt [kst] (kst a multiple of 8, at most 32), the kst largest scores so far in
 * ascending order (-inf: none yet), the smallest dropped. Returns how many were appended. */
int64_t mha_run_topk_scan(mha_isa isa, mha_cand *cand, float *kt, int64_t kst, const float *x,
                          int64_t n, float thr, int64_t j0, int64_t nv);

/* A value that at least k of x [n] reach, for a top-k row's first threshold: x's keys dealt into
 * G groups (key j to group j mod G, G = mha_topk_bound_groups(kst); kst: k rounded up to 8, at
 * most 32), the k-th largest of the groups' maxima (-inf when fewer than k groups hold a key above
 * -inf; NaN keys are left out). k groups' maxima reach it, so k keys do; with 4k groups or more it
 * is close to the k-th largest key (on random rows of 256 keys about 9 keys reach it at k = 8 and
 * 40 at k = 32, where the smallest of k groups' maxima was reached by 21 and 100). The same bits
 * on every ISA. */
#define MHA_TOPK_BOUND_MAX_GROUPS 64
static inline int64_t mha_topk_bound_groups(int64_t kst)
{
    return 4 * kst < MHA_TOPK_BOUND_MAX_GROUPS ? 4 * kst : MHA_TOPK_BOUND_MAX_GROUPS;
}
float mha_run_topk_bound(mha_isa isa, const float *x, int64_t n, int64_t k, int64_t kst);

/* A streamed pool's block into a pooled row's partials, for c < n: acc[c] += d[c]·f in double (the
 * product rounded first), or with max acc[c] = the larger of acc[c] and (float)d[c]·f. */
void mha_run_pool_accumulate(mha_isa isa, double *acc, const double *d, int64_t n, float f,
                             bool max);

/* The order key of x: an unsigned integer whose ascending order is the floats' descending order:
 * the bits of x + 0 (-0 becomes +0), negatives as they are and the others complemented below the
 * sign; NaN as UINT32_MAX, after every number. */
static inline uint32_t mha_order_key(float x)
{
    if (x != x)
        return UINT32_MAX;
    x += 0.0f;
    uint32_t b;
    memcpy(&b, &x, sizeof b);
    return b & 0x80000000u ? b : ~b & 0x7FFFFFFFu;
}

/* The order keys of x [n] into key [n] (mha_select_keys.c): unsigned integers whose ascending order is the floats'
 * descending order (-0 as +0, -inf last of the numbers), NaN as UINT32_MAX (after every number);
 * *lo and *hi their smallest and largest. */
void mha_run_order_keys(mha_isa isa, uint32_t *key, const float *x, int64_t n, uint32_t *lo,
                        uint32_t *hi);

/* The positions j < n (ascending, into idx) where key[j] <= thr, and those keys (into kout); idx
 * and kout have room for n. Returns how many. */
int64_t mha_run_keys_upto(mha_isa isa, int32_t *idx, uint32_t *kout, const uint32_t *key,
                          int64_t n, uint32_t thr);

/* mha_run_order_keys, then mha_run_keys_upto on its keys (key [n]: every key; idx and kout the
 * ones at or under thr), in one pass where the CPU allows; returns how many are kept. */
int64_t mha_run_order_keys_upto(mha_isa isa, uint32_t *key, int32_t *idx, uint32_t *kout,
                                const float *x, int64_t n, uint32_t thr, uint32_t *lo,
                                uint32_t *hi);

/* m[j] = the larger of m[j] and x[j] for j < n (a NaN x[j] leaves m[j]). */
void mha_run_max_into(mha_isa isa, float *m, const float *x, int64_t n);

/* What one row's top-k tells the next (mha_topk_row): the rows of one head's block are alike, so
 * how far the last row's k-th key fell below its largest, moved by a margin that follows how well
 * it served, keeps about k keys of the next row in one pass. Measured from each row's own largest
 * (order keys step about evenly through each octave, so the gap is about log(w_1 / w_k)): a
 * softmax row's values all scale with 1 / its sum, which moves from row to row far more than the
 * gap does. Only a guess: a row it does not serve is chosen as without it, and the result never
 * depends on it. Zeroed: no guess yet. */
typedef struct mha_topk_hint {
    uint32_t gap;    /* the last row's k-th order key minus its first's                */
    uint32_t margin; /* added to it for the next row's bound                            */
    uint32_t set;    /* 0: no row yet                                                   */
} mha_topk_hint;

/* A row's room for mha_topk_row, n floats each (n: the row's keys). */
typedef struct mha_topk_scratch {
    int32_t *cand, *cand2; /* candidates' keys in the row, and the sort's other half      */
    uint32_t *key, *key2;  /* their sort keys, and the other half                         */
    float *gmax;           /* the groups' maxima (k of them)                              */
    mha_topk_hint *hint;   /* the last row's k-th gap, for the next row's bound; or NULL  */
} mha_topk_scratch;

/* The k best of the row w [n] (mha_select_topk.c), best first: the larger value, of equal values
 * the lower key; vals the values, idx their keys + key0. NaN keys are never chosen (a row with
 * fewer than k other keys gets NaN and -1 in the places left). */
void mha_topk_row(mha_isa isa, const float *w, int64_t n, int64_t k, int64_t key0, float *vals,
                  int32_t *idx, const mha_topk_scratch *t);

/* d[j] += x[j]·f (the product rounded first, as the full averaged map sums), and x[j] /= div, for
 * j < n (d and x do not overlap). */
void mha_run_add_scaled(mha_isa isa, float *d, const float *x, int64_t n, float f);
void mha_run_div(mha_isa isa, float *x, int64_t n, float div);

#endif
