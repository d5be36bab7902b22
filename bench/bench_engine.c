/*
 * bench_engine.c - times the engine's forward pass on the shapes (self-attention, batch_first)
 * with and without per-head weights, on 1 and 2 threads, next to a square sgemm measured in the
 * same run (the machine is shared: only same-run ratios mean much) and, when given, torch's times.
 *
 *   build/bench/bench_engine [--shapes S,M,L,XL] [--threads 1,2] [--min-time 0.3] [--torch FILE]
 *
 * FILE holds lines "shape mode threads ms" (bench/torch_time.py writes them); mode is nw0
 * (need_weights off) or nw1 (per-head weights). GFLOP/s use 8NLE² + 4NLSE.
 */
#include "mha.h"

#include <cblas.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

typedef struct shape {
    const char *name;
    int64_t N, L, E, H;
} shape;

static const shape shapes[] = {
    {"S", 1, 32, 64, 4},
    {"M", 1, 128, 512, 8},
    {"L", 8, 512, 768, 12},
    {"XL", 1, 2048, 1024, 16},
};

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

/* Median seconds of repeated calls of fn(ctx): at least 3 and until min_time has passed (max 2000). */
static double time_median(void (*fn)(void *), void *ctx, double min_time)
{
    enum { max_reps = 2000 };
    static double t[max_reps];
    fn(ctx); /* warm-up */
    int n = 0;
    double start = now();
    while (n < max_reps && (n < 3 || now() - start < min_time)) {
        double t0 = now();
        fn(ctx);
        t[n++] = now() - t0;
    }
    qsort(t, (size_t)n, sizeof t[0], cmp_double);
    return t[n / 2];
}

typedef struct sgemm_ctx {
    int n;
    float *a, *b, *c;
} sgemm_ctx;

static void sgemm_once(void *p)
{
    sgemm_ctx *s = p;
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, s->n, s->n, s->n, 1.0f, s->a, s->n, s->b, s->n,
                0.0f, s->c, s->n);
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
    if (mha_forward(f->layer, &f->in, &f->plan, f->out, f->weights, NULL, f->pool, &err) != MHA_OK) {
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

int main(int argc, char **argv)
{
    const char *shape_list = "S,M,L,XL", *thread_list = "1,2", *torch_file = NULL;
    double min_time = 0.3;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--shapes") && i + 1 < argc)
            shape_list = argv[++i];
        else if (!strcmp(argv[i], "--threads") && i + 1 < argc)
            thread_list = argv[++i];
        else if (!strcmp(argv[i], "--min-time") && i + 1 < argc)
            min_time = atof(argv[++i]);
        else if (!strcmp(argv[i], "--torch") && i + 1 < argc)
            torch_file = argv[++i];
        else {
            fprintf(stderr, "usage: %s [--shapes S,M,L,XL] [--threads 1,2] [--min-time SEC] [--torch FILE]\n",
                    argv[0]);
            return 2;
        }
    }

    /* The sgemm anchor: square n=1024, OpenBLAS on 1 and on 2 threads. */
    sgemm_ctx sg = {1024, random_array(1024 * 1024, 1), random_array(1024 * 1024, 2),
                    random_array(1024 * 1024, 3)};
    double peak[3] = {0};
    for (int t = 1; t <= 2; t++) {
        char tn[4];
        snprintf(tn, sizeof tn, "%d", t);
        if (!in_list(thread_list, tn))
            continue;
        mha_blas_set_threads(t);
        peak[t] = 2.0 * 1024 * 1024 * 1024 / time_median(sgemm_once, &sg, min_time) / 1e9;
    }
    mha_blas_set_threads(1); /* the engine parallelises itself */
    printf("sgemm 1024^2: %.1f GFLOP/s on 1 thread, %.1f on 2 (OpenBLAS threads)\n\n", peak[1], peak[2]);
    printf("%-3s %-4s %2s %9s %8s %7s %9s %7s %8s\n", "shp", "mode", "t", "ms", "GFLOP/s", "%sgemm",
           "torch ms", "x torch", "w cost");

    mha_pool *pool2 = mha_pool_create(2, NULL);
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
        const shape *sh = &shapes[s];
        if (!in_list(shape_list, sh->name))
            continue;
        mha_config cfg;
        mha_config_init(&cfg, sh->E, sh->H);
        mha_error err;
        mha_layer *layer = mha_layer_create(&cfg, NULL, &err);
        mha_layer_init(layer, "xavier_uniform", 0, &err);
        float *x = random_array(sh->N * sh->L * sh->E, 7);
        for (int t = 1; t <= 2; t++) {
            char tn[4];
            snprintf(tn, sizeof tn, "%d", t);
            if (!in_list(thread_list, tn))
                continue;
            double ms_nw0 = NAN;
            for (int mode = 0; mode < 2; mode++) {
                fwd_ctx f = {.layer = layer, .pool = t == 2 ? pool2 : NULL};
                f.in.query = (mha_tensor){x, 3, {sh->N, sh->L, sh->E}};
                f.in.need_weights = mode == 1;
                f.in.average_attn_weights = false;
                if (mha_plan_forward(layer, &f.in, NULL, &f.plan, &err) != MHA_OK) {
                    fprintf(stderr, "plan failed: %s\n", err.message);
                    return 1;
                }
                f.out = calloc((size_t)f.plan.out_count, sizeof(float));
                f.weights = mode ? calloc((size_t)f.plan.weights_count, sizeof(float)) : NULL;
                double sec = time_median(forward_once, &f, min_time);
                double ms = sec * 1e3, gf = f.plan.flops / sec / 1e9;
                const char *mname = mode ? "nw1" : "nw0";
                double tms = torch_ms(torch_file, sh->name, mname, t);
                if (mode == 0)
                    ms_nw0 = ms;
                char tcol[16] = "-", rcol[16] = "-", wcol[16] = "";
                if (!isnan(tms)) {
                    snprintf(tcol, sizeof tcol, "%.3f", tms);
                    snprintf(rcol, sizeof rcol, "%.2f", tms / ms);
                }
                if (mode == 1)
                    snprintf(wcol, sizeof wcol, "%+.0f%%", (ms / ms_nw0 - 1) * 100);
                printf("%-3s %-4s %2d %9.3f %8.1f %6.0f%% %9s %7s %8s\n", sh->name, mname, t, ms, gf,
                       100 * gf / peak[t], tcol, rcol, wcol);
                fflush(stdout);
                free(f.out);
                free(f.weights);
            }
        }
        free(x);
        mha_layer_free(layer);
    }
    mha_pool_free(pool2);
    free(sg.a);
    free(sg.b);
    free(sg.c);
    printf("\nnw0 = need_weights off, nw1 = per-head weights [N,H,L,S]; x torch = torch ms / ours;\n"
           "w cost = nw1 over nw0 at the same thread count.\n");
    return 0;
}
