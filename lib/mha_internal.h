/*
 * mha_internal.h - private to lib/: the layer's layout, the error helper, checked size arithmetic,
 * the pool's parallel-for and the streaming stores. Nothing outside lib/ includes this.
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

typedef struct mha_layer_kernels mha_layer_kernels;

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
    /* The projection weights packed for the kernels and the JIT kernels of its passes, made with
     * the layer and kept in step with its weights (mha_weights.c). */
    mha_layer_kernels *kern;
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

/* Whether the environment variable `name` (a switch for tests) is set to something other than
 * "" or "0", read once into *cache (-1 until then; a race between two first callers reads the same
 * value). */
bool mha_test_switch(const char *name, int *cache);

/* Whether every RoPE angle inv_freq[d]·p of a head of hd dimensions (theta > 0 and finite, hd even)
 * is finite in float32 for every position p < MHA_MAX_POSITION (mha_rope.c); *worst = the largest
 * inv_freq. A theta far below 1 makes inv_freq overflow, and the rotation NaN. */
bool mha_rope_theta_fits(int64_t hd, double theta, float *worst);

/* With ATTND_POISON_SCRATCH=1 in the environment (for tests), fills p [bytes] with 0xFF bytes (a NaN
 * in every float) wherever the engine hands out working memory: the scratch of a pass, fresh or kept
 * from the one before, and a selection's state. A path that read memory before writing it would
 * then show NaN in its results instead of zeros or, worse, an earlier request's numbers. Otherwise
 * nothing. */
void mha_scratch_poison(void *p, size_t bytes);

/* ---------------------------------------------------------------------------------------------- */
/* Pool                                                                                           */

#define MHA_POOL_MAX_THREADS 1024 /* mha_pool_create's bound: a task's slot is below it */

/* A weights map (per head, or a selection's) of at least this many bytes is written with
 * non-temporal stores (mha_scale_rows_stream_isa); a smaller one stays in the cache, where the
 * reply's encoder reads it next (S's 16 KB map: 16.38 -> 16.09 µs with weights on Zen 4). */
#define MHA_STREAM_MAP_BYTES ((double)(4 << 20))

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
/* Streaming stores (mha_rows.c)                                                                  */

/* dst[r][j] = src[r][j] · inv[r] for j < n over rows rows (row strides ld_dst, ld_src) on isa's
 * kernel (the portable loop when the CPU lacks it), written with non-temporal stores where
 * aligned (the weights outputs: never read back soon). Call mha_copy_stream_fence before handing
 * dst over. */
void mha_scale_rows_stream_isa(mha_isa isa, float *dst, int64_t ld_dst, const float *src,
                               int64_t ld_src, int64_t rows, int64_t n, const float *inv);
void mha_copy_stream_fence(void);

#endif
