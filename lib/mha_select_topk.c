/*
 * mha_select_topk.c - the k best keys of a whole row, for the selection's paths that hold the row:
 * a top-k the core cannot stream (k above 32, averaged over heads, the trace's stages, or a
 * streamed row that could not be made exact), fed the map's own values block by block
 * (mha_select.c) and chosen here once the row is complete.
 *
 * The order is torch.topk's on the slice (and mha_sink_best_offer's): the larger value first, of equal values
 * the lower key. A NaN key is never chosen (no compare admits it; the daemon refuses passes whose
 * output is not finite, so none reaches a reply).
 *
 *   1. A bound that k keys reach: the keys dealt into k groups, the smallest of the groups'
 *      maxima (mha_run_topk_bound for k <= 32, group j mod k above), one vectorised pass. Only
 *      when k is under a quarter of the row: otherwise most keys reach it anyway.
 *   2. The keys at or above it, in key order (mha_run_above).
 *   3. Those candidates sorted on a 32-bit key that orders the floats (-0 as +0, -inf first),
 *      descending, stably (of equal values the lower key stays first), as far as the first k:
 *      a counting sort on up to 10 bits under the keys' common prefix, then each bucket on the way to
 *      the k-th by insertion or, when large, a radix sort (LSD, 8 bits a pass, a pass whose digit
 *      every key shares skipped). Insertion alone for a few dozen candidates. Time linear in the
 *      candidates whatever the values: a client cannot choose inputs that make it quadratic.
 *
 * A row of n keys with k best costs about n/8 vector compares and a sort of typically a few k
 * candidates; the heap it replaced cost ~log k branches per candidate, and every key was one
 * until the heap was full (top-64 of 1024 keys: +120% over a pass without weights, Zen 3).
 */
#include "mha_select.h"

#include <math.h>
#include <string.h>

/* Ascending order of the floats as unsigned integers (-0 as +0; x holds no NaN), complemented:
 * the largest value gets the smallest key. */
static inline uint32_t desc_key(float x)
{
    x += 0.0f; /* -0 + 0 = +0: the compare's tie, the same key */
    uint32_t b;
    memcpy(&b, &x, sizeof b);
    const uint32_t mono = b & 0x80000000u ? ~b : b | 0x80000000u;
    return ~mono;
}

/* Sorts key[0..n) ascending, pay moving with it, stably; tmp_key, tmp_pay: room for n each.
 * Returns the sorted payload (pay or tmp_pay, as the passes left it). */
static const int32_t *radix_sort(uint32_t *key, int32_t *pay, uint32_t *tmp_key, int32_t *tmp_pay,
                                 int64_t n)
{
    uint32_t hist[4][256];
    memset(hist, 0, sizeof hist);
    for (int64_t i = 0; i < n; i++) {
        const uint32_t k = key[i];
        hist[0][k & 255]++;
        hist[1][(k >> 8) & 255]++;
        hist[2][(k >> 16) & 255]++;
        hist[3][k >> 24]++;
    }
    for (int p = 0; p < 4; p++) {
        const int shift = 8 * p;
        if (hist[p][(key[0] >> shift) & 255] == (uint32_t)n)
            continue; /* every key has this digit: the order stays */
        uint32_t at = 0;
        for (int d = 0; d < 256; d++) {
            const uint32_t c = hist[p][d];
            hist[p][d] = at;
            at += c;
        }
        for (int64_t i = 0; i < n; i++) {
            const uint32_t dst = hist[p][(key[i] >> shift) & 255]++;
            tmp_key[dst] = key[i];
            tmp_pay[dst] = pay[i];
        }
        uint32_t *tk = key;
        int32_t *tp = pay;
        key = tmp_key;
        pay = tmp_pay;
        tmp_key = tk;
        tmp_pay = tp;
    }
    return pay;
}

/* Sorts key[0..n) ascending, pay moving with it, stably, in place. */
static void insertion_sort(uint32_t *key, int32_t *pay, int64_t n)
{
    for (int64_t i = 1; i < n; i++) {
        const uint32_t k = key[i];
        const int32_t p = pay[i];
        int64_t j = i;
        for (; j > 0 && key[j - 1] > k; j--) {
            key[j] = key[j - 1];
            pay[j] = pay[j - 1];
        }
        key[j] = k;
        pay[j] = p;
    }
}

/* Sorts t->key [n] (t->cand moving with it) far enough that its first k are the k smallest in
 * order, stably; returns the sorted payload (t->cand or t->cand2, the keys beside it). First a
 * counting sort on the bits below the keys' common prefix (the candidates of a row share most of
 * their high bits), about as many buckets as keys and at most 1024, then each bucket in turn,
 * until k keys are in place: in order already when it holds one key, by insertion when a few,
 * else by the radix sort (a client's values cannot make a bucket quadratic). */
static const int32_t *sort_first(const mha_topk_scratch *t, int64_t n, int64_t k)
{
    uint32_t lo = t->key[0], hi = t->key[0];
    for (int64_t i = 1; i < n; i++) {
        lo = t->key[i] < lo ? t->key[i] : lo;
        hi = t->key[i] > hi ? t->key[i] : hi;
    }
    if (lo == hi) /* all equal: key order, as they are */
        return t->cand;
    /* about one bucket a key (at most 1024): fewer buckets to clear and walk than keys */
    int want = 4;
    while (want < 10 && ((int64_t)1 << want) < n)
        want++;
    const int bits = 32 - __builtin_clz(lo ^ hi), shift = bits > want ? bits - want : 0;
    const uint32_t base = lo >> shift, nb = (hi >> shift) - base + 1; /* nb <= 2^want */
    uint32_t end[1024]; /* counts, then each bucket's first place, then (scattered) its end */
    memset(end, 0, (size_t)nb * sizeof end[0]);
    for (int64_t i = 0; i < n; i++)
        end[(t->key[i] >> shift) - base]++;
    for (uint32_t b = 0, at = 0; b < nb; b++) {
        const uint32_t c = end[b];
        end[b] = at;
        at += c;
    }
    for (int64_t i = 0; i < n; i++) { /* in key order, so ties stay in it */
        const uint32_t dst = end[(t->key[i] >> shift) - base]++;
        t->key2[dst] = t->key[i];
        t->cand2[dst] = t->cand[i];
    }
    for (uint32_t b = 0, s0 = 0; b < nb && (int64_t)s0 < k; s0 = end[b++]) {
        const uint32_t len = end[b] - s0;
        if (len <= 1)
            continue;
        if (len <= 32) {
            insertion_sort(t->key2 + s0, t->cand2 + s0, len);
            continue;
        }
        /* the radix sort's other halves: the arrays just scattered from */
        const int32_t *p = radix_sort(t->key2 + s0, t->cand2 + s0, t->key + s0, t->cand + s0, len);
        if (p != t->cand2 + s0) /* it ended in the other half: back into place */
            memcpy(t->cand2 + s0, p, (size_t)len * sizeof *p);
    }
    return t->cand2;
}

void mha_topk_row(mha_isa isa, const float *w, int64_t n, int64_t k, int64_t key0, float *vals,
                  int32_t *idx, const mha_topk_scratch *t)
{
    float bound = -INFINITY;
    if (4 * k <= n) {
        if (k <= 32) {
            bound = mha_run_topk_bound(isa, w, n, k, (k + 7) / 8 * 8);
        } else { /* group g: the keys j = g mod k, their maxima built a run of k at a time */
            for (int64_t g = 0; g < k; g++)
                t->gmax[g] = -INFINITY;
            for (int64_t c = 0; c < n; c += k)
                mha_run_max_into(isa, t->gmax, w + c, n - c < k ? n - c : k);
            bound = INFINITY;
            for (int64_t g = 0; g < k; g++)
                bound = t->gmax[g] < bound ? t->gmax[g] : bound;
        }
    }
    /* every key but NaN reaches -inf */
    const int64_t nc = mha_run_above(isa, t->cand, w, n, bound);
    for (int64_t c = 0; c < nc; c++)
        t->key[c] = desc_key(w[t->cand[c]]);
    const int32_t *pay = t->cand;
    if (nc <= 48)
        insertion_sort(t->key, t->cand, nc);
    else
        pay = sort_first(t, nc, k);
    const int64_t m = nc < k ? nc : k;
    for (int64_t q = 0; q < m; q++) {
        vals[q] = w[pay[q]];
        idx[q] = (int32_t)(key0 + pay[q]);
    }
    for (int64_t q = m; q < k; q++) { /* fewer than k keys that are not NaN */
        vals[q] = NAN;
        idx[q] = -1;
    }
}
