/*
 * mha_select_topk.c - the k best keys of a whole row, for the selection's paths that hold the row:
 * a top-k the core cannot stream (k above 32, averaged over heads, the trace's stages, or a
 * streamed row that could not be made exact), fed the map's own values block by block
 * (mha_select.c) and chosen here once the row is complete.
 *
 * The order is torch.topk's on the slice (and mha_run_best_of's): the larger value first, of
 * equal values the lower key. A NaN key is never chosen (no compare admits it; the daemon refuses
 * passes whose output is not finite, so none reaches a reply).
 *
 * Every value is given a 32-bit order key (mha_order_key: ascending keys, descending values, -0
 * as +0). The candidates, in key order (so that sorting stably keeps ties in it):
 *   - when k is small against the row (bound_pays): the keys at or above a bound that k keys
 *     reach: for k <= 32 the k-th largest of 4k groups' maxima (mha_run_topk_bound), above k
 *     the smallest of k groups' maxima (group j mod k); one vectorised pass;
 *   - else every order key; when k is at most a quarter of them, first the keys up to the row's
 *     largest's key plus the last row's gap to its k-th plus a margin (mha_topk_hint: a head's
 *     rows are alike), kept when that is k to 2k + 64 of them; else a count of every 4th key into
 *     buckets spread evenly over the keys' range finds about where the k-th falls (with a margin),
 *     and one branch-free pass (mha_run_keys_upto) keeps the keys up to that bucket's end; when
 *     fewer than k are kept, every key is counted, which finds the k-th's bucket exactly.
 * Then a counting sort of the candidates into about one bucket each over their own range, stable,
 * as far as the k-th's bucket (the keys past it dealt to one run after it, unordered, never read),
 * a bucket of more than 32 sorted by radix (LSD, 8 bits a pass, a digit every key shares skipped),
 * and one insertion pass as far as the k-th's bucket: its keys move only within their bucket, a
 * few places. Time linear in the candidates whatever the values: a client cannot choose inputs that
 * make it quadratic.
 *
 * Rows of 1024 keys (Zen 3, cycles of the TSC a row): top-8 about 1.2k, top-64 4k, top-256 9k
 * where the bound and a bucketed sort from the common prefix cost 1.3k, 6.5–9k and 16–24k, and a
 * heap before them more. The noinline helpers keep their 8–16 KiB of counts off the small path's
 * stack frame.
 */
#include "mha_select.h"

#include <math.h>
#include <stdint.h>
#include <string.h>

/* Sorts key[0..n) ascending, pay moving with it, stably; tmp_key, tmp_pay: room for n each.
 * Returns the sorted payload (pay or tmp_pay, as the passes left it), the keys beside it. */
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

/* Buckets spread evenly over the keys [lo, hi] (lo < hi), about `want` of them (at most
 * MAX_BUCKETS): bucket of key x = (x - lo) >> shift. */
#define MAX_BUCKETS 2048
static int bucket_shift(uint32_t lo, uint32_t hi, int64_t want)
{
    int bits = 4;
    while (bits < 11 && ((int64_t)1 << bits) < want)
        bits++;
    const int span = 32 - __builtin_clz(hi - lo);
    return span > bits ? span - bits : 0;
}

/* A key up to which about k of key [n] (keys lo..hi, lo < hi) fall, by whole buckets: the end of
 * the bucket where the want-th of every stride-th key falls (never a NaN's key). With stride 1 and
 * want k, at least k keys are at or under it; a sample (stride 4) needs a check. */
__attribute__((noinline)) static uint32_t kth_bucket_end(const uint32_t *key, int64_t n,
                                                         int64_t stride, int64_t want, uint32_t lo,
                                                         uint32_t hi)
{
    const int shift = bucket_shift(lo, hi, n / stride / 2);
    const uint32_t nb = ((hi - lo) >> shift) + 1;
    uint32_t count[MAX_BUCKETS];
    memset(count, 0, (size_t)nb * sizeof count[0]);
    for (int64_t j = 0; j < n; j += stride)
        count[(key[j] - lo) >> shift]++;
    uint32_t b = 0;
    for (int64_t at = 0; b + 1 < nb; b++) {
        at += count[b];
        if (at >= want)
            break;
    }
    const uint64_t end = (uint64_t)lo + (((uint64_t)b + 1) << shift) - 1;
    return end < UINT32_MAX - 1 ? (uint32_t)end : UINT32_MAX - 1;
}

/* Sorts t->key [n] (t->cand moving with it; in key order, keys lo..hi) far enough that its first
 * k are the k smallest in order, stably; returns the sorted payload (t->cand or t->cand2, the keys
 * beside it). */
__attribute__((noinline)) static const int32_t *sort_first(const mha_topk_scratch *t, int64_t n,
                                                           int64_t k, uint32_t lo, uint32_t hi)
{
    if (lo == hi) /* all equal: key order is their order */
        return t->cand;
    const int shift = bucket_shift(lo, hi, n);
    const uint32_t nb = ((hi - lo) >> shift) + 1;
    uint32_t count[MAX_BUCKETS];
    uint32_t end[MAX_BUCKETS + 1]; /* each bucket's first place, then (scattered) its end */
    memset(count, 0, (size_t)nb * sizeof count[0]);
    for (int64_t i = 0; i < n; i++)
        count[(t->key[i] - lo) >> shift]++;
    uint32_t big = 0, last = nb - 1, at = 0; /* last: the bucket that holds the k-th */
    for (uint32_t b = 0; b < nb; b++) {
        end[b] = at;
        at += count[b];
        big |= count[b] > 32;
        if (at >= (uint64_t)k) {
            last = b;
            break;
        }
    }
    end[last + 1] = at; /* the keys past the k-th's bucket: one run after it, never read */
    for (int64_t i = 0; i < n; i++) { /* in key order, so ties stay in it */
        const uint32_t x = t->key[i], b = (x - lo) >> shift;
        const uint32_t dst = end[b <= last ? b : last + 1]++;
        t->key2[dst] = x;
        t->cand2[dst] = t->cand[i];
    }
    if (big) /* buckets of many keys (a crowd of close values) by radix, into the other halves */
        for (uint32_t b = 0, s0 = 0; b <= last; s0 = end[b++]) {
            const uint32_t len = end[b] - s0;
            if (len <= 32)
                continue;
            const int32_t *p =
                radix_sort(t->key2 + s0, t->cand2 + s0, t->key + s0, t->cand + s0, len);
            if (p != t->cand2 + s0) { /* it ended in the other half: back into place */
                memcpy(t->cand2 + s0, p, (size_t)len * sizeof *p);
                memcpy(t->key2 + s0, t->key + s0, (size_t)len * sizeof *t->key);
            }
        }
    insertion_sort(t->key2, t->cand2, end[last]); /* within buckets; the big ones are in order */
    return t->cand2;
}

/* Whether the groups' bound is the cheaper way to the candidates. About k ln k keys reach the
 * smallest of k groups' maxima (each of k groups of n/k keys keeps a few), each then sorted (for
 * k <= 32 mha_run_topk_bound's k-th of 4k maxima, about k); the count costs ~2 cycles a key, its
 * candidates ~k. Measured (Zen 3): for k <= 32 the bound wins on rows of 4k keys and more (one
 * kernel, a vector a group); above 32 (k runs of maxima) only on rows of 16·k·log2(k) or more (the
 * two even at top-64 of 8192, the count 1.7x faster at top-64 of 2048). */
static bool bound_pays(int64_t n, int64_t k)
{
    if (k <= 32)
        return 4 * k <= n;
    return 16 * k * (64 - __builtin_clzll((uint64_t)k)) <= n;
}

/* The bound the hint gives a row whose largest value's key is top: the last row's gap from its
 * largest to its k-th, plus the margin. */
static uint32_t hint_bound(const mha_topk_hint *h, uint32_t top)
{
    const uint64_t b = (uint64_t)top + h->gap + h->margin;
    return b < UINT32_MAX - 1 ? (uint32_t)b : UINT32_MAX - 1;
}

/* Whether the hint's bound, which kept nc of a row's keys, serves for its top k: k to 2k + 64 of
 * them (else the row is chosen without it). The margin grows when the bound kept too few and
 * shrinks when it kept many more than k, so that it follows how much the rows' k-th keys move. */
static bool hint_serves(mha_topk_hint *h, int64_t nc, int64_t k)
{
    if (nc < k) {
        h->margin = h->margin < (1u << 30) ? 2 * h->margin + (1u << 12) : h->margin;
        return false;
    }
    if (nc > k + k / 2 + 16) /* more than needed: a closer bound next time */
        h->margin -= h->margin / 4 + (nc > 2 * k + 64 ? h->margin / 4 : 0);
    return nc <= 2 * k + 64;
}

void mha_topk_row(mha_isa isa, const float *w, int64_t n, int64_t k, int64_t key0, float *vals,
                  int32_t *idx, const mha_topk_scratch *t)
{
    int64_t nc;
    uint32_t lo, hi;
    if (bound_pays(n, k)) {
        float bound;
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
        nc = mha_run_above(isa, t->cand, w, n, bound); /* every key but NaN reaches -inf */
        lo = UINT32_MAX;
        hi = 0;
        for (int64_t c = 0; c < nc; c++) {
            const uint32_t x = mha_order_key(w[t->cand[c]]);
            t->key[c] = x;
            lo = x < lo ? x : lo;
            hi = x > hi ? x : hi;
        }
    } else {
        uint32_t upto = UINT32_MAX - 1; /* every number */
        nc = -1;
        if (t->hint && t->hint->set && 4 * k <= n) { /* the keys, and those up to the bound */
            const uint32_t b = hint_bound(t->hint, mha_order_key(mha_run_max(isa, w, n)));
            nc = mha_run_order_keys_upto(isa, t->key2, t->cand, t->key, w, n, b, &lo, &hi);
            if (hint_serves(t->hint, nc, k))
                upto = b;
            else
                nc = -1;
        } else {
            mha_run_order_keys(isa, t->key2, w, n, &lo, &hi);
        }
        if (nc < 0 && lo < hi && 2 * k <= n && n >= 512) {
            /* every 4th key counted (the count is half the work of choosing): its k/4-th, with
             * a margin of twice the sample's spread, almost always keeps k keys; when it does
             * not (chance, or a row whose 4th keys are its best), every key is counted */
            const int64_t want = k / 4 + 2 * (int64_t)sqrt((double)k / 4) + 2;
            upto = kth_bucket_end(t->key2, n, 4, want, lo, hi);
            nc = mha_run_keys_upto(isa, t->cand, t->key, t->key2, n, upto);
            if (nc < k)
                nc = -1;
        }
        if (nc < 0) {
            if (lo < hi && 2 * k <= n)
                upto = kth_bucket_end(t->key2, n, 1, k, lo, hi);
            nc = mha_run_keys_upto(isa, t->cand, t->key, t->key2, n, upto);
        }
        hi = upto < hi ? upto : hi; /* not the kept keys' largest, but above it: range enough */
    }
    const int32_t *pay = t->cand;
    if (nc <= 48) { /* a few (a small top-k's usual case): by insertion */
        if (lo < hi)
            insertion_sort(t->key, t->cand, nc);
    } else {
        pay = sort_first(t, nc, k, lo, hi);
    }
    const int64_t m = nc < k ? nc : k;
    for (int64_t q = 0; q < m; q++) {
        vals[q] = w[pay[q]];
        idx[q] = (int32_t)(key0 + pay[q]);
    }
    if (t->hint && m == k) { /* the next row's guess */
        if (!t->hint->set)
            t->hint->margin = 1u << 16; /* about 1/128 of an octave of the values */
        t->hint->set = 1;
        t->hint->gap = mha_order_key(vals[k - 1]) - mha_order_key(vals[0]);
    }
    for (int64_t q = m; q < k; q++) { /* fewer than k keys that are not NaN */
        vals[q] = NAN;
        idx[q] = -1;
    }
}
