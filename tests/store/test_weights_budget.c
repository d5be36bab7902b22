/*
 * test_weights_budget.c - the layers' memory (issue 22): --max-weights-bytes bounds every layer
 * together, and building layers never holds up the HTTP threads.
 *
 *   - a 60-byte PUT asking for a 1 GiB layer under a smaller limit is a 507 insufficient_storage
 *     naming the layer's size, what is held and the limit, answered before anything is allocated
 *     (the process's peak resident memory does not move);
 *   - the accounting: layers fit until the limit, the next one is refused; a replacement counts as
 *     the difference (a layer can always be replaced by one of its size); a delete gives its bytes
 *     back; weights PUTs and safetensors bodies (refused from the header, before a tensor is
 *     decoded) are counted the same way;
 *   - at start, a data dir holding more than the limit loads what fits and lists the rest in
 *     /readyz with the reason;
 *   - changes run on workers, never on an HTTP thread: with one HTTP thread and three PUTs held up
 *     (waiting for the data dir's lock, which the test holds), /healthz, /metrics and a small
 *     forward still answer; the PUTs then complete. Three large layers built at once while /healthz
 *     is polled: every poll answers.
 */
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "check.h"
#include "codec/safetensors.h"
#include "http_client.h"
#include "tmpdir.h"

static char root[64];

/* E=64, H=4: 4·64·64 + 4·64 = 16640 parameters, 66560 bytes */
#define SMALL_BYTES 66560
#define SMALL "{\"config\": {\"embed_dim\": 64, \"num_heads\": 4}}"

static long put(srv_daemon *d, const char *name, const char *body, char *reply, size_t size)
{
    char path[96];
    snprintf(path, sizeof path, "/v1/layers/%s", name);
    hc_response r;
    hc_request(d, "PUT", path, NULL, body, -1, NULL, &r);
    if (reply)
        snprintf(reply, size, "%s", r.body ? r.body : "");
    long s = r.status;
    hc_response_free(&r);
    return s;
}

static long simple(srv_daemon *d, const char *method, const char *path)
{
    hc_response r;
    hc_request(d, method, path, NULL, NULL, 0, NULL, &r);
    long s = r.status;
    hc_response_free(&r);
    return s;
}

/* The process's peak resident memory in KiB (VmHWM), after resetting it when the kernel lets us. */
static long peak_kib(bool reset)
{
    if (reset) {
        int fd = open("/proc/self/clear_refs", O_WRONLY);
        if (fd >= 0) {
            ssize_t w = write(fd, "5", 1);
            (void)w;
            close(fd);
        }
    }
    FILE *f = fopen("/proc/self/status", "r");
    char line[256];
    long kib = -1;
    while (f && fgets(line, sizeof line, f))
        if (sscanf(line, "VmHWM: %ld kB", &kib) == 1)
            break;
    if (f)
        fclose(f);
    return kib;
}

static void test_refused_before_allocating(void)
{
    srv_options opt;
    hc_options(&opt);
    opt.max_weights_bytes = 64 << 20;
    srv_daemon *d = hc_start(&opt);
    if (!CHECK(d, "daemon with --max-weights-bytes 64 MiB"))
        return;
    /* 268,451,840 parameters: 1 GiB */
    const char *huge = "{\"config\": {\"embed_dim\": 8192, \"num_heads\": 8, \"kdim\": 8191, "
                       "\"vdim\": 8191}}";
    long before = peak_kib(true);
    hc_response r;
    hc_request(d, "PUT", "/v1/layers/huge", NULL, huge, -1, NULL, &r);
    long after = peak_kib(false);
    HC_CHECK_ERROR(r, 507, "insufficient_storage", NULL);
    CHECK(r.body && strstr(r.body, "1073807360 bytes") && strstr(r.body, "268451840 parameters") &&
              strstr(r.body, "hold 0") && strstr(r.body, "--max-weights-bytes 67108864"),
          "the 507 names the layer's size, what is held and the limit: %s", r.body);
    hc_response_free(&r);
    CHECK(before > 0 && after - before < 64 * 1024,
          "nothing was allocated for it: peak resident memory %ld -> %ld KiB", before, after);
    CHECK(simple(d, "GET", "/v1/layers/huge") == 404, "and there is no such layer");
    hc_stop(d);
}

/* A safetensors body of an E=64 H=4 layer with its config in the metadata. */
static char *small_safetensors(size_t *len)
{
    static float w_in[3 * 64 * 64], b_in[3 * 64], w_out[64 * 64], b_out[64];
    int64_t s_in[2] = {192, 64}, s_b[1] = {192}, s_out[2] = {64, 64}, s_bo[1] = {64};
    srv_st_view v[4] = {{"in_proj_weight", 2, s_in, w_in},
                        {"in_proj_bias", 1, s_b, b_in},
                        {"out_proj.weight", 2, s_out, w_out},
                        {"out_proj.bias", 1, s_bo, b_out}};
    json_t *meta = json_pack("{s:s}", "config", "{\"embed_dim\": 64, \"num_heads\": 4}");
    srv_buf b;
    srv_buf_init(&b);
    srv_st_write(&b, v, 4, meta, NULL);
    json_decref(meta);
    *len = b.len;
    return b.data;
}

static void test_accounting(void)
{
    srv_options opt;
    hc_options(&opt);
    opt.max_weights_bytes = 2 * SMALL_BYTES + SMALL_BYTES / 2; /* two small layers and a half */
    srv_daemon *d = hc_start(&opt);
    char reply[1024];
    if (!CHECK(d, "daemon"))
        return;
    CHECK(put(d, "a", SMALL, NULL, 0) == 201 && put(d, "b", SMALL, NULL, 0) == 201,
          "two layers fit");
    CHECK(put(d, "c", SMALL, reply, sizeof reply) == 507 && strstr(reply, "hold 133120"),
          "the third does not: %s", reply);
    CHECK(put(d, "a", SMALL, reply, sizeof reply) == 200,
          "a replacement of the same size fits (counted as the difference): %s", reply);
    CHECK(put(d, "a", "{\"config\": {\"embed_dim\": 80, \"num_heads\": 4}}", reply, sizeof reply) ==
                  507 &&
              strstr(reply, "not counting the layer it replaces"),
          "a larger replacement past the limit does not: %s", reply);
    CHECK(simple(d, "GET", "/v1/layers/a") == 200, "a still serves");
    hc_response m;
    hc_request(d, "GET", "/metrics", NULL, NULL, 0, NULL, &m);
    CHECK(m.body && strstr(m.body, "\nattnd_weights_bytes 133120\n") &&
              strstr(m.body, "\nattnd_weights_bytes_limit 166400\n"),
          "/metrics shows what is held and the limit");
    hc_response_free(&m);

    /* weights PUT: same size, fits */
    size_t slen;
    char *st = small_safetensors(&slen);
    hc_response r;
    hc_request(d, "PUT", "/v1/layers/a/weights", "application/octet-stream", st, (long)slen, NULL,
               &r);
    CHECK(r.status == 200, "PUT weights (safetensors) of a: %ld %s", r.status, r.body);
    hc_response_free(&r);
    /* a whole layer from safetensors: refused from its header */
    hc_request(d, "PUT", "/v1/layers/c", "application/octet-stream", st, (long)slen, NULL, &r);
    HC_CHECK_ERROR(r, 507, "insufficient_storage", NULL);
    hc_response_free(&r);

    CHECK(simple(d, "DELETE", "/v1/layers/b") == 204, "delete b");
    hc_request(d, "PUT", "/v1/layers/c", "application/octet-stream", st, (long)slen, NULL, &r);
    CHECK(r.status == 201, "now c fits: %ld %s", r.status, r.body);
    hc_response_free(&r);
    free(st);
    hc_stop(d);
}

static void test_start_over_budget(void)
{
    char dir[128];
    snprintf(dir, sizeof dir, "%s/over", root);
    srv_options opt;
    hc_options(&opt);
    snprintf(opt.data_dir, sizeof opt.data_dir, "%s", dir);
    srv_daemon *d = hc_start(&opt);
    if (!CHECK(d, "daemon"))
        return;
    CHECK(put(d, "a", SMALL, NULL, 0) == 201 && put(d, "b", SMALL, NULL, 0) == 201 &&
              put(d, "c", SMALL, NULL, 0) == 201,
          "three layers on disk");
    hc_stop(d);
    opt.max_weights_bytes = 2 * SMALL_BYTES;
    d = hc_start(&opt);
    if (!CHECK(d, "restart with room for two"))
        return;
    int served = (simple(d, "GET", "/v1/layers/a") == 200) +
                 (simple(d, "GET", "/v1/layers/b") == 200) +
                 (simple(d, "GET", "/v1/layers/c") == 200);
    CHECK(served == 2, "two are served (%d)", served);
    hc_response r;
    hc_request(d, "GET", "/readyz", NULL, NULL, 0, NULL, &r);
    CHECK(r.status == 200 && strstr(r.body, "--max-weights-bytes 133120"),
          "/readyz lists the one that did not fit, and why: %s", r.body);
    hc_response_free(&r);
    hc_stop(d);
}

typedef struct putter {
    srv_daemon *d;
    const char *name, *body;
    long status;
    volatile bool done;
} putter;

static void *run_put(void *arg)
{
    putter *p = arg;
    p->status = put(p->d, p->name, p->body, NULL, 0);
    __atomic_store_n(&p->done, true, __ATOMIC_RELEASE);
    return NULL;
}

static void test_off_the_http_threads(void)
{
    char dir[128], lock[160];
    snprintf(dir, sizeof dir, "%s/lock", root);
    srv_options opt;
    hc_options(&opt);
    opt.threads = 1; /* a PUT on the HTTP thread would stop everything else */
    opt.max_inflight = 2;
    snprintf(opt.data_dir, sizeof opt.data_dir, "%s", dir);
    srv_daemon *d = hc_start(&opt);
    if (!CHECK(d, "daemon with one HTTP thread"))
        return;
    CHECK(put(d, "demo", SMALL, NULL, 0) == 201, "a small layer to forward through");

    /* hold the data dir's lock as another replica would: changes wait for it on their workers */
    snprintf(lock, sizeof lock, "%s/attnd.lock", dir);
    int fd = open(lock, O_RDWR);
    struct flock fl = {.l_type = F_WRLCK, .l_whence = SEEK_SET};
    CHECK(fd >= 0 && fcntl(fd, F_OFD_SETLK, &fl) == 0, "the test holds the lock");
    putter p[3] = {{d, "x", SMALL, 0, false}, {d, "y", SMALL, 0, false}, {d, "z", SMALL, 0, false}};
    pthread_t t[3];
    for (int i = 0; i < 3; i++)
        pthread_create(&t[i], NULL, run_put, &p[i]);
    usleep(200000); /* let them arrive; they cannot finish while the lock is held */
    hc_response r;
    hc_request(d, "GET", "/healthz", NULL, NULL, 0, NULL, &r);
    CHECK(r.status == 200, "/healthz answers while three PUTs wait (%ld)", r.status);
    hc_response_free(&r);
    hc_request(d, "GET", "/metrics", NULL, NULL, 0, NULL, &r);
    CHECK(r.status == 200, "/metrics too (%ld)", r.status);
    hc_response_free(&r);
    hc_request(d, "POST", "/v1/layers/demo/forward", NULL,
               "{\"query\": {\"shape\": [1, 64], \"data\": [" /* 64 zeros */
               "0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,"
               "0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0]}}",
               -1, NULL, &r);
    CHECK(r.status == 200, "and a small forward (%ld %.200s)", r.status, r.body);
    hc_response_free(&r);
    bool waiting = true;
    for (int i = 0; i < 3; i++)
        waiting &= !__atomic_load_n(&p[i].done, __ATOMIC_ACQUIRE);
    CHECK(waiting, "meanwhile the three PUTs were still waiting");
    fl.l_type = F_UNLCK;
    fcntl(fd, F_OFD_SETLK, &fl);
    close(fd);
    for (int i = 0; i < 3; i++) {
        pthread_join(t[i], NULL);
        CHECK(p[i].status == 201, "PUT %s done once the lock is free (%ld)", p[i].name,
              p[i].status);
    }
    hc_stop(d);

    /* three large layers (E=2048: 16.8 M parameters, 64 MiB each) built at once, from 60-byte
     * bodies, with /healthz polled meanwhile */
    hc_options(&opt);
    opt.threads = 1;
    d = hc_start(&opt);
    if (!CHECK(d, "daemon without a data dir"))
        return;
    const char *big = "{\"config\": {\"embed_dim\": 2048, \"num_heads\": 16}}";
    putter q[3] = {{d, "b1", big, 0, false}, {d, "b2", big, 0, false}, {d, "b3", big, 0, false}};
    for (int i = 0; i < 3; i++)
        pthread_create(&t[i], NULL, run_put, &q[i]);
    int polls = 0, ok = 0;
    for (;;) {
        bool all = true;
        for (int i = 0; i < 3; i++)
            all &= __atomic_load_n(&q[i].done, __ATOMIC_ACQUIRE);
        if (all)
            break;
        polls++;
        ok += simple(d, "GET", "/healthz") == 200;
        usleep(2000);
    }
    for (int i = 0; i < 3; i++) {
        pthread_join(t[i], NULL);
        CHECK(q[i].status == 201, "large PUT %s: %ld", q[i].name, q[i].status);
    }
    printf("  /healthz polled %d times while three 64 MiB layers were built\n", polls);
    CHECK(ok == polls, "every poll answered 200 (%d of %d)", ok, polls);
    hc_stop(d);
}

int main(void)
{
    if (td_make(root, sizeof root, "budget") != 0)
        return 1;
    test_refused_before_allocating();
    test_accounting();
    test_start_over_budget();
    test_off_the_http_threads();
    td_rm_rf(root);
    return check_report();
}
