/*
 * mha_gemm.c - the hand-written GEMM kernels: C[rows][cols] (+)= X[rows][depth] · W[depth][cols]
 * (mha_kernels.h), for AVX-512F and for AVX2+FMA, any shape and strides; cblas_sgemm for the rest.
 *
 * Register tiles: R rows of C by V vectors of columns stay in registers over the whole depth; each
 * step broadcasts one X value per row and loads V vectors of one W row. AVX-512: 6 rows x 4 vectors
 * (64 columns; 24 accumulators + 4 W vectors + 1 broadcast of the 32 registers), AVX2: 6 rows x 2
 * vectors (16 columns; 12 + 2 + 1 of 16). Every loop over the tile is unrolled: gcc otherwise keeps
 * the accumulators on the stack (measured 44 -> 106 GFLOP/s for the AVX2 tile on Zen 4). The last
 * vector of a row is masked when it is partial, so columns past cols are never read or written,
 * and only then: a masked store of a whole vector cost as much as a partial one, and the loads of
 * the tile's rows right after it (the epilogues' packing of K and V) waited for it to reach the
 * cache instead of taking the stored values (S's pass on Zen 4: 15.1 -> 14.9 µs). Column groups
 * outside, row tiles inside: a group's W columns ([depth][64] floats) stay in L1 while the rows
 * pass.
 */
#include "mha_kernels.h"

#include <cblas.h>
#include <string.h>

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#define HAVE_X86_KERNELS 1
#endif

bool mha_isa_usable(mha_isa isa)
{
    switch (isa) {
    case MHA_ISA_PORTABLE:
        return true;
#ifdef HAVE_X86_KERNELS
    case MHA_ISA_AVX2:
        return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
    case MHA_ISA_AVX512:
        return __builtin_cpu_supports("avx512f");
#endif
    default:
        return false;
    }
}

#ifdef HAVE_X86_KERNELS
enum { ROWS = 6 }; /* rows per register tile, both ISAs */

/* ---------------------------------------------------------------------------------------------- */
/* AVX-512F                                                                                       */

__attribute__((target("avx512f"), always_inline)) static inline void
tile_avx512(float *c, int64_t ldc, const float *x, int64_t ldx, const float *w, int64_t ldw,
            int64_t depth, __mmask16 last, const float *from, bool acc, const int R, const int V,
            const bool full)
{
    __m512 a[ROWS][4], f[4];
#pragma GCC unroll 4
    for (int v = 0; v < V && from; v++)
        f[v] = v == V - 1 && !full ? _mm512_maskz_loadu_ps(last, from + v * 16)
                                   : _mm512_loadu_ps(from + v * 16);
#pragma GCC unroll 6
    for (int i = 0; i < R; i++)
#pragma GCC unroll 4
        for (int v = 0; v < V; v++)
            a[i][v] = from                  ? f[v]
                      : !acc                ? _mm512_setzero_ps()
                      : v == V - 1 && !full ? _mm512_maskz_loadu_ps(last, c + i * ldc + v * 16)
                                            : _mm512_loadu_ps(c + i * ldc + v * 16);
    for (int64_t d = 0; d < depth; d++) {
        const float *wd = w + d * ldw;
        __m512 b[4];
#pragma GCC unroll 4
        for (int v = 0; v < V; v++)
            b[v] = v == V - 1 && !full ? _mm512_maskz_loadu_ps(last, wd + v * 16)
                                       : _mm512_loadu_ps(wd + v * 16);
#pragma GCC unroll 6
        for (int i = 0; i < R; i++) {
            const __m512 xi = _mm512_set1_ps(x[i * ldx + d]);
#pragma GCC unroll 4
            for (int v = 0; v < V; v++)
                a[i][v] = _mm512_fmadd_ps(xi, b[v], a[i][v]);
        }
    }
#pragma GCC unroll 6
    for (int i = 0; i < R; i++)
#pragma GCC unroll 4
        for (int v = 0; v < V; v++) {
            if (v == V - 1 && !full)
                _mm512_mask_storeu_ps(c + i * ldc + v * 16, last, a[i][v]);
            else
                _mm512_storeu_ps(c + i * ldc + v * 16, a[i][v]);
        }
}

/* Every row of one group of V vectors (the last one masked by last). */
__attribute__((target("avx512f"), always_inline)) static inline void
group_avx512(float *c, int64_t ldc, const float *x, int64_t ldx, const float *w, int64_t ldw,
             int64_t rows, int64_t depth, __mmask16 last, const float *from, bool acc, const int V,
             const bool full)
{
    int64_t r = 0;
#define TILE(R)                                                                                    \
    tile_avx512(c + r * ldc, ldc, x + r * ldx, ldx, w, ldw, depth, last, from, acc, R, V, full)
    for (; r + ROWS <= rows; r += ROWS)
        TILE(ROWS);
    switch (rows - r) {
    case 5:
        TILE(5);
        break;
    case 4:
        TILE(4);
        break;
    case 3:
        TILE(3);
        break;
    case 2:
        TILE(2);
        break;
    case 1:
        TILE(1);
        break;
    }
#undef TILE
}

__attribute__((target("avx512f"))) static void
gemm_avx512(float *c, int64_t ldc, const float *x, int64_t ldx, const float *w, int64_t ldw,
            int64_t rows, int64_t cols, int64_t depth, const float *from, bool acc)
{
    for (int64_t c0 = 0; c0 < cols; c0 += 64) {
        const int64_t n = cols - c0 < 64 ? cols - c0 : 64;
        const int V = (int)((n + 15) / 16);
        const int rest = (int)(n - (V - 1) * 16); /* 1..16 columns in the last vector */
        const __mmask16 last = (__mmask16)(rest == 16 ? 0xffff : (1u << rest) - 1);
        float *cg = c + c0;
        const float *wg = w + c0, *fg = from ? from + c0 : NULL;
        const bool full = rest == 16; /* masked loads and stores only where they must be */
        /* V and full are constants in each inlined copy of the group */
#define GROUP(V, FULL)                                                                             \
    case V * 2 + FULL:                                                                             \
        group_avx512(cg, ldc, x, ldx, wg, ldw, rows, depth, last, fg, acc, V, FULL);               \
        break
        switch (V * 2 + full) {
            GROUP(1, false);
            GROUP(1, true);
            GROUP(2, false);
            GROUP(2, true);
            GROUP(3, false);
            GROUP(3, true);
            GROUP(4, false);
            GROUP(4, true);
        }
#undef GROUP
    }
}

/* ---------------------------------------------------------------------------------------------- */
/* AVX2 + FMA                                                                                     */

/* Lanes [0, n) of 8 set (n in 1..8), as _mm256_maskload_ps / maskstore_ps take them. */
__attribute__((target("avx2"))) static inline __m256i lanes_avx2(int n)
{
    return _mm256_cmpgt_epi32(_mm256_set1_epi32(n), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
}

__attribute__((target("avx2,fma"), always_inline)) static inline void
tile_avx2(float *c, int64_t ldc, const float *x, int64_t ldx, const float *w, int64_t ldw,
          int64_t depth, __m256i last, bool full, const float *from, bool acc, const int R,
          const int V)
{
    __m256 a[ROWS][2], f[2];
#pragma GCC unroll 2
    for (int v = 0; v < V && from; v++)
        f[v] = v == V - 1 && !full ? _mm256_maskload_ps(from + v * 8, last) : _mm256_loadu_ps(from + v * 8);
#pragma GCC unroll 6
    for (int i = 0; i < R; i++)
#pragma GCC unroll 2
        for (int v = 0; v < V; v++)
            a[i][v] = from                    ? f[v]
                      : !acc                  ? _mm256_setzero_ps()
                      : v == V - 1 && !full   ? _mm256_maskload_ps(c + i * ldc + v * 8, last)
                                              : _mm256_loadu_ps(c + i * ldc + v * 8);
    if (full) {
        for (int64_t d = 0; d < depth; d++) {
            const float *wd = w + d * ldw;
            __m256 b[2];
#pragma GCC unroll 2
            for (int v = 0; v < V; v++)
                b[v] = _mm256_loadu_ps(wd + v * 8);
#pragma GCC unroll 6
            for (int i = 0; i < R; i++) {
                const __m256 xi = _mm256_broadcast_ss(x + i * ldx + d);
#pragma GCC unroll 2
                for (int v = 0; v < V; v++)
                    a[i][v] = _mm256_fmadd_ps(xi, b[v], a[i][v]);
            }
        }
    } else { /* the last vector of W partial: masked loads (slower, one group per call at most) */
        for (int64_t d = 0; d < depth; d++) {
            const float *wd = w + d * ldw;
            __m256 b[2];
#pragma GCC unroll 2
            for (int v = 0; v < V; v++)
                b[v] = v == V - 1 ? _mm256_maskload_ps(wd + v * 8, last) : _mm256_loadu_ps(wd + v * 8);
#pragma GCC unroll 6
            for (int i = 0; i < R; i++) {
                const __m256 xi = _mm256_broadcast_ss(x + i * ldx + d);
#pragma GCC unroll 2
                for (int v = 0; v < V; v++)
                    a[i][v] = _mm256_fmadd_ps(xi, b[v], a[i][v]);
            }
        }
    }
#pragma GCC unroll 6
    for (int i = 0; i < R; i++)
#pragma GCC unroll 2
        for (int v = 0; v < V; v++) {
            if (v == V - 1 && !full)
                _mm256_maskstore_ps(c + i * ldc + v * 8, last, a[i][v]);
            else
                _mm256_storeu_ps(c + i * ldc + v * 8, a[i][v]);
        }
}

__attribute__((target("avx2,fma"), always_inline)) static inline void
group_avx2(float *c, int64_t ldc, const float *x, int64_t ldx, const float *w, int64_t ldw,
           int64_t rows, int64_t depth, __m256i last, bool full, const float *from, bool acc,
           const int V)
{
    int64_t r = 0;
#define TILE(R)                                                                                    \
    tile_avx2(c + r * ldc, ldc, x + r * ldx, ldx, w, ldw, depth, last, full, from, acc, R, V)
    for (; r + ROWS <= rows; r += ROWS)
        TILE(ROWS);
    switch (rows - r) {
    case 5:
        TILE(5);
        break;
    case 4:
        TILE(4);
        break;
    case 3:
        TILE(3);
        break;
    case 2:
        TILE(2);
        break;
    case 1:
        TILE(1);
        break;
    }
#undef TILE
}

__attribute__((target("avx2,fma"))) static void gemm_avx2(float *c, int64_t ldc, const float *x,
                                                         int64_t ldx, const float *w, int64_t ldw,
                                                         int64_t rows, int64_t cols, int64_t depth,
                                                         const float *from, bool acc)
{
    for (int64_t c0 = 0; c0 < cols; c0 += 16) {
        const int64_t n = cols - c0 < 16 ? cols - c0 : 16;
        const int V = n > 8 ? 2 : 1;
        const int rest = (int)(n - (V - 1) * 8); /* 1..8 columns in the last vector */
        const __m256i last = lanes_avx2(rest);
        const float *fg = from ? from + c0 : NULL;
        if (V == 2)
            group_avx2(c + c0, ldc, x, ldx, w + c0, ldw, rows, depth, last, rest == 8, fg, acc, 2);
        else
            group_avx2(c + c0, ldc, x, ldx, w + c0, ldw, rows, depth, last, rest == 8, fg, acc, 1);
    }
}
#endif

/* Both entries: the accumulators start from `from` (a row, in every row of C) when it is given,
 * else from C when acc, else from 0. */
static bool gemm_isa(mha_isa isa, float *c, int64_t ldc, const float *x, int64_t ldx, const float *w,
                     int64_t ldw, int64_t rows, int64_t cols, int64_t depth, const float *from,
                     bool acc)
{
    if (!mha_isa_usable(isa))
        return false;
    switch (isa) {
#ifdef HAVE_X86_KERNELS
    case MHA_ISA_AVX512:
        gemm_avx512(c, ldc, x, ldx, w, ldw, rows, cols, depth, from, acc);
        return true;
    case MHA_ISA_AVX2:
        gemm_avx2(c, ldc, x, ldx, w, ldw, rows, cols, depth, from, acc);
        return true;
#endif
    default:
        for (int64_t r = 0; r < rows && from; r++)
            memcpy(c + r * ldc, from, (size_t)cols * sizeof(float));
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, (int)rows, (int)cols, (int)depth,
                    1.0f, x, (int)ldx, w, (int)ldw, acc || from ? 1.0f : 0.0f, c, (int)ldc);
        return true;
    }
}

bool mha_gemm_isa(mha_isa isa, float *c, int64_t ldc, const float *x, int64_t ldx, const float *w,
                  int64_t ldw, int64_t rows, int64_t cols, int64_t depth, bool acc)
{
    return gemm_isa(isa, c, ldc, x, ldx, w, ldw, rows, cols, depth, NULL, acc);
}

bool mha_gemm_from_row_isa(mha_isa isa, float *c, int64_t ldc, const float *x, int64_t ldx,
                           const float *w, int64_t ldw, int64_t rows, int64_t cols, int64_t depth,
                           const float *row)
{
    return gemm_isa(isa, c, ldc, x, ldx, w, ldw, rows, cols, depth, row, false);
}
