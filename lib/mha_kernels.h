/*
 * mha_kernels.h - private to lib/: the small GEMM every part of a pass is built from, its
 * JIT-compiled and hand-written kernels, and the choice between them.
 *
 * One contract for all of them, in row-major terms (the engine's):
 *
 *     C[rows][cols] (+)= X[rows][depth] · W[depth][cols]       row strides ldc, ldx, ldw
 *
 * The attention's scores are sc[BM][BN] = q[BM][hd] · Kᵀ[hd][BN] (keys packed transposed), its
 * weights·v O[BM][hd] += P[BM][BN] · V[BN][hd], and a projection's tile Y[64][64] += X[64][K] ·
 * Wᵀ[K][64] (the layer's weights packed transposed in panels of 64 columns). In libxsmm's
 * column-major terms the same call is C(m×n) = A(m×k) · B(k×n) with m = cols, n = rows, k = depth,
 * A = W, B = X.
 *
 * Kernels, best first (mha_gemm_describe names the ones in use):
 *   - JIT: code generated for one exact shape by libxsmm's generator (libxsmmgen, Debian's
 *     libxsmm-dev) for AVX-512 or AVX2, in memory this process maps executable itself. Built with
 *     -DATTND_HAVE_LIBXSMM (the Makefile sets it when libxsmm.h is installed); none otherwise, nor
 *     where the system refuses executable memory (then the hand kernels run).
 *   - hand: AVX-512F and AVX2+FMA kernels taking any shape (mha_gemm.c), within 5-15% of the JIT
 *     ones; also every partial tile of a pass.
 *   - generic (ATTND_ISA=generic, or a CPU with neither): cblas_sgemm.
 */
#ifndef ATTND_MHA_KERNELS_H
#define ATTND_MHA_KERNELS_H

#include "mha_internal.h"

/* ---------------------------------------------------------------------------------------------- */
/* The hand kernels and cblas, any shape                                                          */

/* C[rows][cols] (row stride ldc) = (acc ? C : 0) + X[rows][depth] (ldx) · W[depth][cols] (ldw),
 * on isa's hand kernel (MHA_ISA_PORTABLE: cblas_sgemm). Columns past cols are neither read from W
 * nor written to C. Returns false (nothing done) when this CPU lacks isa. rows, cols, depth >= 1. */
bool mha_gemm_isa(mha_isa isa, float *c, int64_t ldc, const float *x, int64_t ldx, const float *w,
                  int64_t ldw, int64_t rows, int64_t cols, int64_t depth, bool acc);

/* C[rows][cols] = row[0, cols) in every row (NULL: 0) + X · W, as mha_gemm_isa: the accumulators
 * start from the row where mha_gemm_isa's would load it from C (a projection's bias: the same bits
 * as C filled with it and accumulated into, without the copy and its loads). */
bool mha_gemm_from_row_isa(mha_isa isa, float *c, int64_t ldc, const float *x, int64_t ldx,
                           const float *w, int64_t ldw, int64_t rows, int64_t cols, int64_t depth,
                           const float *row);

/* True when this CPU can run isa's hand kernels (PORTABLE: always). */
bool mha_isa_usable(mha_isa isa);

/* ---------------------------------------------------------------------------------------------- */
/* JIT kernels                                                                                    */

/* A JIT kernel: libxsmm's calling convention for its column-major GEMM, C = A·B (+ C). */
typedef void (*mha_jit_fn)(const float *a, const float *b, float *c);

/* The shape of one GEMM call, as mha_gemm_isa takes it. */
typedef struct mha_mm_shape {
    int64_t rows, cols, depth;
    int64_t ldc, ldx, ldw;
    bool acc; /* C += X·W, else C = X·W */
} mha_mm_shape;

/* Executable memory holding the code of a set of kernels. Filled while open, then sealed (mapped
 * read + execute, never writable again) before any kernel in it runs. */
typedef struct mha_jit_arena {
    unsigned char *code; /* mmap'd, NULL when empty                    */
    size_t size, used;
    bool sealed;
} mha_jit_arena;

/* Generates the kernel for one shape on isa (AVX2 or AVX512) into the arena (which must be open)
 * and returns its entry point, valid once the arena is sealed; NULL when there is no JIT in this
 * build, the CPU lacks isa, libxsmm cannot generate this shape, or memory runs out. */
mha_jit_fn mha_jit_add(mha_jit_arena *arena, mha_isa isa, const mha_mm_shape *s);

/* Makes the arena's code executable (read + execute, no write). false when the system refuses
 * executable memory (SELinux execmem, a seccomp policy...): then no kernel of it may run. */
bool mha_jit_seal(mha_jit_arena *arena);

/* Unmaps the arena (NULL or empty: nothing). */
void mha_jit_arena_free(mha_jit_arena *arena);

/* True when this build has the JIT (compiled with libxsmm's generator). */
bool mha_jit_built(void);

/* ---------------------------------------------------------------------------------------------- */
/* One GEMM of fixed shape, JIT or hand                                                            */

typedef struct mha_mm {
    mha_mm_shape s;
    mha_isa isa;    /* the hand kernel's instruction set when jit is NULL (PORTABLE: cblas) */
    mha_jit_fn jit; /* JIT code for exactly s, or NULL                                      */
} mha_mm;

/* After JIT code: the upper halves of the vector registers cleared (vzeroupper). libxsmm's code
 * leaves them in use, and legacy SSE code after it (the scalar float code GCC writes for x86-64)
 * then waits on them: S's head outputs, 32 divisions after the last P·V, took 2.8% of its pass
 * where they took 0.4% (Zen 4). */
void mha_jit_leave(void);

/* C (+)= X · W with the mm's shape and strides: the JIT kernel when there is one, else the hand
 * kernel (or cblas). */
static inline void mha_mm_run(const mha_mm *mm, float *c, const float *x, const float *w)
{
    if (mm->jit) {
        mm->jit(w, x, c);
        mha_jit_leave();
    } else
        mha_gemm_isa(mm->isa, c, mm->s.ldc, x, mm->s.ldx, w, mm->s.ldw, mm->s.rows, mm->s.cols,
                     mm->s.depth, mm->s.acc);
}

#endif
