/*
 * mha_proj.c - the projections of a pass: C[M][Nc] = bias + X[M][K] · Wᵀ, W packed once per layer
 * into panels Wᵀ [K][64] (mha_weights.c).
 *
 * A task is 64 rows x 256 columns (4 panels) of one job: the task's X rows (64 x K floats) stay in
 * L2 while its four panels stream past. Each 64 x 64 tile starts from the bias (torch's addmm: the
 * bias first) and takes X·Wᵀ in depth chunks (mha_proj_depth: 128 or 512), in order, from the
 * kernel set's full-tile call (JIT or hand); the last rows (M mod 64) and the last panel's columns
 * (Nc mod 64) run the hand kernel on their exact size. XL's in-projection is 384 tasks, its
 * out-projection 128: two threads finish within a task of each other, and no result depends on the
 * thread count.
 *
 * On AVX2 from a depth of 256 (mha_proj_packs) a task of 64 rows runs on copies: its X rows
 * copied to [64][K] in the thread's slot, each tile summed in a [64][64] of its own and then
 * written to C, so that the kernel's rows are not E floats apart (at E = 1024 they all fall in the
 * same cache sets).
 *
 * Measured (Zen 4, one core, before this file existed; /work notes): OpenBLAS 87-92% of the FMA
 * peak on these shapes, repacking W on every call; libxsmm's code on packed panels 96-100%.
 */
#include "mha_core.h"
#include "mha_pack.h"

#include <cblas.h>
#include <string.h>

void mha_proj_add(mha_proj_set *set, const float *X, int64_t M, int64_t ldx, const float *W,
                  const mha_packed_w *w, const float *bias, float *C, int64_t ldc)
{
    mha_proj_job *j = &set->job[set->n++];
    *j = (mha_proj_job){X, W, w, bias, C, M, ldx, ldc, set->ntasks, NULL, NULL, false, false};
    const int64_t rows = (M + MHA_PROJ_ROWS - 1) / MHA_PROJ_ROWS;
    const int64_t cols = (w->Nc + MHA_PROJ_COLS - 1) / MHA_PROJ_COLS;
    set->ntasks += rows * cols;
}

void mha_proj_then(mha_proj_set *set, mha_proj_epilogue fn, void *arg, bool keep_c)
{
    mha_proj_job *j = &set->job[set->n - 1];
    j->then = fn;
    j->then_arg = arg;
    j->no_c = !keep_c;
}

void mha_proj_then_groups(mha_proj_set *set, mha_proj_epilogue fn, void *arg)
{
    mha_proj_then(set, fn, arg, true);
    set->job[set->n - 1].groups = true;
}

void mha_proj_set_held(mha_proj_set *set, mha_proj_held *held, int threads)
{
    memset(held, 0, (size_t)threads * sizeof *held);
    set->held = held;
}

/* Asks for the cache lines of p[0, n) (n <= 0: none) into L2, to be written. */
static inline void prefetch_row(const float *p, int64_t n)
{
    for (int64_t c = 0; c < n; c += 16)
        __builtin_prefetch(p + c, 1, 2);
}

/* A finished panel block (rows [r0, r0+rows), columns [c0, c0+cols) of the job, at c, row stride
 * ldc) to the job's epilogue, when it takes blocks. */
static void then_block(const mha_proj_job *j, int64_t r0, int64_t rows, int64_t c0, int64_t cols,
                       float *c, int64_t ldc)
{
    if (j->then && !j->groups)
        j->then(j->then_arg, r0, rows, c0, cols, c, ldc);
}

/* A task's finished columns [g0, g1) of C's rows [r0, r0+rows) (C: the task's first row) to the
 * job's epilogue, when it takes whole groups (mha_proj_then_groups): they are in L2. */
static void then_group(const mha_proj_job *j, int64_t r0, int64_t rows, int64_t g0, int64_t g1,
                       float *C)
{
    if (j->then && j->groups)
        j->then(j->then_arg, r0, rows, g0, g1 - g0, C + g0, j->ldc);
}

/* rows rows of c (row stride ldc), cols columns each, set to bias[0, cols) (NULL: 0): torch's
 * addmm starts from the bias. Not inlined: where panel_sum's constant 64 columns reached
 * mha_copy_floats, GCC warned of an overflowing iteration in its (never run) tail loop. */
__attribute__((noinline)) static void bias_rows(float *c, int64_t ldc, const float *bias,
                                                int64_t rows, int64_t cols)
{
    for (int64_t r = 0; r < rows; r++) {
        if (bias)
            mha_copy_floats(c + r * ldc, bias, cols);
        else
            memset(c + r * ldc, 0, (size_t)cols * sizeof(float));
    }
}

/* c[rows][cols] = bias[0, cols) (NULL: 0) + x[rows][K] · panel[K][64]'s first cols columns, in
 * depth chunks of ks->kc in order: the full tile's call of the kernel set (JIT or hand) where there
 * is one for these strides, on c filled with the bias first, else the hand kernel on the exact
 * size, its accumulators started from the bias (the same bits, without the copy: a tenth of S's
 * pass). */
static void panel_sum(const mha_kernel_set *ks, float *c, int64_t ldc, const float *x, int64_t ldx,
                      const float *panel, int64_t rows, int64_t cols, int64_t K, const float *bias)
{
    for (int64_t k0 = 0; k0 < K; k0 += ks->kc) {
        const int64_t depth = K - k0 < ks->kc ? K - k0 : ks->kc;
        const mha_mm *mm = rows == MHA_PROJ_ROWS && cols == MHA_PANEL
                               ? mha_kernel_set_proj(ks, depth, ldx, ldc)
                               : NULL;
        if (mm) {
            if (k0 == 0)
                bias_rows(c, ldc, bias, rows, cols);
            mha_mm_run(mm, c, x + k0, panel + k0 * MHA_PANEL);
        } else if (k0 == 0) {
            mha_gemm_from_row_isa(ks->isa, c, ldc, x, ldx, panel, MHA_PANEL, rows, cols, depth,
                                  bias);
        } else {
            mha_gemm_isa(ks->isa, c, ldc, x + k0, ldx, panel + k0 * MHA_PANEL, MHA_PANEL, rows,
                         cols, depth, true);
        }
    }
}

/* A task of 64 rows on copies (mha_proj_packs): X's rows to xs [64][K], each panel's tile summed
 * in ct [64][64] from the bias as in place, then written to C. Tasks run row block by row block
 * (a row block's column groups are consecutive tasks), so a slot whose copy already holds these
 * rows (set->held) uses it again: XL's in-projection copied each row block 12 times. */
static void packed_task(const mha_proj_set *set, const mha_proj_job *j, int slot, const float *X,
                        float *C, int64_t r0, int64_t g0, int64_t g1)
{
    const int64_t K = j->w->K, R = MHA_PROJ_ROWS;
    float *xs = set->scratch + slot * set->slot_floats; /* [64][K]  */
    float *ct = xs + R * K;                             /* [64][64] */
    mha_proj_held *held = set->held ? &set->held[slot] : NULL;
    const bool copy = !held || held->job != j || held->x != X;
    /* Each tile's lines of C are asked for (into L2, a row at a time beside other work) while
     * the tile before is written, the first tile's while X is copied: written when the tile is
     * done, they missed every cache, a miss per line (this function was 5% of M's pass on Zen 3,
     * 3.7% with this). */
    for (int64_t r = 0; r < R; r++) {
        if (copy)
            memcpy(xs + r * K, X + r * j->ldx, (size_t)K * sizeof(float));
        if (!j->no_c)
            prefetch_row(C + r * j->ldc + g0, g1 - g0 < MHA_PANEL ? g1 - g0 : MHA_PANEL);
    }
    if (held)
        *held = (mha_proj_held){j, X};
    for (int64_t c0 = g0; c0 < g1; c0 += MHA_PANEL) {
        const int64_t cols = g1 - c0 < MHA_PANEL ? g1 - c0 : MHA_PANEL;
        const int64_t n0 = c0 + MHA_PANEL, ncols = g1 - n0 < MHA_PANEL ? g1 - n0 : MHA_PANEL;
        panel_sum(set->ks, ct, MHA_PANEL, xs, K, j->w->p + c0 * K, R, cols, K,
                  j->bias ? j->bias + c0 : NULL);
        then_block(j, r0, R, c0, cols, ct, MHA_PANEL); /* before the copy: it may change it */
        for (int64_t r = 0; r < R && !j->no_c; r++) {
            mha_copy_floats(C + r * j->ldc + c0, ct + r * MHA_PANEL, cols);
            prefetch_row(C + r * j->ldc + n0, ncols);
        }
    }
    then_group(j, r0, R, g0, g1, C);
}

/* A task whose job writes no C (mha_proj_job.no_c): each panel's block made in the slot's tile
 * ct [64][64] from the bias, as in place, and handed to the job's epilogue from there. */
static void tile_task(const mha_proj_set *set, const mha_proj_job *j, int slot, const float *X,
                      int64_t r0, int64_t rows, int64_t g0, int64_t g1)
{
    const mha_kernel_set *ks = set->ks;
    const int64_t K = j->w->K;
    float *ct = set->scratch + slot * set->slot_floats; /* [64][64] */
    for (int64_t c0 = g0; c0 < g1; c0 += MHA_PANEL) {
        const int64_t cols = g1 - c0 < MHA_PANEL ? g1 - c0 : MHA_PANEL;
        const float *bias = j->bias ? j->bias + c0 : NULL;
        if (ks->isa == MHA_ISA_PORTABLE) {
            bias_rows(ct, MHA_PANEL, bias, rows, cols);
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, (int)rows, (int)cols, (int)K, 1.0f,
                        X, (int)j->ldx, j->W + c0 * K, (int)K, 1.0f, ct, MHA_PANEL);
        } else {
            panel_sum(ks, ct, MHA_PANEL, X, j->ldx, j->w->p + c0 * K, rows, cols, K, bias);
        }
        then_block(j, r0, rows, c0, cols, ct, MHA_PANEL);
    }
}

void mha_proj_task(void *arg, int64_t task, int slot)
{
    const mha_proj_set *set = arg;
    if (mha_cancelled(set->cancel))
        return;
    const mha_proj_job *j = &set->job[0];
    for (int i = 1; i < set->n && task >= set->job[i].first_task; i++)
        j = &set->job[i];
    const int64_t t = task - j->first_task, K = j->w->K, Nc = j->w->Nc;
    const int64_t groups = (Nc + MHA_PROJ_COLS - 1) / MHA_PROJ_COLS;
    const int64_t r0 = t / groups * MHA_PROJ_ROWS, g0 = t % groups * MHA_PROJ_COLS;
    const int64_t rows = j->M - r0 < MHA_PROJ_ROWS ? j->M - r0 : MHA_PROJ_ROWS;
    const int64_t g1 = Nc - g0 < MHA_PROJ_COLS ? Nc : g0 + MHA_PROJ_COLS;
    const mha_kernel_set *ks = set->ks;
    const float *X = j->X + r0 * j->ldx;
    float *C = j->C + r0 * j->ldc;
    if (rows == MHA_PROJ_ROWS && mha_proj_packs(ks->isa, K)) {
        packed_task(set, j, slot, X, C, r0, g0, g1);
        return;
    }
    if (j->no_c) {
        tile_task(set, j, slot, X, r0, rows, g0, g1);
        return;
    }
    if (ks->isa == MHA_ISA_PORTABLE) { /* generic: one cblas call on the weights as given */
        bias_rows(C + g0, j->ldc, j->bias ? j->bias + g0 : NULL, rows, g1 - g0);
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, (int)rows, (int)(g1 - g0), (int)K,
                    1.0f, X, (int)j->ldx, j->W + g0 * K, (int)K, 1.0f, C + g0, (int)j->ldc);
        for (int64_t c0 = g0; c0 < g1; c0 += MHA_PANEL)
            then_block(j, r0, rows, c0, g1 - c0 < MHA_PANEL ? g1 - c0 : MHA_PANEL, C + c0, j->ldc);
        then_group(j, r0, rows, g0, g1, C);
        return;
    }
    for (int64_t c0 = g0; c0 < g1; c0 += MHA_PANEL) {
        const int64_t cols = g1 - c0 < MHA_PANEL ? g1 - c0 : MHA_PANEL;
        panel_sum(ks, C + c0, j->ldc, X, j->ldx, j->w->p + c0 * K, rows, cols, K,
                  j->bias ? j->bias + c0 : NULL);
        then_block(j, r0, rows, c0, cols, C + c0, j->ldc); /* while it is in L1 */
    }
    then_group(j, r0, rows, g0, g1, C);
}
