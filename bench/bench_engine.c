/*
 * bench_engine.c - times the engine's forward pass on the shapes (self-attention)
 * with and without per-head weights, on 1 and 2 threads, next to a square sgemm and the CPU's FMA
 * peak measured in the same run (the machine is shared: only same-run ratios mean much) and, when
 * given, torch's times.
 *
 *   build/bench/bench_engine [--shapes S,M,L,XL,...] [--threads 1,2] [--min-time SEC]
 *                            [--torch FILE] [--layout bf|sf]
 *   build/bench/bench_engine --core      (prints OpenBLAS's core name and exits; bench/run.sh uses it)
 *   build/bench/bench_engine --core-fix  (prints the OPENBLAS_CORETYPE to set when this OpenBLAS
 *                                         does not know the CPU and chose a core without its AVX2 or
 *                                         AVX-512 by itself, else nothing; bench/compare.py uses it)
 *   build/bench/bench_engine --serve     (the engine as a contender of bench/compare.py: see serve())
 *
 * The attention of today's models (issue 13), next to the plain rows they are measured against:
 * L-rope, L-alibi (L with RoPE / ALiBi: the cost of the extension alone), L-causal and L-cwin
 * (is_causal, then with a window of 512 = L that masks nothing more: the window's bookkeeping
 * alone); the same for XL (XL-cwin: window 2048), and XL-w128 (causal, window 128: the keys the
 * window masks are skipped). XLa-causal and XLa-w128 are XL's attention alone: E=16 with H=16
 * heads of head_dim 64, so the projections are ~1% of the work and the window's skipping shows
 * undiluted; XLa, XLa-4k and XLa-16k (not run by default) the same without a mask at L = S = 2048,
 * 4096 and 16384: the core's speed against the length, without the projections. Llama (E=4096, H=32, num_kv_heads=8, head_dim=128, RoPE, causal,
 * N=1, L=S=2048) and Mistral (the same with window=512); Llama-mha (num_kv_heads=32, not run by
 * default) shows a GQA layer against its MHA twin. A row with a base (L-rope: L, Mistral: Llama,
 * ...) times the base's pass without weights in the same rounds, and "cpu vs base" is the median
 * over rounds of its CPU time (every thread's) over the base's: on a shared machine wall time swings
 * with the neighbours' load, while the engine's idle threads sleep, so CPU time is its work. Per-head
 * weights are timed only where they fit in 300 MB.
 *
 * S, M, L, XL are batch_first; Lseq8 is the L request's [8,512,768] query sent to a layer with
 * torch's default batch_first=false: L=8, N=512 (512·12 heads of 8x8 attention, the time in the
 * four projections); Mseq64 (N=64, L=64) sits between the two, also sequence-first ([L,N,E]
 * rows, so a batch's rows are strided). --layout bf|sf runs every shape batch-first / sequence-
 * first instead (the layout column says which ran).
 *
 * The first line says which OpenBLAS kernels ran (openblas_get_corename) and whether the CPU has
 * AVX-512: OPENBLAS_CORETYPE can pin a core older than the CPU, which slows every GEMM.
 *
 * FILE holds lines "shape mode threads ms" (bench/torch_time.py writes them); mode is nw0
 * (need_weights off) or nw1 (per-head weights). GFLOP/s and %peak count the work done: the
 * projections (mha_flops) and 4·hd per (query, key) pair the masks of is_causal and the window
 * allow (8NLE² + 4NLSE for the plain rows); %peak is that work per CPU-second of the pass's threads
 * over one thread's FMA peak (12 or 16 independent FMA chains, AVX-512 where the CPU has it, per
 * CPU-second of its own), so that neighbours on a shared machine do not move it.
 *
 * The attention core's own time (--serve) is taken without a hook in lib/: this program is linked
 * with -Wl,--wrap=mha_pool_run,--wrap=mha_pool_run_limit (Makefile), so each parallel phase
 * mha_forward starts passes through the wrappers below, which time it. Every phase that is not a
 * projection (its tasks are mha_proj_task) is the core: RoPE's tables and rotation, key packing,
 * the attention. (By position, first and last, a RoPE pass's table phase came before its
 * in-projection, which was then counted as core.) Where the in-projection packs the keys and
 * values and rotates q and k itself (mha_proj_then), that work is in the in-projection's time.
 */
#include "mha.h"
#include "mha_core.h" /* mha_proj_task: the phases that are projections */

#include <cblas.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <sys/mman.h>

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#define HAVE_X86 1
#endif

typedef struct shape {
    const char *name;
    int64_t N, L, E, H;
    bool batch_first; /* the layer's setting (inputs [N,L,E], else [L,N,E]) */
    /* issue 13: head_dim (0: E/H), num_kv_heads (0: H), rope theta (0: none), alibi, window (0:
     * none), is_causal; by_default: in the default list */
    int64_t hd, Hkv;
    double rope;
    bool alibi;
    int64_t window;
    bool causal, by_default;
    const char *base; /* NULL, or the row this one is timed against in the same rounds */
} shape;

static const shape shapes[] = {
    {"S", 1, 32, 64, 4, true, .by_default = true},
    {"M", 1, 128, 512, 8, true, .by_default = true},
    {"L", 8, 512, 768, 12, true, .by_default = true},
    {"XL", 1, 2048, 1024, 16, true, .by_default = true},
    {"Lseq8", 512, 8, 768, 12, false, .by_default = true},
    {"Mseq64", 64, 64, 768, 12, false, .by_default = true},
    {"L-rope", 8, 512, 768, 12, true, .rope = 10000, .by_default = true, .base = "L"},
    {"L-alibi", 8, 512, 768, 12, true, .alibi = true, .by_default = true, .base = "L"},
    {"L-causal", 8, 512, 768, 12, true, .causal = true, .by_default = true, .base = "L"},
    {"L-cwin", 8, 512, 768, 12, true, .causal = true, .window = 512, .by_default = true,
     .base = "L-causal"},
    {"XL-rope", 1, 2048, 1024, 16, true, .rope = 10000, .by_default = true, .base = "XL"},
    {"XL-alibi", 1, 2048, 1024, 16, true, .alibi = true, .by_default = true, .base = "XL"},
    {"XL-causal", 1, 2048, 1024, 16, true, .causal = true, .by_default = true, .base = "XL"},
    {"XL-cwin", 1, 2048, 1024, 16, true, .causal = true, .window = 2048, .by_default = true,
     .base = "XL-causal"},
    {"XL-w128", 1, 2048, 1024, 16, true, .causal = true, .window = 128, .by_default = true,
     .base = "XL-causal"},
    {"XLa-causal", 1, 2048, 16, 16, true, .hd = 64, .causal = true, .by_default = true},
    {"XLa-w128", 1, 2048, 16, 16, true, .hd = 64, .causal = true, .window = 128,
     .by_default = true, .base = "XLa-causal"},
    {"XLa", 1, 2048, 16, 16, true, .hd = 64},
    {"XLa-4k", 1, 4096, 16, 16, true, .hd = 64},
    {"XLa-16k", 1, 16384, 16, 16, true, .hd = 64},
    {"Llama", 1, 2048, 4096, 32, true, .hd = 128, .Hkv = 8, .rope = 10000, .causal = true,
     .by_default = true},
    {"Mistral", 1, 2048, 4096, 32, true, .hd = 128, .Hkv = 8, .rope = 10000, .causal = true,
     .window = 512, .by_default = true, .base = "Llama"},
    {"Llama-mha", 1, 2048, 4096, 32, true, .hd = 128, .Hkv = 32, .rope = 10000, .causal = true,
     .base = "Llama"},
};

static const shape *shape_named(const char *name)
{
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++)
        if (!strcmp(shapes[s].name, name))
            return &shapes[s];
    return NULL;
}

static void config_of(mha_config *cfg, const shape *sh, bool bf)
{
    mha_config_init(cfg, sh->E, sh->H);
    cfg->batch_first = bf;
    cfg->head_dim = sh->hd;
    cfg->num_kv_heads = sh->Hkv;
    cfg->rope = sh->rope > 0;
    cfg->rope_theta = sh->rope;
    cfg->alibi = sh->alibi;
    cfg->window = sh->window;
}

/* (query, key) pairs of one batch the rules allow (default positions: query i, key j). */
static double allowed_pairs(const shape *sh)
{
    if (!sh->causal && !sh->window)
        return (double)sh->L * (double)sh->L;
    double pairs = 0;
    for (int64_t i = 0; i < sh->L; i++) {
        int64_t lo = sh->window ? i - sh->window + 1 : 0;
        int64_t hi = sh->causal ? i : sh->window ? i + sh->window - 1 : sh->L - 1;
        lo = lo < 0 ? 0 : lo;
        hi = hi > sh->L - 1 ? sh->L - 1 : hi;
        pairs += (double)(hi - lo + 1);
    }
    return pairs;
}

/* FLOPs of the work a pass does: projections, and 4·hd per allowed (query, key) pair. */
static double work_flops(const mha_config *cfg, const shape *sh)
{
    const double hd = (double)mha_config_head_dim(cfg), H = (double)cfg->num_heads;
    const double dense = 4.0 * (double)sh->N * (double)sh->L * (double)sh->L * hd * H;
    return mha_flops(cfg, sh->N, sh->L, sh->L) - dense +
           4.0 * (double)sh->N * allowed_pairs(sh) * hd * H;
}

/* ---------------------------------------------------------------------------------------------- */
/* FMA peak: independent chains of vector FMAs per thread, in registers */

#ifdef HAVE_X86
__attribute__((target("avx512f"))) static double fma_loop_avx512(int64_t iters)
{
    __m512 acc[16];
    const __m512 a = _mm512_set1_ps(0.999f), b = _mm512_set1_ps(1e-7f);
    for (int i = 0; i < 16; i++)
        acc[i] = _mm512_set1_ps((float)i);
    for (int64_t n = 0; n < iters; n++)
#pragma GCC unroll 16
        for (int i = 0; i < 16; i++)
            acc[i] = _mm512_fmadd_ps(acc[i], a, b);
    __m512 s = acc[0];
    for (int i = 1; i < 16; i++)
        s = _mm512_add_ps(s, acc[i]);
    return 16.0 * 16.0 * 2.0 * (double)iters + 0.0 * _mm512_reduce_add_ps(s); /* FLOPs */
}

/* 12 chains, not 16: with a and b, 16 would need 18 of the 16 ymm registers, and the spills
 * halved the figure on Zen 3 (53 GFLOP/s against fma_peak's 101) */
__attribute__((target("avx2,fma"))) static double fma_loop_avx2(int64_t iters)
{
    __m256 acc[12];
    const __m256 a = _mm256_set1_ps(0.999f), b = _mm256_set1_ps(1e-7f);
    for (int i = 0; i < 12; i++)
        acc[i] = _mm256_set1_ps((float)i);
    for (int64_t n = 0; n < iters; n++)
#pragma GCC unroll 12
        for (int i = 0; i < 12; i++)
            acc[i] = _mm256_fmadd_ps(acc[i], a, b);
    float out[8];
    __m256 s = acc[0];
    for (int i = 1; i < 12; i++)
        s = _mm256_add_ps(s, acc[i]);
    _mm256_storeu_ps(out, s);
    return 12.0 * 8.0 * 2.0 * (double)iters + 0.0 * out[0];
}
#endif

typedef struct peak_arg {
    double flops, seconds;
} peak_arg;

/* CPU seconds of the calling thread. */
static double thread_cpu_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static void *peak_thread(void *p)
{
    peak_arg *a = p;
    const int64_t iters = 4 << 20;
    double t0 = thread_cpu_now();
#ifdef HAVE_X86
    if (__builtin_cpu_supports("avx512f"))
        a->flops = fma_loop_avx512(iters);
    else if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma"))
        a->flops = fma_loop_avx2(iters);
    else
        a->flops = 0;
#else
    a->flops = 0;
#endif
    a->seconds = thread_cpu_now() - t0;
    return NULL;
}

/* FMA GFLOP/s of one thread per CPU-second it runs (its own CPU time: neighbours on a shared
 * machine take turns on the core, not FLOPs from a second it runs): the best of a few tries, 0
 * when unknown. A pass's %peak is its work per CPU-second of all its threads against this. */
static double fma_peak_gflops(void)
{
    double best = 0;
    for (int rep = 0; rep < 5; rep++) {
        peak_arg a = {0, 0};
        peak_thread(&a);
        double g = a.seconds > 0 ? a.flops / a.seconds / 1e9 : 0;
        best = g > best ? g : best;
    }
    return best;
}

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* CPU seconds the process has used, every thread counted. */
static double cpu_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* Seconds of one call of fn(ctx), from k back-to-back calls (k chosen so a sample lasts ~2 ms);
 * *cpu (may be NULL) gets the CPU seconds of one call. */
static double sample_cpu(void (*fn)(void *), void *ctx, int k, double *cpu)
{
    double t0 = now(), c0 = cpu_now();
    for (int i = 0; i < k; i++)
        fn(ctx);
    if (cpu)
        *cpu = (cpu_now() - c0) / k;
    return (now() - t0) / k;
}

static double sample(void (*fn)(void *), void *ctx, int k)
{
    return sample_cpu(fn, ctx, k, NULL);
}

/* Calls of fn that take about 2 ms (1 to 10000); *once: one call's seconds. */
static int calls_per_sample(void (*fn)(void *), void *ctx, double *once)
{
    double t = sample(fn, ctx, 1); /* also the warm-up */
    *once = t;
    int k = (int)(2e-3 / (t > 1e-7 ? t : 1e-7));
    return k < 1 ? 1 : k > 10000 ? 10000 : k;
}

/* A pass shorter than this is timed after this long of its own calls, untimed: right after the
 * anchor (a 1024^2 sgemm, 12 MiB) the core runs slower for more than 10 ms. On an Intel Emerald
 * Rapids VM, timed right after it, S's pass took 22-25 us and M's 2.7-3.4 ms, 4-36% longer than
 * the pass with weights timed after them, which made weights look cheaper than none; 2 ms of
 * settling did not remove it for M. A pass of 20 ms or more loses that while in its sample. */
#define SETTLE_FOR 20e-3

static double median(double *t, int n)
{
    qsort(t, (size_t)n, sizeof t[0], cmp_double);
    return t[n / 2];
}

/* ---------------------------------------------------------------------------------------------- */
/* The attention core's timer: wrappers around the pool's parallel-for (see the header) */

typedef void (*task_fn)(void *arg, int64_t task, int slot); /* lib/'s mha_task_fn */
void __real_mha_pool_run(mha_pool *pool, int64_t ntasks, task_fn fn, void *arg);
void __real_mha_pool_run_limit(mha_pool *pool, int64_t ntasks, task_fn fn, void *arg, int max);
void __wrap_mha_pool_run(mha_pool *pool, int64_t ntasks, task_fn fn, void *arg);
void __wrap_mha_pool_run_limit(mha_pool *pool, int64_t ntasks, task_fn fn, void *arg, int max);

typedef struct phase_log {
    int n, nproj; /* phases, and projection phases among them, since phase_log_reset */
    double core;  /* seconds of the phases that are not projections */
} phase_log;
static _Thread_local phase_log phases; /* the thread that calls mha_forward writes it */

static void phase_done(double t0, task_fn fn)
{
    const double dt = now() - t0;
    phases.n++;
    if (fn == mha_proj_task)
        phases.nproj++;
    else
        phases.core += dt;
}

void __wrap_mha_pool_run(mha_pool *pool, int64_t ntasks, task_fn fn, void *arg)
{
    double t0 = now();
    __real_mha_pool_run(pool, ntasks, fn, arg);
    phase_done(t0, fn);
}

void __wrap_mha_pool_run_limit(mha_pool *pool, int64_t ntasks, task_fn fn, void *arg, int max)
{
    double t0 = now();
    __real_mha_pool_run_limit(pool, ntasks, fn, arg, max);
    phase_done(t0, fn);
}

static void phase_log_reset(void)
{
    phases = (phase_log){0};
}

/* Seconds of the core in the one pass logged since phase_log_reset: every phase that is not a
 * projection (RoPE's tables and rotation, packing, attention); NAN when the pass did not log an
 * in- and an out-projection and something between. */
static double core_seconds(void)
{
    return phases.n >= 3 && phases.nproj >= 2 ? phases.core : NAN;
}
typedef struct sgemm_ctx {
    int n, threads;
    float *a, *b, *c;
} sgemm_ctx;

typedef struct half_arg {
    const sgemm_ctx *s;
    int row0, rows;
} half_arg;

static void *sgemm_rows(void *p)
{
    const half_arg *h = p;
    const sgemm_ctx *s = h->s;
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, h->rows, s->n, s->n, 1.0f,
                s->a + (size_t)h->row0 * s->n, s->n, s->b, s->n, 0.0f,
                s->c + (size_t)h->row0 * s->n, s->n);
    return NULL;
}

/* The anchor: a square n x n sgemm, split in row halves over 2 threads the way the engine splits
 * its GEMMs (OpenBLAS itself single-threaded). */
static void sgemm_once(void *p)
{
    sgemm_ctx *s = p;
    if (s->threads == 1) {
        half_arg h = {s, 0, s->n};
        sgemm_rows(&h);
        return;
    }
    pthread_t th;
    half_arg h1 = {s, 0, s->n / 2}, h2 = {s, s->n / 2, s->n - s->n / 2};
    pthread_create(&th, NULL, sgemm_rows, &h2);
    sgemm_rows(&h1);
    pthread_join(th, NULL);
}

typedef struct fwd_ctx {
    const mha_layer *layer;
    mha_inputs in;
    mha_plan plan;
    float *out, *weights;
    mha_pool *pool;
} fwd_ctx;

static void forward_once(void *p)
{
    fwd_ctx *f = p;
    mha_error err;
    if (mha_forward(f->layer, &f->in, &f->plan, f->out, f->weights, NULL, f->pool, &err) !=
        MHA_OK) {
        fprintf(stderr, "forward failed: %s\n", err.message);
        exit(1);
    }
}

static float *random_array(int64_t n, uint64_t seed)
{
    float *x = malloc((size_t)n * sizeof(float));
    for (int64_t i = 0; i < n; i++) {
        seed = seed * 6364136223846793005ull + 1442695040888963407ull;
        x[i] = (float)((double)(seed >> 40) / (double)(1 << 24) * 2.0 - 1.0);
    }
    return x;
}

/* torch's time for (shape, mode, threads) from the file, or NAN. */
static double torch_ms(const char *file, const char *shape_name, const char *mode, int threads)
{
    if (!file)
        return NAN;
    FILE *fp = fopen(file, "r");
    if (!fp)
        return NAN;
    char s[16], m[16];
    int t;
    double ms, found = NAN;
    while (fscanf(fp, "%15s %15s %d %lf", s, m, &t, &ms) == 4) {
        if (!strcmp(s, shape_name) && !strcmp(m, mode) && t == threads)
            found = ms;
    }
    fclose(fp);
    return found;
}

static bool in_list(const char *list, const char *item)
{
    size_t n = strlen(item);
    for (const char *p = list; p && *p;) {
        const char *end = strchr(p, ',');
        size_t len = end ? (size_t)(end - p) : strlen(p);
        if (len == n && !strncmp(p, item, n))
            return true;
        p = end ? end + 1 : NULL;
    }
    return false;
}

/* count zeroed floats (free() releases them), or exits: a bench tool. Allocated as the daemon
 * does (server/api/forward.c): 64-byte aligned, and from 4 MB on 2 MB aligned with a huge-page hint. */
static float *zeroed_floats(int64_t count)
{
    const size_t bytes = (size_t)(count > 0 ? count : 1) * sizeof(float);
    const size_t huge = (size_t)2 << 20;
    void *p = NULL;
    if (posix_memalign(&p, bytes >= 2 * huge ? huge : 64, bytes) != 0) {
        fprintf(stderr, "out of memory\n");
        exit(1);
    }
#ifdef MADV_HUGEPAGE
    if (bytes >= 2 * huge)
        madvise(p, bytes / huge * huge, MADV_HUGEPAGE);
#endif
    memset(p, 0, bytes);
    return p;
}

/* ---------------------------------------------------------------------------------------------- */
/* --serve: the engine as a contender of bench/compare.py                                         */

/* count 4-byte words (float32 or int32) of DIR/name into a new array (free() it), or NULL with a
 * message in why. */
static void *read_words(const char *dir, const char *name, int64_t count, char *why, size_t wl)
{
    char path[1024];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    FILE *fp = fopen(path, "rb");
    float *x = fp ? malloc((size_t)(count > 0 ? count : 1) * sizeof(float)) : NULL;
    if (!fp || !x || fread(x, sizeof(float), (size_t)count, fp) != (size_t)count) {
        snprintf(why, wl, "cannot read %lld floats from %s", (long long)count, path);
        free(x);
        x = NULL;
    }
    if (fp)
        fclose(fp);
    return x;
}

/* Size of DIR/name in 4-byte words, -1 when it cannot be opened. */
static int64_t file_words(const char *dir, const char *name)
{
    char path[1024];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    FILE *fp = fopen(path, "rb");
    if (!fp)
        return -1;
    fseek(fp, 0, SEEK_END);
    long n = ftell(fp);
    fclose(fp);
    return n / 4;
}

typedef struct served {
    char dir[1024];
    int64_t N, L, E, H;
    mha_layer *layer;
    float *x;     /* [N,L,E]                                            */
    int32_t *rows; /* [R] flat rows checked against torch                */
    float *y;     /* [R,E] torch's output on them                       */
    float *w;     /* [L,L] torch's weights, batch 0 head 0, or NULL     */
    int64_t R;
    fwd_ctx f[2][2]; /* [mode][threads-1], planned and allocated on first use */
    int k[2][2];
    char check[2][2][128];
} served;

static void served_free(served *sv)
{
    for (int m = 0; m < 2; m++)
        for (int t = 0; t < 2; t++) {
            free(sv->f[m][t].out);
            free(sv->f[m][t].weights);
        }
    mha_layer_free(sv->layer);
    free(sv->x);
    free(sv->rows);
    free(sv->y);
    free(sv->w);
    memset(sv, 0, sizeof *sv);
}

/* load DIR N L E H: the layer and x of bench/peer_models.py. Prints the reply. */
static void serve_load(served *sv, const char *dir, int64_t N, int64_t L, int64_t E, int64_t H)
{
    served_free(sv);
    snprintf(sv->dir, sizeof sv->dir, "%s", dir);
    sv->N = N, sv->L = L, sv->E = E, sv->H = H;
    char why[1200] = "";
    mha_config cfg;
    mha_config_init(&cfg, E, H);
    cfg.batch_first = true;
    mha_error err;
    sv->layer = mha_layer_create(&cfg, NULL, &err);
    if (!sv->layer) {
        printf("{\"error\": \"layer: %s\"}\n", err.message);
        return;
    }
    if (!strcmp(dir, "-")) { /* no torch to make the files: a seeded layer and x, unchecked */
        if (mha_layer_init(sv->layer, "xavier_uniform", 0, &err) != MHA_OK) {
            printf("{\"error\": \"init: %s\"}\n", err.message);
            served_free(sv);
            return;
        }
        sv->x = random_array(N * L * E, 7);
        printf("{\"ok\": true}\n");
        return;
    }
    static const struct {
        const char *param, *file;
        int ndim;
        int64_t rows_per_E, cols_per_E; /* shape in units of E (cols 0: 1-D) */
    } params[] = {{"in_proj_weight", "w_in.f32", 2, 3, 1},
                  {"in_proj_bias", "b_in.f32", 1, 3, 0},
                  {"out_proj.weight", "w_out.f32", 2, 1, 1},
                  {"out_proj.bias", "b_out.f32", 1, 1, 0}};
    for (size_t i = 0; i < sizeof params / sizeof params[0]; i++) {
        int64_t dims[2] = {params[i].rows_per_E * E, params[i].cols_per_E * E};
        float *p = read_words(dir, params[i].file, dims[0] * (params[i].ndim == 2 ? dims[1] : 1),
                              why, sizeof why);
        mha_status st = p ? mha_layer_set_param(sv->layer, params[i].param, p, params[i].ndim,
                                                 dims, &err)
                          : MHA_ERR_ARG;
        free(p);
        if (st != MHA_OK) {
            printf("{\"error\": \"%s\"}\n", p ? err.message : why);
            served_free(sv);
            return;
        }
    }
    sv->R = file_words(dir, "rows.i32");
    sv->x = read_words(dir, "x.f32", N * L * E, why, sizeof why);
    sv->rows = sv->x && sv->R > 0 ? read_words(dir, "rows.i32", sv->R, why, sizeof why)
                                  : NULL;
    sv->y = sv->rows ? read_words(dir, "y.f32", sv->R * E, why, sizeof why) : NULL;
    if (!sv->y) {
        printf("{\"error\": \"%s\"}\n", why[0] ? why : "no rows.i32");
        served_free(sv);
        return;
    }
    if (file_words(dir, "w.f32") == L * L)
        sv->w = read_words(dir, "w.f32", L * L, why, sizeof why);
    printf("{\"ok\": true}\n");
}

/* The pass of (mode, threads), planned, allocated and checked against torch on first use; NULL
 * with the reason in why when it cannot run. */
static fwd_ctx *served_pass(served *sv, int mode, int t, mha_pool *pool, char *why, size_t wl)
{
    fwd_ctx *f = &sv->f[mode][t - 1];
    if (f->out)
        return f;
    *f = (fwd_ctx){.layer = sv->layer, .pool = pool};
    f->in.query = (mha_tensor){sv->x, 3, {sv->N, sv->L, sv->E}};
    f->in.need_weights = mode == 1;
    f->in.average_attn_weights = false;
    mha_error err;
    if (mha_plan_forward(sv->layer, &f->in, NULL, &f->plan, &err) != MHA_OK) {
        snprintf(why, wl, "plan: %s", err.message);
        return NULL;
    }
    f->out = zeroed_floats(f->plan.out_count);
    f->weights = mode ? zeroed_floats(f->plan.weights_count) : NULL;
    forward_once(f);
    double dy = 0, dw = 0;
    for (int64_t i = 0; i < sv->R; i++)
        for (int64_t j = 0; j < sv->E; j++)
            dy = fmax(dy, fabs(f->out[(int64_t)sv->rows[i] * sv->E + j] - sv->y[i * sv->E + j]));
    if (mode && sv->w) /* [N,H,L,S]: batch 0, head 0 first */
        for (int64_t i = 0; i < sv->L * sv->L; i++)
            dw = fmax(dw, fabs(f->weights[i] - sv->w[i]));
    if (sv->R == 0)
        snprintf(sv->check[mode][t - 1], sizeof sv->check[0][0], "{}");
    else if (mode && sv->w)
        snprintf(sv->check[mode][t - 1], sizeof sv->check[0][0], "{\"y\": %.3g, \"w\": %.3g}", dy,
                 dw);
    else
        snprintf(sv->check[mode][t - 1], sizeof sv->check[0][0], "{\"y\": %.3g}", dy);
    double t0 = now();
    forward_once(f);
    double once = now() - t0;
    int k = (int)(0.05 / (once > 1e-7 ? once : 1e-7) + 0.5);
    sv->k[mode][t - 1] = k < 1 ? 1 : k > 10000 ? 10000 : k;
    return f;
}

static void print_list(const char *name, const double *v, int n)
{
    printf("\"%s\": [", name);
    for (int i = 0; i < n; i++)
        printf("%s%.6g", i ? ", " : "", v[i]);
    printf("]");
}

/* time nw0|nw1|sgemm T SAMPLES. Prints the reply. */
static void serve_time(served *sv, const char *what, int t, int samples, mha_pool *pools[2],
                       sgemm_ctx *sg)
{
    enum { max_samples = 64 };
    double ms[max_samples], core[max_samples];
    samples = samples < 1 ? 1 : samples > max_samples ? max_samples : samples;
    if (t < 1 || t > 2) {
        printf("{\"error\": \"threads must be 1 or 2\"}\n");
        return;
    }
    if (!strcmp(what, "sgemm")) { /* OpenBLAS's own threads, as a user of OpenBLAS gets them */
        mha_blas_set_threads(t);
        sgemm_ctx one = *sg;
        one.threads = 1;
        sgemm_once(&one);
        for (int i = 0; i < samples; i++)
            ms[i] = sample(sgemm_once, &one, 5) * 1e3;
        mha_blas_set_threads(1);
        printf("{\"n\": %d, ", sg->n);
        print_list("ms", ms, samples);
        printf("}\n");
        return;
    }
    int mode = !strcmp(what, "nw1") ? 1 : !strcmp(what, "nw0") ? 0 : -1;
    if (mode < 0 || !sv->layer) {
        printf("{\"error\": \"%s\"}\n", sv->layer ? "mode must be nw0, nw1 or sgemm" : "no shape loaded");
        return;
    }
    char why[1200];
    fwd_ctx *f = served_pass(sv, mode, t, pools[t - 1], why, sizeof why);
    if (!f) {
        printf("{\"error\": \"%s\"}\n", why);
        return;
    }
    const int k = sv->k[mode][t - 1];
    for (int i = 0; i < samples; i++) {
        double c = 0, t0 = now();
        for (int j = 0; j < k; j++) {
            phase_log_reset();
            forward_once(f);
            c += core_seconds();
        }
        ms[i] = (now() - t0) * 1e3 / k;
        core[i] = c * 1e3 / k;
    }
    printf("{");
    print_list("ms", ms, samples);
    printf(", ");
    print_list("core_ms", core, samples);
    printf(", \"k\": %d, \"flops\": %.6g, \"workspace_bytes\": %zu, \"check\": %s}\n", k,
           f->plan.flops, f->plan.workspace_bytes, sv->check[mode][t - 1]);
}

/* Reads commands from stdin, one per line, and answers each with one JSON line on stdout:
 *   load DIR N L E H      the layer (torch's weights) and x [N,L,E] that bench/peer_models.py wrote
 *                         (DIR "-": a seeded layer and random x, nothing checked: no torch here)
 *   time MODE T SAMPLES   MODE nw0 | nw1 (per-head weights) on T = 1 or 2 threads: the first time,
 *                         the pass is checked against torch (max |diff| on the checked rows, and the
 *                         weights of batch 0, head 0) and k chosen so that a sample lasts ~50 ms;
 *                         answers {"ms": [...], "core_ms": [...], "k", "flops", "workspace_bytes",
 *                         "check"}: each sample the mean of k passes, core_ms the attention core's
 *                         share; MODE sgemm: a 1024² cblas_sgemm on T OpenBLAS threads ({"n", "ms"})
 *   quit                                                                                          */
static int serve(void)
{
    mha_blas_set_threads(1); /* the engine parallelises itself */
    mha_pool *pools[2] = {mha_pool_create(1, NULL), mha_pool_create(2, NULL)};
    sgemm_ctx sg = {1024, 1, random_array(1024 * 1024, 1), random_array(1024 * 1024, 2),
                    random_array(1024 * 1024, 3)};
    static served sv;
    char blas[256];
    printf("{\"ready\": true, \"blas\": \"%s\"}\n", mha_blas_describe(blas, sizeof blas));
    fflush(stdout);
    char line[8192];
    while (fgets(line, sizeof line, stdin)) {
        char cmd[16], arg[1024];
        long long a, b, c, d;
        int t, n;
        if (sscanf(line, "%15s", cmd) != 1 || !strcmp(cmd, "quit"))
            break;
        if (!strcmp(cmd, "load") &&
            sscanf(line, "%*s %1023s %lld %lld %lld %lld", arg, &a, &b, &c, &d) == 5)
            serve_load(&sv, arg, a, b, c, d);
        else if (!strcmp(cmd, "time") && sscanf(line, "%*s %15s %d %d", arg, &t, &n) == 3)
            serve_time(&sv, arg, t, n, pools, &sg);
        else
            printf("{\"error\": \"bad command\"}\n");
        fflush(stdout);
    }
    served_free(&sv);
    mha_pool_free(pools[0]);
    mha_pool_free(pools[1]);
    free(sg.a);
    free(sg.b);
    free(sg.c);
    return 0;
}

int main(int argc, char **argv)
{
    const char *shape_list = NULL, *thread_list = "1,2", *torch_file = NULL;
    int layout = -1; /* -1: each shape's own; 1 batch-first; 0 sequence-first */
    double min_time = 0.8;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--shapes") && i + 1 < argc)
            shape_list = argv[++i];
        else if (!strcmp(argv[i], "--threads") && i + 1 < argc)
            thread_list = argv[++i];
        else if (!strcmp(argv[i], "--min-time") && i + 1 < argc)
            min_time = atof(argv[++i]);
        else if (!strcmp(argv[i], "--torch") && i + 1 < argc)
            torch_file = argv[++i];
        else if (!strcmp(argv[i], "--layout") && i + 1 < argc &&
                 (!strcmp(argv[i + 1], "bf") || !strcmp(argv[i + 1], "sf")))
            layout = !strcmp(argv[++i], "bf");
        else if (!strcmp(argv[i], "--serve"))
            return serve();
        else if (!strcmp(argv[i], "--core")) {
            mha_blas_info bi;
            mha_blas_get_info(&bi);
            printf("%s\n", bi.core);
            return 0;
        } else if (!strcmp(argv[i], "--core-fix")) {
            mha_blas_info bi;
            mha_blas_get_info(&bi);
            if (bi.unknown_cpu)
                printf("%s\n", bi.cpu_avx512 ? "SkylakeX" : "Haswell");
            return 0;
        }
        else {
            fprintf(
                stderr,
                "usage: %s [--shapes S,M,L,XL,Lseq8,Mseq64,...] [--threads 1,2] [--min-time SEC] "
                "[--torch FILE] [--layout bf|sf] | --core | --core-fix | --serve\n",
                argv[0]);
            return 2;
        }
    }
    char default_list[512] = "";
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
        if (shapes[s].by_default) {
            strcat(default_list, default_list[0] ? "," : "");
            strcat(default_list, shapes[s].name);
        }
    }
    if (!shape_list)
        shape_list = default_list;

    mha_blas_set_threads(1); /* the engine (and the anchor) parallelise themselves */
    sgemm_ctx sg = {1024, 1, random_array(1024 * 1024, 1), random_array(1024 * 1024, 2),
                    random_array(1024 * 1024, 3)};
    char blas[256];
    printf("BLAS: %s\n", mha_blas_describe(blas, sizeof blas));
    const double peak = fma_peak_gflops();
    printf("FMA peak measured: %.1f GFLOP/s per thread (per CPU-second; %.0f for 2)\n", peak,
           2 * peak);
    printf(
        "Each cell: median over rounds that interleave a 1024^2 sgemm (the anchor, same threads),\n"
        "the pass without weights and the pass with per-head weights (a pass under 20 ms timed\n"
        "after 20 ms of its own calls, untimed: the core runs slower for a while after the anchor).\n\n");
    printf("%-10s %2s %2s %-4s %9s %8s %7s %6s %9s %7s %8s  %s\n", "shp", "lo", "t", "mode", "ms",
           "GFLOP/s", "%sgemm", "%peak", "torch ms", "x torch", "w cost", "cpu vs base (base ms)");

    /* Long-lived pools, as a server holds them (a pool also keeps scratch between passes). */
    mha_pool *pool1 = mha_pool_create(1, NULL), *pool2 = mha_pool_create(2, NULL);
    enum { max_rounds = 400 };
    static double t_anchor[max_rounds], t_mode[3][max_rounds], c_mode[3][max_rounds],
        ratio[max_rounds];
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
        const shape *sh = &shapes[s];
        if (!in_list(shape_list, sh->name))
            continue;
        const shape *base = sh->base ? shape_named(sh->base) : NULL;
        const bool bf = layout < 0 ? sh->batch_first : layout == 1;
        mha_config cfg, cfg_base;
        config_of(&cfg, sh, bf);
        const double flops = work_flops(&cfg, sh);
        /* per-head weights only where they fit in 300 MB */
        const int modes = (double)sh->N * sh->H * sh->L * sh->L * 4 <= 300e6 ? 2 : 1;
        mha_error err;
        mha_layer *layer = mha_layer_create(&cfg, NULL, &err), *layer_base = NULL;
        mha_layer_init(layer, "xavier_uniform", 0, &err);
        if (base) {
            config_of(&cfg_base, base, bf);
            layer_base = mha_layer_create(&cfg_base, NULL, &err);
            mha_layer_init(layer_base, "xavier_uniform", 0, &err);
        }
        float *x = random_array(sh->N * sh->L * sh->E, 7);
        for (int t = 1; t <= 2; t++) {
            char tn[4];
            snprintf(tn, sizeof tn, "%d", t);
            if (!in_list(thread_list, tn))
                continue;
            fwd_ctx f[3]; /* without weights, with per-head weights, the base without */
            int k[3];
            int settle[3] = {0, 0, 0}; /* untimed calls before each sample: SETTLE_FOR */
            const int passes = base ? 3 : modes;
            for (int mode = 0; mode < passes; mode++) {
                if (mode == 1 && modes < 2)
                    continue;
                const shape *ps = mode == 2 ? base : sh;
                f[mode] = (fwd_ctx){.layer = mode == 2 ? layer_base : layer,
                                    .pool = t == 2 ? pool2 : pool1};
                f[mode].in.query = bf ? (mha_tensor){x, 3, {sh->N, sh->L, sh->E}}
                                      : (mha_tensor){x, 3, {sh->L, sh->N, sh->E}};
                f[mode].in.need_weights = mode == 1;
                f[mode].in.average_attn_weights = false;
                f[mode].in.is_causal = ps->causal;
                if (mha_plan_forward(f[mode].layer, &f[mode].in, NULL, &f[mode].plan, &err) !=
                    MHA_OK) {
                    fprintf(stderr, "plan failed: %s\n", err.message);
                    return 1;
                }
                /* 64-byte aligned, as the daemon allocates them (streaming stores need it) */
                f[mode].out = zeroed_floats(f[mode].plan.out_count);
                f[mode].weights = mode == 1 ? zeroed_floats(f[mode].plan.weights_count) : NULL;
                double once;
                k[mode] = calls_per_sample(forward_once, &f[mode], &once);
                settle[mode] =
                    once < SETTLE_FOR ? (int)(SETTLE_FOR / (once > 1e-7 ? once : 1e-7)) + 1 : 0;
            }
            if (base) /* the same number of calls per sample, so their ratio is like for like */
                k[0] = k[2] = k[0] < k[2] ? k[0] : k[2];
            sg.threads = t;
            sgemm_once(&sg);
            int rounds = 0;
            double start = now();
            while (rounds < max_rounds && (rounds < 5 || now() - start < min_time)) {
                t_anchor[rounds] = sample(sgemm_once, &sg, 1);
                for (int mode = 0; mode < passes; mode++)
                    if (mode != 1 || modes == 2) {
                        if (settle[mode]) /* untimed: see SETTLE_FOR */
                            sample(forward_once, &f[mode], settle[mode]);
                        t_mode[mode][rounds] =
                            sample_cpu(forward_once, &f[mode], k[mode], &c_mode[mode][rounds]);
                    }
                if (base)
                    ratio[rounds] = c_mode[0][rounds] / c_mode[2][rounds];
                rounds++;
            }
            double anchor_gf = 2.0 * 1024 * 1024 * 1024 / median(t_anchor, rounds) / 1e9;
            double ms[2];
            for (int mode = 0; mode < modes; mode++) {
                ms[mode] = median(t_mode[mode], rounds) * 1e3;
                double gf = flops / ms[mode] / 1e6;
                /* work per CPU-second of the pass's threads, against one thread's peak */
                double cpu_gf = flops / median(c_mode[mode], rounds) / 1e9;
                const char *mname = mode ? "nw1" : "nw0";
                double tms = torch_ms(torch_file, sh->name, mname, t);
                char tcol[16] = "-", rcol[16] = "-", wcol[16] = "", bcol[48] = "";
                if (!isnan(tms)) {
                    snprintf(tcol, sizeof tcol, "%.3f", tms);
                    snprintf(rcol, sizeof rcol, "%.2f", tms / ms[mode]);
                }
                if (mode == 1)
                    snprintf(wcol, sizeof wcol, "%+.0f%%", (ms[1] / ms[0] - 1) * 100);
                if (mode == 0 && base)
                    snprintf(bcol, sizeof bcol, "%+.1f%% vs %s (%.3f)",
                             (median(ratio, rounds) - 1) * 100, base->name,
                             median(t_mode[2], rounds) * 1e3);

                printf("%-10s %2s %2d %-4s %9.3f %8.1f %6.0f%% %5.0f%% %9s %7s %8s  %s\n",
                       sh->name, bf ? "bf" : "sf", t, mname, ms[mode], gf, 100 * gf / anchor_gf,
                       peak > 0 ? 100 * cpu_gf / peak : 0.0, tcol, rcol, wcol, bcol);
            }
            for (int mode = 0; mode < passes; mode++) {
                if (mode == 1 && modes < 2)
                    continue;
                free(f[mode].out);
                free(f[mode].weights);
            }
            printf("%-10s %2s %2d %-4s %9s %8.1f  (%d rounds)\n", sh->name, bf ? "bf" : "sf", t,
                   "sgemm", "", anchor_gf, rounds);
            fflush(stdout);
        }
        free(x);
        mha_layer_free(layer);
        mha_layer_free(layer_base);
    }
    mha_pool_free(pool1);
    mha_pool_free(pool2);
    free(sg.a);
    free(sg.b);
    free(sg.c);
    printf(
        "\nlo = layout (bf batch_first [N,L,E], sf sequence-first [L,N,E]);\n"
        "nw0 = need_weights off, nw1 = per-head weights [N,H,L,S]; x torch = torch ms / ours;\n"
        "w cost = nw1 over nw0 at the same thread count; GFLOP/s and %%peak count the work done\n"
        "(masked keys of is_causal and window not counted); %%peak = the work per CPU-second of\n"
        "the pass's threads over one thread's FMA peak above (load on a shared machine aside);\n"
        "cpu vs base = median over rounds of this row's nw0 CPU time (all threads) over its base\n"
        "row's, run alternately: idle threads sleep, so CPU time is the work, whatever else runs.\n");
    return 0;
}
