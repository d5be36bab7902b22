/*
 * test_persist_http.c - the data dir, safetensors over HTTP, ETag/If-Match, auth, CORS, metrics
 * and draining, end to end: libcurl against in-process daemons on port 0, plus the built binary
 * (build/attnd, or $BUILD/attnd) as a child process for SIGTERM and SIGKILL.
 *
 *   - a restart keeps every layer bit for bit (weights downloaded as safetensors, byte-equal);
 *   - a layer killed mid-write (a temp file left, a truncated weights file) never loads half: the
 *     damaged one is skipped and reported in /readyz and /metrics, the others served;
 *   - a hand-written torch layer (tests/golden_datadir) gives torch's numbers through /forward;
 *   - weights download (safetensors) reads back equal to the JSON form, and uploads;
 *   - ETag / If-Match (409 on mismatch), also for --demo's layer, served from memory only; API key
 * (401 + WWW-Authenticate), --auth-reads,
 *     --read-only (403), CORS preflight, metrics moving with requests;
 *   - drain with a request in flight (in-process), SIGTERM (exit 0 after the in-flight request is
 *     answered), SIGKILL + restart keeps everything.
 */
#define _XOPEN_SOURCE 700
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "check.h"
#include "codec/safetensors.h"
#include "http_client.h"
#include "store/persist.h"
#include "tmpdir.h"

static char root[64];

static srv_daemon *start_dir(const char *dir)
{
    srv_options opt;
    hc_options(&opt);
    snprintf(opt.data_dir, sizeof opt.data_dir, "%s", dir);
    return hc_start(&opt);
}

static const char *const OCTET[] = {"Accept: application/octet-stream", NULL};

/* GET weights as safetensors into a malloc'd buffer. */
static char *get_st(srv_daemon *d, const char *name, size_t *len)
{
    char path[128];
    snprintf(path, sizeof path, "/v1/layers/%s/weights", name);
    hc_opts o = {.headers = OCTET};
    hc_response r;
    hc_request(d, "GET", path, NULL, NULL, 0, &o, &r);
    char ct[128] = "";
    hc_header(&r, "Content-Type", ct, sizeof ct);
    if (r.status != 200 || strcmp(ct, "application/octet-stream") != 0) {
        printf("  GET %s: %ld %s %s\n", path, r.status, ct, r.body);
        hc_response_free(&r);
        return NULL;
    }
    char *b = malloc(r.len + 1);
    memcpy(b, r.body, r.len);
    *len = r.len;
    hc_response_free(&r);
    return b;
}

static long put(srv_daemon *d, const char *path, const char *body)
{
    hc_response r;
    hc_request(d, "PUT", path, NULL, body, -1, NULL, &r);
    long s = r.status;
    if (s >= 300)
        printf("  PUT %s: %ld %s\n", path, s, r.body);
    hc_response_free(&r);
    return s;
}

#define LAYER_A "{\"config\": {\"embed_dim\": 8, \"num_heads\": 2}, \"init\": {\"seed\": 1}}"
#define LAYER_B                                                                                    \
    "{\"config\": {\"embed_dim\": 4, \"num_heads\": 1, \"kdim\": 3, \"vdim\": 2, \"bias\": false," \
    " \"add_bias_kv\": true}, \"init\": {\"seed\": 2}}"

/* The ETag of a response, without quotes, as a number (0 when absent). */
static unsigned long long etag_of(const hc_response *r)
{
    char v[64] = "";
    if (!hc_header(r, "ETag", v, sizeof v))
        return 0;
    return strtoull(v[0] == '"' ? v + 1 : v, NULL, 10);
}

static void test_restart(void)
{
    char dir[128];
    snprintf(dir, sizeof dir, "%s/restart", root);
    srv_daemon *d = start_dir(dir);
    if (!CHECK(d, "daemon with a data dir"))
        return;
    CHECK(put(d, "/v1/layers/a", LAYER_A) == 201, "PUT a");
    CHECK(put(d, "/v1/layers/b", LAYER_B) == 201, "PUT b");
    CHECK(put(d, "/v1/layers/c", LAYER_A) == 201, "PUT c");
    /* c: replaced weights (a safetensors upload of b's... no: of a's weights scaled by hand) */
    size_t alen = 0, blen = 0;
    char *a1 = get_st(d, "a", &alen), *b1 = get_st(d, "b", &blen);
    CHECK(a1 && b1, "weights downloaded as safetensors");
    hc_response r;
    hc_request(d, "GET", "/v1/layers/a", NULL, NULL, 0, NULL, &r);
    unsigned long long etag_a = etag_of(&r);
    hc_response_free(&r);
    hc_request(d, "DELETE", "/v1/layers/c", NULL, NULL, 0, NULL, &r);
    CHECK(r.status == 204, "DELETE c: %ld", r.status);
    hc_response_free(&r);
    hc_stop(d);

    d = start_dir(dir);
    if (!CHECK(d, "restart"))
        goto out;
    size_t alen2 = 0, blen2 = 0;
    char *a2 = get_st(d, "a", &alen2), *b2 = get_st(d, "b", &blen2);
    CHECK(a1 && a2 && alen == alen2 && memcmp(a1, a2, alen) == 0, "a bit for bit after restart");
    CHECK(b1 && b2 && blen == blen2 && memcmp(b1, b2, blen) == 0, "b bit for bit after restart");
    hc_request(d, "GET", "/v1/layers/a", NULL, NULL, 0, NULL, &r);
    CHECK(etag_a > 0 && etag_of(&r) == etag_a, "a keeps its version (ETag) across the restart");
    hc_response_free(&r);
    CHECK(put(d, "/v1/layers/z", LAYER_A) == 201, "PUT z after the restart");
    hc_request(d, "GET", "/v1/layers/z", NULL, NULL, 0, NULL, &r);
    CHECK(etag_of(&r) > etag_a, "new versions come after the loaded ones");
    hc_response_free(&r);
    free(a2);
    free(b2);
    hc_request(d, "GET", "/v1/layers/c", NULL, NULL, 0, NULL, &r);
    CHECK(r.status == 404, "deleted c stays deleted: %ld", r.status);
    hc_response_free(&r);
    hc_request(d, "GET", "/v1/layers/b", NULL, NULL, 0, NULL, &r);
    json_t *doc = hc_json(&r);
    json_t *cfg = json_object_get(doc, "config");
    CHECK(json_integer_value(json_object_get(cfg, "kdim")) == 3 &&
              json_is_true(json_object_get(cfg, "add_bias_kv")) &&
              json_is_false(json_object_get(cfg, "bias")),
          "b's config after restart: %s", r.body);
    json_decref(doc);
    hc_response_free(&r);
    hc_stop(d);

    /* crash mid-write: a temp file next to a, b's weights truncated */
    char p[256];
    snprintf(p, sizeof p, "%s/layers/a/.weights.safetensors.tmp-4242-0", dir);
    FILE *f = fopen(p, "wb");
    if (f) {
        fwrite(b1, 1, blen / 3, f);
        fclose(f);
    }
    snprintf(p, sizeof p, "%s/layers/b/weights.safetensors", dir);
    CHECK(truncate(p, (off_t)blen - 7) == 0, "truncate b's weights");
    d = start_dir(dir);
    if (!CHECK(d, "start after the crash"))
        goto out;
    size_t alen3 = 0;
    char *a3 = get_st(d, "a", &alen3);
    CHECK(a3 && alen3 == alen && memcmp(a1, a3, alen) == 0, "a unharmed by the temp file");
    free(a3);
    hc_request(d, "GET", "/v1/layers/b", NULL, NULL, 0, NULL, &r);
    CHECK(r.status == 404, "half-written b is not served: %ld", r.status);
    hc_response_free(&r);
    hc_request(d, "GET", "/readyz", NULL, NULL, 0, NULL, &r);
    doc = hc_json(&r);
    json_t *dmg = json_object_get(doc, "damaged");
    CHECK(r.status == 200 && json_array_size(dmg) == 1 &&
              strcmp(json_string_value(json_object_get(json_array_get(dmg, 0), "name")), "b") ==
                  0 &&
              strstr(json_string_value(json_object_get(json_array_get(dmg, 0), "reason")),
                     "weights.safetensors"),
          "/readyz reports b damaged: %s", r.body);
    json_decref(doc);
    hc_response_free(&r);
    hc_request(d, "GET", "/metrics", NULL, NULL, 0, NULL, &r);
    CHECK(r.body && strstr(r.body, "attnd_layers_damaged 1\n") &&
              strstr(r.body, "attnd_layers 2\n"),
          "/metrics: 2 layers (a, z), 1 damaged (b)");
    hc_response_free(&r);
    /* a damaged layer can be replaced through the API */
    CHECK(put(d, "/v1/layers/b", LAYER_B) == 201, "PUT b again");
    hc_request(d, "GET", "/readyz", NULL, NULL, 0, NULL, &r);
    CHECK(r.body && !strstr(r.body, "\"name\":\"b\""), "b no longer damaged: %s", r.body);
    hc_response_free(&r);
    hc_stop(d);
out:
    free(a1);
    free(b1);
}

/* Two daemons sharing a data dir, kept in step by srv_persist_sync (what --watch runs). */
/* created and updated are stored with a layer: a replacement keeps created and moves updated, and
 * a restart (or another replica) reads both as they were, not its own start's time. */
static double time_of(srv_daemon *d, const char *name, const char *which)
{
    char path[128];
    snprintf(path, sizeof path, "/v1/layers/%s", name);
    hc_response r;
    hc_request(d, "GET", path, NULL, NULL, 0, NULL, &r);
    json_t *doc = hc_json(&r);
    double t = json_number_value(json_object_get(doc, which));
    json_decref(doc);
    hc_response_free(&r);
    return t;
}

static void test_times(void)
{
    char dir[128];
    snprintf(dir, sizeof dir, "%s/times", root);
    srv_daemon *d = start_dir(dir);
    if (!CHECK(d, "daemon with a data dir"))
        return;
    CHECK(put(d, "/v1/layers/t", LAYER_A) == 201, "PUT t");
    double c1 = time_of(d, "t", "created"), u1 = time_of(d, "t", "updated");
    struct timespec pause = {0, 50 * 1000 * 1000};
    nanosleep(&pause, NULL);
    CHECK(put(d, "/v1/layers/t", LAYER_B) == 200, "replace t");
    double c2 = time_of(d, "t", "created"), u2 = time_of(d, "t", "updated");
    CHECK(c1 > 1.6e9 && c2 == c1 && u2 > u1 + 0.04,
          "a replacement keeps created (%.3f, %.3f) and moves updated (%.3f -> %.3f)", c1, c2, u1,
          u2);
    hc_stop(d);
    nanosleep(&pause, NULL);
    d = start_dir(dir);
    if (!CHECK(d, "the daemon again"))
        return;
    double c3 = time_of(d, "t", "created"), u3 = time_of(d, "t", "updated");
    CHECK(fabs(c3 - c1) < 0.002 && fabs(u3 - u2) < 0.002,
          "after a restart the times are the stored ones, to the millisecond (%.3f %.3f, were %.3f "
          "%.3f)",
          c3, u3, c1, u2);
    hc_stop(d);
}

static void test_sync(void)
{
    char dir[128];
    snprintf(dir, sizeof dir, "%s/shared", root);
    srv_daemon *a = start_dir(dir), *b = start_dir(dir);
    if (!CHECK(a && b, "two daemons on one data dir")) {
        hc_stop(a);
        hc_stop(b);
        return;
    }
    srv_app *aa = srv_daemon_app(a), *ba = srv_daemon_app(b);
    hc_response r;
    hc_request(a, "PUT", "/v1/layers/x", NULL, LAYER_A, -1, NULL, &r);
    unsigned long long v = etag_of(&r);
    CHECK(r.status == 201, "PUT x on A");
    hc_response_free(&r);
    CHECK(srv_persist_sync(aa->persist, aa->registry, &aa->limits) == 0,
          "A does not reload its own write");
    hc_request(a, "GET", "/v1/layers/x", NULL, NULL, 0, NULL, &r);
    CHECK(etag_of(&r) == v, "A's ETag unchanged by the sync");
    hc_response_free(&r);
    CHECK(srv_persist_sync(ba->persist, ba->registry, &ba->limits) == 1, "B picks up x");
    CHECK(srv_persist_sync(ba->persist, ba->registry, &ba->limits) == 0, "then nothing changes");
    size_t la = 0, lb = 0;
    char *xa = get_st(a, "x", &la), *xb = get_st(b, "x", &lb);
    CHECK(xa && xb && la == lb && memcmp(xa, xb, la) == 0, "B serves A's x bit for bit");
    hc_request(b, "GET", "/v1/layers/x", NULL, NULL, 0, NULL, &r);
    CHECK(etag_of(&r) == v, "B gives x the version A gave it (%llu)", v);
    hc_response_free(&r);
    free(xa);
    free(xb);

    /* replaced on A: B follows */
    hc_request(a, "PUT", "/v1/layers/x", NULL, LAYER_B, -1, NULL, &r);
    hc_response_free(&r);
    CHECK(srv_persist_sync(ba->persist, ba->registry, &ba->limits) == 1, "B reloads x");
    hc_request(b, "GET", "/v1/layers/x", NULL, NULL, 0, NULL, &r);
    CHECK(r.body && strstr(r.body, "\"kdim\":3"), "B has the new config: %.200s", r.body);
    hc_response_free(&r);

    /* damaged on disk: B keeps serving the version it has, and reports it */
    char p[256];
    snprintf(p, sizeof p, "%s/layers/x/weights.safetensors", dir);
    CHECK(truncate(p, 100) == 0, "damage x");
    CHECK(srv_persist_sync(ba->persist, ba->registry, &ba->limits) == 1, "B notices");
    hc_request(b, "GET", "/v1/layers/x", NULL, NULL, 0, NULL, &r);
    CHECK(r.status == 200, "B still serves x (%ld)", r.status);
    hc_response_free(&r);
    CHECK(srv_persist_damaged_count(ba->persist) == 1, "B reports x damaged");
    CHECK(srv_persist_sync(ba->persist, ba->registry, &ba->limits) == 0,
          "a damaged file is not re-read until it changes");

    /* a stale temp file (a writer that died) is removed by a later sync */
    snprintf(p, sizeof p, "%s/layers/x/.config.json.tmp-99-1", dir);
    FILE *tf = fopen(p, "w");
    if (tf)
        fclose(tf);
    ba->persist->dd->temp_grace_s = 0;
    ba->persist->last_clean = 0;
    srv_persist_sync(ba->persist, ba->registry, &ba->limits);
    CHECK(access(p, F_OK) != 0, "stale temp removed by the sync");
    ba->persist->dd->temp_grace_s = 600;

    /* deleted on A: B stops serving it */
    hc_request(a, "DELETE", "/v1/layers/x", NULL, NULL, 0, NULL, &r);
    CHECK(r.status == 204, "DELETE x on A");
    hc_response_free(&r);
    CHECK(srv_persist_sync(ba->persist, ba->registry, &ba->limits) == 1, "B notices the delete");
    hc_request(b, "GET", "/v1/layers/x", NULL, NULL, 0, NULL, &r);
    CHECK(r.status == 404 && srv_persist_damaged_count(ba->persist) == 0,
          "B no longer serves x (%ld)", r.status);
    hc_response_free(&r);
    hc_stop(a);
    hc_stop(b);
}

/* A failed write answers 5xx and changes nothing, in memory or on disk. */
static void test_write_failure(void)
{
    char dir[128], p[256];
    snprintf(dir, sizeof dir, "%s/failing", root);
    srv_daemon *d = start_dir(dir);
    if (!CHECK(d, "daemon"))
        return;
    CHECK(put(d, "/v1/layers/a", LAYER_A) == 201, "PUT a");
    size_t l1 = 0, l2 = 0;
    char *w1 = get_st(d, "a", &l1);
    /* a directory where the weights file goes: the rename of the new weights fails */
    snprintf(p, sizeof p, "%s/layers/a/weights.safetensors", dir);
    unlink(p);
    mkdir(p, 0755);
    snprintf(p, sizeof p, "%s/layers/a/weights.safetensors/x", dir);
    FILE *f = fopen(p, "w");
    if (f)
        fclose(f);
    hc_response r;
    hc_request(d, "PUT", "/v1/layers/a", NULL, LAYER_B, -1, NULL, &r);
    CHECK(r.status == 409 && r.body && strstr(r.body, "remove it by hand"),
          "replace that cannot be written for a directory in the way: 409 saying so (%ld %.200s)",
          r.status, r.body);
    hc_response_free(&r);
    char *w2 = get_st(d, "a", &l2);
    CHECK(w1 && w2 && l1 == l2 && memcmp(w1, w2, l1) == 0, "the old layer is still served");
    free(w1);
    free(w2);
    /* a file where a new layer's directory goes: not a layer, a conflict that leaves it there */
    snprintf(p, sizeof p, "%s/layers/n", dir);
    f = fopen(p, "w");
    if (f)
        fclose(f);
    hc_request(d, "PUT", "/v1/layers/n", NULL, LAYER_A, -1, NULL, &r);
    HC_CHECK_ERROR(r, 409, "conflict", "name");
    hc_response_free(&r);
    struct stat st;
    CHECK(lstat(p, &st) == 0 && S_ISREG(st.st_mode), "the file is left as it was");
    hc_request(d, "GET", "/v1/layers/n", NULL, NULL, 0, NULL, &r);
    CHECK(r.status == 404, "and the layer does not exist (%ld)", r.status);
    hc_response_free(&r);
    hc_stop(d);
}

static float *floats_of(const json_t *t, size_t *n)
{
    json_t *data = json_object_get(t, "data");
    *n = json_array_size(data);
    float *f = malloc((*n ? *n : 1) * sizeof *f);
    for (size_t i = 0; i < *n; i++)
        f[i] = (float)json_number_value(json_array_get(data, i));
    return f;
}

static void test_hand_written(void)
{
    char dir[128], p[256];
    snprintf(dir, sizeof dir, "%s/hand", root);
    mkdir(dir, 0755);
    snprintf(p, sizeof p, "%s/layers", dir);
    mkdir(p, 0755);
    const char *names[] = {"torch_mha", "torch_kv"};
    for (int k = 0; k < 2; k++) {
        snprintf(p, sizeof p, "%s/layers/%s", dir, names[k]);
        mkdir(p, 0755);
        char dst[300], src[200];
        snprintf(dst, sizeof dst, "%s/config.json", p);
        snprintf(src, sizeof src, "tests/golden_datadir/layers/%s/config.json", names[k]);
        CHECK(td_copy_file(dst, src) == 0, "copy %s", src);
        snprintf(dst, sizeof dst, "%s/weights.safetensors", p);
        snprintf(src, sizeof src, "tests/golden_datadir/layers/%s/weights.safetensors", names[k]);
        CHECK(td_copy_file(dst, src) == 0, "copy %s", src);
    }
    snprintf(p, sizeof p, "%s/layers/my layer", dir); /* not a layer name: reported */
    mkdir(p, 0755);
    size_t len;
    char *text = check_read_file("tests/golden_datadir/expected.json", &len);
    json_t *expected = text ? json_loadb(text, len, 0, NULL) : NULL;
    free(text);
    srv_daemon *d = start_dir(dir);
    if (d) {
        hc_response r;
        hc_request(d, "GET", "/readyz", NULL, NULL, 0, NULL, &r);
        CHECK(r.status == 200 && r.body && strstr(r.body, "\"name\":\"my layer\"") &&
                  strstr(r.body, "not a layer name"),
              "a directory that is not a layer name is reported: %s", r.body);
        hc_response_free(&r);
    }
    if (!CHECK(d && expected, "daemon on the hand-written data dir")) {
        json_decref(expected);
        hc_stop(d);
        return;
    }
    for (int k = 0; k < 2; k++) {
        json_t *want = json_object_get(expected, names[k]);
        json_t *req =
            json_pack("{s:O, s:O, s:O, s:b, s:s}", "query", json_object_get(want, "query"), "key",
                      json_object_get(want, "key"), "value", json_object_get(want, "value"),
                      "need_weights", 1, "encoding", "flat");
        char *body = json_dumps(req, JSON_COMPACT);
        char path[128];
        snprintf(path, sizeof path, "/v1/layers/%s/forward", names[k]);
        hc_response r;
        hc_request(d, "POST", path, NULL, body, -1, NULL, &r);
        json_t *doc = hc_json(&r);
        if (CHECK(r.status == 200 && doc, "%s forward: %ld %.300s", names[k], r.status, r.body)) {
            size_t n1, n2, n3, n4;
            float *got = floats_of(json_object_get(doc, "output"), &n1);
            float *wo = floats_of(json_object_get(want, "output"), &n2);
            float *gw = floats_of(json_object_get(doc, "attn_weights"), &n3);
            float *ww = floats_of(json_object_get(want, "attn_weights"), &n4);
            CHECK(n1 == n2 && n3 == n4 && n1 > 0, "%s: sizes", names[k]);
            if (n1 == n2)
                CHECK_CLOSE_ARRAY(names[k], got, wo, (int64_t)n1);
            if (n3 == n4)
                CHECK_CLOSE_ARRAY(names[k], gw, ww, (int64_t)n3);
            free(got), free(wo), free(gw), free(ww);
        }
        json_decref(doc);
        hc_response_free(&r);
        free(body);
        json_decref(req);
    }
    json_decref(expected);
    hc_stop(d);
}

static void test_weights_io(void)
{
    srv_daemon *d = hc_start(NULL);
    if (!CHECK(d, "daemon"))
        return;
    CHECK(put(d, "/v1/layers/w", LAYER_B) == 201, "PUT w");
    size_t len = 0;
    char *st = get_st(d, "w", &len);
    hc_response r;
    hc_request(d, "GET", "/v1/layers/w/weights?encoding=flat", NULL, NULL, 0, NULL, &r);
    json_t *map = hc_json(&r);
    hc_response_free(&r);
    srv_st parsed;
    srv_error err = {0};
    if (CHECK(st && map && srv_st_parse(&parsed, (const uint8_t *)st, len, 1 << 20, "w", &err) == 0,
              "download parses: %s", err.message)) {
        CHECK(parsed.n == (int)json_object_size(map), "same parameters (%d)", parsed.n);
        bool same = true;
        const char *name;
        json_t *t;
        json_object_foreach(map, name, t)
        {
            const srv_st_tensor *x = srv_st_find(&parsed, name);
            size_t n;
            float *f = floats_of(t, &n);
            same = same && x && (size_t)x->count == n && memcmp(x->data, f, n * 4) == 0;
            free(f);
        }
        CHECK(same, "safetensors download equals the JSON weights bit for bit");
        srv_st_free(&parsed);
    }
    json_decref(map);

    /* upload: into another layer of the same config, then download: byte-equal */
    CHECK(put(d, "/v1/layers/w2", LAYER_B) == 201, "PUT w2");
    hc_response_free(&r);
    hc_request(d, "PUT", "/v1/layers/w2/weights", "application/octet-stream", st, (long)len, NULL,
               &r);
    CHECK(r.status == 200, "PUT weights as safetensors: %ld %s", r.status, r.body);
    hc_response_free(&r);
    size_t len2 = 0;
    char *st2 = get_st(d, "w2", &len2);
    CHECK(st && st2 && len == len2 && memcmp(st, st2, len) == 0, "uploaded weights read back");
    free(st2);
    /* a damaged upload is a 400 naming the problem; the layer is unchanged */
    hc_request(d, "PUT", "/v1/layers/w2/weights", "application/octet-stream", st, (long)len - 3,
               NULL, &r);
    CHECK(r.status == 400 && strstr(r.body, "safetensors"), "truncated upload: %ld %s", r.status,
          r.body);
    hc_response_free(&r);
    /* weights that do not fit the config */
    CHECK(put(d, "/v1/layers/x", LAYER_A) == 201, "PUT x");
    hc_request(d, "PUT", "/v1/layers/x/weights", "application/octet-stream", st, (long)len, NULL,
               &r);
    CHECK(r.status == 400, "b's weights into an E=8 layer: %ld %s", r.status, r.body);
    hc_response_free(&r);
    hc_request(d, "PUT", "/v1/layers/x/weights", "text/plain", "hi", 2, NULL, &r);
    CHECK(r.status == 415 && strstr(r.body, "application/json") &&
              strstr(r.body, "application/octet-stream for a safetensors file"),
          "text/plain weights: 415 naming both types it takes (%ld %s)", r.status, r.body);
    hc_response_free(&r);

    /* PUT a whole layer as safetensors: config in __metadata__["config"] */
    srv_st_parse(&parsed, (const uint8_t *)st, len, 1 << 20, "w", &err);
    srv_st_view v[16];
    for (int i = 0; i < parsed.n; i++)
        v[i] = (srv_st_view){parsed.tensors[i].name, parsed.tensors[i].ndim,
                             parsed.tensors[i].shape, parsed.tensors[i].data};
    json_t *meta = json_pack("{s:s}", "config",
                             "{\"embed_dim\": 4, \"num_heads\": 1, \"kdim\": 3, \"vdim\": 2, "
                             "\"bias\": false, \"add_bias_kv\": true}");
    srv_buf b;
    srv_buf_init(&b);
    srv_st_write(&b, v, parsed.n, meta, &err);
    hc_request(d, "PUT", "/v1/layers/fromfile", "application/octet-stream", b.data, (long)b.len,
               NULL, &r);
    CHECK(r.status == 201, "PUT layer as safetensors with config metadata: %ld %s", r.status,
          r.body);
    hc_response_free(&r);
    size_t len3 = 0;
    char *st3 = get_st(d, "fromfile", &len3);
    CHECK(st3 && len3 == len && memcmp(st3, st, len) == 0, "its weights read back");
    free(st3);
    json_decref(meta);
    srv_buf_free(&b);
    /* without the config metadata: 400 saying how */
    srv_buf_init(&b);
    srv_st_write(&b, v, parsed.n, NULL, &err);
    hc_request(d, "PUT", "/v1/layers/nometa", "application/octet-stream", b.data, (long)b.len, NULL,
               &r);
    CHECK(r.status == 400 && strstr(r.body, "__metadata__"), "no config metadata: %ld %s", r.status,
          r.body);
    hc_response_free(&r);
    srv_buf_free(&b);
    srv_st_free(&parsed);
    free(st);
    hc_stop(d);
}

static void test_etag(void)
{
    srv_daemon *d = hc_start(NULL);
    if (!CHECK(d, "daemon"))
        return;
    hc_response r;
    hc_request(d, "PUT", "/v1/layers/e", NULL, LAYER_A, -1, NULL, &r);
    unsigned long long v1 = etag_of(&r);
    CHECK(r.status == 201 && v1 > 0, "PUT gives an ETag (%llu)", v1);
    hc_response_free(&r);
    hc_request(d, "GET", "/v1/layers/e", NULL, NULL, 0, NULL, &r);
    CHECK(etag_of(&r) == v1, "GET gives the same ETag");
    hc_response_free(&r);
    hc_request(d, "GET", "/v1/layers/e/weights", NULL, NULL, 0, NULL, &r);
    CHECK(etag_of(&r) == v1, "GET weights gives the same ETag");
    hc_response_free(&r);

    char stale[64], cur[64];
    snprintf(stale, sizeof stale, "If-Match: \"%llu\"", v1 + 100);
    const char *hs[] = {stale, NULL};
    hc_opts o = {.headers = hs};
    hc_request(d, "PUT", "/v1/layers/e", NULL, LAYER_A, -1, &o, &r);
    char code[64];
    CHECK(r.status == 409 && strcmp(hc_error_code(&r, code, sizeof code), "conflict") == 0,
          "PUT with a stale If-Match: 409 (%ld %s)", r.status, r.body);
    hc_response_free(&r);
    /* If-Match compares strongly (RFC 9110 13.1.1): the current version as a weak tag is no match,
     * and the layer stays as it was; beside it in a list, the strong tag still matches */
    char weak[64];
    snprintf(weak, sizeof weak, "If-Match: W/\"%llu\"", v1);
    const char *hw[] = {weak, NULL};
    hc_opts ow = {.headers = hw};
    hc_request(d, "PUT", "/v1/layers/e", NULL, LAYER_A, -1, &ow, &r);
    CHECK(r.status == 409 && strcmp(hc_error_code(&r, code, sizeof code), "conflict") == 0 &&
              strstr(r.body, "weak"),
          "PUT with the current version as a weak If-Match tag: 409 (%ld %s)", r.status, r.body);
    hc_response_free(&r);
    hc_request(d, "DELETE", "/v1/layers/e", NULL, NULL, 0, &ow, &r);
    CHECK(r.status == 409, "DELETE with a weak If-Match tag: 409 (%ld)", r.status);
    hc_response_free(&r);
    hc_request(d, "GET", "/v1/layers/e", NULL, NULL, 0, NULL, &r);
    CHECK(r.status == 200 && etag_of(&r) == v1, "the layer is unchanged at version %llu", v1);
    hc_response_free(&r);
    snprintf(cur, sizeof cur, "If-Match: W/\"%llu\", \"%llu\"", v1, v1);
    const char *hc_[] = {cur, NULL};
    hc_opts oc = {.headers = hc_};
    hc_request(d, "PUT", "/v1/layers/e", NULL, LAYER_A, -1, &oc, &r);
    unsigned long long v2 = etag_of(&r);
    CHECK(r.status == 200 && v2 > v1, "PUT with the current If-Match: 200, new ETag %llu", v2);
    hc_response_free(&r);
    hc_request(d, "DELETE", "/v1/layers/e", NULL, NULL, 0, &oc, &r);
    CHECK(r.status == 409, "DELETE with the old version: 409 (%ld)", r.status);
    hc_response_free(&r);
    const char *star[] = {"If-Match: *", NULL};
    hc_opts os = {.headers = star};
    hc_request(d, "PUT", "/v1/layers/nope", NULL, LAYER_A, -1, &os, &r);
    CHECK(r.status == 409, "If-Match: * on a missing layer: 409 (%ld)", r.status);
    hc_response_free(&r);
    hc_request(d, "DELETE", "/v1/layers/e", NULL, NULL, 0, &os, &r);
    CHECK(r.status == 204, "DELETE with If-Match: *: 204 (%ld)", r.status);
    hc_response_free(&r);
    hc_stop(d);
}

/* --demo's layer in a daemon with a data dir is served from memory only (never written there), yet
 * answers If-Match, If-None-Match and DELETE as it is served, like any layer: the data dir having
 * nothing of that name made a DELETE 404 and If-Match "1" a 409 "does not exist", while GET gave
 * 200 with ETag "1"; If-None-Match: * replaced it */
static void test_demo_memory_only(void)
{
    char dir[160];
    snprintf(dir, sizeof dir, "%s/demo", root);
    srv_options opt;
    hc_options(&opt);
    snprintf(opt.data_dir, sizeof opt.data_dir, "%s", dir);
    opt.demo = true;
    srv_daemon *d = hc_start(&opt);
    if (!CHECK(d, "daemon with --demo and a data dir"))
        return;
    hc_response r;
    hc_request(d, "GET", "/v1/layers/demo", NULL, NULL, 0, NULL, &r);
    const unsigned long long v = etag_of(&r);
    CHECK(r.status == 200 && v > 0, "the demo layer is served (%ld, ETag %llu)", r.status, v);
    hc_response_free(&r);
    char path[256];
    snprintf(path, sizeof path, "%s/layers/demo", dir);
    struct stat st;
    CHECK(stat(path, &st) != 0, "and not written to the data dir");

    const char *none[] = {"If-None-Match: *", NULL};
    hc_opts on = {.headers = none};
    hc_request(d, "PUT", "/v1/layers/demo", NULL, LAYER_A, -1, &on, &r);
    CHECK(r.status == 409, "If-None-Match: * on it: 409, it exists (%ld %s)", r.status, r.body);
    hc_response_free(&r);
    char stale[64], cur[64];
    snprintf(stale, sizeof stale, "If-Match: \"%llu\"", v + 7);
    const char *hs[] = {stale, NULL};
    hc_opts os = {.headers = hs};
    hc_request(d, "DELETE", "/v1/layers/demo", NULL, NULL, 0, &os, &r);
    CHECK(r.status == 409 && strstr(r.body, "is at version"),
          "DELETE with another version: 409 naming the version (%ld %s)", r.status, r.body);
    hc_response_free(&r);
    snprintf(cur, sizeof cur, "If-Match: \"%llu\"", v);
    const char *hcur[] = {cur, NULL};
    hc_opts oc = {.headers = hcur};
    hc_request(d, "DELETE", "/v1/layers/demo", NULL, NULL, 0, &oc, &r);
    CHECK(r.status == 204, "DELETE with its version: 204 (%ld %s)", r.status, r.body);
    hc_response_free(&r);
    hc_request(d, "GET", "/v1/layers/demo", NULL, NULL, 0, NULL, &r);
    CHECK(r.status == 404, "then it is gone (%ld)", r.status);
    hc_response_free(&r);
    hc_request(d, "DELETE", "/v1/layers/demo", NULL, NULL, 0, NULL, &r);
    CHECK(r.status == 404, "and a second DELETE is 404 (%ld)", r.status);
    hc_response_free(&r);
    hc_stop(d);

    /* replaced with If-Match: its version, it is written to the data dir like any PUT */
    d = hc_start(&opt);
    if (!CHECK(d, "daemon again"))
        return;
    hc_request(d, "GET", "/v1/layers/demo", NULL, NULL, 0, NULL, &r);
    snprintf(cur, sizeof cur, "If-Match: \"%llu\"", etag_of(&r));
    hc_response_free(&r);
    hc_request(d, "PUT", "/v1/layers/demo", NULL, LAYER_A, -1, &oc, &r);
    CHECK(r.status == 200, "PUT with If-Match: its version: 200 (%ld %s)", r.status, r.body);
    hc_response_free(&r);
    CHECK(stat(path, &st) == 0, "and the new layer is in the data dir");
    hc_stop(d);
}

static void test_auth(void)
{
    srv_options opt;
    hc_options(&opt);
    snprintf(opt.api_key, sizeof opt.api_key, "s3cret");
    srv_daemon *d = hc_start(&opt);
    if (!CHECK(d, "daemon with a key"))
        return;
    hc_response r;
    hc_request(d, "PUT", "/v1/layers/k", NULL, LAYER_A, -1, NULL, &r);
    char www[128] = "";
    CHECK(r.status == 401 && hc_header(&r, "WWW-Authenticate", www, sizeof www) &&
              strncmp(www, "Bearer", 6) == 0,
          "PUT without a key: 401 + WWW-Authenticate: Bearer (%ld, %s)", r.status, www);
    hc_response_free(&r);
    const char *wrong[] = {"Authorization: Bearer s3cres", NULL};
    hc_opts ow = {.headers = wrong};
    hc_request(d, "PUT", "/v1/layers/k", NULL, LAYER_A, -1, &ow, &r);
    CHECK(r.status == 401, "wrong key: 401 (%ld)", r.status);
    hc_response_free(&r);
    const char *right[] = {"Authorization: Bearer s3cret", NULL};
    hc_opts orr = {.headers = right};
    hc_request(d, "PUT", "/v1/layers/k", NULL, LAYER_A, -1, &orr, &r);
    CHECK(r.status == 201, "right key: 201 (%ld)", r.status);
    hc_response_free(&r);
    hc_request(d, "GET", "/v1/layers/k", NULL, NULL, 0, NULL, &r);
    CHECK(r.status == 200, "reads need no key by default (%ld)", r.status);
    hc_response_free(&r);
    hc_request(d, "POST", "/v1/layers/k/forward", NULL, "{\"query\": [[1,2,3,4,5,6,7,8]]}", -1,
               NULL, &r);
    CHECK(r.status == 200, "forward needs no key (%ld)", r.status);
    hc_response_free(&r);
    hc_request(d, "DELETE", "/v1/layers/k", NULL, NULL, 0, NULL, &r);
    CHECK(r.status == 401, "DELETE without a key: 401 (%ld)", r.status);
    hc_response_free(&r);
    hc_request(d, "DELETE", "/v1/layers/k", NULL, NULL, 0, &orr, &r);
    CHECK(r.status == 204, "DELETE with the key: 204 (%ld)", r.status);
    hc_response_free(&r);
    hc_stop(d);

    opt.auth_reads = true;
    d = hc_start(&opt);
    if (CHECK(d, "daemon with --auth-reads")) {
        hc_request(d, "GET", "/v1/layers", NULL, NULL, 0, NULL, &r);
        CHECK(r.status == 401, "guarded read without a key: 401 (%ld)", r.status);
        hc_response_free(&r);
        hc_request(d, "GET", "/v1/layers", NULL, NULL, 0, &orr, &r);
        CHECK(r.status == 200, "guarded read with the key (%ld)", r.status);
        hc_response_free(&r);
        hc_request(d, "GET", "/healthz", NULL, NULL, 0, NULL, &r);
        CHECK(r.status == 200, "probes never need a key (%ld)", r.status);
        hc_response_free(&r);
        const char *probes[] = {"/readyz", "/metrics", "/v2/health/live", "/v2/health/ready"};
        for (int i = 0; i < 4; i++) {
            hc_request(d, "GET", probes[i], NULL, NULL, 0, NULL, &r);
            CHECK(r.status == 200, "%s needs no key (%ld)", probes[i], r.status);
            hc_response_free(&r);
        }
        hc_request(d, "GET", "/v2/models/k", NULL, NULL, 0, NULL, &r);
        char www2[128] = "";
        CHECK(r.status == 401 && hc_header(&r, "WWW-Authenticate", www2, sizeof www2) && r.body &&
                  strncmp(r.body, "{\"error\":", 9) == 0,
              "guarded /v2 read: 401 in the protocol's error form (%ld %s)", r.status, r.body);
        hc_response_free(&r);
        hc_stop(d);
    }

    hc_options(&opt);
    opt.read_only = true;
    d = hc_start(&opt);
    if (CHECK(d, "read-only daemon")) {
        hc_request(d, "PUT", "/v1/layers/k", NULL, LAYER_A, -1, NULL, &r);
        CHECK(r.status == 403, "read-only: PUT is 403 (%ld)", r.status);
        hc_response_free(&r);
        hc_request(d, "GET", "/v1/layers", NULL, NULL, 0, NULL, &r);
        CHECK(r.status == 200, "read-only: reads work (%ld)", r.status);
        hc_response_free(&r);
        hc_stop(d);
    }
}

static void test_cors(void)
{
    srv_options opt;
    hc_options(&opt);
    snprintf(opt.cors_origin, sizeof opt.cors_origin, "https://app.example");
    srv_daemon *d = hc_start(&opt);
    if (!CHECK(d, "daemon with CORS"))
        return;
    CHECK(put(d, "/v1/layers/c", LAYER_A) == 201, "PUT c");
    const char *pre[] = {"Origin: https://app.example", "Access-Control-Request-Method: POST",
                         "Access-Control-Request-Headers: content-type", NULL};
    hc_opts o = {.headers = pre};
    hc_response r;
    hc_request(d, "OPTIONS", "/v1/layers/c/forward", NULL, NULL, 0, &o, &r);
    char ao[128] = "", am[128] = "", ah[256] = "", ma[32] = "";
    hc_header(&r, "Access-Control-Allow-Origin", ao, sizeof ao);
    hc_header(&r, "Access-Control-Allow-Methods", am, sizeof am);
    hc_header(&r, "Access-Control-Allow-Headers", ah, sizeof ah);
    hc_header(&r, "Access-Control-Max-Age", ma, sizeof ma);
    CHECK(r.status == 204 && strcmp(ao, "https://app.example") == 0 && strstr(am, "POST") &&
              strcasestr(ah, "content-type") && atoi(ma) > 0,
          "preflight: %ld origin=%s methods=%s headers=%s max-age=%s", r.status, ao, am, ah, ma);
    /* every header the API reads may be sent (If-None-Match: * makes a PUT create-only) */
    static const char *const asked[] = {"Authorization", "If-Match", "If-None-Match",
                                        "X-Request-Id", "Inference-Header-Content-Length"};
    for (size_t i = 0; i < sizeof asked / sizeof *asked; i++)
        CHECK(strcasestr(ah, asked[i]), "the preflight allows %s: %s", asked[i], ah);
    hc_response_free(&r);
    const char *from[] = {"Origin: https://app.example", NULL};
    hc_opts of = {.headers = from};
    hc_request(d, "POST", "/v1/layers/c/trace", NULL, "{\"query\": [[1,2,3,4,5,6,7,8]]}", -1, &of,
               &r);
    ao[0] = '\0';
    hc_header(&r, "Access-Control-Allow-Origin", ao, sizeof ao);
    CHECK(r.status == 200 && strcmp(ao, "https://app.example") == 0,
          "trace from the allowed origin carries Allow-Origin (%ld, %s)", r.status, ao);
    /* the page may read the reply's Server-Timing: exposed, and timing allowed for that origin */
    char ex[256] = "", ta[128] = "", st[256] = "";
    hc_header(&r, "Access-Control-Expose-Headers", ex, sizeof ex);
    hc_header(&r, "Timing-Allow-Origin", ta, sizeof ta);
    CHECK(hc_header(&r, "Server-Timing", st, sizeof st) && strstr(ex, "Server-Timing") &&
              strcmp(ta, "https://app.example") == 0,
          "Server-Timing '%s' exposed (%s) and allowed (%s) to the origin", st, ex, ta);
    hc_response_free(&r);
    const char *evil[] = {"Origin: https://evil.example", NULL};
    hc_opts oe = {.headers = evil};
    hc_request(d, "POST", "/v1/layers/c/forward", NULL, "{\"query\": [[1,2,3,4,5,6,7,8]]}", -1, &oe,
               &r);
    CHECK(!hc_header(&r, "Access-Control-Allow-Origin", ao, sizeof ao),
          "no Allow-Origin for another origin");
    hc_response_free(&r);
    hc_stop(d);
}

/* The value of the first sample line starting with prefix (-1 when absent). */
static double metric(const char *text, const char *prefix)
{
    const char *p = text;
    size_t n = strlen(prefix);
    while (p && *p) {
        if (strncmp(p, prefix, n) == 0 && p[n] == ' ')
            return strtod(p + n + 1, NULL);
        p = strchr(p, '\n');
        if (p)
            p++;
    }
    return -1;
}

static void test_metrics(void)
{
    srv_daemon *d = hc_start(NULL);
    if (!CHECK(d, "daemon"))
        return;
    CHECK(put(d, "/v1/layers/m", LAYER_A) == 201, "PUT m");
    const char *fwd =
        "attnd_http_requests_total{method=\"POST\",route=\"/v1/layers/{name}/forward\","
        "code=\"200\"}";
    hc_response r;
    hc_request(d, "GET", "/metrics", NULL, NULL, 0, NULL, &r);
    char ct[128] = "";
    hc_header(&r, "Content-Type", ct, sizeof ct);
    CHECK(r.status == 200 && strncmp(ct, "text/plain", 10) == 0, "/metrics is text (%s)", ct);
    double f0 = metric(r.body, fwd), flops0 = metric(r.body, "attnd_forward_flops_total");
    double layers = metric(r.body, "attnd_layers");
    CHECK(strstr(r.body, "attnd_build_info{version=\"") != NULL, "build info");
    CHECK(layers == 1, "attnd_layers 1 (%g)", layers);
    hc_response_free(&r);
    for (int i = 0; i < 3; i++) {
        hc_request(d, "POST", "/v1/layers/m/forward", NULL, "{\"query\": [[1,2,3,4,5,6,7,8]]}", -1,
                   NULL, &r);
        hc_response_free(&r);
    }
    hc_request(d, "GET", "/nope", NULL, NULL, 0, NULL, &r);
    hc_response_free(&r);
    /* a request is counted when it completes, just after its reply went out: wait for that */
    double want = (f0 < 0 ? 0 : f0) + 3;
    for (int i = 0; i < 200; i++) {
        hc_request(d, "GET", "/metrics", NULL, NULL, 0, NULL, &r);
        if (metric(r.body, fwd) >= want &&
            metric(r.body,
                   "attnd_http_requests_total{method=\"\",route=\"unmatched\",code=\"404\"}") >= 1)
            break;
        hc_response_free(&r);
        usleep(10 * 1000);
    }
    double f1 = metric(r.body, fwd), flops1 = metric(r.body, "attnd_forward_flops_total");
    CHECK(f1 == want, "3 forwards counted (%g -> %g)", f0, f1);
    CHECK(flops1 > flops0, "FLOPs grow (%g -> %g)", flops0, flops1);
    CHECK(metric(r.body,
                 "attnd_http_requests_total{method=\"\",route=\"unmatched\",code=\"404\"}") >= 1,
          "404 counted under unmatched");
    CHECK(metric(r.body, "attnd_http_request_duration_seconds_count{method=\"POST\",route=\"/v1/"
                         "layers/{name}/forward\"}") >= 3,
          "latency histogram counts");
    CHECK(metric(r.body, "attnd_http_requests_in_flight") >= 1, "the scrape itself is in flight");
    CHECK(metric(r.body, "attnd_http_request_bytes_total") > 0 &&
              metric(r.body, "attnd_http_response_bytes_total") > 0,
          "bytes counted");
    hc_response_free(&r);
    hc_stop(d);
}

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>

/* A forward request whose body is sent in two parts, so that it is in flight in between. */
#define SLOW_HEAD                                                                                  \
    "POST /v1/layers/s/forward HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"  \
    "Content-Length: 32\r\nConnection: close\r\n\r\n{\"query\": [[1,2,3,4,"
#define SLOW_TAIL "5,6,7,8]]}  "

static int slow_begin(int port)
{
    int fd = hc_connect(port);
    if (fd >= 0 && write(fd, SLOW_HEAD, strlen(SLOW_HEAD)) != (ssize_t)strlen(SLOW_HEAD)) {
        close(fd);
        return -1;
    }
    return fd;
}

/* Sends the rest and returns the reply's status (0 when there is none). */
static int slow_end(int fd)
{
    char reply[1024];
    size_t got = 0;
    if (write(fd, SLOW_TAIL, strlen(SLOW_TAIL)) != (ssize_t)strlen(SLOW_TAIL))
        return 0;
    struct pollfd pf = {fd, POLLIN, 0};
    while (got < sizeof reply - 1 && poll(&pf, 1, 10000) > 0) {
        ssize_t n = read(fd, reply + got, sizeof reply - 1 - got);
        if (n <= 0)
            break;
        got += (size_t)n;
    }
    reply[got] = '\0';
    close(fd);
    return strncmp(reply, "HTTP/1.1 ", 9) == 0 ? atoi(reply + 9) : 0;
}

/* Sends GET path on an open keep-alive connection and reads one whole reply (headers, then
 * Content-Length bytes); returns its status, 0 when there is none. */
/* GET path on an open connection; returns the status and copies the whole reply into reply. */
#define REPLY_MAX 4096
static int keep_alive_status(int fd, const char *path, char *reply)
{
    char rq[256];
    snprintf(rq, sizeof rq, "GET %s HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n", path);
    if (write(fd, rq, strlen(rq)) != (ssize_t)strlen(rq))
        return 0;
    size_t got = 0;
    struct pollfd pf = {fd, POLLIN, 0};
    for (;;) {
        reply[got] = '\0';
        char *end = strstr(reply, "\r\n\r\n");
        if (end) {
            const char *cl = strcasestr(reply, "Content-Length:");
            size_t want = (size_t)(end + 4 - reply) + (cl ? (size_t)atol(cl + 15) : 0);
            if (got >= want)
                break;
        }
        if (got >= REPLY_MAX - 1 || poll(&pf, 1, 5000) <= 0)
            return 0;
        ssize_t n = read(fd, reply + got, REPLY_MAX - 1 - got);
        if (n <= 0)
            return 0;
        got += (size_t)n;
    }
    return strncmp(reply, "HTTP/1.1 ", 9) == 0 ? atoi(reply + 9) : 0;
}

typedef struct drain_arg {
    srv_daemon *d;
    int deadline_ms;
    int left;
} drain_arg;

static void *drain_thread(void *arg)
{
    drain_arg *a = arg;
    a->left = srv_daemon_drain(a->d, a->deadline_ms);
    return NULL;
}

static bool wait_for(bool (*cond)(void *), void *arg, int ms)
{
    for (int i = 0; i < ms; i++) {
        if (cond(arg))
            return true;
        usleep(1000);
    }
    return cond(arg);
}

static bool in_flight(void *app)
{
    return srv_metrics_in_flight(((srv_app *)app)->metrics) >= 1;
}

static bool idle(void *app)
{
    return srv_metrics_in_flight(((srv_app *)app)->metrics) == 0;
}

static bool refused(void *port)
{
    int fd = hc_connect(*(int *)port);
    if (fd >= 0)
        close(fd);
    return fd < 0;
}

static bool is_draining(void *app)
{
    return __atomic_load_n(&((srv_app *)app)->draining, __ATOMIC_ACQUIRE);
}

static void test_drain(void)
{
    srv_daemon *d = hc_start(NULL);
    if (!CHECK(d, "daemon"))
        return;
    CHECK(put(d, "/v1/layers/s", LAYER_A) == 201, "PUT s");
    srv_app *app = srv_daemon_app(d);
    int port = srv_daemon_port(d);
    CHECK(wait_for(idle, app, 5000), "the PUT completed");
    int fd = slow_begin(port);
    CHECK(fd >= 0 && wait_for(in_flight, app, 5000), "a request is in flight");

    /* an open connection, for /readyz during the drain: one request on it first, so that the daemon
     * has accepted it (a connection still in the listen backlog is reset when the socket closes) */
    int keep = hc_connect(port);
    char reply[REPLY_MAX] = "";
    CHECK(keep >= 0 && keep_alive_status(keep, "/healthz", reply) == 200,
          "keep-alive connection open");
    drain_arg a = {d, 10000, -1};
    pthread_t t;
    pthread_create(&t, NULL, drain_thread, &a);
    CHECK(wait_for(is_draining, app, 5000), "draining began");
    CHECK(wait_for(refused, &port, 5000), "no new connections while draining");
    int rs = keep >= 0 ? keep_alive_status(keep, "/readyz", reply) : 0;
    CHECK(rs == 503, "/readyz answers 503 while draining (%d)", rs);
    CHECK(rs != 503 ||
              (strstr(reply, "\"code\":\"unavailable\"") && strstr(reply, "\"request_id\":\"")),
          "its error object has a code and the request id, as every error reply: %.400s", reply);
    if (keep >= 0)
        close(keep);
    CHECK(slow_end(fd) == 200, "the request in flight is answered 200");
    pthread_join(t, NULL);
    CHECK(a.left == 0, "drain returns with nothing left in flight (%d)", a.left);
    hc_stop(d);

    /* a request that never completes: the drain gives up at its deadline */
    d = hc_start(NULL);
    if (!CHECK(d, "daemon"))
        return;
    CHECK(put(d, "/v1/layers/s", LAYER_A) == 201, "PUT s");
    app = srv_daemon_app(d);
    CHECK(wait_for(idle, app, 5000), "the PUT completed");
    fd = slow_begin(srv_daemon_port(d));
    CHECK(fd >= 0 && wait_for(in_flight, app, 5000), "a stuck request is in flight");
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    int left = srv_daemon_drain(d, 200);
    clock_gettime(CLOCK_MONOTONIC, &t1);
    double ms = (double)(t1.tv_sec - t0.tv_sec) * 1e3 + (double)(t1.tv_nsec - t0.tv_nsec) / 1e6;
    CHECK(left == 1 && ms >= 150, "drain stops at its deadline with 1 left (%d, %.0f ms)", left,
          ms);
    hc_stop(d);
    if (fd >= 0)
        close(fd);
}

/* The built daemon as a child process: its pid, and the port it prints on stderr. */
typedef struct child {
    pid_t pid;
    int err_fd;
    int port;
    char tail[4096]; /* the last of its stderr, shown when it ends other than as expected */
    size_t tail_len;
} child;

/* Reads what c's stderr holds now (at most one read) into its tail; false at its end. */
static bool child_read_err(child *c)
{
    char buf[4096];
    ssize_t n = read(c->err_fd, buf, sizeof buf);
    if (n <= 0)
        return false;
    const size_t keep = sizeof c->tail;
    if ((size_t)n >= keep) {
        memcpy(c->tail, buf + (size_t)n - keep, keep);
        c->tail_len = keep;
    } else {
        if (c->tail_len + (size_t)n > keep) { /* drop the oldest */
            const size_t drop = c->tail_len + (size_t)n - keep;
            memmove(c->tail, c->tail + drop, c->tail_len - drop);
            c->tail_len -= drop;
        }
        memcpy(c->tail + c->tail_len, buf, (size_t)n);
        c->tail_len += (size_t)n;
    }
    return true;
}

static int child_start(child *c, const char *dir)
{
    const char *build = getenv("BUILD");
    char bin[256];
    snprintf(bin, sizeof bin, "%s/attnd", build && *build ? build : "build");
    int pfd[2];
    memset(c, 0, sizeof *c);
    if (access(bin, X_OK) != 0 || pipe(pfd) != 0) {
        printf("  cannot run %s\n", bin);
        return -1;
    }
    c->pid = fork();
    if (c->pid == 0) {
        dup2(pfd[1], 2);
        close(pfd[0]);
        close(pfd[1]);
        char *argv[] = {bin,         "--host",    "127.0.0.1", "--port",       "0",    "--data-dir",
                        (char *)dir, "--threads", "2",         "--log-format", "text", NULL};
        execv(bin, argv);
        _exit(127);
    }
    close(pfd[1]);
    c->err_fd = pfd[0];
    /* read stderr until the "listening on http://127.0.0.1:PORT" line */
    char text[8192];
    size_t got = 0;
    struct pollfd pf = {c->err_fd, POLLIN, 0};
    while (got < sizeof text - 1 && poll(&pf, 1, 20000) > 0) {
        ssize_t n = read(c->err_fd, text + got, sizeof text - 1 - got);
        if (n <= 0)
            break;
        got += (size_t)n;
        text[got] = '\0';
        const char *p = strstr(text, "listening on http://127.0.0.1:");
        if (p) {
            c->port = atoi(p + strlen("listening on http://127.0.0.1:"));
            return c->port > 0 ? 0 : -1;
        }
    }
    printf("  attnd did not say where it listens: %.*s\n", (int)got, text);
    return -1;
}

/* Waits for the child (up to ms); returns its exit status, 128+signal, or -1 on timeout. */
static int child_wait(child *c, int ms)
{
    int status = 0;
    for (int i = 0; i < ms / 10; i++) {
        pid_t r = waitpid(c->pid, &status, WNOHANG);
        if (r == c->pid) {
            for (int k = 0; k < 64 && child_read_err(c); k++) /* what it said last */
                ;
            close(c->err_fd);
            const int st = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
            if (st != 0 && st != 128 + SIGKILL) /* a crash or an error exit: say what it said */
                printf("  attnd exited with %d; the end of its stderr:\n%.*s\n", st,
                       (int)c->tail_len, c->tail);
            return st;
        }
        /* keep its stderr flowing (at its end, read returns 0 at once: then just wait) */
        struct pollfd pf = {c->err_fd, POLLIN, 0};
        if (poll(&pf, 1, 10) <= 0 || !child_read_err(c))
            usleep(10 * 1000);
    }
    return -1;
}

static char *child_get_st(int port, const char *name, size_t *len)
{
    char path[128];
    snprintf(path, sizeof path, "/v1/layers/%s/weights", name);
    hc_opts o = {.headers = OCTET};
    hc_response r;
    hc_request_port(port, "GET", path, NULL, NULL, 0, &o, &r);
    char *b = NULL;
    if (r.status == 200) {
        b = malloc(r.len + 1);
        memcpy(b, r.body, r.len);
        *len = r.len;
    }
    hc_response_free(&r);
    return b;
}

static void test_signals(void)
{
    char dir[128];
    snprintf(dir, sizeof dir, "%s/signals", root);
    child c;
    if (!CHECK(child_start(&c, dir) == 0, "attnd starts and prints its port"))
        return;
    hc_response r;
    hc_request_port(c.port, "PUT", "/v1/layers/s", NULL, LAYER_A, -1, NULL, &r);
    CHECK(r.status == 201, "PUT s to the child: %ld", r.status);
    hc_response_free(&r);
    size_t len1 = 0;
    char *s1 = child_get_st(c.port, "s", &len1);

    /* SIGTERM with a request in flight: it is answered, then attnd exits 0 */
    /* wait until the scrape is all that is in flight, then start the slow request */
    bool quiet = false;
    for (int i = 0; i < 500 && !quiet; i++) {
        hc_request_port(c.port, "GET", "/metrics", NULL, NULL, 0, NULL, &r);
        quiet = r.body && metric(r.body, "attnd_http_requests_in_flight") == 1;
        hc_response_free(&r);
        if (!quiet)
            usleep(2000);
    }
    int fd = slow_begin(c.port);
    bool seen = false;
    for (int i = 0; i < 500 && !seen; i++) {
        hc_request_port(c.port, "GET", "/metrics", NULL, NULL, 0, NULL, &r);
        seen = r.body && metric(r.body, "attnd_http_requests_in_flight") >= 2;
        hc_response_free(&r);
        if (!seen)
            usleep(2000);
    }
    CHECK(fd >= 0 && seen, "a request in flight in the child");
    kill(c.pid, SIGTERM);
    usleep(100 * 1000);
    CHECK(slow_end(fd) == 200, "in-flight request answered after SIGTERM");
    int st = child_wait(&c, 40000);
    CHECK(st == 0, "attnd exits 0 after SIGTERM (%d)", st);
    if (st < 0)
        kill(c.pid, SIGKILL), child_wait(&c, 5000);

    /* SIGKILL right after a PUT answered: both layers come back bit for bit */
    if (CHECK(child_start(&c, dir) == 0, "attnd restarts")) {
        size_t len2 = 0;
        char *s2 = child_get_st(c.port, "s", &len2);
        CHECK(s1 && s2 && len1 == len2 && memcmp(s1, s2, len1) == 0, "s after SIGTERM restart");
        free(s2);
        hc_request_port(c.port, "PUT", "/v1/layers/k", NULL, LAYER_B, -1, NULL, &r);
        CHECK(r.status == 201, "PUT k: %ld", r.status);
        hc_response_free(&r);
        size_t lk = 0;
        char *k1 = child_get_st(c.port, "k", &lk);
        kill(c.pid, SIGKILL);
        int sk = child_wait(&c, 10000);
        CHECK(sk == 128 + SIGKILL, "killed (%d)", sk);
        if (CHECK(child_start(&c, dir) == 0, "attnd restarts after SIGKILL")) {
            size_t lk2 = 0, ls = 0;
            char *k2 = child_get_st(c.port, "k", &lk2), *s3 = child_get_st(c.port, "s", &ls);
            CHECK(k1 && k2 && lk == lk2 && memcmp(k1, k2, lk) == 0, "k bit for bit after SIGKILL");
            CHECK(s1 && s3 && ls == len1 && memcmp(s1, s3, ls) == 0, "s bit for bit after SIGKILL");
            free(k2);
            free(s3);
            struct timespec t0, t1;
            clock_gettime(CLOCK_MONOTONIC, &t0);
            kill(c.pid, SIGTERM);
            int st2 = child_wait(&c, 40000);
            clock_gettime(CLOCK_MONOTONIC, &t1);
            CHECK(st2 == 0, "exit 0 (%d after %ld s)", st2, (long)(t1.tv_sec - t0.tv_sec));
            if (st2 < 0)
                kill(c.pid, SIGKILL), child_wait(&c, 5000);
        }
        free(k1);
    }
    free(s1);
}

/* SIGKILL at random moments while a large layer is being replaced: after a restart the layer is
 * whole, either the old or the new one, and nothing is reported damaged. */
static void test_kill_mid_write(void)
{
    char dir[128];
    snprintf(dir, sizeof dir, "%s/killed", root);
    const char *v1 =
        "{\"config\": {\"embed_dim\": 512, \"num_heads\": 8}, \"init\": {\"seed\": 1}}";
    const char *v2 =
        "{\"config\": {\"embed_dim\": 512, \"num_heads\": 8}, \"init\": {\"seed\": 2}}";
    child c;
    if (!CHECK(child_start(&c, dir) == 0, "attnd starts"))
        return;
    hc_response r;
    /* the two versions' bytes, for reference */
    hc_request_port(c.port, "PUT", "/v1/layers/ref1", NULL, v1, -1, NULL, &r);
    hc_response_free(&r);
    hc_request_port(c.port, "PUT", "/v1/layers/ref2", NULL, v2, -1, NULL, &r);
    hc_response_free(&r);
    size_t l1 = 0, l2 = 0;
    char *b1 = child_get_st(c.port, "ref1", &l1), *b2 = child_get_st(c.port, "ref2", &l2);
    CHECK(b1 && b2 && l1 > 4000000, "reference versions (%zu bytes)", l1);
    hc_request_port(c.port, "PUT", "/v1/layers/big", NULL, v1, -1, NULL, &r);
    CHECK(r.status == 201, "PUT big v1");
    hc_response_free(&r);
    int old_seen = 0, new_seen = 0, whole = 0;
    uint32_t seed = 777;
    for (int round = 0; round < 4 && b1 && b2; round++) {
        /* send the replacement, then kill the daemon 0-80 ms later: often in the middle of it */
        int fd = hc_connect(c.port);
        char head[256];
        const char *body = round % 2 ? v1 : v2;
        snprintf(head, sizeof head,
                 "PUT /v1/layers/big HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: "
                 "application/json\r\nContent-Length: %zu\r\n\r\n",
                 strlen(body));
        if (fd >= 0 && write(fd, head, strlen(head)) > 0 && write(fd, body, strlen(body)) > 0) {
            seed = seed * 1664525u + 1013904223u;
            usleep((seed >> 8) % 80000);
        }
        kill(c.pid, SIGKILL);
        child_wait(&c, 10000);
        if (fd >= 0)
            close(fd);
        if (!CHECK(child_start(&c, dir) == 0, "restart after SIGKILL"))
            break;
        size_t lb = 0;
        char *bb = child_get_st(c.port, "big", &lb);
        bool is_old = bb && lb == l1 && memcmp(bb, b1, l1) == 0;
        bool is_new = bb && lb == l2 && memcmp(bb, b2, l2) == 0;
        whole += is_old || is_new;
        old_seen += is_old;
        new_seen += is_new;
        free(bb);
        hc_request_port(c.port, "GET", "/readyz", NULL, NULL, 0, NULL, &r);
        CHECK(r.body && strstr(r.body, "\"damaged\":[]"), "round %d: nothing damaged: %s", round,
              r.body);
        hc_response_free(&r);
    }
    printf("  kill mid-write: %d whole, %d old, %d new\n", whole, old_seen, new_seen);
    CHECK(whole == 4, "after every kill the layer is whole: old or new (%d whole, %d old, %d new)",
          whole, old_seen, new_seen);
    kill(c.pid, SIGTERM);
    if (child_wait(&c, 40000) < 0)
        kill(c.pid, SIGKILL), child_wait(&c, 5000);
    free(b1);
    free(b2);
}

int main(void)
{
    signal(SIGPIPE, SIG_IGN);
    if (td_make(root, sizeof root, "persist") != 0)
        return 1;
    test_restart();
    test_times();
    test_sync();
    test_write_failure();
    test_hand_written();
    test_weights_io();
    test_etag();
    test_demo_memory_only();
    test_auth();
    test_cors();
    test_metrics();
    test_drain();
    test_signals();
    test_kill_mid_write();
    td_rm_rf(root);
    return check_report();
}
