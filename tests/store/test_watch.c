/*
 * test_watch.c - `--watch`: two in-process daemons sharing one temp data dir follow each other.
 *
 * Daemon A and daemon B run with --watch on the same data dir (B polls only, no inotify, as on NFS).
 * A layer created, replaced or deleted through one is served the same way by the other within 2 s; the
 * answers on the way are always the old or the new layer, never anything else; a damaged or
 * half-written layer file never replaces the version in memory; a layer directory written by hand
 * appears; a daemon's own write does not bump its version (ETag) when its watcher sees it.
 * The waits poll the other daemon every 10 ms against a 2 s deadline: the propagation delay is the
 * property under test, and each wait ends as soon as it is met.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "check.h"
#include "http_client.h"
#include "store/watch.h"

#define FOLLOW_MS 2000 /* the promise: replicas follow within 2 s */

static long long ms_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (long long)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static void pause_ms(int ms)
{
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

static const char *QUERY = "{\"query\": [[[0.5, -1, 2, 0.25, 1, 0, -0.5, 3], "
                           "[1, 2, 3, 4, 5, 6, 7, 8]]], \"encoding\": \"base64\"}";

/* The "output" member of a forward on d of layer name (malloc'd JSON text), or NULL with *status
 * set when the forward did not answer 200. */
static char *forward(srv_daemon *d, const char *name, long *status)
{
    char path[128];
    snprintf(path, sizeof path, "/v1/layers/%s/forward", name);
    hc_response r;
    hc_request(d, "POST", path, NULL, QUERY, -1, NULL, &r);
    *status = r.status;
    char *out = NULL;
    if (r.status == 200) {
        json_t *doc = hc_json(&r);
        json_t *o = doc ? json_object_get(doc, "output") : NULL;
        out = o ? json_dumps(o, JSON_COMPACT | JSON_SORT_KEYS) : NULL;
        json_decref(doc);
    }
    hc_response_free(&r);
    return out;
}

static long put_layer(srv_daemon *d, const char *name, int seed, char *etag, size_t etag_size)
{
    char path[128], body[256];
    snprintf(path, sizeof path, "/v1/layers/%s", name);
    snprintf(body, sizeof body,
             "{\"config\": {\"embed_dim\": 8, \"num_heads\": 2}, "
             "\"init\": {\"method\": \"xavier_uniform\", \"seed\": %d}}",
             seed);
    hc_response r;
    hc_request(d, "PUT", path, NULL, body, -1, NULL, &r);
    long st = r.status;
    if (etag && !hc_header(&r, "ETag", etag, etag_size))
        etag[0] = '\0';
    hc_response_free(&r);
    return st;
}

static long request_status(srv_daemon *d, const char *method, const char *path, char *etag,
                           size_t etag_size)
{
    hc_response r;
    hc_request(d, method, path, NULL, NULL, -1, NULL, &r);
    long st = r.status;
    if (etag && !hc_header(&r, "ETag", etag, etag_size))
        etag[0] = '\0';
    hc_response_free(&r);
    return st;
}

/* Polls d until forward(name) answers `want` (NULL: 404), for at most FOLLOW_MS. Every answer on
 * the way must be `old` (NULL: 404); anything else is a fail (a half-served layer). Returns the ms
 * it took, or -1 on timeout or a bad answer. */
static long long follow(srv_daemon *d, const char *name, const char *old, const char *want)
{
    long long t0 = ms_now();
    for (;;) {
        long st;
        char *out = forward(d, name, &st);
        bool is_want = want ? (out && !strcmp(out, want)) : st == 404;
        bool is_old = old ? (out && !strcmp(out, old)) : st == 404;
        free(out);
        long long took = ms_now() - t0;
        if (is_want) {
            printf("  %s: followed in %lld ms\n", name, took);
            return took;
        }
        if (!is_old) {
            CHECK(false, "%s answered %ld with neither the old nor the new layer", name, st);
            return -1;
        }
        if (took > FOLLOW_MS)
            return -1;
        pause_ms(10);
    }
}

static int write_file(const char *path, const void *data, size_t len)
{
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (fd < 0)
        return -1;
    ssize_t w = write(fd, data, len);
    close(fd);
    return w == (ssize_t)len ? 0 : -1;
}

static char *slurp(const char *path, size_t *len)
{
    return check_read_file(path, len);
}

static void rm_rf(const char *path)
{
    DIR *dir = opendir(path);
    if (dir) {
        struct dirent *e;
        char sub[4096];
        while ((e = readdir(dir))) {
            if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, ".."))
                continue;
            snprintf(sub, sizeof sub, "%s/%s", path, e->d_name);
            rm_rf(sub);
        }
        closedir(dir);
        rmdir(path);
    } else {
        unlink(path);
    }
}

/* Replaces layer "flip" through a over and over (seeds 1 and 2 in turn) while the main thread reads it
 * from b: every answer b gives must be exactly one of the two layers. */
typedef struct flipper {
    srv_daemon *a;
    int rounds;
    int failures;
    int done; /* set (atomically) when the last replacement answered */
} flipper;

static void *flip_main(void *arg)
{
    flipper *f = arg;
    for (int i = 0; i < f->rounds; i++)
        if (put_layer(f->a, "flip", 1 + i % 2, NULL, 0) != 200)
            f->failures++;
    __atomic_store_n(&f->done, 1, __ATOMIC_RELEASE);
    return NULL;
}

int main(void)
{
    char dir[] = "/tmp/attnd-test-watch-XXXXXX";
    if (!CHECK(mkdtemp(dir) != NULL, "mkdtemp: %s", strerror(errno)))
        return check_report();

    srv_options oa, ob;
    hc_options(&oa);
    snprintf(oa.data_dir, sizeof oa.data_dir, "%s", dir);
    oa.watch = true;
    ob = oa;
    ob.watch_poll = true; /* B: rescans only, like a replica on NFS */
    srv_daemon *a = hc_start(&oa);
    srv_daemon *b = hc_start(&ob);
    if (!CHECK(a && b, "two daemons on one data dir")) {
        hc_stop(a);
        hc_stop(b);
        rm_rf(dir);
        return check_report();
    }
    srv_watch *wa = srv_daemon_app(a)->watch, *wb = srv_daemon_app(b)->watch;
    CHECK(wa && wb, "both daemons watch");
    CHECK(wa && srv_watch_get_stats(wa).inotify, "A uses inotify");
    CHECK(wb && !srv_watch_get_stats(wb).inotify, "B polls only");

    /* Created through A: B serves it, with the same numbers. */
    char etag[128], etag2[128];
    CHECK(put_layer(a, "w", 1, etag, sizeof etag) == 201, "PUT w on A");
    long st;
    char *out_a1 = forward(a, "w", &st);
    CHECK(out_a1 != NULL, "forward w on A: %ld", st);
    long long took = follow(b, "w", NULL, out_a1);
    CHECK(took >= 0 && took <= FOLLOW_MS, "B serves A's new layer, same numbers, after %lld ms", took);

    /* A's own watcher saw A's write: same content, so the version stays what the PUT answered. */
    if (wa) {
        srv_watch_scan(wa);
        CHECK(request_status(a, "GET", "/v1/layers/w", etag2, sizeof etag2) == 200, "GET w on A");
        CHECK(etag[0] && !strcmp(etag, etag2), "A's ETag unchanged by its own watcher: %s vs %s",
              etag, etag2);
    }

    /* Replaced through A: B switches from the old numbers to the new ones, nothing in between. */
    CHECK(put_layer(a, "w", 2, NULL, 0) == 200, "replace w on A");
    char *out_a2 = forward(a, "w", &st);
    CHECK(out_a2 && out_a1 && strcmp(out_a1, out_a2), "the replacement answers differently");
    took = out_a2 ? follow(b, "w", out_a1, out_a2) : -1;
    CHECK(took >= 0 && took <= FOLLOW_MS, "B serves the replacement after %lld ms", took);

    /* Deleted through B: A drops it. */
    CHECK(request_status(b, "DELETE", "/v1/layers/w", NULL, 0) == 204, "DELETE w on B");
    took = out_a2 ? follow(a, "w", out_a2, NULL) : -1;
    CHECK(took >= 0 && took <= FOLLOW_MS, "A drops the deleted layer after %lld ms", took);

    /* Never half a layer: B reads "flip" while A replaces it 20 times. */
    CHECK(put_layer(a, "flip", 2, NULL, 0) == 201, "PUT flip on A");
    char *flip2 = forward(a, "flip", &st);
    CHECK(put_layer(a, "flip", 1, NULL, 0) == 200, "replace flip on A");
    char *flip1 = forward(a, "flip", &st);
    took = flip1 && flip2 ? follow(b, "flip", NULL, flip1) : -1;
    if (CHECK(took >= 0, "B serves flip") && flip1 && flip2) {
        flipper f = {.a = a, .rounds = 20};
        pthread_t t;
        pthread_create(&t, NULL, flip_main, &f);
        int reads = 0, bad = 0;
        long long t0 = ms_now();
        /* Keep reading until the replacements are over and B had time to follow the last one. */
        long long done_at = 0;
        while (ms_now() - t0 < 20000) {
            char *o = forward(b, "flip", &st);
            reads++;
            if (!o || (strcmp(o, flip1) && strcmp(o, flip2)))
                bad++;
            free(o);
            if (!done_at && __atomic_load_n(&f.done, __ATOMIC_ACQUIRE))
                done_at = ms_now();
            if (done_at && ms_now() - done_at > 700)
                break;
        }
        pthread_join(t, NULL);
        CHECK(f.failures == 0, "20 replacements on A: %d failed", f.failures);
        CHECK(bad == 0, "B, read %d times during 20 replacements: %d answers were neither layer",
              reads, bad);
    }

    /* A broken writer truncates weights.safetensors in place: both keep serving the last good one. */
    char wpath[4200], cpath[4200], good[4200];
    snprintf(wpath, sizeof wpath, "%s/layers/flip/weights.safetensors", dir);
    snprintf(cpath, sizeof cpath, "%s/layers/flip/config.json", dir);
    size_t wlen = 0;
    char *weights = slurp(wpath, &wlen);
    char *now_b = forward(b, "flip", &st);
    if (CHECK(weights && wlen > 64 && now_b, "read back flip's weights (%zu bytes)", wlen)) {
        CHECK(write_file(wpath, weights, wlen / 2) == 0, "truncate weights by hand");
        srv_watch_scan(wb);
        srv_watch_scan(wa);
        char *after = forward(b, "flip", &st);
        CHECK(after && !strcmp(after, now_b), "B still serves the last good flip (%ld)", st);
        free(after);
        hc_response r;
        hc_request(b, "GET", "/readyz", NULL, NULL, -1, NULL, &r);
        CHECK(r.body && strstr(r.body, "flip"), "B's /readyz names the damaged layer: %s",
              r.body ? r.body : "");
        hc_response_free(&r);
        /* Repaired (the full file back): served again without a restart. */
        CHECK(write_file(wpath, weights, wlen) == 0, "restore weights");
        srv_watch_scan(wb);
        after = forward(b, "flip", &st);
        CHECK(after && !strcmp(after, now_b), "B serves flip after the repair (%ld)", st);
        free(after);
    }

    /* A layer directory copied in by hand (config.json + weights.safetensors) is served by both. */
    size_t clen = 0;
    char *config = slurp(cpath, &clen);
    snprintf(good, sizeof good, "%s/layers/copied", dir);
    if (CHECK(config && weights && mkdir(good, 0755) == 0, "make layers/copied")) {
        char p[4300];
        snprintf(p, sizeof p, "%s/config.json", good);
        CHECK(write_file(p, config, clen) == 0, "write copied/config.json");
        snprintf(p, sizeof p, "%s/weights.safetensors", good);
        CHECK(write_file(p, weights, wlen) == 0, "write copied/weights.safetensors");
        took = follow(a, "copied", NULL, now_b);
        CHECK(took >= 0 && took <= FOLLOW_MS, "A serves the hand-copied layer after %lld ms", took);
        took = follow(b, "copied", NULL, now_b);
        CHECK(took >= 0 && took <= FOLLOW_MS, "B serves the hand-copied layer after %lld ms", took);
        /* Removed by hand: both drop it. */
        rm_rf(good);
        took = follow(a, "copied", now_b, NULL);
        CHECK(took >= 0 && took <= FOLLOW_MS, "A drops the removed directory after %lld ms", took);
        took = follow(b, "copied", now_b, NULL);
        CHECK(took >= 0 && took <= FOLLOW_MS, "B drops the removed directory after %lld ms", took);
    }

    /* Without --watch, a daemon on the same dir does not follow (the flag is what turns it on). */
    srv_options oc = oa;
    oc.watch = false;
    srv_daemon *c = hc_start(&oc);
    if (CHECK(c != NULL, "third daemon without --watch")) {
        CHECK(srv_daemon_app(c)->watch == NULL, "no watcher without --watch");
        CHECK(put_layer(a, "late", 3, NULL, 0) == 201, "PUT late on A");
        srv_watch_scan(wb);
        CHECK(request_status(b, "GET", "/v1/layers/late", NULL, 0) == 200, "B has late");
        CHECK(request_status(c, "GET", "/v1/layers/late", NULL, 0) == 404,
              "C (no --watch) does not pick up late");
        hc_stop(c);
    }

    /* --watch without a data dir has nothing to follow: the daemon refuses to start, saying why. */
    srv_options od;
    hc_options(&od);
    od.watch = true;
    srv_error err = {0};
    srv_daemon *dd = srv_daemon_start(&od, &err);
    CHECK(dd == NULL && strstr(err.message, "--data-dir"), "--watch alone is refused: %s",
          err.message);
    srv_daemon_stop(dd);

    free(out_a1);
    free(out_a2);
    free(flip1);
    free(flip2);
    free(now_b);
    free(weights);
    free(config);
    hc_stop(a);
    hc_stop(b);
    rm_rf(dir);
    return check_report();
}
