/*
 * bench_layers.c - making large layers: the engine's initialisation against the speed of memory,
 * and a daemon's probes while several large layers are made at once.
 *
 *   1. a 1 GiB layer (E=8192, H=8, kdim=vdim=8191: 268 M parameters) created and initialised
 *      (xavier_uniform) on 1 and on 2 threads, next to a memset of the same 1 GiB of fresh memory
 *      (the floor: the kernel's page faults and the memory's write speed), to the former way
 *      (every page zeroed at create, then one thread), and to the same initialisation when the
 *      pages are already there (the generator's own cost);
 *   2. an in-process daemon (2 HTTP threads) asked for three such layers at once by three 60-byte
 *      PUTs, while one client polls GET /healthz: the PUTs' times, and /healthz's median and worst
 *      latency during them.
 *
 * BENCH_E (default 8192) sets the layer's embed_dim (kdim = vdim = E - 1), BENCH_REPS (3) the runs.
 * Needs about 3.5 GiB of memory for part 2 (the limit --max-weights-bytes is raised for it).
 */
#include <curl/curl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>

#include "api/daemon.h"
#include "app/options.h"
#include "bench_http.h"
#include "mha.h"

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec / 1e9;
}

static int64_t env_int(const char *name, int64_t def)
{
    const char *v = getenv(name);
    return v && *v ? strtoll(v, NULL, 10) : def;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static double median(double *v, int n)
{
    qsort(v, (size_t)n, sizeof *v, cmp_double);
    return n ? v[n / 2] : 0;
}

static void engine(int64_t E, int reps)
{
    mha_config cfg;
    mha_config_init(&cfg, E, 8);
    cfg.kdim = cfg.vdim = E - 1;
    mha_limits lim;
    mha_limits_default(&lim);
    lim.max_elements = (int64_t)1 << 40;
    lim.max_dim = (int64_t)1 << 20;
    double bytes = (double)mha_param_total(&cfg) * 4;
    printf("== a layer of %.0f MiB (E=%lld, H=8, kdim=vdim=%lld), median of %d\n", bytes / 1048576,
           (long long)E, (long long)E - 1, reps);
    double t_memset[16], t_init[2][16], t_again[2][16], t_former[16];
    mha_error err = {0};
    for (int r = 0; r < reps; r++) {
        double t0 = now_s();
        void *p = mmap(NULL, (size_t)bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS,
                       -1, 0);
        if (p == MAP_FAILED)
            return;
        memset(p, 1, (size_t)bytes);
        t_memset[r] = now_s() - t0;
        munmap(p, (size_t)bytes);
        /* the former way: every page zeroed at create, then the values drawn on one thread */
        t0 = now_s();
        mha_layer *former = mha_layer_create(&cfg, &lim, &err);
        if (!former)
            return;
        for (int i = 0; i < mha_layer_param_count(former); i++)
            memset((void *)mha_layer_param_data(former, i), 0,
                   (size_t)mha_layer_param_info(former, i)->count * sizeof(float));
        mha_layer_init_pool(former, "xavier_uniform", 0, NULL, &err);
        t_former[r] = now_s() - t0;
        mha_layer_free(former);
        for (int t = 0; t < 2; t++) {
            mha_pool *pool = mha_pool_create(t + 1, &err);
            t0 = now_s();
            mha_layer *layer = mha_layer_create(&cfg, &lim, &err);
            if (!layer || mha_layer_init_pool(layer, "xavier_uniform", 0, pool, &err) != MHA_OK) {
                printf("  failed: %s\n", err.message);
                return;
            }
            t_init[t][r] = now_s() - t0;
            t0 = now_s();
            mha_layer_init_pool(layer, "xavier_uniform", 0, pool, &err);
            t_again[t][r] = now_s() - t0;
            mha_layer_free(layer);
            mha_pool_free(pool);
        }
    }
    printf("  %-52s %8.3f s\n", "memset of fresh memory, one thread (the floor)",
           median(t_memset, reps));
    printf("  %-52s %8.3f s\n", "the former way: memset at create, then one thread",
           median(t_former, reps));
    for (int t = 0; t < 2; t++) {
        char what[96];
        snprintf(what, sizeof what, "create + init, %d thread%s", t + 1, t ? "s" : "");
        printf("  %-52s %8.3f s   (%.2f GB/s)\n", what, median(t_init[t], reps),
               bytes / median(t_init[t], reps) / 1e9);
        snprintf(what, sizeof what, "init again (pages already there), %d thread%s", t + 1,
                 t ? "s" : "");
        printf("  %-52s %8.3f s   (%.2f GB/s)\n", what, median(t_again[t], reps),
               bytes / median(t_again[t], reps) / 1e9);
    }
}

typedef struct put_job {
    int port;
    char name[16];
    const char *body;
    long status;
    double seconds;
    volatile int done;
} put_job;

static long request(int port, const char *method, const char *path, const char *body)
{
    char url[160];
    snprintf(url, sizeof url, "http://127.0.0.1:%d%s", port, path);
    CURL *c = curl_easy_init();
    srv_buf resp;
    srv_buf_init(&resp);
    long ihcl;
    const long status = bench_request(c, method, url, body, body ? strlen(body) : 0,
                                      "application/json", -1, &resp, &ihcl);
    srv_buf_free(&resp);
    curl_easy_cleanup(c);
    return status;
}

static void *run_put(void *arg)
{
    put_job *j = arg;
    char path[64];
    snprintf(path, sizeof path, "/v1/layers/%s", j->name);
    double t0 = now_s();
    j->status = request(j->port, "PUT", path, j->body);
    j->seconds = now_s() - t0;
    __atomic_store_n(&j->done, 1, __ATOMIC_RELEASE);
    return NULL;
}

static void daemon_puts(int64_t E)
{
    srv_options opt;
    srv_options_default(&opt);
    opt.port = 0;
    opt.log_format = SRV_LOG_OFF;
    opt.max_weights_bytes = (int64_t)16 << 30;
    srv_error err = {0};
    srv_daemon *d = srv_daemon_start(&opt, &err);
    if (!d) {
        printf("daemon: %s\n", err.message);
        return;
    }
    int port = srv_daemon_port(d);
    char body[160];
    snprintf(body, sizeof body,
             "{\"config\": {\"embed_dim\": %lld, \"num_heads\": 8, \"kdim\": %lld, \"vdim\": %lld}}",
             (long long)E, (long long)E - 1, (long long)E - 1);
    printf("\n== three PUTs of %zu bytes, each for that layer, at once; GET /healthz polled meanwhile "
           "(%d HTTP threads)\n", strlen(body), opt.threads);
    put_job jobs[3];
    pthread_t t[3];
    for (int i = 0; i < 3; i++) {
        jobs[i] = (put_job){port, "", body, 0, 0, 0};
        snprintf(jobs[i].name, sizeof jobs[i].name, "big%d", i);
        pthread_create(&t[i], NULL, run_put, &jobs[i]);
    }
    static double lat[100000];
    int n = 0, bad = 0;
    double t0 = now_s();
    for (;;) {
        int done = 0;
        for (int i = 0; i < 3; i++)
            done += __atomic_load_n(&jobs[i].done, __ATOMIC_ACQUIRE);
        if (done == 3 || n == 100000)
            break;
        double a = now_s();
        bad += request(port, "GET", "/healthz", NULL) != 200;
        lat[n++] = (now_s() - a) * 1e3;
    }
    double total = now_s() - t0;
    for (int i = 0; i < 3; i++) {
        pthread_join(t[i], NULL);
        printf("  PUT %s: %ld in %.2f s\n", jobs[i].name, jobs[i].status, jobs[i].seconds);
    }
    double worst = 0;
    for (int i = 0; i < n; i++)
        worst = lat[i] > worst ? lat[i] : worst;
    printf("  all three done in %.2f s; /healthz answered %d times (%d not 200): median %.2f ms, "
           "worst %.2f ms\n", total, n, bad, median(lat, n), worst);
    srv_daemon_stop(d);
}

int main(void)
{
    int64_t E = env_int("BENCH_E", 8192);
    int reps = (int)env_int("BENCH_REPS", 3);
    if (reps < 1 || reps > 16)
        reps = 3;
    curl_global_init(CURL_GLOBAL_DEFAULT);
    engine(E, reps);
    daemon_puts(E);
    curl_global_cleanup();
    return 0;
}
