/*
 * test_engine_gemm.c - the small GEMM every part of a pass is built from (lib/mha_kernels.h):
 * C[rows][cols] (+)= X[rows][depth] · W[depth][cols], against a double-precision reference.
 *
 * Every kernel this CPU can run: the hand kernels for AVX-512 and AVX2, cblas (generic), and the
 * JIT kernels libxsmm's generator writes for AVX-512 and AVX2. Shapes hit every edge of the
 * register tiles (rows 1..13 around the 6-row tiles, columns around the 8-, 16- and 64-column
 * groups, depth 1 to 256 including the attention's odd head sizes), with strides wider than the
 * matrices, overwrite, accumulate, and (hand kernels) start from a row (a projection's bias; also
 * bit for bit what C filled with that row and accumulated into gives). Columns past cols and rows past rows must stay untouched.
 * A kernel the CPU (or the build) lacks is reported as SKIP, never counted as passed.
 *
 * Also the operands' packing (lib/mha_pack.c): the transposed copy with zero padding that keys and
 * projection weights go through, on every block edge, exact.
 */
#include "check.h"
#include "mha_kernels.h"
#include "mha_pack.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *const isa_name[MHA_ISA_COUNT] = {"generic (cblas)", "avx2", "avx512"};

static uint64_t seed = 777;

static float rnd(void)
{
    seed = seed * 6364136223846793005ull + 1442695040888963407ull;
    return (float)((double)(seed >> 40) / (double)(1 << 24) * 2.0 - 1.0);
}

static float *rnd_array(int64_t n)
{
    float *x = malloc((size_t)(n > 0 ? n : 1) * sizeof(float));
    for (int64_t i = 0; i < n; i++)
        x[i] = rnd();
    return x;
}

typedef enum { HAND, JIT } kind;

typedef enum { OVERWRITE, ACCUMULATE, FROM_ROW } start;

/* One shape on one kernel: C (with 3 spare columns per row and a spare row) against double.
 * Returns false when the kernel cannot run (JIT unavailable for this shape). */
static bool run_shape(kind k, mha_isa isa, int64_t rows, int64_t cols, int64_t depth, start st,
                      bool *ok)
{
    const int64_t ldc = cols + 3, ldx = depth + 5, ldw = cols + 7;
    const bool acc = st == ACCUMULATE;
    float *x = rnd_array(rows * ldx), *w = rnd_array(depth * ldw), *row = rnd_array(cols + 1);
    float *c = rnd_array((rows + 1) * ldc), *c0 = malloc((size_t)((rows + 1) * ldc) * sizeof(float));
    memcpy(c0, c, (size_t)((rows + 1) * ldc) * sizeof(float));
    const mha_mm_shape s = {rows, cols, depth, ldc, ldx, ldw, acc};
    bool ran = true, same_bits = true;
    mha_jit_arena arena = {0};
    if (k == HAND && st == FROM_ROW) {
        ran = mha_gemm_from_row_isa(isa, c, ldc, x, ldx, w, ldw, rows, cols, depth, row);
        /* the same as C filled with the row, accumulated into */
        float *f = malloc((size_t)(rows * ldc) * sizeof(float));
        for (int64_t i = 0; i < rows; i++)
            memcpy(f + i * ldc, row, (size_t)cols * sizeof(float));
        mha_gemm_isa(isa, f, ldc, x, ldx, w, ldw, rows, cols, depth, true);
        for (int64_t i = 0; i < rows; i++)
            same_bits &= !memcmp(f + i * ldc, c + i * ldc, (size_t)cols * sizeof(float));
        free(f);
    } else if (k == HAND) {
        ran = mha_gemm_isa(isa, c, ldc, x, ldx, w, ldw, rows, cols, depth, acc);
    } else {
        mha_jit_fn fn = mha_jit_add(&arena, isa, &s);
        ran = fn && mha_jit_seal(&arena);
        if (ran) {
            const mha_mm mm = {s, isa, fn};
            mha_mm_run(&mm, c, x, w);
        }
    }
    if (ran) {
        bool good = true, untouched = true;
        for (int64_t i = 0; i <= rows; i++) {
            for (int64_t j = 0; j < ldc; j++) {
                const float got = c[i * ldc + j];
                if (i == rows || j >= cols) {
                    untouched &= got == c0[i * ldc + j];
                    continue;
                }
                double want = st == FROM_ROW ? row[j] : acc ? c0[i * ldc + j] : 0.0;
                double mag = fabs(want);
                for (int64_t d = 0; d < depth; d++) {
                    const double t = (double)x[i * ldx + d] * w[d * ldw + j];
                    want += t;
                    mag += fabs(t);
                }
                good &= fabs(got - want) <= 6e-8 * (double)(depth + 2) * mag; /* float rounding bound */
            }
        }
        *ok = good && untouched && same_bits;
        if (!*ok)
            printf("  %s %s: rows %lld cols %lld depth %lld %s: %s\n", k == JIT ? "jit" : "hand",
                   isa_name[isa], (long long)rows, (long long)cols, (long long)depth,
                   st == FROM_ROW ? "C = row +" : acc ? "C +=" : "C =",
                   !good ? "wrong values" : !untouched ? "wrote outside C"
                                                       : "not the bits of C filled with the row");
    }
    mha_jit_arena_free(&arena);
    free(row);
    free(x);
    free(w);
    free(c);
    free(c0);
    return ran;
}

static void test_kernel(kind k, mha_isa isa)
{
    static const int64_t rows[] = {1, 2, 3, 5, 6, 7, 12, 13, 64};
    static const int64_t cols[] = {1, 7, 8, 9, 15, 16, 17, 31, 33, 48, 63, 64, 65, 100, 129, 256};
    static const int64_t depth[] = {1, 3, 8, 40, 64, 72, 100, 256};
    const char *what = k == JIT ? "jit" : "hand";
    if (!mha_isa_usable(isa)) {
        printf("SKIP %s %s kernels: this CPU lacks %s\n", what, isa_name[isa], isa_name[isa]);
        return;
    }
    if (k == JIT && !mha_jit_built()) {
        printf("SKIP jit %s kernels: built without libxsmm (XSMM=0)\n", isa_name[isa]);
        return;
    }
    int tried = 0, ran = 0, bad = 0;
    for (size_t r = 0; r < sizeof rows / sizeof rows[0]; r++)
        for (size_t c = 0; c < sizeof cols / sizeof cols[0]; c++)
            for (size_t d = 0; d < sizeof depth / sizeof depth[0]; d++) {
                if (rows[r] * cols[c] * depth[d] > 64 * 256 * 40 && (c + d) % 3)
                    continue; /* the big ones on a sample */
                for (int st = OVERWRITE; st <= (k == HAND ? FROM_ROW : ACCUMULATE); st++) {
                    bool ok = true;
                    tried++;
                    if (run_shape(k, isa, rows[r], cols[c], depth[d], (start)st, &ok)) {
                        ran++;
                        bad += !ok;
                    }
                }
            }
    if (k == JIT && ran == 0) {
        printf("SKIP jit %s kernels: no kernel could be generated or made executable\n",
               isa_name[isa]);
        return;
    }
    CHECK(bad == 0, "%s %s: %d of %d shapes wrong", what, isa_name[isa], bad, ran);
    CHECK(ran == tried, "%s %s: every shape gets a kernel (%d of %d)", what, isa_name[isa], ran,
          tried);
}

/* A JIT kernel is generated for its ISA only: the AVX-512 code is never offered on a CPU without
 * AVX-512, and an arena refuses new kernels once sealed. */
static void test_jit_rules(void)
{
    if (!mha_jit_built())
        return;
    const mha_mm_shape s = {8, 16, 8, 16, 8, 16, false};
    mha_jit_arena arena = {0};
    mha_jit_fn a = mha_jit_add(&arena, MHA_ISA_PORTABLE, &s);
    CHECK(a == NULL, "no JIT kernel for the generic ISA");
    mha_jit_fn b = mha_jit_add(&arena, MHA_ISA_AVX2, &s);
    if (b && mha_jit_seal(&arena))
        CHECK(mha_jit_add(&arena, MHA_ISA_AVX2, &s) == NULL, "a sealed arena takes no new kernel");
    const mha_mm_shape bad = {8, 16, 8, 8, 8, 16, false}; /* ldc < cols */
    mha_jit_arena other = {0};
    CHECK(mha_jit_add(&other, MHA_ISA_AVX2, &bad) == NULL, "strides narrower than the matrix refused");
    mha_jit_arena_free(&arena);
    mha_jit_arena_free(&other);
}

/* The packing copies on every ISA: transposed (dst[c][r] = src[r][c], zeros up to rows_pad) or
 * by rows (dst[r][c] = src[r][c], zeros up to cols_pad and rows_pad: whole vectors, a short last
 * one, the wide rows' memcpy); nothing else written. dst is lines of ld floats: a column of src
 * each when transposed, a row each otherwise. */
static void test_pack(mha_isa isa, bool transposed)
{
    static const int64_t t_rows[] = {1, 7, 8, 9, 15, 16, 17, 33, 256};
    static const int64_t t_cols[] = {1, 3, 8, 16, 17, 40, 64, 72, 100};
    static const int64_t r_rows[] = {1, 2, 7, 16, 33};
    static const int64_t r_cols[] = {1, 3, 7, 8, 9, 15, 16, 17, 24, 31, 32, 48, 63, 64, 65, 100};
    const int64_t *rows = transposed ? t_rows : r_rows, *cols = transposed ? t_cols : r_cols;
    const size_t nr = transposed ? 9 : 5, nc = transposed ? 9 : 16;
    int bad = 0, n = 0;
    for (size_t a = 0; a < nr; a++)
        for (size_t b = 0; b < nc; b++)
            for (int padded = 0; padded < 2; padded++) {
                const int64_t R = rows[a], C = cols[b], lds = C + 3 + 2 * !transposed;
                /* rows_pad and cols_pad; dst's lines before the padding, and along each */
                const int64_t rpad = transposed ? (R + 15) / 16 * 16 + 16 * padded : R + 2 * padded;
                const int64_t cpad = transposed ? C : C + 3 * padded;
                const int64_t lines = transposed ? C : rpad, along = transposed ? rpad : cpad;
                const int64_t ld = along + 5;
                float *src = rnd_array(R * lds), *dst = rnd_array((lines + 1) * ld);
                float *before = malloc((size_t)((lines + 1) * ld) * sizeof(float));
                memcpy(before, dst, (size_t)((lines + 1) * ld) * sizeof(float));
                if (transposed)
                    mha_pack_transposed(isa, dst, ld, src, lds, R, C, rpad);
                else
                    mha_pack_rows(isa, dst, ld, src, lds, R, C, rpad, cpad);
                bool ok = true;
                for (int64_t i = 0; i <= lines; i++)
                    for (int64_t j = 0; j < ld; j++) {
                        const int64_t r = transposed ? j : i, c = transposed ? i : j;
                        const float got = dst[i * ld + j];
                        if (i == lines || j >= along)
                            ok &= got == before[i * ld + j];
                        else
                            ok &= got == (r < R && c < C ? src[r * lds + c] : 0.0f);
                    }
                bad += !ok;
                n++;
                free(src);
                free(dst);
                free(before);
            }
    CHECK(bad == 0, "pack %s %s: %d of %d copies wrong", transposed ? "transposed" : "rows",
          isa_name[isa], bad, n);
}

int main(void)
{
    for (int isa = 0; isa < MHA_ISA_COUNT; isa++) {
        if (mha_isa_usable((mha_isa)isa)) {
            test_pack((mha_isa)isa, true);
            test_pack((mha_isa)isa, false);
        } else {
            printf("SKIP pack %s: this CPU lacks it\n", isa_name[isa]);
        }
    }
    for (int isa = 0; isa < MHA_ISA_COUNT; isa++)
        test_kernel(HAND, (mha_isa)isa);
    for (int isa = MHA_ISA_AVX2; isa < MHA_ISA_COUNT; isa++)
        test_kernel(JIT, (mha_isa)isa);
    test_jit_rules();
    return check_report();
}
