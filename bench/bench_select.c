/*
 * bench_select.c - what choosing the weights costs (issue 25): a pass with a selection against the
 * same pass without weights, and against the full per-head map where that fits.
 *
 *   build/bench/bench_select [--L 16384] [--E 1024] [--H 16] [--threads 2] [--rounds 3]
 *                            [--rows nw,head64,top8,pool64,...] [--full-L 4096]
 *                            [--http-L 1024,2048]
 *
 * Rows (self-attention, N = 1, batch-first, random inputs; every row of one length is timed in the
 * same interleaved rounds, so the machine's neighbours weigh on all alike):
 *   nw       no weights (the base)
 *   head64   one head's weights for 64 query rows ({"heads": [0], "queries": [0, 64]})
 *   top8     the top 8 keys of every row of every head (per head, float32 values + int32 indices);
 *            topK for any K
 *   pool64   a 64 x 64 pooled map of every head (blocks of L/64 x S/64, mean); poolP for any P
 *   full     the full per-head map [H,L,S] (only at --full-L, where it fits)
 *   avg-ROW  any of the weights rows averaged over the heads (torch's default), e.g. avg-top8,
 *            avg-full (the full averaged map [L,S])
 * At --full-L (default 4096; 0 skips) the rows run again with "full" among them: a selection must
 * never make a pass slower than the full map would.
 *
 * With --http-L 1024,2048 the same rows, full map included, also run as /v2 requests with binary
 * tensors to the daemon started in this process (libcurl on loopback; the layer, query and
 * engine threads as above): what a client waits for, the reply's bytes on the wire included. The
 * full map is what a client would otherwise ask for, as long as it fits the daemon's default limits
 * (--max-tensor-elements: 2^26, H·L·S at L = S = 2048 with H = 16); past them it is refused (413)
 * and reported so.
 *
 * Columns: median wall ms, median CPU ms of the pass (every thread's: on a shared machine the
 * honest measure of work), both relative to nw, and the peak RSS of one pass of that row in a fresh
 * child process, beyond the inputs, the layer and the reply (the engine's scratch and the
 * selection's state; the reply is listed apart). The goals at L = S = 16384, E = 1024,
 * H = 16: head64 <= +10%, top8 <= +25%, pool64 <= +15% over nw, and memory O((L + S)·E).
 */
#include "api/daemon.h"
#include "bench_http.h"
#include "mha.h"

#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#define MAX_ROWS 10

typedef struct row {
    char name[24];
    mha_select sel;
    bool weights; /* need_weights                               */
    bool avg;     /* average_attn_weights (an "avg-" row), else per head */
    int64_t heads[1];
} row;

static double now(int clock)
{
    struct timespec ts;
    clock_gettime(clock, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static double median(double *t, int n)
{
    qsort(t, (size_t)n, sizeof t[0], cmp_double);
    return t[n / 2];
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

/* The rows of one length L (S = L): list's names in its order (at most MAX_ROWS - 1; unknown
 * names are refused), then "full" when with_full. */
static int make_rows(row *rows, const char *list, int64_t L, bool with_full)
{
    int n = 0;
    char buf[256];
    snprintf(buf, sizeof buf, "%s%s", list, with_full ? ",full" : "");
    for (char *save = NULL, *nm = strtok_r(buf, ",", &save); nm; nm = strtok_r(NULL, ",", &save)) {
        long long v = 0;
        char tail = 0;
        const bool avg = !strncmp(nm, "avg-", 4);
        const char *base = avg ? nm + 4 : nm;
        const bool top = sscanf(base, "top%lld%c", &v, &tail) == 1 && v >= 1;
        const bool pool = sscanf(base, "pool%lld%c", &v, &tail) == 1 && v >= 1;
        if ((strcmp(base, "nw") || avg) && strcmp(base, "head64") && strcmp(base, "full") && !top &&
            !pool) {
            fprintf(stderr, "bench_select: unknown row '%s'\n", nm);
            exit(2);
        }
        if (n == MAX_ROWS) {
            fprintf(stderr, "bench_select: at most %d rows\n", MAX_ROWS);
            exit(2);
        }
        row *r = &rows[n++];
        memset(r, 0, sizeof *r);
        snprintf(r->name, sizeof r->name, "%s", nm);
        r->weights = strcmp(nm, "nw") != 0;
        r->avg = avg;
        if (!strcmp(base, "head64")) {
            r->heads[0] = 0;
            r->sel.nheads = 1;
            r->sel.heads = r->heads;
            r->sel.has_queries = true;
            r->sel.queries[0] = 0;
            r->sel.queries[1] = L < 64 ? L : 64;
        } else if (top) {
            r->sel.has_top_k = true;
            r->sel.top_k = v < L ? v : L;
        } else if (pool) { /* a v x v map: blocks of ceil(L / v) */
            r->sel.has_pool = true;
            r->sel.pool[0] = r->sel.pool[1] = (L + v - 1) / v;
        }
    }
    return n;
}

typedef struct pass {
    mha_layer *layer;
    mha_inputs in;
    mha_plan plan;
    float *out, *w;
    int32_t *idx;
} pass;

static bool pass_setup(pass *p, mha_layer *layer, float *q, int64_t L, int64_t E, const row *r)
{
    memset(p, 0, sizeof *p);
    p->layer = layer;
    p->in.query = (mha_tensor){q, 3, {1, L, E, 0}};
    p->in.need_weights = r->weights;
    p->in.average_attn_weights = r->avg;
    p->in.select = r->weights && !strstr(r->name, "full") ? &r->sel : NULL;
    mha_error err = {0};
    if (mha_plan_forward(layer, &p->in, NULL, &p->plan, &err) != MHA_OK) {
        fprintf(stderr, "%s: %s\n", r->name, err.message);
        return false;
    }
    p->out = aligned_alloc(64, (size_t)(p->plan.out_count * 4 + 64) / 64 * 64);
    if (r->weights)
        p->w = aligned_alloc(64, (size_t)(p->plan.weights_count * 4 + 64) / 64 * 64);
    if (p->plan.top_k)
        p->idx = malloc((size_t)p->plan.weights_count * 4);
    return p->out && (!r->weights || p->w);
}

static void pass_free(pass *p)
{
    free(p->out);
    free(p->w);
    free(p->idx);
}

static void pass_run(pass *p, mha_pool *pool)
{
    mha_error err;
    if (mha_forward_select(p->layer, &p->in, &p->plan, p->out, p->w, p->idx, NULL, pool, &err) !=
        MHA_OK) {
        fprintf(stderr, "forward failed: %s\n", err.message);
        exit(1);
    }
}

static long rss_kb(void)
{
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    return ru.ru_maxrss;
}

/* Peak RSS growth (KiB) of one pass of row r in a child process, beyond what the child held before
 * it (the layer, the inputs, its output and weights buffers touched). -1 when it fails. */
static long child_peak(mha_layer *layer, float *q, int64_t L, int64_t E, const row *r, int threads)
{
    int fd[2];
    if (pipe(fd) != 0)
        return -1;
    fflush(stdout);
    pid_t pid = fork();
    if (pid == 0) {
        close(fd[0]);
        pass p;
        long grew = -1;
        if (pass_setup(&p, layer, q, L, E, r)) {
            memset(p.out, 0, (size_t)p.plan.out_count * 4);
            if (p.w)
                memset(p.w, 0, (size_t)p.plan.weights_count * 4);
            if (p.idx)
                memset(p.idx, 0, (size_t)p.plan.weights_count * 4);
            mha_error err;
            mha_pool *pool = mha_pool_create(threads, &err);
            long before = rss_kb();
            pass_run(&p, pool);
            grew = rss_kb() - before;
        }
        if (write(fd[1], &grew, sizeof grew) != (ssize_t)sizeof grew)
            _exit(1);
        _exit(0);
    }
    close(fd[1]);
    long grew = -1;
    if (pid < 0 || read(fd[0], &grew, sizeof grew) != (ssize_t)sizeof grew)
        grew = -1;
    close(fd[0]);
    if (pid > 0)
        waitpid(pid, NULL, 0);
    return grew;
}

static void run_length(int64_t L, int64_t E, int64_t H, int threads, int rounds, const char *list,
                       bool with_full)
{
    mha_config cfg;
    mha_config_init(&cfg, E, H);
    mha_error err;
    mha_layer *layer = mha_layer_create(&cfg, NULL, &err);
    mha_layer_init(layer, "xavier_uniform", 1, &err);
    float *q = random_array(L * E, 7);
    for (int64_t i = 0; i < L * E; i++)
        q[i] *= 2.0f; /* peaked weights, as trained layers give */
    row rows[MAX_ROWS];
    int n = make_rows(rows, list, L, with_full);
    pass passes[MAX_ROWS];
    for (int i = 0; i < n; i++)
        if (!pass_setup(&passes[i], layer, q, L, E, &rows[i]))
            exit(1);
    /* a pool of one thread too, as the daemon runs the engine (and bench_engine times it): its
     * scratch is kept between passes, where a pass without a pool maps and faults it in afresh
     * (measured: 4% of an L pass, the same for every row) */
    mha_pool *pool = mha_pool_create(threads, &err);
    double wall[MAX_ROWS][32], cpu[MAX_ROWS][32];
    for (int i = 0; i < n; i++)
        pass_run(&passes[i], pool); /* warm-up: pages faulted, kernels chosen */
    for (int k = 0; k < rounds; k++)
        for (int i = 0; i < n; i++) {
            double t0 = now(CLOCK_MONOTONIC), c0 = now(CLOCK_PROCESS_CPUTIME_ID);
            pass_run(&passes[i], pool);
            wall[i][k] = now(CLOCK_MONOTONIC) - t0;
            cpu[i][k] = now(CLOCK_PROCESS_CPUTIME_ID) - c0;
        }
    printf("\nL = S = %lld, E = %lld, H = %lld, N = 1, %d thread%s, median of %d interleaved rounds\n",
           (long long)L, (long long)E, (long long)H, threads, threads > 1 ? "s" : "", rounds);
    printf("%-11s %10s %8s %10s %8s %12s %14s\n", "row", "wall ms", "vs nw", "cpu ms", "vs nw",
           "reply bytes", "peak RSS MiB");
    double base_w = 0, base_c = 0;
    for (int i = 0; i < n; i++) {
        double mw = median(wall[i], rounds) * 1e3, mc = median(cpu[i], rounds) * 1e3;
        if (!strcmp(rows[i].name, "nw")) {
            base_w = mw;
            base_c = mc;
        }
        int64_t reply = rows[i].weights ? passes[i].plan.weights_count * (passes[i].plan.top_k ? 8 : 4) : 0;
        const long kb = child_peak(layer, q, L, E, &rows[i], threads);
        printf("%-11s %10.1f %+7.1f%% %10.1f %+7.1f%% %12lld ", rows[i].name, mw,
               base_w > 0 ? (mw / base_w - 1) * 100 : 0.0, mc,
               base_c > 0 ? (mc / base_c - 1) * 100 : 0.0, (long long)reply);
        if (kb >= 0)
            printf("%14.1f\n", (double)kb / 1024.0);
        else
            printf("%14s\n", "?");
    }
    for (int i = 0; i < n; i++)
        pass_free(&passes[i]);
    mha_pool_free(pool);
    free(q);
    mha_layer_free(layer);
}

/* ---------------------------------------------------------------------------------------------- */
/* The same rows over HTTP                                                                        */

/* Row r's /v2 request at length L: a JSON header asking for r's weights (binary outputs), padded to
 * a multiple of 4, then the query's bytes. *ihcl: the header's length. */
static void http_body(srv_buf *b, long *ihcl, const row *r, const float *q, int64_t L, int64_t E)
{
    srv_buf_printf(b,
                   "{\"inputs\":[{\"name\":\"query\",\"shape\":[1,%" PRId64 ",%" PRId64
                   "],\"datatype\":\"FP32\",\"parameters\":{\"binary_data_size\":%" PRId64
                   "}}],\"parameters\":{\"binary_data_output\":true",
                   L, E, L * E * 4);
    if (!r->weights)
        srv_buf_puts(b, ",\"need_weights\":false");
    else
        srv_buf_printf(b, ",\"need_weights\":true,\"average_attn_weights\":%s",
                       r->avg ? "true" : "false");
    if (!strcmp(r->name, "head64"))
        srv_buf_printf(b, ",\"weights_heads\":\"0\",\"weights_queries\":\"0:%" PRId64 "\"",
                       r->sel.queries[1]);
    else if (r->sel.has_top_k)
        srv_buf_printf(b, ",\"weights_top_k\":%" PRId64, r->sel.top_k);
    else if (r->sel.has_pool)
        srv_buf_printf(b, ",\"weights_pool\":\"%" PRId64 "x%" PRId64 "\"", r->sel.pool[0],
                       r->sel.pool[1]);
    srv_buf_puts(b, "}}");
    while (b->len % 4)
        srv_buf_putc(b, ' ');
    *ihcl = (long)b->len;
    srv_buf_append(b, q, (size_t)(L * E) * sizeof(float));
}

static void run_http(int64_t L, int64_t E, int64_t H, int threads, int rounds, const char *list)
{
    srv_daemon *d = bench_daemon(threads, "bench_select");
    CURL *c = curl_easy_init();
    char base[64], url[160];
    bench_put_layer(d, c, "sel", E, H, 1, "bench_select", base, sizeof base);
    srv_buf resp;
    srv_buf_init(&resp);
    long ihcl, st;
    snprintf(url, sizeof url, "%s/v2/models/sel/infer", base);
    float *q = random_array(L * E, 7);
    for (int64_t i = 0; i < L * E; i++)
        q[i] *= 2.0f;
    row rows[MAX_ROWS];
    const int n = make_rows(rows, list, L, true);
    srv_buf body[MAX_ROWS];
    long body_ihcl[MAX_ROWS], status[MAX_ROWS];
    size_t got[MAX_ROWS] = {0};
    char why[MAX_ROWS][128] = {{0}}; /* a refused row's error reply */
    double wall[MAX_ROWS][32];
    for (int i = 0; i < n; i++) {
        srv_buf_init(&body[i]);
        http_body(&body[i], &body_ihcl[i], &rows[i], q, L, E);
    }
    for (int k = -1; k < rounds; k++) /* round -1: the warm-up, and each row's status */
        for (int i = 0; i < n; i++) {
            if (k >= 0 && status[i] != 200)
                continue;
            const double t0 = now(CLOCK_MONOTONIC);
            st = bench_request(c, "POST", url, body[i].data, body[i].len,
                               "application/octet-stream", body_ihcl[i], &resp, &ihcl);
            if (k >= 0)
                wall[i][k] = now(CLOCK_MONOTONIC) - t0;
            else {
                status[i] = st;
                got[i] = resp.len;
                snprintf(why[i], sizeof why[i], "%s", srv_buf_cstr(&resp));
            }
        }
    printf("\nOver HTTP: /v2 with binary tensors, L = S = %lld, E = %lld, H = %lld, N = 1, %d engine "
           "thread%s, median of %d interleaved rounds\n",
           (long long)L, (long long)E, (long long)H, threads, threads > 1 ? "s" : "", rounds);
    printf("%-11s %10s %8s %8s %14s\n", "row", "wall ms", "vs nw", "vs full", "reply bytes");
    double base_w = 0, full_w = 0;
    for (int i = 0; i < n; i++)
        if (status[i] == 200) {
            const double mw = median(wall[i], rounds) * 1e3;
            base_w = strcmp(rows[i].name, "nw") ? base_w : mw;
            full_w = strcmp(rows[i].name, "full") ? full_w : mw;
        }
    for (int i = 0; i < n; i++) {
        if (status[i] != 200) {
            printf("%-11s refused: HTTP %ld %s\n", rows[i].name, status[i], why[i]);
            continue;
        }
        const double mw = median(wall[i], rounds) * 1e3;
        printf("%-11s %10.1f %+7.1f%% ", rows[i].name, mw, base_w > 0 ? (mw / base_w - 1) * 100 : 0.0);
        if (full_w > 0)
            printf("%7.2fx", mw / full_w);
        else
            printf("%8s", "-");
        printf(" %14zu\n", got[i]);
    }
    for (int i = 0; i < n; i++)
        srv_buf_free(&body[i]);
    free(q);
    srv_buf_free(&resp);
    curl_easy_cleanup(c);
    srv_daemon_stop(d);
}

int main(int argc, char **argv)
{
    int64_t L = 16384, E = 1024, H = 16, full_L = 4096;
    int threads = 2, rounds = 3;
    const char *list = "nw,head64,top8,pool64";
    const char *http_L = NULL; /* lengths to run over HTTP too */
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--L") && i + 1 < argc)
            L = atoll(argv[++i]);
        else if (!strcmp(argv[i], "--E") && i + 1 < argc)
            E = atoll(argv[++i]);
        else if (!strcmp(argv[i], "--H") && i + 1 < argc)
            H = atoll(argv[++i]);
        else if (!strcmp(argv[i], "--threads") && i + 1 < argc)
            threads = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--rounds") && i + 1 < argc)
            rounds = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--rows") && i + 1 < argc)
            list = argv[++i];
        else if (!strcmp(argv[i], "--full-L") && i + 1 < argc)
            full_L = atoll(argv[++i]);
        else if (!strcmp(argv[i], "--http-L") && i + 1 < argc)
            http_L = argv[++i];
        else {
            fprintf(stderr,
                    "usage: %s [--L 16384] [--E 1024] [--H 16] [--threads 2] [--rounds 3] "
                    "[--rows nw,head64,top8,pool64] [--full-L 4096] [--http-L 1024,2048]\n",
                    argv[0]);
            return 2;
        }
    }
    if (rounds < 1 || rounds > 32 || threads < 1 || L < 1 || E < 1 || H < 1 || E % H) {
        fprintf(stderr, "bad arguments\n");
        return 2;
    }
    mha_blas_set_threads(1);
    run_length(L, E, H, threads, rounds, list, false);
    if (full_L > 0)
        run_length(full_L, E, H, threads, rounds, list, true);
    if (http_L) {
        curl_global_init(CURL_GLOBAL_DEFAULT);
        for (const char *p = http_L; *p;) {
            char *end;
            const long long hl = strtoll(p, &end, 10);
            if (end == p || hl < 1) {
                fprintf(stderr, "bad --http-L\n");
                return 2;
            }
            run_http(hl, E, H, threads, rounds, list);
            p = *end == ',' ? end + 1 : end;
        }
        curl_global_cleanup();
    }
    return 0;
}
