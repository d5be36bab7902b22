/*
 * mha_core.h - private to lib/: how a forward pass is cut into work, and what a layer keeps so its
 * passes run on the kernels of mha_kernels.h.
 *
 *   projections  C[M][Nc] = bias + X[M][K] · Wᵀ, W packed once per layer into panels Wᵀ [K][64]
 *                (mha_weights.c); tasks of 64 rows x 256 columns, kernel calls of 64 x 64 x 512
 *                (AVX-512) or 64 (AVX2) (mha_proj.c)
 *   keys, values per (batch, kv head, key block): Kᵀ blocks [hd][BN], V blocks [BN][hd], the keys
 *                add_bias_kv and add_zero_attn append included (mha_attention.c)
 *   attention    per (batch, head, 64 query rows): the key blocks in order with an online softmax
 *                (mha_softmax_block.c), output and, where asked for, weights (mha_attention.c)
 *
 * Every block size depends on the shape only (head_dim, S), never on the thread count or on
 * need_weights: a pass gives the same bits on 1 or 2 threads, with weights or without.
 */
#ifndef ATTND_MHA_CORE_H
#define ATTND_MHA_CORE_H

#include "mha_forward_internal.h"
#include "mha_kernels.h"
#include "mha_select.h"

#define MHA_BM 64       /* query rows per row block of the attention                         */
#define MHA_BM_WIDE 128 /* ... of a pass that gives only its output, on AVX2 (mha_attn_bm)    */
#define MHA_GROUP 4     /* row blocks of one head a task takes together past MHA_GROUP_FROM  */
#define MHA_GROUP_FROM                                                                             \
    ((int64_t)2 << 20) /* bytes of one head's keys and values (2·S·hd floats)                    \
                        * from which they stream from beyond L2              */
#define MHA_GROUP_WIDE                                                                             \
    8 /* ... and past MHA_GROUP_WIDE_FROM, when the group's q and output                           \
       * tiles take at most MHA_GROUP_TILES bytes (head_dim <= 64)         */
#define MHA_GROUP_WIDE_FROM ((int64_t)8 << 20)
#define MHA_GROUP_TILES ((int64_t)256 << 10)
#define MHA_PANEL 64      /* output columns per packed weight panel and per projection call    */
#define MHA_PROJ_ROWS 64  /* rows per projection kernel call                                   */
#define MHA_PROJ_COLS 256 /* columns per projection task (4 panels: the X rows stay in L2)     */

/* Depth per projection call on isa: 64 for AVX2 (on the task's rows copied contiguous, below),
 * 512 for AVX-512 (Zen 4: 96-100% of peak at 512). */
int64_t mha_proj_depth(mha_isa isa);

/* True when isa's projections of depth K run on copies: a task's 64 rows of X copied to [64][K]
 * and each 64 x 64 tile summed in a [64][64] of the thread's own before it goes to C. The rows of
 * X and C are the request's and the pass's buffers, E or 3E floats apart: at E = 1024 every row of
 * a tile falls in the same few sets of L1 and L2, and the kernel's loads and stores miss. Measured
 * on Zen 3 (XL's in-projection, one core, the JIT kernel): 77 GFLOP/s in place at depth 128, 82 on
 * the copies at depth 64 (E = 768: 76 -> 83). From K = MHA_PROJ_PACK_MIN: below it the copies
 * cost about what the kernel does. AVX2 only: AVX-512 on its depth 512 was no faster on the copies
 * on Zen 4 (L and XL, 1 and 2 threads, A/B within +-1.6%, 2026-11-28). The same sums in the same
 * order: the same bits. */
#define MHA_PROJ_PACK_MIN 256
bool mha_proj_packs(mha_isa isa, int64_t K);

/* Floats of the thread's room for mha_proj_packs: [64][Kmax] rows and a [64][64] tile, Kmax the
 * widest projection input of the layer (E, kdim, vdim, H·hd); 0 when isa does not pack it. */
int64_t mha_proj_slot_floats(const mha_config *cfg, mha_isa isa);

/* Keys per attention block for head_dim hd on isa: 128 above hd 128 (a K and a V block then stay
 * at 64-128 KiB each, in L2 next to the scores tile); else 256 for AVX-512 (Zen 4) and 128 for
 * AVX2 and generic: on Zen 3 a block of 128 keys at hd 64 keeps each kernel's Kᵀ or V operand at
 * 32 KiB, in L1, and XL's attention core ran 8% faster than with 256. */
int64_t mha_key_block(int64_t hd, mha_isa isa);

/* ---------------------------------------------------------------------------------------------- */
/* A layer's projection weights, packed (mha_weights.c)                                           */

/* W [Nc][K] as ceil(Nc/64) panels Wᵀ [K][64] (columns past Nc zero), panel p at p·K·64. */
typedef struct mha_packed_w {
    float *p; /* NULL: the layer has no such weight */
    int64_t Nc, K;
} mha_packed_w;

/* Floats of W [Nc][K] packed. */
int64_t mha_packed_w_floats(int64_t Nc, int64_t K);

/* ---------------------------------------------------------------------------------------------- */
/* A layer's kernels for one instruction set (mha_weights.c)                                      */

#define MHA_MAX_PROJ_MM 24

typedef struct mha_edge_cache mha_edge_cache; /* mha_edge_kernels.c */

typedef struct mha_kernel_set {
    mha_isa isa;
    int64_t BN;    /* keys per attention block                                          */
    int64_t kc;    /* depth per projection call (mha_proj_depth)                         */
    mha_mm scores; /* sc[BM][BN] = qt[BM][hd] · Kᵀ[hd][BN]                               */
    mha_mm pv;     /* O[BM][hd] += P[BM][BN] · V[BN][hd]                                 */
    mha_mm scores_wide, pv_wide; /* the same for MHA_BM_WIDE rows (AVX2 only; else unused)     */
    int nproj; /* projection calls of full tiles: C[64][64] (row stride ldc) +=      */
    mha_mm proj[MHA_MAX_PROJ_MM]; /* X[64][depth] (row stride ldx) · panel[depth][64]      */
    int njit; /* how many of the above run JIT code                                 */
    mha_jit_arena arena;
    mha_edge_cache *edges; /* JIT code for the edge tiles passes meet, made on first use (NULL:
                            * none: no JIT for the full tiles either)                        */
} mha_kernel_set;

/* Fills ks for isa and the layer's config (resolved): JIT code for every full tile when jit is
 * true and the build and system allow it, the hand kernels (cblas for generic) for the rest. */
void mha_kernel_set_init(mha_kernel_set *ks, mha_isa isa, const mha_config *cfg, bool jit);
void mha_kernel_set_free(mha_kernel_set *ks);

/* The attention's edge tiles (mha_edge_kernels.c): JIT code for scores sc [m][n] = qt [m][hd] ·
 * Kᵀ [hd][n] and P·V O [m][hd] += P [m][n] · V [n][hd] (the strides of the full tiles'), made the
 * first time a pass asks for (m, n) where it gives the hand kernel's bits; each NULL when there is
 * none (then the hand kernel). Safe from any number of threads. */
void mha_kernel_set_edge(const mha_kernel_set *ks, int64_t m, int64_t n, const mha_mm **scores,
                         const mha_mm **pv);
mha_edge_cache *mha_edge_cache_create(void);
void mha_edge_cache_free(mha_edge_cache *c);

/* The projection call of full tiles for (depth, ldx, ldc), or NULL (then the hand kernel). */
const mha_mm *mha_kernel_set_proj(const mha_kernel_set *ks, int64_t depth, int64_t ldx,
                                  int64_t ldc);

/* The layer's share (mha_layer.c calls these): packed weights and kernel sets, made with the
 * layer (weights zero, as its parameters); repacked when a weight parameter called name is set
 * (NULL: every weight, after an initialisation), on the pool's threads (NULL: the caller's). */
mha_status mha_layer_kernels_create(mha_layer *layer, mha_error *err);
void mha_layer_kernels_free(mha_layer_kernels *lk);
void mha_layer_kernels_repack(mha_layer *layer, const char *name, mha_pool *pool);

/* The layer's kernel set for a pass planned with isa and jit (see mha_plan.jit). */
const mha_kernel_set *mha_layer_kernel_set(const mha_layer *layer, mha_isa isa, bool jit);

/* The layer's packed weight 'q', 'k', 'v' or 'o' (out_proj). */
const mha_packed_w *mha_layer_packed(const mha_layer *layer, char which);

/* ---------------------------------------------------------------------------------------------- */
/* Projections (mha_proj.c)                                                                       */

/* A finished block of a job's C, rows [r0, r0+rows) and columns [c0, c0+cols) of the job, at c
 * (row stride ldc; c[0] is C[r0][c0] or the task's own copy of it): handed over by the task that
 * made it while it is still in the thread's cache (mha_proj_then). c0 is a multiple of 64 and the
 * block at most 64 columns wide, or a task's whole group of columns (c0 a multiple of 256, at
 * most 256 wide: mha_proj_then_groups); the epilogue may change it in place. */
typedef void (*mha_proj_epilogue)(void *arg, int64_t r0, int64_t rows, int64_t c0, int64_t cols,
                                  float *c, int64_t ldc);

typedef struct mha_proj_job {
    const float *X;        /* [M][K] at row stride ldx                              */
    const float *W;        /* [Nc][K] as given (the generic path's cblas reads it) */
    const mha_packed_w *w; /* W packed                                             */
    const float *bias;     /* [Nc], or NULL (0)                                     */
    float *C;              /* [M][Nc] at row stride ldc                            */
    int64_t M, ldx, ldc;
    int64_t first_task;     /* tasks before this job's in its set                   */
    mha_proj_epilogue then; /* or NULL                                               */
    void *then_arg;         /* its first argument                                   */
    bool no_c;              /* with then: no C; blocks made in the task's own tile  */
    bool groups;            /* with then: a task's whole column group at once       */
} mha_proj_job;

/* The rows a slot's copy holds (mha_proj_packs): a job's rows from x; job NULL: none. */
typedef struct mha_proj_held {
    const struct mha_proj_job *job;
    const float *x;
} mha_proj_held;

typedef struct mha_proj_set {
    mha_proj_job job[3];
    int n;
    int64_t ntasks;
    const mha_kernel_set *ks;
    const int *cancel; /* mha_inputs.cancel: once set, the tasks left do nothing */
    float *scratch;    /* [threads][slot_floats]: mha_proj_packs' room in each */
    int64_t slot_floats;
    mha_proj_held *held; /* [threads]: what each slot's copy of X rows holds, or NULL */
} mha_proj_set;

/* Gives the set held[threads] for what each slot's copy holds, cleared: nothing yet (the slots'
 * room was another phase's before this set runs). */
void mha_proj_set_held(mha_proj_set *set, mha_proj_held *held, int threads);

/* Adds C = bias + X·Wᵀ to the set (its tasks after the ones already there). */
void mha_proj_add(mha_proj_set *set, const float *X, int64_t M, int64_t ldx, const float *W,
                  const mha_packed_w *w, const float *bias, float *C, int64_t ldc);

/* The last job added to the set hands each block of C it finishes to fn(arg, ...) (an epilogue:
 * it runs on the task's thread, once per block, every block of the job once). keep_c false: the
 * job's C is never written (nothing but the epilogue wants it), its blocks are made in the
 * thread's slot (set->scratch, at least mha_proj_slot_floats). */
void mha_proj_then(mha_proj_set *set, mha_proj_epilogue fn, void *arg, bool keep_c);

/* The same with a task's whole group of columns (MHA_PROJ_COLS) at once, from C once the task has
 * written it (in L2): for an epilogue that needs more than 64 columns together (RoPE's rotation of
 * heads of 128 or 256). */
void mha_proj_then_groups(mha_proj_set *set, mha_proj_epilogue fn, void *arg);

/* One task of a set (mha_task_fn): 64 rows x 256 columns of one job. torch's addmm order: each
 * row starts as the bias, then += X·Wᵀ in depth chunks (mha_proj_depth) in order (generic: one
 * cblas call on W as given); on copies where mha_proj_packs (a task of 64 rows). */
void mha_proj_task(void *arg, int64_t task, int slot);

/* ---------------------------------------------------------------------------------------------- */
/* The attention core (mha_attention.c)                                                           */

typedef struct mha_attn {
    const mha_layer *layer;
    const mha_inputs *in;
    const mha_kernel_set *ks;
    mha_isa isa;
    int64_t N, L, S0, S, H, Hkv, grp, hd, BN, nblk, nrb;
    int64_t bm; /* rows per row block (mha_attn_bm), and the kernels of its full tiles:    */
    const mha_mm *mm_scores, *mm_pv; /* ks->scores and pv, or their _wide twins           */
    /* a tile's kernels by its shape: [m == m_edge][n == n_edge], [0][0] the full tile's (bm rows,
     * BN keys: mm_scores, mm_pv), the others the edge tiles' JIT code (mha_kernel_set_edge) or
     * NULL (the hand kernel); m_edge, n_edge: the last row block's rows and the last key block's
     * keys when short of bm and BN, else 0 */
    int64_t m_edge, n_edge;
    const mha_mm *tile_scores[2][2], *tile_pv[2][2];
    int64_t group; /* row blocks of one head per task (mha_attn_group; all_heads: 1) */
    /* projected rows in input order (row (b, i) at b·bs + i·rs), RoPE applied */
    const float *q, *k, *v;
    int64_t q_bs, q_rs, k_bs, k_rs, v_bs, v_rs;
    float *cat; /* [N,L,Dq] concat of head outputs, in input order: over q's columns (a task
                 * reads its q rows of a head before it writes the head's output there) */
    int64_t c_bs, c_rs;
    /* keys and values packed per (batch, kv head): Kᵀ [nblk][hd][BN], then V [nblk·BN][hd] */
    float *kv;
    int64_t kv_floats; /* per (batch, kv head) */
    /* positions [N,L], [N,S0] (mha_positions_fill), rules */
    const float *qpos, *kpos;
    bool keys_sorted, causal, alibi;
    int64_t window;
    float qscale; /* √hd as float: torch divides q by it                                   */
    float qinv;   /* 1/√hd when √hd is a power of two (hd 16, 64, 256...): multiplying by it is
                   * exact, the same bits as the division at a fraction of its cost; else 0 */
    /* outputs beyond the head outputs */
    float *weights; /* per head [N,H,L,S] or averaged [N,L,S], or NULL     */
    bool per_head;
    bool stream_weights; /* per-head weights written with non-temporal stores (a map of
                          * MHA_STREAM_MAP_BYTES or more)                                      */
    float *trace_scores, *trace_weights; /* [N,H,L,S] each, or NULL         */
    /* a selection (plan.selected): the chosen weights and the trace's scores and weights go to
     * these sinks instead (mha_select.h; NULL: not wanted) */
    mha_sink *sink_w, *sink_scores, *sink_tw;
    /* per-thread scratch: [threads][slot_floats] */
    float *scratch;
    int64_t slot_floats;
    int64_t *no_score_row; /* the first row (b·H + h)·L + i found with no finite score though
                            * the masks and rules allow it keys: float32 overflowed (q·kᵀ past
                            * ±3.4e38, or NaN); -1 while none (atomic minimum)              */
    bool slab;      /* the slot holds the weights slab (some weights wanted)                  */
    bool all_heads; /* a task is (batch, row block) with every head in order: averaged
                     * weights, or an averaged selection (its sink sums a row block's heads) */
} mha_attn;

/* The masks on a row's keys (mha_masks.c) */

/* Adds the merged masks to n scores of one row. am, kp: the mask entries of those keys
 * (attn_mask / key_padding_mask) or NULL. */
void mha_apply_masks(float *row, int64_t n, const void *am, mha_mask_type amt, const void *kp,
                     mha_mask_type kpt);

/* Entry col of row `row` of a mask of row width `width`. */
const void *mha_mask_at(const mha_mask *m, int64_t row, int64_t width, int64_t col);

/* The row of a's attn_mask that query qi of head h in batch b reads ([L,S0], or [N·H,L,S0]). */
int64_t mha_attn_mask_row(const mha_attn *a, int64_t b, int64_t h, int64_t qi);

/* Whether query qi (position qp) of head h in batch b may attend some key under the masks and the
 * rules (kp: the batch's key positions [S0]; [k0, k1): the keys the rules leave its row block):
 * for a row that attended none, tells the masks' doing from float32's. Only such rows are asked,
 * and cheaply: a row block the rules leave no key answers at once (none of its key blocks was
 * visited), a block without attn_mask and rules once for all its rows (*same: -1 until asked), an
 * attn_mask's row alone is one scan, else the row's masks over [k0, k1), 256 keys at a time on the
 * stack, until one is allowed. */
bool mha_row_allows_a_key(const mha_attn *a, int64_t b, int64_t h, int64_t qi, float qp,
                          const float *kp, int64_t k0, int64_t k1, int *same);

/* True once the caller set a pass's cancel flag (mha_inputs.cancel). */
static inline bool mha_cancelled(const int *flag)
{
    return flag && __atomic_load_n(flag, __ATOMIC_RELAXED);
}

/* Row blocks of one head a task takes together (mha_attn.group), or as many as there are: 1 while
 * one head's keys and values take less than MHA_GROUP_FROM bytes; MHA_GROUP from there;
 * MHA_GROUP_WIDE from MHA_GROUP_WIDE_FROM when their tiles fit MHA_GROUP_TILES. (For tests:
 * ATTND_TEST_GROUP_ROWS=1 in the environment groups at every length, and ATTND_TEST_GROUP_WIDE=1
 * takes the wide groups at every length where their tiles fit.) */
int64_t mha_attn_group(const mha_plan *plan, int64_t bm);

/* Query rows per row block of a pass: MHA_BM_WIDE on AVX2 for a pass of at least MHA_BM_WIDE rows
 * that gives only its output (output_only: no weights, trace or selection) under no causal or
 * window rule (rules: is_causal or a window), else MHA_BM. A key block then serves twice the rows
 * while it is in L1 and L2; the output's bits are the same whichever is taken. Not on AVX-512:
 * there (key blocks of 256) 128-row blocks measured the same as 64 on Zen 4 (L and XL, 1 and 2
 * threads, A/B within +-1.1%, 2026-11-28). */
int64_t mha_attn_bm(const mha_plan *plan, bool output_only, bool rules);

/* Floats of one thread's slot for a plan (slab: per-row tiles kept for weights), with the room of
 * a group's further row blocks. */
int64_t mha_attn_slot_floats(const mha_plan *plan, bool slab, int64_t bm);

/* Floats of one thread's slot for a whole pass: the attention's (mha_attn_slot_floats) or the
 * projections' (mha_proj_slot_floats), whichever is larger; the phases take turns with it. */
int64_t mha_pass_slot_floats(const mha_plan *plan, const mha_config *cfg, bool slab, int64_t bm);

/* The slot plan.workspace_bytes counts for these inputs (mha_pass_slot_floats with the slab when
 * weights are asked for, and the row blocks of a pass without a trace): mha_forward takes it out
 * and puts its own slots, one per thread, in its place. */
int64_t mha_plan_slot_floats(const mha_plan *plan, const mha_config *cfg, const mha_inputs *in);

/* Floats of the packed keys and values of one (batch, kv head). */
int64_t mha_attn_kv_floats(const mha_plan *plan);

/* Packs one (batch, kv head, key block) (mha_task_fn; task = (b·Hkv + g)·nblk + blk;
 * mha_kv_pack.c, as the two below). */
void mha_attn_pack_task(void *arg, int64_t task, int slot);

/* The same packing done by the in-projection as it makes the keys and the values (epilogues of
 * the k and v jobs, arg the mha_attn; mha_proj_then): each finished block of k or v rows goes to
 * its place in the packed keys or values while it is in cache, where the packing phase read them
 * back from L3 or memory (4 ms of L's 244 on one thread, Zen 4). For passes whose keys are the
 * projection's rows (rotated by RoPE first, in the same epilogue, where a block holds whole heads):
 * no add_bias_kv, no add_zero_attn (the packing phase handles those). */
void mha_attn_pack_keys_from(void *arg, int64_t r0, int64_t rows, int64_t c0, int64_t cols,
                             float *c, int64_t ldc);
void mha_attn_pack_values_from(void *arg, int64_t r0, int64_t rows, int64_t c0, int64_t cols,
                               float *c, int64_t ldc);

/* Tasks of the attention: (batch, head, group of row blocks), or (batch, row block) with every
 * head in order (all_heads: averaged weights, summed over heads in torch's order, by the pass or
 * its sink). A group's row blocks that give only their output run together, each key block shared
 * while in L2; else one after the other. */
int64_t mha_attn_ntasks(const mha_attn *a);
void mha_attn_task(void *arg, int64_t task, int slot);

#endif
