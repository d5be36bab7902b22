/*
 * test_datadir_hostile.c - a data dir someone else can write to (issue 22), end to end on in-process
 * daemons over HTTP: it is never followed out of itself, never blocks the daemon, and its files'
 * contents never reach a reply.
 *
 *   - a layer directory that is a symbolic link to a real layer elsewhere: not loaded (at start and
 *     by --watch), listed in /readyz as a link; PUT and DELETE of its name answer 409 and leave the
 *     link, its target and every file in the target exactly as they were (bytes and inode);
 *   - a weights.safetensors that is a link to a file outside: the layer is reported, not loaded; a
 *     PUT replaces the link by a real file and a DELETE unlinks the link, the target stays;
 *   - a FIFO in place of weights.safetensors, and a FIFO, a socket and a file in place of a layer
 *     directory: start and --watch never block on them (SIGALRM ends a hang), each is reported with
 *     what it is, and PUT/DELETE of a name taken by one is a 409 that leaves it there;
 *   - layers/ itself a link stops the start with a message saying so; the data dir's own path may be
 *     a link.
 */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include "check.h"
#include "http_client.h"
#include "codec/safetensors.h"
#include "store/persist.h"
#include "tmpdir.h"

static char root[64];

#define LAYER "{\"config\": {\"embed_dim\": 8, \"num_heads\": 2}, \"init\": {\"seed\": 3}}"

static srv_daemon *start_dir(const char *dir, bool watch)
{
    srv_options opt;
    hc_options(&opt);
    snprintf(opt.data_dir, sizeof opt.data_dir, "%s", dir);
    opt.watch = watch;
    opt.watch_interval_ms = 20;
    return hc_start(&opt);
}

static long request(srv_daemon *d, const char *method, const char *path, const char *body,
                    const char *if_match, char *out, size_t size)
{
    char h[64];
    const char *headers[] = {h, NULL};
    snprintf(h, sizeof h, "If-Match: %s", if_match ? if_match : "");
    hc_opts o = {.headers = if_match ? headers : NULL};
    hc_response r;
    hc_request(d, method, path, NULL, body, body ? -1 : 0, &o, &r);
    if (out)
        snprintf(out, size, "%s", r.body ? r.body : "");
    long s = r.status;
    hc_response_free(&r);
    return s;
}

/* A file's identity and content, to prove nothing changed it. */
typedef struct snap {
    bool ok;
    struct stat st;
    char *bytes;
    size_t len;
} snap;

static snap take(const char *path)
{
    snap s = {0};
    s.ok = lstat(path, &s.st) == 0;
    if (s.ok && S_ISREG(s.st.st_mode))
        s.bytes = check_read_file(path, &s.len);
    return s;
}

static bool unchanged(const snap *a, const char *path)
{
    snap b = take(path);
    bool same = a->ok && b.ok && a->st.st_ino == b.st.st_ino && a->st.st_size == b.st.st_size &&
                a->st.st_mtim.tv_sec == b.st.st_mtim.tv_sec &&
                a->st.st_mtim.tv_nsec == b.st.st_mtim.tv_nsec && a->len == b.len &&
                (!a->bytes || (b.bytes && memcmp(a->bytes, b.bytes, a->len) == 0));
    free(b.bytes);
    return same;
}

/* The /readyz reason for name, copied into out ("" when it is not listed). */
static const char *readyz_reason(srv_daemon *d, const char *name, char *out, size_t size)
{
    hc_response r;
    hc_request(d, "GET", "/readyz", NULL, NULL, 0, NULL, &r);
    json_t *doc = hc_json(&r);
    out[0] = '\0';
    json_t *dmg = json_object_get(doc, "damaged"), *e;
    size_t i;
    json_array_foreach(dmg, i, e)
    {
        if (strcmp(json_string_value(json_object_get(e, "name")) ?: "", name) == 0)
            snprintf(out, size, "%s", json_string_value(json_object_get(e, "reason")) ?: "");
    }
    json_decref(doc);
    hc_response_free(&r);
    return out;
}

/* Makes a real layer at <dir>/layers/<name> through a daemon of its own. */
static bool make_layer(const char *dir, const char *name)
{
    srv_daemon *d = start_dir(dir, false);
    char path[128];
    snprintf(path, sizeof path, "/v1/layers/%s", name);
    long s = d ? request(d, "PUT", path, LAYER, NULL, NULL, 0) : 0;
    hc_stop(d);
    return s == 201;
}

#define MARK "CANARYSECRET"

/* Writes a safetensors file of an E=8, H=2 layer's parameters plus extra tensors/metadata. */
static bool write_weights(const char *path, const char *extra_tensor, const char *meta_value)
{
    float w_in[3 * 8 * 8] = {0}, b_in[3 * 8] = {0}, w_out[8 * 8] = {0}, b_out[8] = {0}, x[1] = {0};
    int64_t s_in[2] = {24, 8}, s_b[1] = {24}, s_out[2] = {8, 8}, s_bo[1] = {8}, s_x[1] = {1};
    srv_st_view v[5] = {{"in_proj_weight", 2, s_in, w_in},
                        {"in_proj_bias", 1, s_b, b_in},
                        {"out_proj.weight", 2, s_out, w_out},
                        {"out_proj.bias", 1, s_bo, b_out},
                        {extra_tensor, 1, s_x, x}};
    json_t *meta = json_pack("{s:s}", "format", "pt");
    if (meta_value)
        json_object_set_new(meta, "attnd.config", json_string(meta_value));
    srv_buf b;
    srv_buf_init(&b);
    bool ok = srv_st_write(&b, v, extra_tensor ? 5 : 4, meta, NULL) == 0 &&
              td_put_file(path, b.data, b.len) == 0;
    srv_buf_free(&b);
    json_decref(meta);
    return ok;
}

static void test_no_contents_in_replies(void)
{
    char dir[128], p[256], q[300], reason[400];
    snprintf(dir, sizeof dir, "%s/contents", root);
    const char *cfg_ok = "{\"embed_dim\": 8, \"num_heads\": 2}";
    struct {
        const char *name, *config; /* config.json text (NULL: hard link to the secret) */
        const char *tensor, *meta; /* weights: an extra tensor, attnd.config metadata  */
        const char *raw_weights;   /* weights.safetensors bytes instead (NULL: none)    */
        const char *want;          /* what /readyz must say                             */
    } cases[] = {
        {"badjson", "{\"embed_dim\": " MARK "}", NULL, NULL, NULL,
         "layers/badjson/config.json is not valid JSON: invalid syntax (line 1, column "},
        {"dup", "{\"embed_dim\": 8, \"num_heads\": 2, \"" MARK "\": 1, \"" MARK "\": 2}", NULL,
         NULL, NULL, "a key given twice (line 1"},
        {"unknown", "{\"embed_dim\": 8, \"num_heads\": 2, \"" MARK "\": 1}", NULL, NULL, NULL,
         "layers/unknown: config.json holds a field that is not a config field"},
        {"secret", NULL, NULL, NULL, NULL, "layers/secret/config.json is not valid JSON"},
        {"tensor", cfg_ok, MARK, NULL, NULL,
         "weights.safetensors holds a tensor that is not a parameter"},
        {"meta", cfg_ok, NULL, "{\"" MARK "\": ", NULL,
         "layers/meta/weights.safetensors: its attnd.config metadata is not valid JSON"},
        {"header", cfg_ok, NULL, NULL, MARK MARK MARK,
         "layers/header/weights.safetensors is not a valid safetensors file"},
        {"shape", "{\"embed_dim\": 4, \"num_heads\": 2}", NULL, NULL, NULL,
         "has shape [24"},
    };
    char secret[256];
    snprintf(secret, sizeof secret, "%s/secret.txt", root);
    td_put_file(secret, "password=" MARK "\n", strlen("password=" MARK "\n"));
    mkdir(dir, 0755);
    snprintf(p, sizeof p, "%s/layers", dir);
    mkdir(p, 0755);
    int n = (int)(sizeof cases / sizeof cases[0]);
    for (int i = 0; i < n; i++) {
        snprintf(p, sizeof p, "%s/layers/%s", dir, cases[i].name);
        mkdir(p, 0755);
        snprintf(q, sizeof q, "%s/config.json", p);
        if (cases[i].config)
            td_put_file(q, cases[i].config, strlen(cases[i].config));
        else
            CHECK(link(secret, q) == 0, "config.json hard-linked to a secret file");
        snprintf(q, sizeof q, "%s/weights.safetensors", p);
        if (cases[i].raw_weights)
            td_put_file(q, cases[i].raw_weights, strlen(cases[i].raw_weights));
        else
            CHECK(write_weights(q, cases[i].tensor, cases[i].meta), "weights of %s", cases[i].name);
    }
    srv_daemon *d = start_dir(dir, false);
    if (!CHECK(d, "daemon starts"))
        return;
    hc_response r;
    hc_request(d, "GET", "/readyz", NULL, NULL, 0, NULL, &r);
    CHECK(r.status == 200 && !strstr(r.body, MARK) && !strstr(r.body, root),
          "/readyz shows neither the marker nor an absolute path: %s", r.body);
    hc_response_free(&r);
    for (int i = 0; i < n; i++) {
        readyz_reason(d, cases[i].name, reason, sizeof reason);
        CHECK(strstr(reason, cases[i].want) != NULL, "%s: %s", cases[i].name, reason);
    }
    /* error replies about those names: none shows the marker or a path either */
    char body[1024];
    for (int i = 0; i < n; i++) {
        char path[96];
        snprintf(path, sizeof path, "/v1/layers/%s/forward", cases[i].name);
        request(d, "POST", path, "{\"query\": [[[1,2,3,4,5,6,7,8]]]}", NULL, body, sizeof body);
        CHECK(!strstr(body, MARK) && !strstr(body, root), "forward %s: %s", cases[i].name, body);
    }
    /* a write that fails names the file relative to the data dir; a directory where the weights
     * belong is a 409 saying so (it was a 503 with Retry-After, which no retry ever changed), and
     * the directory is kept */
    snprintf(p, sizeof p, "%s/layers/w", dir);
    mkdir(p, 0755);
    snprintf(p, sizeof p, "%s/layers/w/weights.safetensors", dir);
    mkdir(p, 0755);
    snprintf(p, sizeof p, "%s/layers/w/weights.safetensors/x", dir);
    td_put_file(p, "x", 1);
    long st = request(d, "PUT", "/v1/layers/w", LAYER, NULL, body, sizeof body);
    struct stat sb;
    CHECK(st == 409 && strstr(body, "layers/w/weights.safetensors") && !strstr(body, root) &&
              strstr(body, "remove it by hand") && stat(p, &sb) == 0,
          "a failed write names layers/w/weights.safetensors, not the server's path: %ld %s", st,
          body);
    hc_stop(d);
}

static void on_alarm(int sig)
{
    (void)sig;
    static const char msg[] = "test_datadir_hostile: a data dir operation blocked (SIGALRM)\n"
                              "0 passed, 1 failed\n";
    ssize_t w = write(1, msg, sizeof msg - 1);
    (void)w;
    _exit(1);
}

static void test_linked_layer_dir(void)
{
    char dir[128], outside[128], p[256], q[256], reason[400], body[1024];
    snprintf(dir, sizeof dir, "%s/linkdir", root);
    snprintf(outside, sizeof outside, "%s/outside", root);
    if (!CHECK(make_layer(outside, "victim"), "a real layer outside the data dir"))
        return;
    snprintf(p, sizeof p, "%s/layers/victim/canary.txt", outside);
    td_put_file(p, "keep me", 7);
    snprintf(p, sizeof p, "%s/layers", dir);
    mkdir(dir, 0755);
    mkdir(p, 0755);
    snprintf(p, sizeof p, "%s/layers/x", dir);
    snprintf(q, sizeof q, "%s/layers/victim", outside);
    CHECK(symlink(q, p) == 0, "layers/x -> a layer outside");

    char wf[300], cf[300], kf[300];
    snprintf(wf, sizeof wf, "%s/weights.safetensors", q);
    snprintf(cf, sizeof cf, "%s/config.json", q);
    snprintf(kf, sizeof kf, "%s/canary.txt", q);
    snap sw = take(wf), sc = take(cf), sk = take(kf), sl = take(p), sd = take(q);

    srv_daemon *d = start_dir(dir, false);
    if (!CHECK(d, "daemon starts"))
        goto out;
    CHECK(request(d, "GET", "/v1/layers/x", NULL, NULL, NULL, 0) == 404,
          "a linked layer dir is not loaded");
    readyz_reason(d, "x", reason, sizeof reason);
    CHECK(strstr(reason, "symbolic link") && strstr(reason, "layers/x"),
          "/readyz lists it as a link: %s", reason);
    CHECK(!strstr(reason, root), "the reason names no absolute path: %s", reason);

    CHECK(request(d, "PUT", "/v1/layers/x", LAYER, NULL, body, sizeof body) == 409,
          "PUT through the link: 409 (%s)", body);
    CHECK(strstr(body, "\"conflict\"") && strstr(body, "symbolic link") && !strstr(body, root),
          "the reply says why, without paths: %s", body);
    CHECK(request(d, "DELETE", "/v1/layers/x", NULL, NULL, body, sizeof body) == 409,
          "DELETE through the link: 409 (%s)", body);
    CHECK(request(d, "DELETE", "/v1/layers/x", NULL, "*", body, sizeof body) == 409,
          "DELETE with If-Match: 409 (%s)", body);
    CHECK(request(d, "PUT", "/v1/layers/x/weights", "{}", NULL, NULL, 0) == 404,
          "PUT weights of it: not a layer (404)");
    CHECK(unchanged(&sl, p), "the link is still there, unchanged");
    CHECK(unchanged(&sd, q) && unchanged(&sw, wf) && unchanged(&sc, cf) && unchanged(&sk, kf),
          "the target and every file in it are untouched");
    hc_stop(d);

    /* --watch: a link that appears later is reported, never loaded */
    d = start_dir(dir, true);
    if (!CHECK(d, "daemon with --watch"))
        goto out;
    char p2[256];
    snprintf(p2, sizeof p2, "%s/layers/y", dir);
    CHECK(symlink(q, p2) == 0, "layers/y -> the same layer, after start");
    srv_app *app = srv_daemon_app(d);
    srv_watch_scan(app->watch);
    CHECK(request(d, "GET", "/v1/layers/y", NULL, NULL, NULL, 0) == 404, "--watch skips it");
    readyz_reason(d, "y", reason, sizeof reason);
    CHECK(strstr(reason, "symbolic link") != NULL, "and /readyz lists it: %s", reason);
    unlink(p2);
    srv_watch_scan(app->watch);
    readyz_reason(d, "y", reason, sizeof reason);
    CHECK(reason[0] == '\0', "once the link is gone, it is no longer listed");
    CHECK(unchanged(&sd, q) && unchanged(&sw, wf) && unchanged(&sc, cf) && unchanged(&sk, kf),
          "the target is still untouched");
    hc_stop(d);
out:
    free(sw.bytes);
    free(sc.bytes);
    free(sk.bytes);
}

static void test_linked_file(void)
{
    char dir[128], p[256], target[256], reason[400], body[1024];
    snprintf(dir, sizeof dir, "%s/linkfile", root);
    if (!CHECK(make_layer(dir, "y"), "layer y"))
        return;
    snprintf(target, sizeof target, "%s/outside-weights.safetensors", root);
    snprintf(p, sizeof p, "%s/layers/y/weights.safetensors", dir);
    CHECK(rename(p, target) == 0 && symlink(target, p) == 0,
          "layers/y/weights.safetensors -> a file outside");
    snap st = take(target);

    srv_daemon *d = start_dir(dir, false);
    if (!CHECK(d, "daemon starts"))
        return;
    CHECK(request(d, "GET", "/v1/layers/y", NULL, NULL, NULL, 0) == 404, "y is not loaded");
    readyz_reason(d, "y", reason, sizeof reason);
    CHECK(strstr(reason, "layers/y/weights.safetensors is a symbolic link") != NULL,
          "/readyz says which file is a link: %s", reason);
    CHECK(request(d, "PUT", "/v1/layers/y", LAYER, NULL, body, sizeof body) == 201,
          "PUT y: written (%s)", body);
    struct stat ls;
    CHECK(lstat(p, &ls) == 0 && S_ISREG(ls.st_mode), "the link was replaced by a real file");
    CHECK(unchanged(&st, target), "the file it pointed to is untouched");

    CHECK(unlink(p) == 0 && symlink(target, p) == 0, "the link again");
    CHECK(request(d, "DELETE", "/v1/layers/y", NULL, NULL, body, sizeof body) == 204,
          "DELETE y (%s)", body);
    CHECK(unchanged(&st, target), "the delete unlinked the link, not its target");
    hc_stop(d);
    free(st.bytes);
}

static void test_not_files(void)
{
    char dir[128], p[256], reason[400], body[1024];
    snprintf(dir, sizeof dir, "%s/fifo", root);
    if (!CHECK(make_layer(dir, "w"), "layer w") || !CHECK(make_layer(dir, "ok"), "layer ok"))
        return;
    /* a FIFO in place of weights.safetensors: opening it for reading would wait for a writer */
    snprintf(p, sizeof p, "%s/layers/w/weights.safetensors", dir);
    CHECK(unlink(p) == 0 && mkfifo(p, 0644) == 0, "FIFO as w's weights");
    /* a FIFO, a socket and a file where layer directories go */
    char fz[256], sz[256], rz[256];
    snprintf(fz, sizeof fz, "%s/layers/fz", dir);
    snprintf(sz, sizeof sz, "%s/layers/sz", dir);
    snprintf(rz, sizeof rz, "%s/layers/rz", dir);
    CHECK(mkfifo(fz, 0644) == 0, "FIFO layers/fz");
    int sock = socket(AF_UNIX, SOCK_STREAM, 0);
    struct sockaddr_un sa = {.sun_family = AF_UNIX};
    snprintf(sa.sun_path, sizeof sa.sun_path, "%.100s", sz);
    CHECK(sock >= 0 && bind(sock, (struct sockaddr *)&sa, sizeof sa) == 0, "socket layers/sz");
    td_put_file(rz, "not a layer", 11);

    alarm(30);
    srv_daemon *d = start_dir(dir, true);
    if (!CHECK(d, "the start does not hang on FIFOs"))
        goto out;
    CHECK(request(d, "GET", "/v1/layers/ok", NULL, NULL, NULL, 0) == 200, "the others serve");
    readyz_reason(d, "w", reason, sizeof reason);
    CHECK(strstr(reason, "layers/w/weights.safetensors is a FIFO") != NULL, "w: %s", reason);
    readyz_reason(d, "fz", reason, sizeof reason);
    CHECK(strstr(reason, "layers/fz is a FIFO") != NULL, "fz: %s", reason);
    readyz_reason(d, "sz", reason, sizeof reason);
    CHECK(strstr(reason, "layers/sz is a socket") != NULL, "sz: %s", reason);
    readyz_reason(d, "rz", reason, sizeof reason);
    CHECK(strstr(reason, "layers/rz is a file") != NULL, "rz: %s", reason);

    /* --watch meets a FIFO that appears later, in a layer it serves */
    srv_app *app = srv_daemon_app(d);
    char ok[256];
    snprintf(ok, sizeof ok, "%s/layers/ok/weights.safetensors", dir);
    CHECK(unlink(ok) == 0 && mkfifo(ok, 0644) == 0, "FIFO as ok's weights, after start");
    srv_watch_scan(app->watch);
    srv_watch_stats s0 = srv_watch_get_stats(app->watch);
    for (int i = 0; i < 200 && srv_watch_get_stats(app->watch).scans < s0.scans + 3; i++)
        usleep(10000);
    CHECK(srv_watch_get_stats(app->watch).scans >= s0.scans + 3, "the watcher keeps scanning");
    CHECK(request(d, "GET", "/v1/layers/ok", NULL, NULL, NULL, 0) == 200,
          "the version in memory keeps serving");
    readyz_reason(d, "ok", reason, sizeof reason);
    CHECK(strstr(reason, "is a FIFO") != NULL, "and the FIFO is reported: %s", reason);

    const char *names[] = {"fz", "sz", "rz"};
    const char *paths[] = {fz, sz, rz};
    for (int i = 0; i < 3; i++) {
        char path[64];
        snprintf(path, sizeof path, "/v1/layers/%s", names[i]);
        snap before = take(paths[i]);
        CHECK(request(d, "PUT", path, LAYER, NULL, body, sizeof body) == 409, "PUT %s: 409 (%s)",
              names[i], body);
        CHECK(request(d, "DELETE", path, NULL, NULL, body, sizeof body) == 409,
              "DELETE %s: 409 (%s)", names[i], body);
        CHECK(unchanged(&before, paths[i]), "%s is left as it was", names[i]);
        free(before.bytes);
    }
    /* a layer whose weights are a FIFO can be replaced through the API (the FIFO goes) */
    CHECK(request(d, "PUT", "/v1/layers/w", LAYER, NULL, body, sizeof body) == 201,
          "PUT w over its FIFO (%s)", body);
    hc_stop(d);
out:
    alarm(0);
    if (sock >= 0)
        close(sock);
}

static void test_root_links(void)
{
    char dir[128], p[256], q[256];
    srv_error err = {0};
    /* layers/ itself a link: refused at start, saying so */
    snprintf(dir, sizeof dir, "%s/layerslink", root);
    snprintf(q, sizeof q, "%s/elsewhere", root);
    mkdir(dir, 0755);
    mkdir(q, 0755);
    snprintf(p, sizeof p, "%s/layers", dir);
    CHECK(symlink(q, p) == 0, "layers -> elsewhere");
    srv_persist *ps = srv_persist_create(dir, false, SRV_LOG_OFF, &err);
    CHECK(!ps && strstr(err.message, "symbolic link"), "a linked layers/ stops the start: %s",
          err.message);
    srv_persist_free(ps);

    /* the data dir's own path may be a link */
    char real[128], link[128];
    snprintf(real, sizeof real, "%s/realdir", root);
    snprintf(link, sizeof link, "%s/dirlink", root);
    if (!CHECK(make_layer(real, "z"), "layer z") || !CHECK(symlink(real, link) == 0, "link"))
        return;
    srv_daemon *d = start_dir(link, false);
    CHECK(d && request(d, "GET", "/v1/layers/z", NULL, NULL, NULL, 0) == 200,
          "a data dir reached through a link serves its layers");
    hc_stop(d);
}

/* Versions a file claims past SRV_DD_VERSION_TRUSTED are not believed: a layer whose weights say
 * "attnd.version": 2^53 (the last version there is), or a counter file saying so, used up the
 * versions and left every later change refused with 503, even after that layer was deleted. */
static void test_version_claims(void)
{
    char dir[128], path[256], cfgp[256];
    snprintf(dir, sizeof dir, "%s/versions", root);
    mkdir(dir, 0755);
    snprintf(path, sizeof path, "%s/layers", dir);
    mkdir(path, 0755);
    snprintf(path, sizeof path, "%s/layers/claims", dir);
    mkdir(path, 0755);
    snprintf(cfgp, sizeof cfgp, "%s/layers/claims/config.json", dir);
    static const char cfg[] = "{\"embed_dim\": 8, \"num_heads\": 2}";
    td_put_file(cfgp, cfg, sizeof cfg - 1);
    float w_in[3 * 8 * 8] = {0}, b_in[3 * 8] = {0}, w_out[8 * 8] = {0}, b_out[8] = {0};
    int64_t s_in[2] = {24, 8}, s_b[1] = {24}, s_out[2] = {8, 8}, s_bo[1] = {8};
    srv_st_view v[4] = {{"in_proj_weight", 2, s_in, w_in},
                        {"in_proj_bias", 1, s_b, b_in},
                        {"out_proj.weight", 2, s_out, w_out},
                        {"out_proj.bias", 1, s_bo, b_out}};
    json_t *meta = json_pack("{s:s, s:s}", "format", "pt", "attnd.version", "9007199254740992");
    srv_buf b;
    srv_buf_init(&b);
    snprintf(path, sizeof path, "%s/layers/claims/weights.safetensors", dir);
    CHECK(srv_st_write(&b, v, 4, meta, NULL) == 0 && td_put_file(path, b.data, b.len) == 0,
          "a layer claiming version 2^53 written");
    srv_buf_free(&b);
    json_decref(meta);
    srv_daemon *d = start_dir(dir, false);
    if (!CHECK(d != NULL, "daemon on it"))
        return;
    char out[512];
    CHECK(request(d, "GET", "/v1/layers/claims", NULL, NULL, out, sizeof out) == 200,
          "the layer is served: %.200s", out);
    CHECK(request(d, "PUT", "/v1/layers/next", LAYER, NULL, out, sizeof out) == 201,
          "a change after it is served, not refused for used-up versions: %.200s", out);
    CHECK(request(d, "DELETE", "/v1/layers/next", NULL, NULL, out, sizeof out) == 204,
          "and so is a delete");
    hc_stop(d);
    /* the counter file claiming the last version: taken for damaged, not believed */
    snprintf(path, sizeof path, "%s/attnd.counter", dir);
    td_put_file(path, "9007199254740992\n", 17);
    d = start_dir(dir, false);
    CHECK(d && request(d, "PUT", "/v1/layers/after", LAYER, NULL, out, sizeof out) == 201,
          "a counter claiming 2^53 does not refuse changes: %.200s", out);
    hc_stop(d);
}

/* The names /readyz lists as damaged that start with prefix. */
static int readyz_count(srv_daemon *d, const char *prefix)
{
    hc_response r;
    hc_request(d, "GET", "/readyz", NULL, NULL, 0, NULL, &r);
    json_t *doc = hc_json(&r);
    json_t *dmg = json_object_get(doc, "damaged"), *e;
    size_t i;
    int n = 0;
    json_array_foreach(dmg, i, e)
        n += strncmp(json_string_value(json_object_get(e, "name")) ?: "", prefix, strlen(prefix)) == 0;
    json_decref(doc);
    hc_response_free(&r);
    return n;
}

/* Many strays with --watch (the list of them is indexed by name, grown by doubling, and rebuilt
 * as they go): every one listed once, the ones removed gone from the list at the next scan, the
 * ones that come back listed again, a damaged layer among them kept, and changes served. */
static void test_many_strays(void)
{
    char dir[128], path[256];
    snprintf(dir, sizeof dir, "%s/strays", root);
    mkdir(dir, 0755);
    snprintf(path, sizeof path, "%s/layers", dir);
    mkdir(path, 0755);
    enum { N = 600 };
    for (int i = 0; i < N; i++) {
        snprintf(path, sizeof path, "%s/layers/s%04d", dir, i);
        td_put_file(path, "", 0);
    }
    srv_daemon *d = start_dir(dir, true);
    if (!CHECK(d != NULL, "daemon on a data dir of %d strays", N))
        return;
    CHECK(readyz_count(d, "s") == N, "all %d listed once (%d)", N, readyz_count(d, "s"));
    for (int i = 0; i < N; i += 2) {
        snprintf(path, sizeof path, "%s/layers/s%04d", dir, i);
        unlink(path);
    }
    int n = -1;
    for (int k = 0; k < 200 && (n = readyz_count(d, "s")) != N / 2; k++)
        usleep(20000);
    CHECK(n == N / 2, "the removed half leaves the list (%d listed)", n);
    char out[512];
    CHECK(request(d, "PUT", "/v1/layers/real", LAYER, NULL, out, sizeof out) == 201,
          "a change is served among them: %.200s", out);
    for (int i = 0; i < N; i += 4) {
        snprintf(path, sizeof path, "%s/layers/s%04d", dir, i);
        td_put_file(path, "", 0);
    }
    for (int k = 0; k < 200 && (n = readyz_count(d, "s")) != N / 2 + N / 4; k++)
        usleep(20000);
    CHECK(n == N / 2 + N / 4, "the ones that came back are listed again, once (%d)", n);
    char reason[512];
    CHECK(readyz_reason(d, "s0001", reason, sizeof reason)[0] != '\0' &&
              readyz_reason(d, "s0000", reason, sizeof reason)[0] != '\0' &&
              readyz_reason(d, "s0002", reason, sizeof reason)[0] == '\0',
          "each name looked up where it is");
    hc_stop(d);
}

int main(void)
{
    signal(SIGALRM, on_alarm);
    signal(SIGPIPE, SIG_IGN);
    if (td_make(root, sizeof root, "hostile") != 0)
        return 1;
    test_linked_layer_dir();
    test_linked_file();
    test_not_files();
    test_root_links();
    test_no_contents_in_replies();
    test_version_claims();
    test_many_strays();
    td_rm_rf(root);
    return check_report();
}
