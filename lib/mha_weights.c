/*
 * mha_weights.c - what a layer keeps so that its passes run on the engine's own kernels: the
 * projection weights packed once into panels (instead of OpenBLAS repacking them on every call),
 * and the JIT kernels for the full tiles of its passes, for each instruction set the CPU has.
 *
 * The packed copy is made when a parameter is set (mha_layer_set_param, mha_layer_init), before
 * the layer is shared: a layer stays immutable while passes read it. It doubles the weights'
 * memory (16 MiB more for E = 1024).
 *
 * Which kernel runs where (measured on Zen 4, one core, GFLOP/s of a 117 peak, the tile shapes of
 * a pass): the JIT code for every full tile (scores 111-117, projections 113-118 on both ISAs), except
 * AVX2 weights·values at a head_dim not a multiple of 32, where the hand kernel is ahead (hd 72:
 * 107 against 89, hd 100: 102 against 76); partial tiles always run the hand kernels.
 */
#include "mha_core.h"
#include "mha_pack.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int64_t mha_key_block(int64_t hd, mha_isa isa)
{
    if (hd > 128)
        return 128;
    return isa == MHA_ISA_AVX512 ? 256 : 128;
}

int64_t mha_proj_depth(mha_isa isa)
{
    return isa == MHA_ISA_AVX512 ? 512 : isa == MHA_ISA_AVX2 ? 64 : 128;
}

bool mha_proj_packs(mha_isa isa, int64_t K)
{
    return isa == MHA_ISA_AVX2 && K >= MHA_PROJ_PACK_MIN;
}

int64_t mha_proj_slot_floats(const mha_config *cfg, mha_isa isa)
{
    int64_t K = cfg->embed_dim, Dq = cfg->num_heads * cfg->head_dim;
    K = cfg->kdim > K ? cfg->kdim : K;
    K = cfg->vdim > K ? cfg->vdim : K;
    K = Dq > K ? Dq : K;
    /* the copies, or a tile of its own for a job that writes no C (mha_proj_then) */
    return mha_proj_packs(isa, K) ? MHA_PROJ_ROWS * K + MHA_PROJ_ROWS * MHA_PANEL
                                  : MHA_PROJ_ROWS * MHA_PANEL;
}

int64_t mha_packed_w_floats(int64_t Nc, int64_t K)
{
    return (Nc + MHA_PANEL - 1) / MHA_PANEL * K * MHA_PANEL;
}

/* ---------------------------------------------------------------------------------------------- */

static void set_mm(mha_mm *mm, mha_isa isa, const mha_mm_shape *s, mha_jit_arena *arena, bool jit,
                   int *njit)
{
    mm->s = *s;
    mm->isa = isa;
    mm->jit = jit ? mha_jit_add(arena, isa, s) : NULL;
    *njit += mm->jit != NULL;
}

/* Adds the projection calls for depth K from rows of stride ldx into rows of stride ldc (a full
 * depth chunk and the last, shorter one); on the copies (rows of K into a tile of 64) where isa
 * projects depth K on them (mha_proj_packs). */
static void add_proj(mha_kernel_set *ks, int64_t K, int64_t ldx, int64_t ldc, bool jit)
{
    if (mha_proj_packs(ks->isa, K)) {
        ldx = K;
        ldc = MHA_PANEL;
    }
    const int64_t kc = ks->kc;
    const int64_t chunks[2] = {K < kc ? K : kc, K > kc ? K % kc : 0};
    for (int c = 0; c < 2; c++) {
        if (chunks[c] == 0 || mha_kernel_set_proj(ks, chunks[c], ldx, ldc) ||
            ks->nproj == MHA_MAX_PROJ_MM)
            continue;
        const mha_mm_shape s = {MHA_PROJ_ROWS, MHA_PANEL, chunks[c], ldc, ldx, MHA_PANEL, true};
        set_mm(&ks->proj[ks->nproj++], ks->isa, &s, &ks->arena, jit, &ks->njit);
    }
}

void mha_kernel_set_init(mha_kernel_set *ks, mha_isa isa, const mha_config *cfg, bool jit)
{
    memset(ks, 0, sizeof *ks);
    ks->isa = isa;
    jit = jit && isa != MHA_ISA_PORTABLE && mha_jit_built();
    const int64_t hd = cfg->head_dim, BN = mha_key_block(hd, isa), E = cfg->embed_dim;
    const int64_t Dq = cfg->num_heads * hd, Dkv = cfg->num_kv_heads * hd;
    ks->BN = BN;
    ks->kc = mha_proj_depth(isa);
    const mha_mm_shape sc = {MHA_BM, BN, hd, BN, hd, BN, false};
    const mha_mm_shape pv = {MHA_BM, hd, BN, hd, BN, hd, true};
    set_mm(&ks->scores, isa, &sc, &ks->arena, jit, &ks->njit);
    set_mm(&ks->pv, isa, &pv, &ks->arena, jit && (isa == MHA_ISA_AVX512 || hd % 32 == 0),
           &ks->njit);
    if (isa == MHA_ISA_AVX2) { /* the wide row blocks of plain passes (mha_attn_bm) */
        const mha_mm_shape scw = {MHA_BM_WIDE, BN, hd, BN, hd, BN, false};
        const mha_mm_shape pvw = {MHA_BM_WIDE, hd, BN, hd, BN, hd, true};
        set_mm(&ks->scores_wide, isa, &scw, &ks->arena, jit, &ks->njit);
        set_mm(&ks->pv_wide, isa, &pvw, &ks->arena, jit && hd % 32 == 0, &ks->njit);
    }
    /* every (K, ldx, ldc) a pass of this layer can use: mha_forward.c's buffers (the inputs are
     * contiguous, the out-projection reads the concat over q's columns), or the copies */
    if (mha_config_packed(cfg)) {
        add_proj(ks, E, E, Dq + 2 * Dkv, jit); /* self-attention: q | k | v side by side */
        add_proj(ks, E, E, Dq, jit);
        add_proj(ks, E, E, 2 * Dkv, jit); /* value = key: k | v */
        add_proj(ks, E, E, Dkv, jit);
        add_proj(ks, Dq, Dq + 2 * Dkv, E, jit); /* out, after self-attention */
        add_proj(ks, E, E, MHA_PANEL, jit);     /* k and v into a tile of their own */
    } else {
        add_proj(ks, E, E, Dq, jit);
        add_proj(ks, cfg->kdim, cfg->kdim, Dkv, jit);
        add_proj(ks, cfg->vdim, cfg->vdim, Dkv, jit);
        add_proj(ks, cfg->kdim, cfg->kdim, MHA_PANEL, jit);
        add_proj(ks, cfg->vdim, cfg->vdim, MHA_PANEL, jit);
    }
    add_proj(ks, Dq, Dq, E, jit); /* out */
    if (ks->arena.code && !mha_jit_seal(&ks->arena)) { /* no executable memory: no JIT */
        ks->scores.jit = ks->pv.jit = ks->scores_wide.jit = ks->pv_wide.jit = NULL;
        for (int i = 0; i < ks->nproj; i++)
            ks->proj[i].jit = NULL;
        ks->njit = 0;
        mha_jit_arena_free(&ks->arena);
    }
    if (ks->scores.jit) /* no cache: the edges run the hand kernels */
        ks->edges = mha_edge_cache_create();
}

void mha_kernel_set_free(mha_kernel_set *ks)
{
    mha_edge_cache_free(ks->edges);
    ks->edges = NULL;
    mha_jit_arena_free(&ks->arena);
}

const mha_mm *mha_kernel_set_proj(const mha_kernel_set *ks, int64_t depth, int64_t ldx,
                                  int64_t ldc)
{
    for (int i = 0; i < ks->nproj; i++) {
        const mha_mm_shape *s = &ks->proj[i].s;
        if (s->depth == depth && s->ldx == ldx && s->ldc == ldc)
            return &ks->proj[i];
    }
    return NULL;
}

/* ---------------------------------------------------------------------------------------------- */
/* The layer's share                                                                              */

struct mha_layer_kernels {
    void *block;   /* one allocation for the four weights (calloc'd: zero pages until written) */
    float *packed; /* 64-byte aligned, inside block */
    mha_packed_w q, k, v, out;
    bool have[MHA_ISA_COUNT];
    mha_kernel_set jit[MHA_ISA_COUNT];   /* JIT code where possible */
    mha_kernel_set hand[MHA_ISA_COUNT];  /* the same calls on hand kernels only */
};

mha_status mha_layer_kernels_create(mha_layer *layer, mha_error *err)
{
    const mha_config *cfg = &layer->cfg;
    const int64_t E = cfg->embed_dim, hd = cfg->head_dim;
    const int64_t Dq = cfg->num_heads * hd, Dkv = cfg->num_kv_heads * hd;
    mha_layer_kernels *lk = calloc(1, sizeof *lk);
    if (!lk)
        return mha_fail(err, MHA_ERR_NOMEM, "layer", "out of memory creating a layer");
    lk->q = (mha_packed_w){NULL, Dq, E};
    lk->k = (mha_packed_w){NULL, Dkv, cfg->kdim};
    lk->v = (mha_packed_w){NULL, Dkv, cfg->vdim};
    lk->out = (mha_packed_w){NULL, E, Dq};
    mha_packed_w *all[4] = {&lk->q, &lk->k, &lk->v, &lk->out};
    int64_t total = 0;
    for (int i = 0; i < 4; i++)
        total += mha_packed_w_floats(all[i]->Nc, all[i]->K);
    /* calloc: zero, as the parameters start, page by page as first written (mha_layer.c) */
    lk->block = calloc(1, (size_t)total * sizeof(float) + 64);
    if (!lk->block) {
        free(lk);
        return mha_fail(err, MHA_ERR_NOMEM, "layer", "out of memory packing %lld weights",
                        (long long)total);
    }
    lk->packed = (float *)(((uintptr_t)lk->block + 63) & ~(uintptr_t)63);
    float *p = lk->packed;
    for (int i = 0; i < 4; i++) {
        all[i]->p = p;
        p += mha_packed_w_floats(all[i]->Nc, all[i]->K);
    }
    for (int isa = 0; isa < MHA_ISA_COUNT; isa++) {
        lk->have[isa] = mha_isa_usable((mha_isa)isa);
        if (!lk->have[isa])
            continue;
        mha_kernel_set_init(&lk->jit[isa], (mha_isa)isa, cfg, true);
        mha_kernel_set_init(&lk->hand[isa], (mha_isa)isa, cfg, false);
    }
    layer->kern = lk;
    return MHA_OK;
}

void mha_layer_kernels_free(mha_layer_kernels *lk)
{
    if (!lk)
        return;
    for (int isa = 0; isa < MHA_ISA_COUNT; isa++) {
        mha_kernel_set_free(&lk->jit[isa]);
        mha_kernel_set_free(&lk->hand[isa]);
    }
    free(lk->block);
    free(lk);
}

/* The panels to pack: up to four weights, each cut into its 64-column panels (one task each). */
typedef struct repack_job {
    const mha_packed_w *w[4];
    const float *src[4];
    int64_t first[5]; /* tasks before weight i; first[n] = all */
    int n;
} repack_job;

static void repack_task(void *arg, int64_t task, int slot)
{
    (void)slot;
    const repack_job *j = arg;
    int i = 0;
    while (task >= j->first[i + 1])
        i++;
    const mha_packed_w *pw = j->w[i];
    const int64_t c0 = (task - j->first[i]) * MHA_PANEL, K = pw->K;
    const int64_t n = pw->Nc - c0 < MHA_PANEL ? pw->Nc - c0 : MHA_PANEL;
    /* panel [K][64]: its column c is row c0 + c of W; columns past Nc zero. The transposes are
     * exact: the best ISA the CPU has (mha_pack_transposed falls back) gives the bits. */
    mha_pack_transposed(MHA_ISA_AVX512, pw->p + c0 * K, MHA_PANEL, j->src[i] + c0 * K, K, n, K,
                        MHA_PANEL);
}

void mha_layer_kernels_repack(mha_layer *layer, const char *name, mha_pool *pool)
{
    mha_layer_kernels *lk = layer->kern;
    const bool all = !name, in = all || !strcmp(name, "in_proj_weight");
    repack_job j = {.n = 0};
    if (in || !strcmp(name, "q_proj_weight"))
        j.w[j.n] = &lk->q, j.src[j.n++] = layer->w_q;
    if (in || !strcmp(name, "k_proj_weight"))
        j.w[j.n] = &lk->k, j.src[j.n++] = layer->w_k;
    if (in || !strcmp(name, "v_proj_weight"))
        j.w[j.n] = &lk->v, j.src[j.n++] = layer->w_v;
    if (all || !strcmp(name, "out_proj.weight"))
        j.w[j.n] = &lk->out, j.src[j.n++] = layer->w_out;
    for (int i = 0; i < j.n; i++)
        j.first[i + 1] = j.first[i] + (j.w[i]->Nc + MHA_PANEL - 1) / MHA_PANEL;
    mha_pool_run(pool, j.first[j.n], repack_task, &j);
}

const mha_kernel_set *mha_layer_kernel_set(const mha_layer *layer, mha_isa isa, bool jit)
{
    const mha_layer_kernels *lk = layer->kern;
    while (isa > MHA_ISA_PORTABLE && !lk->have[isa]) /* the plan never asks for more; be safe */
        isa = (mha_isa)(isa - 1);
    return jit ? &lk->jit[isa] : &lk->hand[isa];
}

const mha_packed_w *mha_layer_packed(const mha_layer *layer, char which)
{
    const mha_layer_kernels *lk = layer->kern;
    switch (which) {
    case 'q':
        return &lk->q;
    case 'k':
        return &lk->k;
    case 'v':
        return &lk->v;
    default:
        return &lk->out;
    }
}

/* ---------------------------------------------------------------------------------------------- */

const char *mha_kernels_describe(char *buf, size_t size)
{
    if (!buf || size == 0)
        return buf;
    const mha_isa isa = mha_isa_active();
    mha_isa best = MHA_ISA_PORTABLE;
    for (int i = MHA_ISA_COUNT - 1; i > 0; i--)
        if (mha_isa_usable((mha_isa)i)) {
            best = (mha_isa)i;
            break;
        }
    char cap[96] = "";
    if (isa != best)
        snprintf(cap, sizeof cap, " (capped by ATTND_ISA=%s; the CPU has %s)", mha_isa_name(isa),
                 mha_isa_name(best));
    const char *hand = isa == MHA_ISA_AVX512 ? "AVX-512" : "AVX2";
    if (isa == MHA_ISA_PORTABLE) {
        snprintf(buf, size, "kernels generic%s: cblas_sgemm for every GEMM, portable softmax", cap);
        return buf;
    }
    /* can this process run JIT code? one small kernel, generated and sealed */
    const char *why = NULL;
    const char *v = getenv("ATTND_JIT");
    if (v && (!strcmp(v, "0") || !strcmp(v, "off")))
        why = "ATTND_JIT=0";
    else if (!mha_jit_built())
        why = "built without libxsmm";
    else {
        mha_jit_arena arena = {0};
        const mha_mm_shape s = {8, 16, 8, 16, 8, 16, false};
        if (!mha_jit_add(&arena, isa, &s))
            why = "libxsmm's generator gave no kernel";
        else if (!mha_jit_seal(&arena))
            why = "no executable memory for JIT code";
        mha_jit_arena_free(&arena);
    }
    if (why)
        snprintf(buf, size, "kernels %s%s: hand %s kernels for every GEMM (no JIT: %s); softmax %s",
                 mha_isa_name(isa), cap, hand, why, hand);
    else
        snprintf(buf, size,
                 "kernels %s%s: JIT code from libxsmm's generator for the full tiles (attention "
                 "64 rows x %s keys, projections 64 x 64 x %lld deep) and for the attention's "
                 "edge tiles as passes meet them, hand %s kernels for the rest; softmax %s",
                 mha_isa_name(isa), cap,
                 isa == MHA_ISA_AVX512 ? "256 (128 past head_dim 128)" : "128",
                 (long long)mha_proj_depth(isa), hand, hand);
    return buf;
}
