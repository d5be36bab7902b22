/*
 * mha_edge_kernels.c - the attention's JIT kernels for a pass's edge tiles: the last row block's
 * rows (L mod 64) and the last key block's keys (S mod BN), made the first time a pass has that
 * shape and kept with the layer's kernel set.
 *
 * A layer's kernel set holds JIT code for full tiles only (64 rows x BN keys), made when the layer
 * is: the edges' shapes depend on each pass's L and S. Without this cache they ran the hand kernel,
 * which on short inputs is every tile of the pass: S (L = S = 32, hd 16) spent 2.8 us of its 15.8
 * in the hand kernel's scores and P·V, where libxsmm's code for the same shapes takes 2.4 (Zen 4,
 * one core: 32 x 32 x 16 in 0.342 against 0.307 us, 32 x 16 x 32 in 0.357 against 0.288).
 *
 * Only where the JIT code gives the hand kernel's bits, so that no output depends on whether the
 * JIT ran (test_engine_kernels): each kernel is run once when it is made, beside the hand kernel,
 * on the same made-up operands, and kept only when every bit agrees. libxsmm's AVX2 code agreed on
 * every shape tried; its AVX-512 code does not where it has few accumulators (one vector of 16
 * columns and up to 8 rows, 5 vectors and 1 row: it splits the sum over depth to hide the FMA's
 * latency), nor where the columns are not a multiple of 16 (a masked last vector summed in
 * another order). A shape it does not keep runs the hand kernel.
 *
 * At most MHA_EDGE_SHAPES shapes per kernel set, the first ones passes ask for; then the hand
 * kernels: a client sending ever new lengths costs a bounded amount of code (a few KiB to a few
 * tens of KiB a shape) and of time, once a shape: making and checking its two kernels took
 * 0.03-0.7 ms on Zen 4 (libxsmm unrolls the depth: longest for 255 keys), under the cache's
 * lock, which passes whose shapes are made do not take. Readers take no lock: an entry is written
 * whole, its code sealed, before the count that shows it is published (release; readers
 * acquire).
 */
#include "mha_core.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#define MHA_EDGE_SHAPES 32

typedef struct edge_entry {
    int64_t m, n;      /* rows, keys                                                     */
    mha_mm scores, pv; /* the hand kernel's shape and strides; jit NULL: none was made    */
    mha_jit_arena arena;
} edge_entry;

struct mha_edge_cache {
    pthread_mutex_t lock; /* writers */
    atomic_int count;     /* entries [0, count) are complete */
    edge_entry e[MHA_EDGE_SHAPES];
};

mha_edge_cache *mha_edge_cache_create(void)
{
    mha_edge_cache *c = calloc(1, sizeof *c);
    if (!c)
        return NULL;
    pthread_mutex_init(&c->lock, NULL);
    atomic_init(&c->count, 0);
    return c;
}

void mha_edge_cache_free(mha_edge_cache *c)
{
    if (!c)
        return;
    const int n = atomic_load_explicit(&c->count, memory_order_acquire);
    for (int i = 0; i < n; i++)
        mha_jit_arena_free(&c->e[i].arena);
    pthread_mutex_destroy(&c->lock);
    free(c);
}

static const edge_entry *find(const mha_edge_cache *c, int n_entries, int64_t m, int64_t n)
{
    for (int i = 0; i < n_entries; i++)
        if (c->e[i].m == m && c->e[i].n == n)
            return &c->e[i];
    return NULL;
}

/* rows x cols made-up values at row stride ld: every mantissa bit in use, both signs, magnitudes
 * 2^-6 to 2^6 (a sum taken in another order rounds differently in most outputs). */
static void fill(float *x, int64_t rows, int64_t cols, int64_t ld, uint32_t *seed)
{
    for (int64_t r = 0; r < rows; r++)
        for (int64_t c = 0; c < cols; c++) {
            *seed = *seed * 1664525u + 1013904223u;
            const uint32_t bits = (*seed & 0x807fffffu) | (121u + (*seed >> 8) % 13u) << 23;
            memcpy(&x[r * ld + c], &bits, sizeof bits);
        }
}

/* Whether fn, JIT code for mm's shape, gives the hand kernel's bits on made-up operands: W once,
 * X and C anew each round until 4096 outputs are compared, at least 64 rounds for the smallest (a
 * tile of 2 x 1 agreed by chance on one round of 1 in 30 shapes tried). */
static bool keeps_bits(const mha_mm *mm, mha_jit_fn fn)
{
    const mha_mm_shape *s = &mm->s;
    const int64_t nx = s->rows * s->ldx, nw = s->depth * s->ldw, nc = s->rows * s->ldc;
    float *buf = calloc((size_t)(nx + nw + 2 * nc), sizeof(float));
    if (!buf)
        return false;
    float *x = buf, *w = x + nx, *c1 = w + nw, *c2 = c1 + nc;
    const int64_t outs = s->rows * s->cols;
    const int64_t rounds = outs >= 4096 ? 1 : outs >= 64 ? (4096 + outs - 1) / outs : 64;
    uint32_t seed = 12345;
    fill(w, s->depth, s->cols, s->ldw, &seed);
    bool same = true;
    for (int64_t r = 0; r < rounds && same; r++) {
        fill(x, s->rows, s->depth, s->ldx, &seed);
        fill(c1, s->rows, s->cols, s->ldc, &seed);
        memcpy(c2, c1, (size_t)nc * sizeof(float));
        fn(w, x, c1);
        mha_jit_leave();
        mha_gemm_isa(mm->isa, c2, s->ldc, x, s->ldx, w, s->ldw, s->rows, s->cols, s->depth,
                     s->acc);
        same = !memcmp(c1, c2, (size_t)nc * sizeof(float));
    }
    free(buf);
    return same;
}

/* Entry e made for (m, n): the scores' and P·V's shapes as mha_attention.c calls the hand kernel
 * (sc [m][n] at row stride BN from qt [m][hd] and Kᵀ at row stride BN; O [m][hd] += P (row stride
 * BN) · V [n][hd]), with JIT code where the full tiles have it and it keeps the hand kernel's
 * bits. */
static void make(edge_entry *e, const mha_kernel_set *ks, int64_t m, int64_t n)
{
    const int64_t BN = ks->BN, hd = ks->scores.s.depth;
    *e = (edge_entry){.m = m, .n = n};
    e->scores = (mha_mm){{m, n, hd, BN, hd, BN, false}, ks->isa, NULL};
    e->pv = (mha_mm){{m, hd, n, hd, BN, hd, true}, ks->isa, NULL};
    mha_jit_fn fs = ks->scores.jit ? mha_jit_add(&e->arena, ks->isa, &e->scores.s) : NULL;
    mha_jit_fn fp = ks->pv.jit ? mha_jit_add(&e->arena, ks->isa, &e->pv.s) : NULL;
    if ((fs || fp) && mha_jit_seal(&e->arena)) {
        e->scores.jit = fs && keeps_bits(&e->scores, fs) ? fs : NULL;
        e->pv.jit = fp && keeps_bits(&e->pv, fp) ? fp : NULL;
    }
    if (!e->scores.jit && !e->pv.jit)
        mha_jit_arena_free(&e->arena);
}

void mha_kernel_set_edge(const mha_kernel_set *ks, int64_t m, int64_t n, const mha_mm **scores,
                         const mha_mm **pv)
{
    *scores = *pv = NULL;
    mha_edge_cache *c = ks->edges;
    if (!c || m < 1 || n < 1)
        return;
    const edge_entry *e = find(c, atomic_load_explicit(&c->count, memory_order_acquire), m, n);
    if (!e) {
        pthread_mutex_lock(&c->lock);
        const int have = atomic_load_explicit(&c->count, memory_order_relaxed);
        e = find(c, have, m, n); /* made meanwhile by another pass */
        if (!e && have < MHA_EDGE_SHAPES) {
            make(&c->e[have], ks, m, n);
            e = &c->e[have];
            atomic_store_explicit(&c->count, have + 1, memory_order_release);
        }
        pthread_mutex_unlock(&c->lock);
    }
    if (e) {
        *scores = e->scores.jit ? &e->scores : NULL;
        *pv = e->pv.jit ? &e->pv : NULL;
    }
}
