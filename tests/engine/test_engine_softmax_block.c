/*
 * test_engine_softmax_block.c - the online softmax over key blocks (lib/mha_softmax_block.c) and
 * its exp, against libm in double, on every instruction set this CPU has (SKIP for the others):
 *   - exp: within 1 ulp over the softmax's range [-87.3, 0] (every 512th float), exactly 0 for -inf and below the
 *     flush point, exactly 1 at 0, NaN for NaN (and a +inf score gives a NaN sum: an input that
 *     overflowed must not turn into a plausible output), and the same bits on every ISA;
 *   - blocks: rows of scores split into blocks of every awkward size (1, 7, 8, 9, 16, 33, 256),
 *     masked keys, rows masked in their first blocks only, fully masked rows; the running maximum
 *     and sum, and each key's weight p · (product of later alphas) / l, against the double softmax
 *     of the whole row; the exps and maxima with the portable code's bits on every ISA, and each
 *     row's running maximum and sum the same alone as among other rows.
 */
#include "check.h"
#include "mha_kernels.h"
#include "mha_softmax_block.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *const isa_name[MHA_ISA_COUNT] = {"portable", "avx2", "avx512"};

static uint64_t seed = 4242;

static double rnd(void)
{
    seed = seed * 6364136223846793005ull + 1442695040888963407ull;
    return (double)(seed >> 40) / (double)(1 << 24);
}

/* The spacing of floats at |v| (v a normal float's value, in double). */
static double ulp_at(double v)
{
    int e;
    frexp(v, &e);
    return ldexp(1.0, e - 24);
}

static void test_exp(mha_isa isa)
{
    /* every 512th float in [-87.3, 0] (about 2.1 million: every binade, every part of the
     * polynomial's interval; an exhaustive run over all of them gave at most 0.88 ulp) */
    enum { n = 1 << 16 };
    static float x[n], y[n], ref[n];
    double worst = 0, worst_ulp = 0;
    float worst_x = 0;
    bool same = true;
    uint32_t b = 0x80000000u;
    for (bool more = true; more;) {
        int k = 0;
        for (; k < n; k++, b += 512) {
            memcpy(&x[k], &b, sizeof b);
            if (!(x[k] >= -87.3f)) {
                more = false;
                break;
            }
        }
        mha_exp_le0_array_isa(isa, y, x, k);
        mha_exp_le0_array_isa(MHA_ISA_PORTABLE, ref, x, k);
        for (int i = 0; i < k; i++) {
            const double want = exp((double)x[i]), u = fabs(y[i] - want) / ulp_at(want);
            worst = fmax(worst, fabs(y[i] - want) / want);
            if (u > worst_ulp)
                worst_ulp = u, worst_x = x[i];
            same &= memcmp(&y[i], &ref[i], sizeof(float)) == 0;
        }
    }
    CHECK(worst_ulp <= 1.0 && worst < 1.2e-7,
          "%s: exp within 1 ulp over [-87.3, 0] (worst %.3f ulp at %.9g, relative %.3g)",
          isa_name[isa], worst_ulp, worst_x, worst);
    CHECK(same, "%s: exp gives the portable code's bits", isa_name[isa]);
    for (int len = 1; len <= 33; len++) { /* every tail length of both vector widths */
        float in[34], got[34], want[34];
        for (int i = 0; i < 34; i++)
            in[i] = -20.0f * (float)rnd(), got[i] = want[i] = 7.0f;
        mha_exp_le0_array_isa(isa, got, in, len);
        mha_exp_le0_array_isa(MHA_ISA_PORTABLE, want, in, len);
        CHECK(memcmp(got, want, sizeof got) == 0,
              "%s: exp of %d floats gives the portable bits and writes nothing past them",
              isa_name[isa], len);
    }
    float special[8] = {-INFINITY, -1000.0f, -88.0f, -87.7f, 0.0f, -1e-8f, -0.5f, -1.0f}, out[8];
    mha_exp_le0_array_isa(isa, out, special, 8);
    CHECK(out[0] == 0.0f && out[1] == 0.0f && out[2] == 0.0f && out[3] == 0.0f,
          "%s: exp of -inf, -1000, -88 and -87.7 is exactly 0 (got %g %g %g %g)", isa_name[isa],
          out[0], out[1], out[2], out[3]);
    CHECK(out[4] == 1.0f, "%s: exp(0) is exactly 1 (got %.9g)", isa_name[isa], out[4]);
    float nan_in[20], nan_out[20];
    for (int i = 0; i < 20; i++)
        nan_in[i] = i == 3 || i == 17 ? NAN : -1.0f;
    mha_exp_le0_array_isa(isa, nan_out, nan_in, 20);
    CHECK(isnan(nan_out[3]) && isnan(nan_out[17]) && !isnan(nan_out[4]),
          "%s: exp(NaN) is NaN (an overflowed input must show in the output)", isa_name[isa]);
    float row[40], m = -INFINITY, l = 0, alpha, tmp[2];
    for (int i = 0; i < 40; i++)
        row[i] = i == 33 ? INFINITY : (float)i * 0.1f;
    mha_softmax_block_isa(isa, row, 40, 1, 40, &m, &l, &alpha, tmp);
    CHECK(isnan(l), "%s: a block with a +inf score sums to NaN (got %g)", isa_name[isa], l);
    CHECK(fabs(out[5] - 1.0) < 1.2e-7 && fabs(out[6] - exp(-0.5)) < 1e-7 &&
              fabs(out[7] - exp(-1.0)) < 1e-7,
          "%s: exp near 0", isa_name[isa]);
}

static int calls; /* test_blocks calls since the ISA's first */

/* rows x n scores in blocks of `block` keys; pct_masked of the keys -inf, row 1 masked in its
 * first half only, row 2 masked entirely (when rows allow). */
static void test_blocks(mha_isa isa, int64_t rows, int64_t n, int64_t block, int pct_masked)
{
    float *s = malloc((size_t)(rows * n) * sizeof(float));
    float *p = malloc((size_t)(rows * n) * sizeof(float)); /* each key's exp, in its block */
    float *after = malloc((size_t)(rows * n) * sizeof(float)); /* product of later alphas */
    float m[32], l[32], alpha[32], tmp[64];
    for (int64_t r = 0; r < rows; r++) {
        for (int64_t j = 0; j < n; j++) {
            const bool masked = (int)(rnd() * 100) < pct_masked || (r == 1 && j < n / 2) || r == 2;
            s[r * n + j] = masked ? -INFINITY : (float)(rnd() * 24.0 - 12.0);
        }
        m[r] = -INFINITY;
        l[r] = 0.0f;
    }
    float *blk = malloc((size_t)(rows * block) * sizeof(float));
    bool alpha_ok = true, split_ok = true;
    for (int64_t j0 = 0; j0 < n; j0 += block) {
        const int64_t kn = n - j0 < block ? n - j0 : block;
        const int64_t ld = block + 3;
        float *tile = malloc((size_t)(rows * ld) * sizeof(float));
        for (int64_t r = 0; r < rows; r++)
            memcpy(tile + r * ld, s + r * n + j0, (size_t)kn * sizeof(float));
        float m_before[32];
        memcpy(m_before, m, sizeof m_before);
        /* the same block in two steps (the maxima, then the exps), on copies: the same bits, and
         * each row's own maximum over the block */
        float *tile2 = malloc((size_t)(rows * ld) * sizeof(float));
        memcpy(tile2, tile, (size_t)(rows * ld) * sizeof(float));
        float m2[32], l2[32], alpha2[32], tmp2[64], bmax[32];
        memcpy(m2, m, sizeof m2);
        memcpy(l2, l, sizeof l2);
        mha_softmax_block_max_isa(isa, tile2, ld, rows, kn, m2, tmp2, bmax);
        for (int64_t r = 0; r < rows; r++) {
            float want = -INFINITY;
            for (int64_t j = 0; j < kn; j++)
                want = tile[r * ld + j] > want ? tile[r * ld + j] : want;
            split_ok &= bmax[r] == want;
        }
        mha_softmax_block_exp_isa(isa, tile2, ld, rows, kn, m2, l2, alpha2, tmp2);
        mha_softmax_block_isa(isa, tile, ld, rows, kn, m, l, alpha, tmp);
        for (int64_t r = 0; r < rows; r++)
            split_ok &= memcmp(tile + r * ld, tile2 + r * ld, (size_t)kn * sizeof(float)) == 0 &&
                        memcmp(&m[r], &m2[r], sizeof(float)) == 0 &&
                        memcmp(&l[r], &l2[r], sizeof(float)) == 0 &&
                        memcmp(&alpha[r], &alpha2[r], sizeof(float)) == 0;
        free(tile2);
        for (int64_t r = 0; r < rows; r++) {
            memcpy(p + r * n + j0, tile + r * ld, (size_t)kn * sizeof(float));
            for (int64_t j = 0; j < j0; j++)
                after[r * n + j] *= alpha[r];
            for (int64_t j = j0; j < j0 + kn; j++)
                after[r * n + j] = 1.0f;
            const double want_alpha =
                m[r] == -INFINITY ? 1.0 : exp((double)m_before[r] - (double)m[r]);
            /* m_before - m is rounded to float first: |x|·2^-24 more relative error */
            const double arg = isinf(m[r]) || isinf(m_before[r]) ? 0 : fabs((double)m_before[r] - m[r]);
            alpha_ok &= fabs(alpha[r] - want_alpha) <= (3e-7 + 6e-8 * arg) * want_alpha;
        }
        free(tile);
    }
    bool ok = true;
    for (int64_t r = 0; r < rows; r++) {
        double mx = -INFINITY, sum = 0;
        for (int64_t j = 0; j < n; j++)
            mx = fmax(mx, s[r * n + j]);
        if (mx == -INFINITY) { /* no key at all: nothing accumulated */
            ok &= m[r] == -INFINITY && l[r] == 0.0f;
            for (int64_t j = 0; j < n; j++)
                ok &= p[r * n + j] == 0.0f;
            continue;
        }
        for (int64_t j = 0; j < n; j++)
            sum += exp((double)s[r * n + j] - mx);
        ok &= m[r] == (float)mx && fabs(l[r] - sum) <= 1e-6 * sum;
        for (int64_t j = 0; j < n; j++) {
            const double want = exp((double)s[r * n + j] - mx) / sum;
            const double got = (double)p[r * n + j] * after[r * n + j] / l[r];
            if (s[r * n + j] == -INFINITY) { /* masked: exactly 0 */
                ok &= got == 0.0;
                continue;
            }
            const double arg = fabs((double)s[r * n + j] - mx); /* rounded to float as above */
            ok &= fabs(got - want) <= (2e-6 + 1.2e-7 * arg) * want + 1e-12;
        }
    }
    /* every key's exp and m: the portable code's bits on every ISA (the same calls on the same
     * scores, the portable code first); l, summed in each ISA's vector lanes, is not */
    static float *ref_p[16], ref_m[16][32];
    const int at = calls++;
    if (at < 16 && isa == MHA_ISA_PORTABLE) {
        free(ref_p[at]);
        ref_p[at] = malloc((size_t)(rows * n) * sizeof(float));
        memcpy(ref_p[at], p, (size_t)(rows * n) * sizeof(float));
        memcpy(ref_m[at], m, sizeof m);
    } else if (at < 16 && ref_p[at]) {
        CHECK(!memcmp(ref_p[at], p, (size_t)(rows * n) * sizeof(float)) &&
                  !memcmp(ref_m[at], m, (size_t)rows * sizeof(float)),
              "%s: %lld rows x %lld keys in blocks of %lld: the portable code's bits (exps, m)",
              isa_name[isa], (long long)rows, (long long)n, (long long)block);
    }
    /* each row alone, block by block: the same m and l as among the others (the AVX-512 code sums
     * 16 rows' lanes at once, and a row alone one at a time) */
    bool alone_ok = true;
    for (int64_t r = 0; r < rows; r++) {
        float m1 = -INFINITY, l1 = 0.0f, a1, t1[2];
        float *row = malloc((size_t)block * sizeof(float));
        for (int64_t j0 = 0; j0 < n; j0 += block) {
            const int64_t kn = n - j0 < block ? n - j0 : block;
            memcpy(row, s + r * n + j0, (size_t)kn * sizeof(float));
            mha_softmax_block_isa(isa, row, block, 1, kn, &m1, &l1, &a1, t1);
        }
        alone_ok &= !memcmp(&m1, &m[r], sizeof m1) && !memcmp(&l1, &l[r], sizeof l1);
        free(row);
    }
    CHECK(alone_ok, "%s: %lld rows x %lld keys in blocks of %lld: each row alone has the same m "
          "and l, bit for bit", isa_name[isa], (long long)rows, (long long)n, (long long)block);
    CHECK(ok && alpha_ok, "%s: %lld rows x %lld keys in blocks of %lld (%d%% masked)%s",
          isa_name[isa], (long long)rows, (long long)n, (long long)block, pct_masked,
          alpha_ok ? "" : ": alpha wrong");
    CHECK(split_ok, "%s: %lld rows x %lld keys in blocks of %lld (%d%% masked): maxima then exps "
          "give the same bits, and each row's own maximum", isa_name[isa], (long long)rows,
          (long long)n, (long long)block, pct_masked);
    free(s);
    free(p);
    free(after);
    free(blk);
}

int main(void)
{
    static const int64_t blocks[] = {1, 7, 8, 9, 16, 33, 256};
    for (int isa = 0; isa < MHA_ISA_COUNT; isa++) {
        if (!mha_isa_usable((mha_isa)isa)) {
            printf("SKIP %s: this CPU lacks it\n", isa_name[isa]);
            continue;
        }
        test_exp((mha_isa)isa);
        seed = 4242; /* every ISA the same scores: their bits compared */
        calls = 0;
        for (size_t b = 0; b < sizeof blocks / sizeof blocks[0]; b++) {
            test_blocks((mha_isa)isa, 5, 300, blocks[b], 0);
            test_blocks((mha_isa)isa, 19, 257, blocks[b], 30);
        }
        test_blocks((mha_isa)isa, 32, 1024, 256, 90);
        test_blocks((mha_isa)isa, 17, 40, 40, 50);
    }
    return check_report();
}
