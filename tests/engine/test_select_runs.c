/*
 * test_select_runs.c - the streamed top-k's scan (mha_run_topk_scan, lib/mha_select_runs.c) against
 * a sort, on every instruction set this CPU has (SKIP for the others): runs of every awkward length
 * (1, 7, 8, 9, 63, 64, 65, 128, 200, 256), a row's largest scores held 8, 16, 24 and 32 at a time,
 * empty, partly filled (-inf places) and full, thresholds that take none, some and all keys, keys
 * masked to -inf, NaN keys, and ties:
 *   - the candidates are exactly the keys >= the threshold, ascending, with their scores, keys
 *     (offset j0) and block;
 *   - the largest scores held are the kst largest of those held before and the candidates, in
 *     ascending order, -inf where fewer were seen; the same bits on every ISA;
 * the k best of a whole row (mha_topk_row, the paths that hold the row): the stable descending
 * order's first k against a sort, for rows of 1 to 4000 keys and k from 1 to all, on weights,
 * scores with negatives, -inf and -0, ties, a crowd within a few ulp (its radix sort), and NaN keys
 * (never chosen), through both ways to the candidates (a bound, or a count of every key);
 * the order keys of every kind of value (mha_run_order_keys: descending order, -0 as +0, NaN last)
 * and the keys up to a threshold (mha_run_keys_upto), for runs of 0 to 80;
 * a row's first threshold (mha_run_topk_bound): the k-th largest of the groups' maxima, the same
 * bits on every ISA, reached by k keys (maxima that tie included);
 * the k best of a row's few candidates (mha_run_best_of) against a sort, ties included;
 * a streamed pool's block into a pooled row (mha_run_pool_accumulate), bit for bit;
 * and a pooled map's columns (mha_run_pool_columns): runs of 1 to 256 keys cut by a block's ends,
 * each column's sum in double (within 1e-12 per key of a sequential double sum) or max (exact), and
 * the bits mha_run_sum / mha_run_max give for that column.
 */
#include "check.h"
#include "mha_kernels.h"
#include "mha_select.h"

#include <float.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *const isa_name[MHA_ISA_COUNT] = {"portable", "avx2", "avx512"};

static uint64_t seed = 2511;

static double rnd(void)
{
    seed = seed * 6364136223846793005ull + 1442695040888963407ull;
    return (double)(seed >> 40) / (double)(1 << 24);
}

static int cmp_float(const void *a, const void *b)
{
    const float x = *(const float *)a, y = *(const float *)b;
    return x < y ? -1 : x > y;
}

/* n keys in [-2, 2); `special` puts -inf, NaN and repeated values (ties) among them. */
static void random_keys(float *x, int64_t n, bool special)
{
    for (int64_t j = 0; j < n; j++) {
        x[j] = (float)(4.0 * rnd() - 2.0);
        if (special && j % 5 == 1)
            x[j] = -INFINITY;
        if (special && j % 11 == 3)
            x[j] = NAN;
        if (special && j % 7 == 2)
            x[j] = 0.5f; /* ties */
    }
}

/* One scan of n keys with kst held, `held` of them real (the rest -inf), the threshold at quantile
 * q of the keys (q < 0: -FLT_MAX, every finite key; q > 1: above them all); `special` puts -inf,
 * NaN and repeated values among the keys. */
static void one_scan(mha_isa isa, int64_t n, int64_t kst, int64_t held, double q, bool special)
{
    float x[256], kt[32], want_kt[32 + 256], sorted[256];
    mha_cand cand[257]; /* one past: nothing may be written there */
    random_keys(x, n, special);
    int64_t nf = 0;
    for (int64_t j = 0; j < n; j++)
        if (isfinite(x[j]))
            sorted[nf++] = x[j];
    qsort(sorted, (size_t)nf, sizeof(float), cmp_float);
    float thr = q < 0 ? -FLT_MAX
                : q > 1 || nf == 0 ? 3.0f
                                   : sorted[(int64_t)(q * (double)(nf - 1))];
    /* the row's largest so far: `held` values in ascending order after -inf places */
    for (int64_t i = 0; i < kst; i++)
        kt[i] = -INFINITY;
    for (int64_t i = 0; i < held; i++)
        kt[kst - held + i] = (float)(-1.0 + 3.0 * rnd());
    qsort(kt + kst - held, (size_t)held, sizeof(float), cmp_float);

    int64_t nw = 0;
    for (int64_t i = 0; i < kst; i++)
        want_kt[nw++] = kt[i];
    const int64_t j0 = 1000, nv = 7;
    int64_t want_c = 0;
    for (int64_t j = 0; j < n; j++)
        if (x[j] >= thr) {
            want_kt[nw++] = x[j];
            want_c++;
        }
    qsort(want_kt, (size_t)nw, sizeof(float), cmp_float); /* the kst largest: the top end */

    for (int64_t c = 0; c < 257; c++)
        cand[c] = (mha_cand){12345.0f, -1, -1};
    const int64_t got_c = mha_run_topk_scan(isa, cand, kt, kst, x, n, thr, j0, nv);
    bool cands_ok = got_c == want_c;
    for (int64_t j = 0, c = 0; j < n && cands_ok; j++)
        if (x[j] >= thr) {
            cands_ok = cand[c].x == x[j] && cand[c].j == j0 + j && cand[c].nv == nv;
            c++;
        }
    cands_ok &= cand[got_c].j == -1; /* nothing written past them */
    CHECK(cands_ok,
          "%s: n=%lld kst=%lld held=%lld q=%.2f special=%d: candidates are the keys >= thr "
          "(got %lld, want %lld)",
          isa_name[isa], (long long)n, (long long)kst, (long long)held, q, special,
          (long long)got_c, (long long)want_c);
    CHECK(memcmp(kt, want_kt + nw - kst, (size_t)kst * sizeof(float)) == 0,
          "%s: n=%lld kst=%lld held=%lld q=%.2f special=%d: the kst largest, ascending",
          isa_name[isa], (long long)n, (long long)kst, (long long)held, q, special);
}

/* mha_run_topk_bound: the k-th largest of G groups' maxima (key j in group j mod G, G =
 * mha_topk_bound_groups(kst)), from a sort of the maxima, and a value that k keys reach. */
static int cmp_desc(const void *a, const void *b)
{
    const float x = *(const float *)a, y = *(const float *)b;
    return x > y ? -1 : x < y;
}

static void one_bound(mha_isa isa, int64_t n, int64_t k, int special)
{
    float x[256];
    random_keys(x, n, special == 1);
    for (int64_t j = 0; j < n && special == 2; j++) /* four values, ±0 the largest: maxima tie */
        x[j] = j % 3 ? -(float)(int)(4.0 * rnd()) : (j % 2 ? 0.0f : -0.0f);
    const int64_t kst = (k + 7) / 8 * 8, G = mha_topk_bound_groups(kst);
    float gmax[MHA_TOPK_BOUND_MAX_GROUPS];
    for (int64_t g = 0; g < G; g++)
        gmax[g] = -INFINITY;
    for (int64_t j = 0; j < n; j++) {
        const int64_t g = j % G;
        if (!isnan(x[j]) && x[j] > gmax[g])
            gmax[g] = x[j];
    }
    qsort(gmax, (size_t)G, sizeof gmax[0], cmp_desc);
    const float want = gmax[k - 1] + 0.0f; /* -0 as +0 */
    const float got = mha_run_topk_bound(isa, x, n, k, kst);
    int64_t reach = 0;
    for (int64_t j = 0; j < n; j++)
        reach += x[j] >= got;
    CHECK(memcmp(&got, &want, sizeof got) == 0 && (got == -INFINITY || reach >= k),
          "%s: n=%lld k=%lld special=%d: first bound %g (want %g), reached by %lld keys",
          isa_name[isa], (long long)n, (long long)k, special, (double)got, (double)want,
          (long long)reach);
}

/* The reference order of mha_topk_row: the larger value, of equal values (-0 = +0) the lower key;
 * NaN keys last (never chosen). */
static const float *order_w;
static int cmp_best(const void *a, const void *b)
{
    const int32_t i = *(const int32_t *)a, j = *(const int32_t *)b;
    const float x = order_w[i], y = order_w[j];
    if (isnan(x) != isnan(y))
        return isnan(x) ? 1 : -1;
    if (!isnan(x) && x != y)
        return x > y ? -1 : 1;
    return i < j ? -1 : i > j;
}

/* mha_run_best_of on n weights (ties: from four values) with the keys 0..n-1 in random order,
 * against a sort of the keys (cmp_best on each key's weight): its first min(n, k) in vals and idx,
 * nothing written past them. */
static void one_best_of(mha_isa isa, int64_t n, int64_t k, bool ties)
{
    float v[96], vals[40], w_of_key[96];
    int32_t j[96], idx[40], order[96];
    for (int64_t c = 0; c < n; c++) {
        v[c] = ties ? 0.25f * (float)(int)(4.0 * rnd()) : (float)rnd();
        j[c] = (int32_t)c;
    }
    for (int64_t c = n - 1; c > 0; c--) { /* keys in random order */
        const int64_t o = (int64_t)(rnd() * (double)(c + 1)) % (c + 1);
        const int32_t t = j[c];
        j[c] = j[o];
        j[o] = t;
    }
    for (int64_t c = 0; c < n; c++) {
        w_of_key[j[c]] = v[c];
        order[c] = (int32_t)c;
    }
    order_w = w_of_key;
    qsort(order, (size_t)n, sizeof order[0], cmp_best);
    for (int q = 0; q < 40; q++) {
        vals[q] = -1.0f;
        idx[q] = -7;
    }
    float vin[96];
    int32_t jin[96];
    memcpy(vin, v, sizeof v);
    memcpy(jin, j, sizeof j);
    const int64_t got = mha_run_best_of(isa, vals, idx, k, vin, jin, n);
    const int64_t m = n < k ? n : k;
    bool ok = got == m;
    for (int64_t q = 0; q < m; q++)
        ok = ok && vals[q] == w_of_key[order[q]] && idx[q] == order[q];
    for (int64_t q = m; q < 40; q++)
        ok = ok && vals[q] == -1.0f && idx[q] == -7;
    CHECK(ok, "%s: best_of n=%lld k=%lld ties=%d: the first %lld in order (got %lld)",
          isa_name[isa], (long long)n, (long long)k, ties, (long long)m, (long long)got);
}

/* mha_topk_row on a row of n keys of one pattern: 0 weights in (0, 1], 1 scores with negatives,
 * -inf and -0, 2 a handful of values (ties), 3 one key far above a crowd within a few ulp (one
 * bucket holds them all: the radix sort), 4 NaN keys among weights (fewer than k others when
 * most are NaN), 5 every 4th key above all the others (a count of every 4th key sees only those:
 * its estimate keeps too few, and every key is counted), 6 weights far more spread than 0's (a
 * hint from 0's rows keeps too few of them, and theirs too many of 0's). */
static void one_topk_row(mha_isa isa, int64_t n, int64_t k, int pattern, float scale,
                         mha_topk_hint *hint)
{
    static float w[4000], vals[4001]; /* vals, idx: one past the k, unwritten */
    static int32_t idx[4001], order[4000];
    static float room[5 * 4000];
    for (int64_t j = 0; j < n; j++) {
        const double u = rnd();
        switch (pattern) {
        case 0:
            w[j] = (float)(u * u * u);
            break;
        case 1:
            w[j] = j % 9 == 4 ? -INFINITY : j % 13 == 6 ? -0.0f : j % 17 == 3 ? 0.0f
                                                                               : (float)(8 * u - 6);
            break;
        case 2:
            w[j] = (float)(int)(u * 5) * 0.25f;
            break;
        case 3:
            w[j] = j == n / 2 ? 1.0f : 0.25f + (float)(int)(u * 40) * 0x1p-25f;
            break;
        case 4:
            w[j] = u < (n > 40 ? 0.3 : 0.9) ? NAN : (float)u;
            break;
        case 6:
            w[j] = (float)pow(u, 12);
            break;
        default:
            w[j] = (float)(j % 4 == 0 ? 1 + u : u);
        }
        w[j] *= scale;
    }
    const mha_topk_scratch t = {(int32_t *)room, (int32_t *)room + n, (uint32_t *)room + 2 * n,
                                (uint32_t *)room + 3 * n, room + 4 * n, hint};
    for (int64_t q = 0; q < k + 1; q++) {
        vals[q] = 12345.0f;
        idx[q] = -7;
    }
    mha_topk_row(isa, w, n, k, 100, vals, idx, &t);
    for (int64_t j = 0; j < n; j++)
        order[j] = (int32_t)j;
    order_w = w;
    qsort(order, (size_t)n, sizeof order[0], cmp_best);
    bool ok = vals[k] == 12345.0f && idx[k] == -7; /* nothing past the k */
    for (int64_t q = 0; q < k && ok; q++) {
        const int32_t j = order[q];
        if (isnan(w[j]))
            ok = isnan(vals[q]) && idx[q] == -1;
        else
            ok = memcmp(&vals[q], &w[j], sizeof w[j]) == 0 && idx[q] == 100 + j;
    }
    if (hint && ok && !isnan(vals[k - 1])) /* the next row's guess: its k-th's gap to its first */
        ok = hint->set && hint->gap == mha_order_key(vals[k - 1]) - mha_order_key(vals[0]);
    CHECK(ok, "%s: top %lld of %lld keys, pattern %d, x%g%s: the stable descending order's first k",
          isa_name[isa], (long long)k, (long long)n, pattern, (double)scale,
          hint ? " (after the last row's hint)" : "");
}

/* mha_topk_row on a run of rows that share a hint (mha_topk_hint): rows like the last (the hint
 * keeps about k keys), rows scaled far up or down (their gaps stay: the order keys shift), and rows
 * of another spread or pattern (it keeps too few, or too many), each exactly its own top k whatever
 * the guess. */
static void topk_rows_hinted(mha_isa isa, int64_t n, int64_t k)
{
    mha_topk_hint hint = {0, 0, 0};
    static const float scales[] = {1, 1, 1, 1, 0x1p-9f, 1, 1, 0x1p+7f, 0x1p+7f, 1, 0.75f, 1};
    for (int r = 0; r < 36; r++) {
        const int pattern = r % 12 == 11 ? (r / 12) % 6 : r % 12 == 5 || r % 12 == 6 ? 6 : 0;
        one_topk_row(isa, n, k, pattern, scales[r % 12], &hint);
    }
}

/* mha_run_order_keys and mha_run_keys_upto on n values of every kind: the keys' unsigned order is
 * the values' descending order (-0 as +0, NaN after every number, as UINT32_MAX), their range, and
 * the positions and keys at or under a threshold, in order. */
static void one_order_keys(mha_isa isa, int64_t n)
{
    static const float special[] = {0.0f, -0.0f, INFINITY, -INFINITY, NAN, 1e-45f, -1e-45f, 1.0f};
    float x[80] = {0};
    uint32_t key[80], kept[80];
    int32_t pos[80];
    for (int64_t j = 0; j < n; j++)
        x[j] = j % 5 == 2 ? special[(j / 5) % 8] : (float)(4 * rnd() - 2);
    uint32_t lo = 7, hi = 7;
    mha_run_order_keys(isa, key, x, n, &lo, &hi);
    bool ok = true;
    uint32_t want_lo = UINT32_MAX, want_hi = 0;
    for (int64_t j = 0; j < n; j++) {
        ok &= isnan(x[j]) ? key[j] == UINT32_MAX : key[j] != UINT32_MAX;
        want_lo = key[j] < want_lo ? key[j] : want_lo;
        want_hi = key[j] > want_hi ? key[j] : want_hi;
        for (int64_t i = 0; i < j; i++)
            if (!isnan(x[i]) && !isnan(x[j]))
                ok &= (x[i] > x[j]) == (key[i] < key[j]) && (x[i] == x[j]) == (key[i] == key[j]);
    }
    ok &= lo == want_lo && hi == want_hi;
    CHECK(ok, "%s: order keys of %lld values: descending order, NaN last, the range", isa_name[isa],
          (long long)n);
    const uint32_t thr = n ? key[(int64_t)(rnd() * (double)n)] : 0;
    const int64_t got = mha_run_keys_upto(isa, pos, kept, key, n, thr);
    int64_t c = 0;
    for (int64_t j = 0; j < n && ok; j++)
        if (key[j] <= thr) {
            ok = c < got && pos[c] == (int32_t)j && kept[c] == key[j];
            c++;
        }
    CHECK(ok && c == got, "%s: keys up to a threshold among %lld: %lld in order, the keys beside",
          isa_name[isa], (long long)n, (long long)c);
    /* the two in one pass: the same keys, range and kept ones (stores within the first n) */
    uint32_t key1[81], kept1[81], lo1 = 7, hi1 = 7;
    int32_t pos1[81];
    key1[n] = kept1[n] = 12345u;
    pos1[n] = -7;
    const int64_t got1 = mha_run_order_keys_upto(isa, key1, pos1, kept1, x, n, thr, &lo1, &hi1);
    ok = got1 == got && lo1 == lo && hi1 == hi && key1[n] == 12345u && kept1[n] == 12345u &&
         pos1[n] == -7 && memcmp(key1, key, (size_t)n * sizeof key[0]) == 0 &&
         memcmp(pos1, pos, (size_t)got * sizeof pos[0]) == 0 &&
         memcmp(kept1, kept, (size_t)got * sizeof kept[0]) == 0;
    CHECK(ok, "%s: order keys and those up to a threshold in one pass among %lld", isa_name[isa],
          (long long)n);
}

/* mha_run_pool_accumulate: acc[c] += d[c]·f in double (the product rounded first), or the larger
 * of acc[c] and (float)d[c]·f, bit for bit. */
static void one_accumulate(mha_isa isa, int64_t n, bool max)
{
    double acc[40], want[40], d[40];
    const float f = (float)rnd();
    for (int64_t c = 0; c < n; c++) {
        d[c] = max ? (double)(float)(3.0 * rnd()) : 7.0 * rnd();
        acc[c] = want[c] = c % 3 == 0 ? 0.0 : 2.0 * rnd();
    }
    for (int64_t c = 0; c < n; c++) {
        if (max) {
            const float w = (float)d[c] * f;
            want[c] = w > want[c] ? w : want[c];
        } else {
            const double p = d[c] * (double)f;
            want[c] = want[c] + p;
        }
    }
    mha_run_pool_accumulate(isa, acc, d, n, f, max);
    CHECK(memcmp(acc, want, (size_t)n * sizeof acc[0]) == 0,
          "%s: a block into a pooled row's %lld partials (%s), bit for bit", isa_name[isa],
          (long long)n, max ? "max" : "sum");
}

/* mha_run_pool_columns: each pooled column a block meets, its keys' sum (as mha_run_sum) or max. */
static void one_pool(mha_isa isa, int64_t k0, int64_t ja, int64_t jb, int64_t pb, bool max)
{
    static float keys[600];
    for (int64_t j = 0; j < 600; j++)
        keys[j] = (float)rnd();
    double out[600];
    mha_run_pool_columns(isa, out, keys, ja, jb, k0, pb, max);
    const int64_t cf = (ja - k0) / pb, cl = (jb - 1 - k0) / pb;
    bool ok = true, same = true;
    for (int64_t c = cf; c <= cl; c++) {
        const int64_t js = ja > k0 + c * pb ? ja : k0 + c * pb;
        const int64_t je = jb < k0 + (c + 1) * pb ? jb : k0 + (c + 1) * pb;
        double want = max ? -INFINITY : 0.0;
        for (int64_t j = js; j < je; j++)
            want = max ? fmax(want, (double)keys[j]) : want + (double)keys[j];
        const double got = out[c - cf];
        ok &= max ? got == want : fabs(got - want) <= 1e-12 * (double)(je - js);
        const double one = max ? (double)mha_run_max(isa, keys + js, je - js)
                               : mha_run_sum(isa, keys + js, je - js);
        same &= memcmp(&got, &one, sizeof got) == 0;
    }
    CHECK(ok && same,
          "%s: pooled columns of %lld from key %lld over keys [%lld, %lld), %s: each column's %s "
          "(and mha_run_%s's bits)",
          isa_name[isa], (long long)pb, (long long)k0, (long long)ja, (long long)jb,
          max ? "max" : "sum", max ? "max" : "sum", max ? "max" : "sum");
}

int main(void)
{
    static const int64_t lens[] = {1, 7, 8, 9, 63, 64, 65, 128, 200, 256};
    static const double qs[] = {-1.0, 0.0, 0.5, 0.9, 0.97, 2.0};
    for (int isa = 0; isa < MHA_ISA_COUNT; isa++) {
        if (!mha_isa_usable((mha_isa)isa)) {
            printf("SKIP %s: this CPU lacks it\n", isa_name[isa]);
            continue;
        }
        seed = 2511; /* the same cases on every ISA */
        for (size_t l = 0; l < sizeof lens / sizeof lens[0]; l++)
            for (int64_t kst = 8; kst <= 32; kst += 8)
                for (size_t qi = 0; qi < sizeof qs / sizeof qs[0]; qi++)
                    for (int special = 0; special < 2; special++) {
                        one_scan((mha_isa)isa, lens[l], kst, 0, qs[qi], special);
                        one_scan((mha_isa)isa, lens[l], kst, kst / 2 + 1, qs[qi], special);
                        one_scan((mha_isa)isa, lens[l], kst, kst, qs[qi], special);
                    }
        for (size_t l = 0; l < sizeof lens / sizeof lens[0]; l++)
            for (int64_t k = 1; k <= 32; k++)
                for (int special = 0; special < 3; special++)
                    one_bound((mha_isa)isa, lens[l], k, special);
        for (int64_t n = 0; n <= 90; n += n < 20 ? 1 : 7)
            for (int64_t k = 1; k <= 33; k += k < 9 ? 1 : 8)
                for (int ties = 0; ties < 2; ties++)
                    one_best_of((mha_isa)isa, n, k, ties);
        /* 4000: top-33 and top-64 from the groups' bound (bound_pays) */
        static const int64_t tlens[] = {1, 2, 7, 31, 48, 49, 64, 100, 129, 300, 1000, 2500, 4000};
        for (size_t l = 0; l < sizeof tlens / sizeof tlens[0]; l++) {
            const int64_t n = tlens[l];
            const int64_t ks[] = {1, 2, 8, 31, 32, 33, 64, n / 4, n / 2, n - 1, n};
            for (size_t q = 0; q < sizeof ks / sizeof ks[0]; q++)
                for (int pattern = 0; pattern < 6 && ks[q] >= 1 && ks[q] <= n; pattern++)
                    one_topk_row((mha_isa)isa, n, ks[q], pattern, 1.0f, NULL);
            for (size_t q = 0; q < sizeof ks / sizeof ks[0]; q++)
                if (ks[q] >= 1 && ks[q] <= n)
                    topk_rows_hinted((mha_isa)isa, n, ks[q]);
        }
        for (int64_t n = 0; n <= 80; n++)
            one_order_keys((mha_isa)isa, n);
        for (int64_t n = 0; n <= 40; n++) {
            one_accumulate((mha_isa)isa, n, false);
            one_accumulate((mha_isa)isa, n, true);
        }
        static const int64_t pbs[] = {1, 2, 3, 4, 5, 8, 16, 37, 64, 100, 256};
        for (size_t p = 0; p < sizeof pbs / sizeof pbs[0]; p++)
            for (int t = 0; t < 12; t++) {
                const int64_t k0 = (int64_t)(rnd() * 40), ja = k0 + (int64_t)(rnd() * 200);
                const int64_t jb = ja + 1 + (int64_t)(rnd() * 300);
                one_pool((mha_isa)isa, k0, ja, jb, pbs[p], t % 2 == 1);
            }
    }
    return check_report();
}
