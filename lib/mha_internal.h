/*
 * mha_internal.h - private to lib/: the layer's layout, the error helper, checked size arithmetic,
 * the pool's parallel-for and the softmax kernel. Nothing outside lib/ includes this.
 */
#ifndef ATTND_MHA_INTERNAL_H
#define ATTND_MHA_INTERNAL_H

#include "mha.h"

#include <stdarg.h>
#include <stdint.h>

/* ---------------------------------------------------------------------------------------------- */
/* Errors and sizes                                                                               */

/* Fills err (may be NULL) with status, field and a printf-style message; returns status. */
mha_status mha_fail(mha_error *err, mha_status status, const char *field, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

/* *out = a * b; false (and *out untouched) on overflow or a negative factor. */
static inline bool mha_mul_ok(int64_t a, int64_t b, int64_t *out)
{
    int64_t r;
    if (a < 0 || b < 0 || __builtin_mul_overflow(a, b, &r))
        return false;
    *out = r;
    return true;
}

/* *out = a + b; false on overflow or a negative term. */
static inline bool mha_add_ok(int64_t a, int64_t b, int64_t *out)
{
    int64_t r;
    if (a < 0 || b < 0 || __builtin_add_overflow(a, b, &r))
        return false;
    *out = r;
    return true;
}

/* Writes "[a,b,c]" for a shape into buf (always NUL-terminated); returns buf. */
const char *mha_shape_str(char *buf, size_t size, int ndim, const int64_t *shape);

/* ---------------------------------------------------------------------------------------------- */
/* Layers                                                                                         */

struct mha_layer {
    mha_config cfg;    /* kdim, vdim, head_dim, num_kv_heads resolved    */
    mha_limits limits; /* the limits the layer was created under         */
    int nparams;
    mha_param_info info[MHA_MAX_PARAMS];
    float *param[MHA_MAX_PARAMS]; /* into data                                      */
    float *data;                  /* every parameter, one allocation, 64-byte aligned */
    void *block;                  /* that allocation (calloc'd: data is inside it)  */
    /* Shortcuts into data (NULL when the config has no such parameter). */
    const float *w_in;            /* [Dq+2Dkv,E] packed                             */
    const float *w_q, *w_k, *w_v; /* [Dq,E], [Dkv,Kd], [Dkv,Vd] (into w_in, packed) */
    const float *b_in;            /* [Dq+2Dkv]                                      */
    const float *bias_k, *bias_v; /* [Dkv] each                                     */
    const float *w_out;           /* [E,Dq]                                         */
    const float *b_out;           /* [E]                                            */
};

/* ---------------------------------------------------------------------------------------------- */
/* Scratch                                                                                        */

typedef struct mha_scratch {
    void *ptr;    /* the usable, 64-byte aligned block   */
    size_t bytes; /* its usable size                     */
    void *base;   /* what to release                     */
    size_t size;  /* mapped size, when mapped            */
    bool mapped;
} mha_scratch;

/* Returns a 64-byte aligned block of bytes (huge-page backed when large), or NULL; s records how
 * to release it with mha_scratch_free. */
void *mha_scratch_alloc(mha_scratch *s, size_t bytes);
void mha_scratch_free(mha_scratch *s);

/* ---------------------------------------------------------------------------------------------- */
/* Pool                                                                                           */

/* One task of a parallel-for: task index in [0, ntasks), slot in [0, mha_pool_threads(pool)) is
 * unique among the threads running tasks of this call at the same time (for per-thread scratch). */
typedef void (*mha_task_fn)(void *arg, int64_t task, int slot);

/* Runs fn(arg, t, slot) for every t in [0, ntasks) on the pool's threads, the caller included, and
 * returns when all are done. pool NULL (or ntasks 1) runs them in order on the caller, slot 0. */
void mha_pool_run(mha_pool *pool, int64_t ntasks, mha_task_fn fn, void *arg);

/* The same on at most max_threads threads (the caller included; slots stay below max_threads). */
void mha_pool_run_limit(mha_pool *pool, int64_t ntasks, mha_task_fn fn, void *arg, int max_threads);

/* Scratch for one pass: the pool keeps the last large block given back (up to 256 MiB) and
 * hands it out again when it is big enough, so back-to-back passes skip the kernel's page
 * zeroing and faults. pool NULL: plain mha_scratch_alloc / mha_scratch_free. */
void *mha_pool_scratch_get(mha_pool *pool, mha_scratch *s, size_t bytes);
void mha_pool_scratch_put(mha_pool *pool, mha_scratch *s);

/* ---------------------------------------------------------------------------------------------- */
/* Generator (mha_rng.c): xoshiro256** seeded through splitmix64, the stream layers are drawn from */

typedef struct mha_rng {
    uint64_t s[4];
} mha_rng;

void mha_rng_seed(mha_rng *r, uint64_t seed);
uint64_t mha_rng_next(mha_rng *r);
double mha_rng_unit(mha_rng *r); /* uniform in [0, 1), 53 random bits: one draw */

/* Moves r on by steps draws, one at a time. */
void mha_rng_advance(mha_rng *r, uint64_t steps);

/* The generator's step raised to the power 2^log2_steps, as a 256×256 bit matrix (8 KiB; making it
 * costs log2_steps matrix squarings, a few milliseconds for 2^20): applying it moves a state on by
 * 2^log2_steps draws at once, so threads can start anywhere in the stream. */
typedef struct mha_rng_jump {
    uint64_t col[256][4];
} mha_rng_jump;

void mha_rng_jump_make(mha_rng_jump *j, int log2_steps);
void mha_rng_jump_apply(const mha_rng_jump *j, mha_rng *r);

/* ---------------------------------------------------------------------------------------------- */
/* Softmax                                                                                        */

/* In place over each of rows rows of n floats (row r at x + r·ld): x = exp(x - max) / sum.
 * A row whose maximum is -inf (every key masked) becomes all zeros. Scores may hold -inf, never
 * NaN or +inf. dst (NULL or rows of the same stride ld) gets a copy of the result, written with
 * non-temporal stores where aligned (the per-head weights output: never read back soon, and
 * saves a second pass over the block). Call mha_copy_stream_fence before handing dst over.
 * AVX-512F or AVX2/FMA when the CPU has them (chosen at run time). */
void mha_softmax_rows(float *x, int64_t rows, int64_t n, int64_t ld, float *dst);

/* The softmax without its last pass: in place x = exp(x - max) over each row, inv[r] = 1 / the
 * row's sum, or 0 when the row's maximum is -inf (its x become 0). The forward pass multiplies by
 * inv where the weights are needed, and scales the head outputs instead of the weights. */
void mha_softmax_exp_rows(float *x, int64_t rows, int64_t n, int64_t ld, float *inv);

/* dst[r][j] = src[r][j] · inv[r] for j < n over rows rows (row strides ld_dst, ld_src), written
 * with non-temporal stores where aligned (the weights outputs). Call mha_copy_stream_fence before
 * handing dst over. */
void mha_scale_rows_stream(float *dst, int64_t ld_dst, const float *src, int64_t ld_src,
                           int64_t rows, int64_t n, const float *inv);

/* exp(x) for n floats (out may equal in): the kernel softmax uses, exposed for its tests. */
void mha_expf_array(float *out, const float *in, int64_t n);

/* The same with a chosen instruction set, so tests can cover every kernel on one machine;
 * false (nothing done) when this CPU lacks it. */
bool mha_softmax_rows_isa(mha_isa isa, float *x, int64_t rows, int64_t n, int64_t ld, float *dst);
bool mha_expf_array_isa(mha_isa isa, float *out, const float *in, int64_t n);
bool mha_softmax_exp_rows_isa(mha_isa isa, float *x, int64_t rows, int64_t n, int64_t ld,
                              float *inv);

/* Copies n floats to memory that will not be read again soon (the per-head weights output):
 * non-temporal stores when the CPU has AVX2, so they neither pollute the cache nor read the
 * destination first. Call mha_copy_stream_fence before the data is handed to another thread. */
void mha_copy_stream(float *dst, const float *src, int64_t n);
void mha_copy_stream_fence(void);

/* ---------------------------------------------------------------------------------------------- */
/* Attention GEMMs for AVX-512 (mha_attn_avx512.c)                                                */

/* True when this CPU has AVX-512F and hd is a multiple of 16: then the attention core uses the
 * kernels below instead of cblas_sgemm (unless the pass's plan.isa is below MHA_ISA_AVX512). */
bool mha_attn_avx512_usable(int64_t hd);

/* Floats mha_pack_keys writes for kn keys of hd dimensions (kn rounded up to 16). */
int64_t mha_packed_keys_floats(int64_t kn, int64_t hd);

/* Packs kn key rows k [kn,hd] (row stride k_rs) into kp: panels of 16 keys, each [hd][16]
 * (keys past kn zero). kp 64-byte aligned, mha_packed_keys_floats(kn, hd) floats. */
void mha_pack_keys(float *kp, const float *k, int64_t k_rs, int64_t kn, int64_t hd);

/* sc[m,kn] (row stride ld) = q[m,hd] (row stride q_rs) · kᵀ, k packed by mha_pack_keys. */
void mha_scores_avx512(float *sc, int64_t ld, const float *q, int64_t q_rs, const float *kp,
                       int64_t m, int64_t kn, int64_t hd);

/* Floats of the pack buffer mha_gemm_avx512 needs for C with Nc columns and A with K columns. */
int64_t mha_gemm_pack_floats(int64_t Nc, int64_t K);

/* C[M,Nc] (row stride ldc) = bias[Nc] (NULL: 0) + A[M,K] (row stride lda) · W[Nc,K]ᵀ (W
 * contiguous), the bias first as torch's addmm; the projections' GEMM. K >= 1. pack: 64-byte
 * aligned scratch of mha_gemm_pack_floats(Nc, K) floats. */
void mha_gemm_avx512(float *C, int64_t ldc, const float *bias, const float *A, int64_t lda,
                     const float *W, int64_t M, int64_t Nc, int64_t K, float *pack);

/* out[m,hd] (row stride o_rs) = P[m,kn] (row stride ld) · v[kn,hd] (row stride v_rs).
 * wdst (NULL: none) also gets wdst[r][j] = P[r][j] · inv[r] for j < kn (row stride wld; the
 * per-head weights), written between the FMAs (non-temporal where aligned): call
 * mha_copy_stream_fence before handing it over. */
void mha_pv_avx512(float *out, int64_t o_rs, const float *P, int64_t ld, const float *v,
                   int64_t v_rs, int64_t m, int64_t kn, int64_t hd, float *wdst, int64_t wld,
                   const float *inv);

#endif
