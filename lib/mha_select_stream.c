/*
 * mha_select_stream.c - a per-head top-k or pool fed from the attention core's tiles as they are
 * made (mha_sink_stream_*, mha_select.h says the arithmetic and why top-k stays exact): no slab of
 * a row block's weights is kept for them.
 */
#include "mha_select.h"
#include "mha_softmax_block.h"

#include <float.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

/* A row's candidates' weights, and beside them their keys, in a stream slot's ctmp: cap of each,
 * rounded up to 8 for mha_run_best_of's padding. */
static int64_t ctmp_room(int64_t cap)
{
    return (cap + 7) / 8 * 8;
}

bool mha_sink_streams(const mha_sink *s)
{
    return s->stream;
}

mha_status mha_sink_stream_init(mha_sink *s, int threads, int group, int64_t BN, int64_t nblk,
                                mha_error *err)
{
    const bool topk = s->kind == MHA_SINK_TOPK && s->k <= 32;
    const bool pool = s->kind == MHA_SINK_POOL && s->pb >= 2;
    if (s->navg || !(topk || pool))
        return MHA_OK;
    const size_t T = (size_t)threads * (size_t)group, rb = (size_t)s->rb; /* stream slots */
    s->sgroup = group;
    s->BN = BN;
    s->nblk = nblk;
    /* one allocation: each part's bytes, and where its pointer goes */
    enum { CAND, KTOP, CTMP, CCNT, CTHR, CFLAG, CSEEN, PP, PC0, SFAC, NPARTS };
    size_t b[NPARTS] = {0};
    void **at[NPARTS] = {(void **)&s->cand,  (void **)&s->ktop,  (void **)&s->ctmp,
                         (void **)&s->ccnt,  (void **)&s->cthr,  (void **)&s->cflag,
                         (void **)&s->cseen, (void **)&s->pp,    (void **)&s->pc0,
                         (void **)&s->sfac};
    b[SFAC] = mha_line(T * (size_t)nblk * rb * sizeof(float));
    if (topk) {
        s->cap = 256 + 2 * s->k + 16; /* a scan's 256 keys beside a compacted set */
        b[CAND] = mha_line(T * rb * (size_t)s->cap * sizeof(mha_cand));
        s->kst = (s->k + 7) / 8 * 8;
        b[KTOP] = mha_line(T * rb * (size_t)s->kst * sizeof(float));
        b[CTMP] = mha_line(T * 2 * (size_t)ctmp_room(s->cap) * sizeof(float));
        b[CCNT] = mha_line(T * rb * sizeof(int64_t));
        b[CTHR] = mha_line(T * rb * sizeof(float));
        b[CFLAG] = mha_line(T * rb);
        b[CSEEN] = mha_line(T * 64); /* a line per thread: both write theirs every block */
    } else {
        s->spb = (BN + s->pb - 1) / s->pb + 1;
        b[PP] = mha_line(T * (size_t)nblk * rb * (size_t)s->spb * sizeof(double));
        b[PC0] = mha_line(T * (size_t)nblk * 2 * sizeof(int64_t)); /* pc0, then pnc */
    }
    size_t total = 0;
    for (int i = 0; i < NPARTS; i++)
        total += b[i];
    char *mem;
    const mha_status st = mha_sink_state_alloc((void **)&mem, total, err);
    if (st != MHA_OK)
        return st;
    s->smem = mem;
    for (int i = 0; i < NPARTS; i++) {
        *at[i] = b[i] ? mem : NULL;
        mem += b[i];
    }
    if (pool)
        s->pnc = s->pc0 + T * (size_t)nblk;
    s->stream = true;
    return MHA_OK;
}

void mha_sink_stream_begin(mha_sink *s, int slot, int64_t b, int64_t h, int64_t i0, int64_t m)
{
    mha_rows_view v;
    if (s->kind != MHA_SINK_TOPK || s->slot_of_head[h] < 0 ||
        !mha_sink_clip_rows(s, b, s->slot_of_head[h], i0, m, &v))
        return;
    s->cseen[8 * slot] = 0;
    for (int64_t r = 0; r < v.r1 - v.r0; r++) {
        const int64_t ri = (int64_t)slot * s->rb + r;
        s->ccnt[ri] = 0;
        s->cthr[ri] = -INFINITY;
        s->cflag[ri] = 0;
        for (int64_t q = 0; q < s->kst; q++)
            s->ktop[ri * s->kst + q] = -INFINITY;
    }
}

/* The margin below a score that k candidates reach, within which a key is still kept: a key below
 * it has a weight below theirs by far more than the rounding of the weights can undo. A weight is
 * exp(s - m_a)·exp(m_a - M)/l, each exp within a few ulp, each difference rounded to ~2^-24 of the
 * larger of |s|, |m_a| and |M|: the margin is 2^-16 (512 ulp of a weight), plus 2^-19 of the
 * magnitudes (mref: the row's maximum so far, or the score itself when larger). */
static float score_margin(float score, float mref)
{
    return 0x1p-16f + (fabsf(mref) + fabsf(score - mref)) * 0x1p-19f;
}

/* Row ri's threshold raised to a score that k keys reach (less the margin); mref: the row's
 * maximum so far (-inf: none yet). */
static void raise_threshold(mha_sink *s, int64_t ri, float score, float mref)
{
    mref = mref > score ? mref : score;
    const float thr = score - score_margin(score, mref);
    if (thr > s->cthr[ri])
        s->cthr[ri] = thr;
}

/* Row ri's candidates below its threshold are dropped; true when there were some. */
static bool compact_row(mha_sink *s, int64_t ri)
{
    const int64_t n = s->ccnt[ri], cap = s->cap;
    mha_cand *cd = s->cand + ri * cap;
    const float thr = s->cthr[ri];
    int64_t kept = 0;
    for (int64_t c = 0; c < n; c++) { /* every one copied, kept or not: no branch to mispredict */
        const mha_cand x = cd[c];
        cd[kept] = x;
        kept += x.x >= thr;
    }
    s->ccnt[ri] = kept;
    return kept < n;
}

/* The keys of x [n] (keys ja.. of block nv) that reach row ri's threshold become its candidates
 * and are offered to its largest scores (mha_run_topk_scan); then the threshold follows the k-th
 * largest. *flag's bits as cflag's. */
static void row_candidates(mha_sink *s, int64_t ri, uint8_t *flag, const float *x, int64_t n,
                           int64_t ja, int64_t nv, float mp)
{
    const int64_t cap = s->cap, k = s->k, kst = s->kst;
    float *const kt = s->ktop + ri * kst;
    if (s->cthr[ri] == -INFINITY && n >= 4 * k) {
        /* a first threshold from the block itself: its keys dealt into 4k groups (at most 64),
         * the k-th largest of the groups' maxima is reached by k keys, and by few more (one call,
         * one max per 8 keys; the smallest of k groups' maxima let 2.5 times as many through) */
        const float bound = mha_run_topk_bound(s->isa, x, n, k, kst);
        if (bound > -INFINITY)
            raise_threshold(s, ri, bound, mp);
    }
    if (s->ccnt[ri] + n > cap && compact_row(s, ri))
        *flag |= 1;
    if (s->ccnt[ri] + n > cap) {
        *flag |= 2;
        return;
    }
    /* a key masked to -inf has weight 0: never a candidate */
    const float thr = s->cthr[ri] > -FLT_MAX ? s->cthr[ri] : -FLT_MAX;
    const int64_t nc =
        mha_run_topk_scan(s->isa, s->cand + ri * cap + s->ccnt[ri], kt, kst, x, n, thr, ja, nv);
    if (nc < n)
        *flag |= 1;
    s->ccnt[ri] += nc;
    if (kt[kst - k] > -INFINITY)
        raise_threshold(s, ri, kt[kst - k], mp);
}

void mha_sink_stream_scores(mha_sink *s, int slot, int64_t b, int64_t h, int64_t i0, int64_t m,
                            int64_t nv, int64_t j0, int64_t c0, int64_t c1, const float *P,
                            int64_t ld, const float *mprev, const float *bmax)
{
    mha_rows_view v;
    if (s->kind != MHA_SINK_TOPK || s->slot_of_head[h] < 0 ||
        !mha_sink_clip_rows(s, b, s->slot_of_head[h], i0, m, &v))
        return;
    const int64_t ja = j0 + c0 > s->k0 ? j0 + c0 : s->k0, jb = j0 + c1 < s->k1 ? j0 + c1 : s->k1;
    if (ja >= jb)
        return;
    s->cseen[8 * slot] += jb - ja;
    const int64_t n = jb - ja, rows = v.r1 - v.r0, base = (int64_t)slot * s->rb;
    const int64_t k = s->k;
    float *const cthr = s->cthr + base;
    uint8_t *const cflag = s->cflag + base;
    const float *const bm = bmax + (v.r0 - i0);
    /* most rows of most blocks hold no key that reaches the threshold: the row's maximum over the
     * block (the softmax's, a superset of the chosen keys) tells; the rows that must look are
     * listed first, without a branch, so that the next one's scores are fetched while one looks */
    for (int64_t r0 = 0; r0 < rows; r0 += 64) {
        const int64_t r1 = r0 + 64 < rows ? r0 + 64 : rows;
        int32_t look[64];
        int64_t nl = 0;
        for (int64_t r = r0; r < r1; r++) {
            const float t = cthr[r] > -FLT_MAX ? cthr[r] : -FLT_MAX;
            const bool over = (cflag[r] & 2) != 0, first = cthr[r] == -INFINITY;
            const bool reach = bm[r] >= t;
            look[nl] = (int32_t)r;
            nl += !over && (first || reach);
            cflag[r] |= (uint8_t)(!over && !first && !reach); /* keys left out */
        }
        for (int64_t q = 0; q < nl; q++) {
            const int64_t r = look[q];
            const float *x = P + (v.r0 - i0 + r) * ld + (ja - j0); /* x[j]: key ja + j */
            if (q + 1 < nl) {
                const char *nx = (const char *)(P + (v.r0 - i0 + look[q + 1]) * ld + (ja - j0));
                for (int64_t o = 0; o < n * (int64_t)sizeof(float); o += 64)
                    __builtin_prefetch(nx + o);
            }
            uint8_t flag = cflag[r];
            const int64_t ri = base + r;
            row_candidates(s, ri, &flag, x, n, ja, nv, mprev[v.r0 - i0 + r]);
            /* the candidates the threshold left behind are dropped once a few k have gathered */
            if (s->ccnt[ri] > 2 * k + 16 && compact_row(s, ri))
                flag |= 1;
            cflag[r] = flag;
        }
    }
}

void mha_sink_stream_block(mha_sink *s, int slot, int64_t b, int64_t h, int64_t i0, int64_t m,
                           int64_t nv, int64_t j0, int64_t c0, int64_t c1, const float *P,
                           int64_t ld)
{
    mha_rows_view v;
    if (s->kind != MHA_SINK_POOL || s->slot_of_head[h] < 0 ||
        !mha_sink_clip_rows(s, b, s->slot_of_head[h], i0, m, &v))
        return;
    const int64_t ja = j0 + c0 > s->k0 ? j0 + c0 : s->k0, jb = j0 + c1 < s->k1 ? j0 + c1 : s->k1;
    const int64_t rows = v.r1 - v.r0;
    {
        int64_t *pc0 = s->pc0 + (int64_t)slot * s->nblk, *pnc = s->pnc + (int64_t)slot * s->nblk;
        if (ja >= jb) {
            pnc[nv] = 0;
            return;
        }
        const int64_t cf = (ja - s->k0) / s->pb, cl = (jb - 1 - s->k0) / s->pb;
        pc0[nv] = cf;
        pnc[nv] = cl - cf + 1;
        double *pp = s->pp + ((int64_t)slot * s->nblk + nv) * s->rb * s->spb;
        for (int64_t r = 0; r < rows; r++) /* x[j]: key j */
            mha_run_pool_columns(s->isa, pp + r * s->spb, P + (v.r0 - i0 + r) * ld - j0, ja, jb,
                                 s->k0, s->pb, s->op == MHA_POOL_MAX);
    }
}

float *mha_sink_stream_factors(mha_sink *s, int slot)
{
    return s->sfac + (int64_t)slot * s->nblk * s->rb;
}

bool mha_sink_stream_end(mha_sink *s, int slot, int64_t b, int64_t h, int64_t i0, int64_t m,
                         int64_t nvis, const float *fac, const float *mt, int64_t fld)
{
    mha_rows_view v;
    if (s->slot_of_head[h] < 0 || !mha_sink_clip_rows(s, b, s->slot_of_head[h], i0, m, &v))
        return true;
    const int64_t rows = v.r1 - v.r0;
    const int eslot = slot / s->sgroup; /* the thread's: the pooled rows it emits */
    if (s->kind == MHA_SINK_POOL) {
        mha_sink_head_begin(s, eslot, b, h, i0, m);
        const int64_t *pc0 = s->pc0 + (int64_t)slot * s->nblk;
        const int64_t *pnc = s->pnc + (int64_t)slot * s->nblk;
        for (int64_t nv = 0; nv < nvis; nv++) {
            const double *pp = s->pp + ((int64_t)slot * s->nblk + nv) * s->rb * s->spb;
            for (int64_t r = 0; r < rows && pnc[nv]; r++) {
                double *prow =
                    mha_sink_part_row(s, eslot, &v, (v.r0 + r - s->q0) / s->pa) + pc0[nv];
                const double *d = pp + r * s->spb;
                /* max(x)·f, or Σx·f in double: the slab path's arithmetic */
                mha_run_pool_accumulate(s->isa, prow, d, pnc[nv], fac[nv * fld + (v.r0 - i0 + r)],
                                        s->op == MHA_POOL_MAX);
            }
        }
        /* keys never computed hold 0; every weight is >= 0, so max(·, 0) is the same as the
         * slab path's fill whether or not a block holds such keys */
        for (int64_t r = 0; r < rows && s->op == MHA_POOL_MAX; r++) {
            double *prow = mha_sink_part_row(s, eslot, &v, (v.r0 + r - s->q0) / s->pa);
            for (int64_t c = 0; c < s->Sp; c++)
                prow[c] = prow[c] > 0.0 ? prow[c] : 0.0;
        }
        mha_sink_head_end(s, eslot, b, h, i0, m);
        return true;
    }
    for (int64_t r = 0; r < rows; r++)
        if (s->cflag[(int64_t)slot * s->rb + r] & 2)
            return false;
    /* the rows' k best are written in their final order here (the few candidates the final
     * threshold leaves are placed by counting), without the sink's head_begin / head_end */
    const bool all_seen = s->cseen[8 * slot] == s->Sk;
    for (int64_t r = 0; r < rows; r++) {
        const int64_t ri = (int64_t)slot * s->rb + r, cap = s->cap, i = v.r0 + r;
        const int64_t at = (v.b * s->nh + v.hs) * s->Lq + (i - s->q0);
        float *vals = s->values + at * s->k;
        int32_t *idx = s->indices + at * s->k;
        /* the candidates the final threshold leaves behind go first: they cannot make the k */
        if (compact_row(s, ri))
            s->cflag[ri] |= 1;
        /* each candidate's weight as the full map has it: its block's exp, exp(score - m after
         * that block), then that block's factor */
        const int64_t n = s->ccnt[ri];
        const mha_cand *cd = s->cand + ri * cap;
        float *e = s->ctmp + (int64_t)slot * 2 * ctmp_room(cap);
        int32_t *key = (int32_t *)(e + ctmp_room(cap));
        for (int64_t c = 0; c < n; c++) {
            e[c] = cd[c].x - mt[cd[c].nv * fld + (i - i0)];
            key[c] = cd[c].j;
        }
        mha_exp_le0_array_isa(s->isa, e, e, n);
        for (int64_t c = 0; c < n; c++)
            e[c] *= fac[cd[c].nv * fld + (i - i0)];
        const int64_t held = mha_run_best_of(s->isa, vals, idx, s->k, e, key, n);
        const bool every_key = all_seen && !(s->cflag[ri] & 1);
        if (!every_key && !(held == s->k && vals[s->k - 1] >= 0x1p-90f))
            return false;
    }
    return true;
}
