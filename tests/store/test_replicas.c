/*
 * test_replicas.c - writers on several replicas (issue 16): two in-process daemons, A and B, share
 * one data dir (both with --watch, as replicas behind a load balancer run) and race.
 *
 *   - many rounds of two conditional PUTs of one layer, one through each daemon, sent at the same
 *     moment with If-Match naming the current version: exactly one wins (200), the other gets 409 -
 *     even when the loser's daemon has not followed the last change yet, since the condition is
 *     checked against the data dir under its lock; the winners' versions grow, never repeat;
 *   - the same for DELETE with If-Match, and for creates with If-None-Match: *;
 *   - unconditional writers racing: every answer has its own version;
 *   - --watch and the version counter agree: both daemons end on the winner's version for every
 *     layer; after a restart of both, versions are kept and new ones are higher than all before;
 *   - a layer written by hand gets one version, the same on both daemons (recorded next to its
 *     files), and a conditional PUT through either works with it.
 */
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "check.h"
#include "http_client.h"
#include "tmpdir.h"

#define ROUNDS 40
#define FOLLOW_MS 2000

static char root[64];

static long long ms_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (long long)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static srv_daemon *start_dir(const char *dir)
{
    srv_options opt;
    hc_options(&opt);
    snprintf(opt.data_dir, sizeof opt.data_dir, "%s", dir);
    opt.watch = true;
    opt.watch_interval_ms = 50;
    return hc_start(&opt);
}

/* One request: its status and ETag (as a number, 0 when none). */
typedef struct call {
    srv_daemon *d;
    const char *method, *path, *body;
    char header[96]; /* "If-Match: ..." or "" */
    pthread_barrier_t *start;
    long status;
    unsigned long long etag;
    char reply[512];
} call;

static void *run_call(void *arg)
{
    call *c = arg;
    const char *headers[] = {c->header, NULL};
    hc_opts o = {.headers = c->header[0] ? headers : NULL};
    if (c->start)
        pthread_barrier_wait(c->start);
    hc_response r;
    hc_request(c->d, c->method, c->path, NULL, c->body, c->body ? -1 : 0, &o, &r);
    c->status = r.status;
    char v[64] = "";
    c->etag = hc_header(&r, "ETag", v, sizeof v) ? strtoull(v[0] == '"' ? v + 1 : v, NULL, 10) : 0;
    snprintf(c->reply, sizeof c->reply, "%s", r.body ? r.body : "");
    hc_response_free(&r);
    return NULL;
}

/* Runs a and b at the same moment (each on its own thread). */
static void race(call *a, call *b)
{
    pthread_barrier_t start;
    pthread_barrier_init(&start, NULL, 2);
    a->start = b->start = &start;
    pthread_t ta, tb;
    pthread_create(&ta, NULL, run_call, a);
    pthread_create(&tb, NULL, run_call, b);
    pthread_join(ta, NULL);
    pthread_join(tb, NULL);
    pthread_barrier_destroy(&start);
}

static call make_call(srv_daemon *d, const char *method, const char *path, const char *body,
                      const char *header)
{
    call c = {.d = d, .method = method, .path = path, .body = body};
    snprintf(c.header, sizeof c.header, "%s", header ? header : "");
    return c;
}

static const char *body_seed(char *buf, size_t size, int seed)
{
    snprintf(buf, size,
             "{\"config\": {\"embed_dim\": 8, \"num_heads\": 2}, \"init\": {\"seed\": %d}}", seed);
    return buf;
}

/* The version d serves for name (0: not served). */
static unsigned long long version_on(srv_daemon *d, const char *name)
{
    char path[96];
    snprintf(path, sizeof path, "/v1/layers/%s", name);
    call c = make_call(d, "GET", path, NULL, NULL);
    run_call(&c);
    return c.status == 200 ? c.etag : 0;
}

/* Waits until d serves name at version want (0: not at all); false after FOLLOW_MS. */
static bool follows(srv_daemon *d, const char *name, unsigned long long want)
{
    long long t0 = ms_now();
    while (version_on(d, name) != want)
        if (ms_now() - t0 > FOLLOW_MS)
            return false;
        else
            usleep(10000);
    return true;
}

static void test_conditional_puts(srv_daemon *a, srv_daemon *b)
{
    char body[160], ba[160], bb[160], h[96];
    call c = make_call(a, "PUT", "/v1/layers/x", body_seed(body, sizeof body, 0), NULL);
    run_call(&c);
    CHECK(c.status == 201 && c.etag, "create x through A (%ld)", c.status);
    unsigned long long cur = c.etag, last = c.etag;
    int won_a = 0, won_b = 0, bad = 0, repeats = 0;
    for (int round = 0; round < ROUNDS; round++) {
        snprintf(h, sizeof h, "If-Match: \"%llu\"", cur);
        call ca = make_call(a, "PUT", "/v1/layers/x", body_seed(ba, sizeof ba, 1000 + round), h);
        call cb = make_call(b, "PUT", "/v1/layers/x", body_seed(bb, sizeof bb, 2000 + round), h);
        race(&ca, &cb);
        bool a_won = ca.status == 200 && cb.status == 409;
        bool b_won = cb.status == 200 && ca.status == 409;
        if (!a_won && !b_won) {
            bad++;
            printf("  round %d: A %ld %s  B %ld %s\n", round, ca.status, ca.reply, cb.status,
                   cb.reply);
            continue;
        }
        unsigned long long v = a_won ? ca.etag : cb.etag;
        won_a += a_won;
        won_b += b_won;
        repeats += v <= last;
        last = v > last ? v : last;
        cur = v;
    }
    printf("  %d rounds: A won %d, B won %d\n", ROUNDS, won_a, won_b);
    CHECK(bad == 0, "every round: exactly one 200 and one 409 (%d rounds were not)", bad);
    CHECK(repeats == 0, "the winners' versions grow, never repeat or go back (%d did)", repeats);
    CHECK(won_a > 0 && won_b > 0, "both daemons won rounds (A %d, B %d): the check is on disk",
          won_a, won_b);
    CHECK(follows(a, "x", cur) && follows(b, "x", cur),
          "--watch: both serve the last winner's version %llu (A %llu, B %llu)", cur,
          version_on(a, "x"), version_on(b, "x"));

    /* a stale ETag is refused through either daemon */
    snprintf(h, sizeof h, "If-Match: \"%llu\"", cur - 1);
    c = make_call(b, "PUT", "/v1/layers/x", body_seed(body, sizeof body, 9), h);
    run_call(&c);
    CHECK(c.status == 409, "a stale If-Match: 409 (%ld)", c.status);
}

static void test_delete_and_create(srv_daemon *a, srv_daemon *b)
{
    char body[160], h[96];
    unsigned long long v = version_on(a, "x");
    snprintf(h, sizeof h, "If-Match: \"%llu\"", v);
    call da = make_call(a, "DELETE", "/v1/layers/x", NULL, h);
    call db = make_call(b, "DELETE", "/v1/layers/x", NULL, h);
    race(&da, &db);
    CHECK((da.status == 204) + (db.status == 204) == 1 &&
              (da.status == 409 || da.status == 404 || db.status == 409 || db.status == 404),
          "racing conditional DELETEs: one 204, the other 409/404 (A %ld, B %ld)", da.status,
          db.status);
    CHECK(follows(a, "x", 0) && follows(b, "x", 0), "x is gone on both");

    int created = 0, refused = 0;
    unsigned long long last = v;
    bool grows = true;
    for (int round = 0; round < 10; round++) {
        char name[32], path[64], b1[160], b2[160];
        snprintf(name, sizeof name, "n%d", round);
        snprintf(path, sizeof path, "/v1/layers/%s", name);
        call ca = make_call(a, "PUT", path, body_seed(b1, sizeof b1, round), "If-None-Match: *");
        call cb = make_call(b, "PUT", path, body_seed(b2, sizeof b2, 50 + round),
                            "If-None-Match: *");
        race(&ca, &cb);
        created += (ca.status == 201) + (cb.status == 201);
        refused += (ca.status == 409) + (cb.status == 409);
        unsigned long long w = ca.status == 201 ? ca.etag : cb.etag;
        grows &= w > last;
        last = w;
    }
    CHECK(created == 10 && refused == 10,
          "racing creates with If-None-Match: *: one 201 and one 409 each (%d, %d)", created,
          refused);
    CHECK(grows, "new layers get versions above every earlier one");

    /* unconditional writers: every answer has its own version */
    unsigned long long seen[40];
    int n = 0;
    bool distinct = true;
    for (int round = 0; round < 20; round++) {
        char b1[160], b2[160];
        call ca = make_call(a, "PUT", "/v1/layers/u", body_seed(b1, sizeof b1, round), NULL);
        call cb = make_call(b, "PUT", "/v1/layers/u", body_seed(b2, sizeof b2, round), NULL);
        race(&ca, &cb);
        if (!CHECK(ca.etag && cb.etag, "unconditional PUTs answered (%ld %ld)", ca.status,
                   cb.status))
            break;
        for (int i = 0; i < n; i++)
            distinct &= seen[i] != ca.etag && seen[i] != cb.etag;
        distinct &= ca.etag != cb.etag;
        seen[n++] = ca.etag;
        seen[n++] = cb.etag;
    }
    CHECK(distinct, "no two writes share a version");
    (void)body;
}

static void test_restart_and_hand_written(const char *dir, srv_daemon **a, srv_daemon **b)
{
    /* the last racing writes: each daemon follows the other's within 2 s */
    long long t0 = ms_now();
    while (version_on(*a, "u") != version_on(*b, "u") && ms_now() - t0 < FOLLOW_MS)
        usleep(10000);
    unsigned long long before = version_on(*a, "u"), max = 0;
    CHECK(before && before == version_on(*b, "u"), "both end on the same version of u (%llu)",
          before);
    for (int i = 0; i < 10; i++) {
        char name[32];
        snprintf(name, sizeof name, "n%d", i);
        unsigned long long v = version_on(*a, name);
        max = v > max ? v : max;
    }
    max = before > max ? before : max;
    hc_stop(*a);
    hc_stop(*b);
    *a = start_dir(dir);
    *b = start_dir(dir);
    if (!CHECK(*a && *b, "both restart"))
        return;
    CHECK(version_on(*a, "u") == before && version_on(*b, "u") == before,
          "a layer keeps its version across restarts, on both (%llu)", before);
    char body[160];
    call c = make_call(*b, "PUT", "/v1/layers/u", body_seed(body, sizeof body, 77), NULL);
    run_call(&c);
    CHECK(c.status == 200 && c.etag > max, "a write after the restart: %llu, above all before (%llu)",
          c.etag, max);

    /* a layer written by hand: both daemons give it the same version */
    char p[256], src[256];
    snprintf(p, sizeof p, "%s/layers/h", dir);
    mkdir(p, 0755);
    const char *files[] = {"config.json", "weights.safetensors"};
    for (int f = 0; f < 2; f++) {
        snprintf(p, sizeof p, "%s/layers/h/%s", dir, files[f]);
        snprintf(src, sizeof src, "tests/golden_datadir/layers/torch_mha/%s", files[f]);
        CHECK(td_copy_file(p, src) == 0, "copy %s", src);
    }
    t0 = ms_now();
    while ((!version_on(*a, "h") || !version_on(*b, "h")) && ms_now() - t0 < FOLLOW_MS)
        usleep(10000);
    unsigned long long ha = version_on(*a, "h"), hb = version_on(*b, "h");
    CHECK(ha && ha == hb && ha > c.etag, "a hand-written layer: one version on both (%llu, %llu)",
          ha, hb);
    hc_stop(*a);
    *a = start_dir(dir);
    CHECK(*a && version_on(*a, "h") == ha, "and the same after a restart (%llu)",
          *a ? version_on(*a, "h") : 0);
    char h[96];
    snprintf(h, sizeof h, "If-Match: \"%llu\"", hb);
    c = make_call(*a, "PUT", "/v1/layers/h/weights", NULL, h);
    c.method = "DELETE";
    c.path = "/v1/layers/h";
    run_call(&c);
    CHECK(c.status == 204, "a conditional DELETE through A with B's ETag (%ld %s)", c.status,
          c.reply);
}

int main(void)
{
    if (td_make(root, sizeof root, "replicas") != 0)
        return 1;
    char dir[128];
    snprintf(dir, sizeof dir, "%s/shared", root);
    srv_daemon *a = start_dir(dir), *b = start_dir(dir);
    if (CHECK(a && b, "two daemons on one data dir")) {
        test_conditional_puts(a, b);
        test_delete_and_create(a, b);
        test_restart_and_hand_written(dir, &a, &b);
    }
    hc_stop(a);
    hc_stop(b);
    td_rm_rf(root);
    return check_report();
}
