/*
 * mha.h - attnd's attention engine: torch.nn.MultiheadAttention (eval mode, float32) in C.
 *
 * This library knows nothing of HTTP or JSON. It depends on libc, libm, pthreads, cblas and (unless
 * built with XSMM=0) libxsmm's code generator for its JIT kernels (lib/mha_kernels.h).
 * Semantics are those of torch's general path (F.multi_head_attention_forward) with torch 2.x mask
 * merging (README.md, "Coming from torch"), except that a query row whose every key is
 * masked gets weights 0 and head output 0 instead of NaN.
 *
 * Shape legend (outermost dimension first), used in every comment of this library:
 *   N   batch size                      L   query length (target)
 *   S0  key length as given             S   keys attended: S0 + add_bias_kv + add_zero_attn
 *   E   embed_dim                       H   num_heads (query heads)
 *   hd  head_dim (default E / H)        Hkv num_kv_heads (default H; divides H)
 *   Dq  H·hd (q and concat width)       Dkv Hkv·hd (k and v width)
 *   Kd  kdim, Vd vdim (feature sizes of key and value)
 * Batched tensors are [N,L,E] when batch_first (attnd's default), [L,N,E] otherwise ("!!" below marks
 * the places where this matters); unbatched tensors are [L,E] and behave as N = 1.
 *
 * Conventions:
 *   - Functions that can fail return an mha_status (MHA_OK = 0) and fill an optional mha_error
 *     (may be NULL) with the input at fault and a message a user can act on. Nothing here exits,
 *     aborts or prints on bad input.
 *   - Every _create has a _free; every _free accepts NULL.
 *   - A layer is immutable once built (filled and, if wanted, initialised): any number of threads may
 *     run mha_forward on the same layer at once. There are no mutable globals (a mutex serialises
 *     libxsmm's code generator, which keeps error flags of its own: mha_jit.c).
 */
#ifndef ATTND_MHA_H
#define ATTND_MHA_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* ---------------------------------------------------------------------------------------------- */
/* Errors                                                                                         */

typedef enum mha_status {
    MHA_OK = 0,
    MHA_ERR_CONFIG,   /* the layer config is invalid (embed_dim % num_heads, sizes <= 0, ...)      */
    MHA_ERR_SHAPE,    /* an input or parameter tensor has the wrong shape or rank                  */
    MHA_ERR_VALUE,    /* a value is not allowed (NaN, +inf, -inf outside a float mask)             */
    MHA_ERR_PARAM,    /* unknown parameter name, or a parameter this config does not have          */
    MHA_ERR_LIMIT,    /* a size is over a limit or overflows; refused before allocating            */
    MHA_ERR_NOMEM,    /* an allocation failed                                                      */
    MHA_ERR_ARG,      /* a programming error by the caller (NULL where a pointer is required)      */
    MHA_ERR_CANCELLED, /* the caller's cancel flag was set during the pass (mha_inputs.cancel)     */
} mha_status;

typedef struct mha_error {
    mha_status status;
    char field[64];    /* the input at fault: "query", "attn_mask", "embed_dim", "in_proj_weight"... */
    char message[256]; /* e.g. "key has 5 features, layer expects kdim=4" (names both shapes)        */
} mha_error;

/* Returns a static name for a status ("shape", "config", ...). */
const char *mha_status_name(mha_status status);

/* ---------------------------------------------------------------------------------------------- */
/* Limits: every size is checked against these (and for overflow) before anything is allocated.   */

typedef struct mha_limits {
    int64_t max_dim;             /* embed_dim, kdim, vdim, num_heads, L, S0 and N each at most this */
    int64_t max_elements;        /* elements in any one input, output or parameter tensor          */
    int64_t max_workspace_bytes; /* scratch memory one forward pass may take                       */
} mha_limits;

/* Fills sane defaults: max_dim 1<<20, max_elements 1<<28 (1 GiB of float32), workspace 1<<31. */
void mha_limits_default(mha_limits *limits);

/* ---------------------------------------------------------------------------------------------- */
/* Layer configuration (names and defaults are torch's, except batch_first which defaults to true) */

typedef struct mha_config {
    int64_t embed_dim;   /* E, required, > 0                                           */
    int64_t num_heads;   /* H, required, > 0; divides E unless head_dim is given       */
    int64_t kdim;        /* Kd; 0 means E                                              */
    int64_t vdim;        /* Vd; 0 means E                                              */
    bool bias;           /* in_proj_bias [Dq+2Dkv] and out_proj.bias [E]; default true */
    bool add_bias_kv;    /* bias_k, bias_v [1,1,Dkv] appended to keys/values; false    */
    bool add_zero_attn;  /* a zero key/value appended after the head split; false      */
    bool batch_first;    /* [N,L,E] when true (default), [L,N,E] when false            */
    double dropout;      /* accepted for compatibility, never applied (eval mode); 0.0 */
    /* Beyond torch (docs/api.md, "The attention of today's models"); zeros are torch's behaviour. */
    int64_t head_dim;     /* hd; 0 means E/H (then H must divide E)                    */
    int64_t num_kv_heads; /* Hkv; 0 means H. Must divide H: query head h uses kv head
                           * h·Hkv/H (rounded down), HF's repeat_kv. 1 = multi-query    */
    bool rope;            /* rotary embedding of q and k after the in-projection (HF
                           * Llama's half-split rotate_half); needs an even hd          */
    double rope_theta;    /* its base, > 0 and finite (Llama: 10000); read when rope   */
    bool alibi;           /* ALiBi: -m_h·(p_i - p_j) added to the scaled scores, m_h
                           * BLOOM's slopes (mha_alibi_slope)                           */
    int64_t window;       /* W >= 1: key j allowed for query i iff |p_i - p_j| < W (and
                           * p_j <= p_i with is_causal: Mistral's i-W < j <= i); 0 none */
    bool is_causal;       /* the default of a request's is_causal. The engine reads only
                           * mha_inputs.is_causal: callers resolve it from this          */
} mha_config;

/* Positions (p_i of a query, p_j of a key: RoPE angles, ALiBi distances, causal and window
 * tests) are integers in [0, MHA_MAX_POSITION): float32 holds every one exactly, as HF turns
 * position_ids into float32 before the rotation. */
#define MHA_MAX_POSITION ((int64_t)1 << 24)

/* Fills cfg with the defaults above for the given E and H (kdim = vdim = 0, i.e. E; every
 * extension off). */
void mha_config_init(mha_config *cfg, int64_t embed_dim, int64_t num_heads);

/* Checks cfg against the rules and limits (limits may be NULL = defaults). MHA_ERR_CONFIG when a rule
 * is broken, MHA_ERR_LIMIT when a size is past the limits; err->field names the offending field
 * ("num_kv_heads", "head_dim", "rope.theta", "window", ...). */
mha_status mha_config_check(const mha_config *cfg, const mha_limits *limits, mha_error *err);

/* True when the layer keeps the packed in_proj_weight [Dq+2Dkv,E], i.e. kdim == vdim == E. */
bool mha_config_packed(const mha_config *cfg);

/* The resolved head_dim (E/H when 0) and num_kv_heads (H when 0) of a config. */
int64_t mha_config_head_dim(const mha_config *cfg);
int64_t mha_config_kv_heads(const mha_config *cfg);

/* ALiBi slope of query head h in [0, H) (BLOOM's build_alibi_tensor): with n the largest power of
 * two <= H, heads 0..n-1 get 2^(-8(h+1)/n) and heads n..H-1 get every other slope of 2n heads,
 * 2^(-4(2k+1)/n) for k = h - n. Computed in double and rounded once to float. */
float mha_alibi_slope(int64_t h, int64_t H);

/* FLOPs of one forward pass (multiply-add = 2), projections and attention, for N batches of L
 * queries and S0 given keys, every key counted (causal and window skipping not subtracted):
 * 2NL·E·Dq (q) + 2NS0·Kd·Dkv (k) + 2NS0·Vd·Dkv (v) + 4NL·S·Dq (scores and weights·v) +
 * 2NL·Dq·E (out). For torch's self-attention (Dq = Dkv = E) this is 8NLE² + 4NLSE. */
double mha_flops(const mha_config *cfg, int64_t N, int64_t L, int64_t S0);

/* ---------------------------------------------------------------------------------------------- */
/* Parameters, under torch's state_dict names and shapes                                          */

#define MHA_MAX_PARAMS 9

typedef struct mha_param_info {
    const char *name; /* static string: "in_proj_weight", "out_proj.weight", ...      */
    int ndim;         /* 1, 2 or 3                                                    */
    int64_t shape[3];
    int64_t count;    /* product of shape                                             */
} mha_param_info;

/* Lists the parameters this config has, in torch's state_dict order:
 *   packed:    in_proj_weight [Dq+2Dkv,E] (q rows, then k rows, then v rows)
 *   separate:  q_proj_weight [Dq,E], k_proj_weight [Dkv,Kd], v_proj_weight [Dkv,Vd]
 *   bias:      in_proj_bias [Dq+2Dkv]
 *   add_bias_kv: bias_k [1,1,Dkv], bias_v [1,1,Dkv]
 *   always:    out_proj.weight [E,Dq]; bias: out_proj.bias [E]
 * (torch's shapes when hd = E/H and Hkv = H: Dq = Dkv = E.) Query head h owns rows [h·hd,
 * (h+1)·hd) of the q projection, kv head g rows [g·hd, (g+1)·hd) of the k and v projections.
 * (torch's state_dict order is: in_proj_weight | q,k,v_proj_weight, in_proj_bias, bias_k, bias_v,
 * out_proj.weight, out_proj.bias.) Writes at most MHA_MAX_PARAMS entries to out; returns how many.
 * cfg must have passed mha_config_check. */
int mha_param_list(const mha_config *cfg, mha_param_info out[MHA_MAX_PARAMS]);

/* Total number of parameters (floats) of this config. */
int64_t mha_param_total(const mha_config *cfg);

/* ---------------------------------------------------------------------------------------------- */
/* Layers                                                                                         */

typedef struct mha_layer mha_layer;

/* Creates a layer for cfg (checked against limits, which may be NULL) with every parameter zero.
 * Returns NULL and fills err on a bad config or when out of memory. Owned by the caller:
 * free with mha_layer_free. */
mha_layer *mha_layer_create(const mha_config *cfg, const mha_limits *limits, mha_error *err);
void mha_layer_free(mha_layer *layer);

/* The layer's config (borrowed; lives as long as the layer). kdim/vdim are resolved (never 0). */
const mha_config *mha_layer_config(const mha_layer *layer);

/* Number of parameters and the info of the i-th (borrowed), in mha_param_list order. */
int mha_layer_param_count(const mha_layer *layer);
const mha_param_info *mha_layer_param_info(const mha_layer *layer, int i);

/* Data of the i-th parameter ([info.count] floats, borrowed). */
const float *mha_layer_param_data(const mha_layer *layer, int i);

/* Index of the parameter called name, or -1 when this layer has none of that name. */
int mha_layer_param_find(const mha_layer *layer, const char *name);

/* Copies a parameter in while the layer is being built (never after it is shared between threads).
 * shape must equal the parameter's shape exactly (MHA_ERR_SHAPE naming both shapes otherwise);
 * an unknown name is MHA_ERR_PARAM; NaN or infinite values are MHA_ERR_VALUE. */
mha_status mha_layer_set_param(mha_layer *layer, const char *name, const float *data, int ndim,
                               const int64_t *shape, mha_error *err);

/* Initialises every parameter as torch's MultiheadAttention._reset_parameters does, with a
 * deterministic generator seeded by seed (same seed, same config => same weights on every machine):
 * xavier_uniform in-projection weights (each of q/k/v separately when not packed), kaiming-uniform
 * (a = sqrt(5)) out_proj.weight, zero biases, xavier_normal bias_k/bias_v; fans from the shapes
 * above (e.g. in_proj_weight: fan_in E, fan_out Dq+2Dkv).
 * method: "xavier_uniform" (the torch scheme above) or "zeros". MHA_ERR_CONFIG for another method. */
mha_status mha_layer_init(mha_layer *layer, const char *method, uint64_t seed, mha_error *err);

/* ---------------------------------------------------------------------------------------------- */
/* Thread pool: the engine's own parallelism (BLAS is used single-threaded inside it)              */

typedef struct mha_pool mha_pool;

/* Creates a pool that runs a forward pass on `threads` threads in all (the caller counts as one, so
 * threads-1 workers are started). Any number of threads may share one pool; their passes take turns
 * on its workers. NULL on failure (err filled). Free with mha_pool_free. */
mha_pool *mha_pool_create(int threads, mha_error *err);
void mha_pool_free(mha_pool *pool);
int mha_pool_threads(const mha_pool *pool);

/* mha_layer_init on the threads of pool (NULL: the caller's only), at memory speed for large
 * layers: the values are exactly mha_layer_init's, whatever the number of threads (each thread
 * starts its share of the generator's stream where drawing in order would have reached it). */
mha_status mha_layer_init_pool(mha_layer *layer, const char *method, uint64_t seed,
                               mha_pool *pool, mha_error *err);

/* Sets OpenBLAS's own thread count (openblas_set_num_threads). The engine calls BLAS from its pool
 * threads, so a process that uses a pool should set this to 1 once at start. */
void mha_blas_set_threads(int threads);

/* The BLAS kernels the engine runs on. OpenBLAS picks a kernel set ("core") for the CPU when it
 * loads, unless the environment variable OPENBLAS_CORETYPE names one; a core older than the CPU
 * (e.g. Haswell's AVX2 kernels on an AVX-512 CPU) makes every GEMM of a pass slower. */
typedef struct mha_blas_info {
    char core[32];    /* kernel set in use (openblas_get_corename): "Haswell", "Cooperlake", ...   */
    char pinned[32];  /* OPENBLAS_CORETYPE as set, "" when unset                                  */
    bool cpu_avx512;  /* the CPU has AVX-512 F, BW, DQ and VL (what OpenBLAS's AVX-512 cores use) */
    bool core_avx512; /* the core in use has AVX-512 kernels (SkylakeX, Cooperlake, ...)          */
    bool weaker;      /* pinned to a core without AVX-512 on a CPU that has it, or (pinned or not)
                       * to a core without AVX2 on a CPU that has AVX2 and FMA                    */
    bool unknown_cpu; /* weaker, and OpenBLAS's own choice: it does not know the CPU's model      */
} mha_blas_info;

/* Fills info for this process (reads the environment and OpenBLAS; no state kept). */
void mha_blas_get_info(mha_blas_info *info);

/* Writes one line for a log into buf (always NUL-terminated) and returns buf, e.g.
 * "OpenBLAS core Cooperlake (CPU has AVX-512)", or when the core is pinned to a weaker one:
 * "OpenBLAS core Haswell, pinned by OPENBLAS_CORETYPE=Haswell; this CPU has AVX-512: unset
 * OPENBLAS_CORETYPE (or set it to SkylakeX) for faster GEMMs". */
const char *mha_blas_describe(char *buf, size_t size);

/* The same for a given info (mha_blas_describe's line for this process is of mha_blas_get_info's);
 * for an OpenBLAS that took the CPU for an older one by itself: "OpenBLAS core Prescott: this
 * OpenBLAS does not know the CPU's model and fell back to it, though the CPU has AVX-512: set
 * OPENBLAS_CORETYPE=SkylakeX for faster GEMMs on the generic path (...)". */
const char *mha_blas_info_describe(const mha_blas_info *info, char *buf, size_t size);

/* Fills info from a core name, the OPENBLAS_CORETYPE value (NULL: unset) and the CPU's features,
 * as mha_blas_get_info does from this process's. */
void mha_blas_classify(mha_blas_info *info, const char *core, const char *pinned, bool cpu_avx2,
                       bool cpu_avx512);

/* ---------------------------------------------------------------------------------------------- */
/* Kernel sets                                                                                    */

/* The instruction sets of the engine's kernels. AVX-512 and AVX2 run every GEMM of a pass (the
 * projections and the attention's tiles) on the engine's own kernels: code generated at run time
 * by libxsmm's generator for the full tiles and, made as passes meet them, the attention's edge
 * tiles (where that code gives the hand kernels' bits), hand-written kernels for the rest (or for
 * all of them where there is no JIT: ATTND_JIT=0, a build without libxsmm, no executable memory);
 * generic runs them on cblas. The softmax and row kernels have all three. */
typedef enum mha_isa { MHA_ISA_PORTABLE, MHA_ISA_AVX2, MHA_ISA_AVX512, MHA_ISA_COUNT } mha_isa;

/* The kernel set a pass planned now runs: the best this CPU has, capped by the environment
 * variable ATTND_ISA=generic|avx2|avx512 (another value, or unset: no cap). Read by
 * mha_plan_forward (plan.isa); tests set it to run the cblas path on an AVX-512 machine. */
mha_isa mha_isa_active(void);

/* Static name: "generic", "avx2", "avx512". */
const char *mha_isa_name(mha_isa isa);

/* The kernel set named name (mha_isa_name's spelling, exactly) into *isa; false for another name. */
bool mha_isa_from_name(const char *name, mha_isa *isa);

/* Writes one line for a log into buf (always NUL-terminated) naming the kernels a pass planned now
 * runs and why, and returns buf, e.g. "kernels avx512: JIT (libxsmm's generator) for full tiles,
 * hand AVX-512 for the rest; softmax AVX-512", or "kernels avx2 (capped by ATTND_ISA=avx2; the
 * CPU has avx512): ...", or "... hand AVX-512 only (no executable memory for JIT code)". */
const char *mha_kernels_describe(char *buf, size_t size);

/* ---------------------------------------------------------------------------------------------- */
/* Forward pass                                                                                   */

typedef struct mha_tensor {     /* a borrowed float32 input, row-major                          */
    const float *data;          /* NULL = absent                                                 */
    int ndim;
    int64_t shape[4];
} mha_tensor;

typedef enum mha_mask_type {
    MHA_MASK_BOOL = 1,          /* uint8_t per element: nonzero = masked (not allowed)            */
    MHA_MASK_FLOAT = 2,         /* float per element, added to the scores; -inf allowed          */
} mha_mask_type;

typedef struct mha_mask {       /* a borrowed mask, row-major                                    */
    const void *data;           /* NULL = no mask                                                */
    mha_mask_type type;
    int ndim;
    int64_t shape[4];
} mha_mask;

/* Choosing which weights come back (SPEC §2, "Choosing which weights come back"): instead of torch's
 * [N,H,L,S] (or averaged [N,L,S]) weights, the chosen heads, query rows and keys only, or per row the
 * k largest weights, or the map pooled over blocks. The output of the pass is the same, bit for bit,
 * whatever is chosen; the chosen numbers are those of the full map (the same float32 values, bit for
 * bit, for a slice; top-k and pooling are taken over them). */
typedef enum mha_pool_op { MHA_POOL_MEAN = 0, MHA_POOL_MAX = 1 } mha_pool_op;

typedef struct mha_select {
    int64_t nheads;            /* 0: every head, in order                                        */
    const int64_t *heads;      /* [nheads] distinct heads in [0,H), in the order they come back   */
    bool has_queries;          /* false: every query row                                         */
    int64_t queries[2];        /* [start, stop) over L, non-empty                                */
    bool has_keys;             /* false: every key                                               */
    int64_t keys[2];           /* [start, stop) over S (the appended keys count), non-empty      */
    bool has_top_k;            /* false: the map                                                 */
    int64_t top_k;             /* k >= 1: per row the k largest (min(k, S') of them), largest
                                * first, ties to the lower key index                             */
    bool has_pool;             /* false: not pooled. Not with top_k                              */
    int64_t pool[2];           /* {a, b} >= 1: the map reduced over blocks of a rows x b keys (an
                                * edge block over the cells it holds)                           */
    mha_pool_op pool_op;       /* mean (default) or max over a block                             */
} mha_select;
typedef struct mha_positions { /* borrowed positions, row-major                                */
    const int64_t *data;        /* NULL = absent                                                 */
    int ndim;                   /* 1: [len], the same for every batch; 2: [N,len]                */
    int64_t shape[2];
} mha_positions;

typedef struct mha_inputs {
    mha_tensor query;           /* [N,L,E] / [L,N,E] !! batch_first / [L,E] unbatched            */
    mha_tensor key;             /* [N,S0,Kd] / [S0,N,Kd] / [S0,Kd]; absent: key = query          */
    mha_tensor value;           /* [N,S0,Vd] / [S0,N,Vd] / [S0,Vd]; absent: value = key          */
    mha_mask key_padding_mask;  /* [N,S0] ([S0] unbatched)                                       */
    mha_mask attn_mask;         /* [L,S0] or [N·H,L,S0] ([H,L,S0] unbatched); row b·H+h          */
    bool is_causal;             /* key j allowed for query i iff p_j <= p_i (merged with masks)  */
    bool need_weights;          /* default false                                                 */
    bool average_attn_weights;  /* default true                                                  */
    const mha_select *select;   /* NULL: torch's weights. Else (with need_weights) the weights are
                                 * this selection; averaged: the mean over the chosen heads. The
                                 * trace's SCORES and ATTN_WEIGHTS stages take it too (per head) */
    /* Positions, integers in [0, MHA_MAX_POSITION), any order. Absent: queries at 0..L-1. Keys
     * absent: the query positions in self-attention (key absent, or key the query's shape and
     * bits), else 0..S0-1 (cross-attention; a decode step: one query at p against S0 = p+1 keys
     * at 0..p). The keys add_bias_kv and add_zero_attn append have no
     * position: never rotated, ALiBi bias 0, never masked (causal and window included). */
    mha_positions positions;     /* [L] or [N,L] ([L] unbatched)                                 */
    mha_positions key_positions; /* [S0] or [N,S0] ([S0] unbatched)                              */
    /* NULL, or a flag another thread may set (to nonzero, with an atomic store) to stop the pass:
     * mha_forward looks at it between blocks of work (a block of query rows of every head, a tile
     * of a projection; milliseconds each at sizes a server accepts), skips what is left and
     * returns MHA_ERR_CANCELLED. Read with __atomic_load_n; never written by the engine. */
    const int *cancel;
} mha_inputs;

/* What a forward pass will take and give, computed and checked before anything is allocated. */
typedef struct mha_plan {
    bool batched;
    int64_t N, L, S0, S;        /* S = S0 + add_bias_kv + add_zero_attn                          */
    int64_t E, H, hd, Hkv;
    mha_isa isa;                /* kernel set the pass runs (mha_isa_active when planned)         */
    bool jit;                   /* JIT kernels allowed: ATTND_JIT is not 0 / off when planned     */
    int out_ndim;               /* output: [N,L,E] / [L,N,E] !! batch_first / [L,E]             */
    int64_t out_shape[3];
    int64_t out_count;
    int weights_ndim;           /* 0 when !need_weights; averaged [N,L,S] ([L,S]); per head     */
    int64_t weights_shape[4];   /* [N,H,L,S] ([H,L,S]). Always batch-major, as torch returns it.
                                 * With a selection: [N,h',L',S'] ([N,L',S'] averaged; no N
                                 * unbatched), the last two [L',k'] with top_k, [⌈L'/a⌉,⌈S'/b⌉]
                                 * pooled                                                         */
    int64_t weights_count;
    /* The selection (in->select) resolved: */
    bool selected;              /* in->select was given (and checked)                            */
    int64_t sel_heads;          /* h': heads returned                                            */
    int64_t sel_q[2], sel_k[2]; /* [start, stop) of the query rows and keys                      */
    int64_t top_k;              /* k' = min(k, S'), 0 without top_k                              */
    int64_t pool[2];            /* {a, b}, {0, 0} when not pooled                                */
    mha_pool_op pool_op;
    int64_t sel_shape[4];       /* per head, batch-major: [N, h', rows, columns] (the trace's
                                 * SCORES and ATTN_WEIGHTS stages with a selection)              */
    size_t workspace_bytes;     /* scratch of a pass on one thread: q|k|v, packed keys and values,
                                 * one thread's tiles, with weights its slab [64, S] (a trace's
                                 * weights without need_weights add the slab in mha_forward)    */
    double flops;
} mha_plan;

/* Checks every input against the layer (shapes, ranks, mask types, positions, limits; limits may be
 * NULL) and fills plan. MHA_ERR_SHAPE with err->field = the input and a message naming both shapes;
 * MHA_ERR_VALUE for a position outside [0, MHA_MAX_POSITION) (field "positions"/"key_positions").
 * A selection (in->select) that breaks a rule is MHA_ERR_VALUE with err->field "select." and the
 * member at fault ("select.heads", ".queries", ".keys", ".top_k", ".pool", ".pool_op") and a message
 * that starts with the member's name ("heads[1] is 9, ..."), so that a caller can name it its own
 * way: a head outside [0,H) or given twice, a range outside its axis or empty, k < 1, a pool size
 * < 1, top_k and pool together. Past max_elements: MHA_ERR_LIMIT, field "select". */
mha_status mha_plan_forward(const mha_layer *layer, const mha_inputs *in, const mha_limits *limits,
                            mha_plan *plan, mha_error *err);

/* The weights a selection would return for a pass of these sizes, without its inputs (a layer's
 * describe): fills plan's sizes (N, L, S0, S, E, H, hd, batched), its selection fields and, as
 * with need_weights, weights_ndim/shape/count (average: the mean over the chosen heads). Errors as
 * mha_plan_forward's for a selection; the sizes must be >= 1 (MHA_ERR_SHAPE otherwise). */
mha_status mha_plan_select(const mha_config *cfg, int64_t N, int64_t L, int64_t S0, bool batched,
                           bool average, const mha_select *sel, const mha_limits *limits,
                           mha_plan *plan, mha_error *err);

/* Trace stages, in order of computation. Shapes are always batch-major ([N,...], N = 1 for
 * unbatched input), whatever batch_first says (the API shows them in the request's layout:
 * docs/api.md):
 *   Q_PROJ [N,L,Dq], K_PROJ [N,S0,Dkv], V_PROJ [N,S0,Dkv]   after the in-projection (before RoPE,
 *                                     no bias_kv yet)
 *   Q_HEADS [N,H,L,hd]   after the split into heads, and after RoPE when the layer has it
 *   K_HEADS [N,Hkv,S,hd], V_HEADS [N,Hkv,S,hd]   the kv heads as computed (num_kv_heads of them,
 *                                     not repeated per query head: query head h reads kv head
 *                                     h·Hkv/H), keys after RoPE, with bias_k/bias_v and the zero
 *                                     key/value appended (never rotated)
 *   SCORES [N,H,L,S]   (q/sqrt(hd))·kᵀ + ALiBi + merged masks (-inf where masked)
 *   ATTN_WEIGHTS [N,H,L,S]   softmax over keys (0 for fully masked rows)
 *   (SCORES and ATTN_WEIGHTS with a selection: plan.sel_shape, the selection per head)
 *   HEAD_OUTPUTS [N,H,L,hd]   weights·v
 *   CONCAT [N,L,Dq]   heads side by side
 *   OUTPUT [N,L,E]   after out_proj */
typedef enum mha_trace_stage {
    MHA_TRACE_Q_PROJ, MHA_TRACE_K_PROJ, MHA_TRACE_V_PROJ,
    MHA_TRACE_Q_HEADS, MHA_TRACE_K_HEADS, MHA_TRACE_V_HEADS,
    MHA_TRACE_SCORES, MHA_TRACE_ATTN_WEIGHTS, MHA_TRACE_HEAD_OUTPUTS,
    MHA_TRACE_CONCAT, MHA_TRACE_OUTPUT,
    MHA_TRACE_NSTAGES
} mha_trace_stage;

/* Static name of a stage: "q_proj", "k_proj", ..., "output". */
const char *mha_trace_stage_name(mha_trace_stage stage);

/* Shape of a stage for this plan; returns ndim (3 or 4) and writes shape; *count (may be NULL) gets
 * the element count. */
int mha_trace_stage_shape(const mha_plan *plan, mha_trace_stage stage, int64_t shape[4],
                          int64_t *count);

typedef struct mha_trace {
    float *stage[MHA_TRACE_NSTAGES]; /* each NULL (not wanted) or room for its stage's elements  */
    int32_t *indices[MHA_TRACE_NSTAGES]; /* with a top_k selection: the key indices of SCORES and
                                          * ATTN_WEIGHTS (same count as the stage), else unused */
} mha_trace;

/* Runs the forward pass planned by mha_plan_forward (with the same layer and inputs).
 *   output        [plan.out_count] floats, shaped plan.out_shape (required)
 *   attn_weights  [plan.weights_count] floats when in->need_weights, else ignored (may be NULL);
 *                 64-byte aligned is faster for big ones (maps of 4 MiB or more: rows then go
 *                 out with streaming stores; smaller ones stay in the cache for the caller)
 *   trace         NULL, or the stages wanted (borrowed buffers the caller owns)
 *   pool          NULL runs on the calling thread only
 * Allocates plan.workspace_bytes of scratch, plus one thread's tiles (with weights, its slab of
 * 64 rows of S) for each further pool thread that fits under the layer's max_workspace_bytes
 * (the pass runs on fewer threads when they
 * do not all fit: a pass planned under the layer's limits never fails for want of room, except
 * that a trace's ATTN_WEIGHTS stage without in->need_weights adds one thread's slab [64, S] that
 * the plan did not count: MHA_ERR_LIMIT when that is over the limit; plan with need_weights
 * to have it counted, as the daemon does), and
 * frees it before returning (a pool may keep it for the next pass). MHA_ERR_NOMEM when that
 * fails; nothing is written to the outputs' contents in that case that the caller may rely on.
 * MHA_ERR_CANCELLED when in->cancel was set during the pass: it stops within a block of work, the
 * scratch is freed (or kept by the pool) as after any pass, and the outputs hold nothing usable. */
mha_status mha_forward(const mha_layer *layer, const mha_inputs *in, const mha_plan *plan,
                       float *output, float *attn_weights, const mha_trace *trace, mha_pool *pool,
                       mha_error *err);

/* mha_forward with a selection's top-k indices: topk_indices [plan.weights_count] int32 (absolute
 * key indices, beside the values in attn_weights) when plan.top_k, else ignored (may be NULL).
 * A selection also takes memory of its own, about the reply's size in doubles when pooled plus, per
 * thread, one [rows, S'] block when averaged: MHA_ERR_NOMEM when that fails. */
mha_status mha_forward_select(const mha_layer *layer, const mha_inputs *in, const mha_plan *plan,
                              float *output, float *attn_weights, int32_t *topk_indices,
                              const mha_trace *trace, mha_pool *pool, mha_error *err);

#ifdef __cplusplus
}
#endif
#endif /* ATTND_MHA_H */
