/*
 * test_engine_softmax.c - the softmax kernel and its expf (lib/mha_softmax.c) against libm in
 * double, for every instruction set this CPU has (portable, AVX2, AVX-512): accuracy over the
 * range the softmax uses, -inf giving exactly 0, row tails of every length, fully masked rows;
 * also the exponentials-only variant the forward pass uses and the scaling that finishes it.
 */
#include "check.h"
#include "mha_internal.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *const isa_names[MHA_ISA_COUNT] = {"portable", "avx2", "avx512"};

static void test_expf(mha_isa isa)
{
    enum { n = 20001 };
    static float x[n], y[n];
    for (int i = 0; i < n; i++)
        x[i] = -87.0f + 87.0f * (float)i / (n - 1); /* [-87, 0], the softmax's range */
    mha_expf_array_isa(isa, y, x, n);
    double worst = 0;
    for (int i = 0; i < n; i++) {
        double want = exp((double)x[i]);
        worst = fmax(worst, fabs(y[i] - want) / want);
    }
    CHECK(worst < 4e-7, "%s: expf relative error %g over [-87, 0]", isa_names[isa], worst);
    float special[5] = {-INFINITY, -200.0f, -88.0f, 0.0f, 10.0f}, out[5];
    mha_expf_array_isa(isa, out, special, 5);
    CHECK(out[0] == 0.0f && out[1] == 0.0f, "%s: exp(-inf) and exp(-200) are exactly 0",
          isa_names[isa]);
    CHECK(out[3] == 1.0f, "%s: exp(0) == 1 (got %.9g)", isa_names[isa], out[3]);
    CHECK(fabs(out[4] - exp(10.0)) / exp(10.0) < 4e-7, "%s: exp(10) (got %.9g)", isa_names[isa],
          out[4]);
}

static void test_softmax_rows(mha_isa isa)
{
    for (int len = 1; len <= 40; len++) {
        float *x = malloc(3 * 48 * sizeof(float));
        for (int r = 0; r < 3; r++)
            for (int j = 0; j < 48; j++)
                x[r * 48 + j] = j < len ? (float)sin(r * 7.0 + j) * 5.0f : 1234.0f;
        x[0] = -INFINITY; /* a masked key in row 0 */
        for (int j = 0; j < len; j++)
            x[2 * 48 + j] = -INFINITY; /* row 2 fully masked */
        float want[48];
        for (int j = 0; j < len; j++) { /* row 1 in double */
            double mx = -INFINITY, sum = 0;
            for (int t = 0; t < len; t++)
                mx = fmax(mx, x[48 + t]);
            for (int t = 0; t < len; t++)
                sum += exp(x[48 + t] - mx);
            want[j] = (float)(exp(x[48 + j] - mx) / sum);
        }
        /* A copy goes to dst too: 64-byte aligned (streamed) for odd lengths, unaligned else. */
        float *dst_mem = aligned_alloc(64, 4 * 48 * sizeof(float));
        float *dst = dst_mem + (len % 2 ? 0 : 1);
        for (int j = 0; j < 3 * 48; j++)
            dst[j] = -7.0f;
        mha_softmax_rows_isa(isa, x, 3, len, 48, dst);
        mha_copy_stream_fence();
        bool copied = true;
        for (int r = 0; r < 3; r++)
            for (int j = 0; j < 48; j++)
                copied &= j < len ? dst[r * 48 + j] == x[r * 48 + j] : dst[r * 48 + j] == -7.0f;
        CHECK(copied, "%s: dst gets exactly the row's result and nothing past it (len %d)",
              isa_names[isa], len);
        free(dst_mem);
        char what[64];
        snprintf(what, sizeof what, "%s softmax row of %d", isa_names[isa], len);
        CHECK_CLOSE_ARRAY(what, x + 48, want, len);
        bool zero = true, untouched = true;
        for (int j = 0; j < len; j++)
            zero &= x[2 * 48 + j] == 0.0f;
        for (int r = 0; r < 3; r++)
            for (int j = len; j < 48; j++)
                untouched &= x[r * 48 + j] == 1234.0f;
        CHECK(zero, "%s: fully masked row of %d is all 0", isa_names[isa], len);
        CHECK(x[0] == 0.0f, "%s: masked key weighs exactly 0 (len %d)", isa_names[isa], len);
        CHECK(untouched, "%s: softmax of %d keys writes nothing past the row", isa_names[isa], len);
        free(x);
    }
}

/* The softmax without its last pass (mha_softmax_exp_rows_isa) and the pass that finishes it where
 * weights are wanted (mha_scale_rows_stream): exp · inv is the softmax. */
static void test_exp_rows(mha_isa isa)
{
    for (int len = 1; len <= 40; len++) {
        float x[3 * 48], inv[3];
        for (int r = 0; r < 3; r++)
            for (int j = 0; j < 48; j++)
                x[r * 48 + j] = j < len ? (float)cos(r * 5.0 + j) * 6.0f : 1234.0f;
        x[0] = -INFINITY;
        for (int j = 0; j < len; j++)
            x[2 * 48 + j] = -INFINITY;
        double want[2][48];
        for (int r = 0; r < 2; r++) {
            double mx = -INFINITY, sum = 0;
            for (int t = 0; t < len; t++)
                mx = fmax(mx, x[r * 48 + t]);
            for (int t = 0; t < len; t++)
                sum += exp(x[r * 48 + t] - mx);
            for (int t = 0; t < len; t++)
                want[r][t] = exp(x[r * 48 + t] - mx) / sum;
        }
        mha_softmax_exp_rows_isa(isa, x, 3, len, 48, inv);
        float *dst_mem = aligned_alloc(64, 4 * 48 * sizeof(float));
        float *dst = dst_mem + len % 3; /* aligned and unaligned starts */
        for (int j = 0; j < 3 * 48; j++)
            dst[j] = -7.0f;
        mha_scale_rows_stream(dst, 48, x, 48, 3, len, inv);
        mha_copy_stream_fence();
        bool exact = true, close = true, untouched = true, masked = inv[2] == 0.0f;
        for (int r = 0; r < 3; r++) {
            for (int j = 0; j < 48; j++) {
                if (j >= len) {
                    untouched &= dst[r * 48 + j] == -7.0f && x[r * 48 + j] == 1234.0f;
                    continue;
                }
                exact &= dst[r * 48 + j] == x[r * 48 + j] * inv[r];
                if (r < 2 && !(r == 0 && len == 1)) /* row 0 of one key is fully masked */
                    close &= fabs(dst[r * 48 + j] - want[r][j]) <= 2e-7 + 1e-5 * want[r][j];
                else
                    masked &= x[r * 48 + j] == 0.0f && dst[r * 48 + j] == 0.0f;
            }
        }
        CHECK(exact, "%s: scale_rows writes x · inv exactly (len %d)", isa_names[isa], len);
        CHECK(close, "%s: exp · inv is the softmax (len %d)", isa_names[isa], len);
        CHECK(masked, "%s: a fully masked row has inv 0 and exponentials 0 (len %d)",
              isa_names[isa], len);
        CHECK(x[0] == 0.0f, "%s: a masked key's exponential is exactly 0 (len %d)", isa_names[isa],
              len);
        CHECK(untouched, "%s: nothing written past %d keys", isa_names[isa], len);
        free(dst_mem);
    }
}

int main(void)
{
    int ran = 0;
    for (int isa = 0; isa < MHA_ISA_COUNT; isa++) {
        float probe = 0.0f;
        if (!mha_expf_array_isa((mha_isa)isa, &probe, &probe, 1)) {
            printf("(%s kernels: this CPU lacks them, skipped)\n", isa_names[isa]);
            continue;
        }
        ran++;
        test_expf((mha_isa)isa);
        test_softmax_rows((mha_isa)isa);
        test_exp_rows((mha_isa)isa);
    }
    CHECK(ran >= 1, "the portable kernels always run");
    float a[40], b[40];
    for (int i = 0; i < 40; i++)
        a[i] = (float)i;
    mha_copy_stream(b + 1, a, 37); /* unaligned start, odd length */
    mha_copy_stream_fence();
    CHECK(!memcmp(b + 1, a, 37 * sizeof(float)), "mha_copy_stream copies exactly");
    return check_report();
}
