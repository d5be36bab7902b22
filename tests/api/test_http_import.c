/*
 * test_http_import.c - Hugging Face checkpoints through the programs a user runs:
 *
 *   - `attnd import` (the binary) on every checkpoint of tests/data/hf/ with --check against the
 *     model's own output, then a daemon on that data dir answers forward passes with the model's
 *     attn_output and attn_weights; a daemon already running with --watch picks an import up;
 *   - POST /v1/layers/{name}/import on a daemon with --checkpoints-dir: the same layers, the API key,
 *     --checkpoints-dir off (403), and names or links leaving the checkpoints directory;
 *   - hostile checkpoints (truncated, overlapping offsets, a header past the file, 2^63 sizes, ../
 *     shard names) through both: an error naming the file and tensor, a non-zero exit or a 4xx, and
 *     nothing written.
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
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
#include "store/config.h"
#include "tensor_json.h"
#include "tmpdir.h"

#define HF_DIR "tests/data/hf"
#define KEY "Authorization: Bearer k3y"

static char attnd[PATH_MAX];
/* Runs `attnd import ARGS...` (NULL-terminated), stdout into out (size bytes), stderr into errout;
 * returns the exit status (-1 when it did not exit). */
static int run_import(char *out, size_t size, char *errout, size_t esize, const char *const *args)
{
    char cmd[4096];
    int o = snprintf(cmd, sizeof cmd, "%s import", attnd);
    for (; *args && o < (int)sizeof cmd; args++)
        o += snprintf(cmd + o, sizeof cmd - (size_t)o, " '%s'", *args);
    char ef[] = "/tmp/attnd-test-import-err-XXXXXX";
    int efd = mkstemp(ef);
    if (efd < 0)
        return -1;
    close(efd);
    snprintf(cmd + o, sizeof cmd - (size_t)o, " 2>%s", ef);
    FILE *p = popen(cmd, "r");
    if (!p)
        return -1;
    size_t n = fread(out, 1, size - 1, p);
    out[n] = '\0';
    int st = pclose(p);
    FILE *e = fopen(ef, "r");
    n = e ? fread(errout, 1, esize - 1, e) : 0;
    errout[n] = '\0';
    if (e)
        fclose(e);
    unlink(ef);
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

/* The reference tensors of a case (owned by *ref). */
static bool read_ref(const char *name, srv_st *ref)
{
    char path[512];
    snprintf(path, sizeof path, HF_DIR "/%s/reference.safetensors", name);
    size_t len;
    char *b = check_read_file(path, &len);
    srv_error err = {0};
    bool ok = b && srv_st_parse(ref, (const uint8_t *)b, len, 1 << 24, "ref", &err) == 0;
    free(b);
    return ok;
}

/* POSTs the reference's hidden_states to layer name's forward and compares with the model's
 * attn_output and attn_weights (the layer's own is_causal, unless this build lacks the field). */
static void forward_matches(srv_daemon *d, const char *name, const char *ckpt, const json_t *want)
{
    srv_st ref = {0};
    if (!CHECK(read_ref(ckpt, &ref), "%s: reference", ckpt))
        return;
    const srv_st_tensor *x = srv_st_find(&ref, "hidden_states");
    const srv_st_tensor *y = srv_st_find(&ref, "attn_output");
    const srv_st_tensor *w = srv_st_find(&ref, "attn_weights");
    json_t *body = json_pack("{s:o, s:b, s:b, s:s}", "query", tj_base64(x->data, 3, x->shape),
                             "need_weights", 1, "average_attn_weights", 0, "encoding", "base64");
    char *text = json_dumps(body, JSON_COMPACT);
    char path[128];
    snprintf(path, sizeof path, "/v1/layers/%s/forward", name);
    hc_response r;
    hc_request(d, "POST", path, NULL, text, -1, NULL, &r);
    json_t *doc = hc_json(&r);
    tj_tensor out = {0}, wt = {0};
    if (CHECK(r.status == 200 && doc && tj_read(&out, json_object_get(doc, "output")) == 0 &&
                  tj_read(&wt, json_object_get(doc, "attn_weights")) == 0,
              "%s: forward %ld: %.300s", ckpt, r.status, r.body ? r.body : "") &&
        CHECK(out.count == y->count && wt.count == w->count, "%s: output sizes", ckpt)) {
        char what[128];
        snprintf(what, sizeof what, "%s attn_output over HTTP", ckpt);
        check_close_array(__FILE__, __LINE__, what, out.data, y->data, y->count, NULL);
        snprintf(what, sizeof what, "%s attn_weights over HTTP", ckpt);
        check_close_array(__FILE__, __LINE__, what, wt.data, w->data, w->count, NULL);
    }
    tj_free(&out);
    tj_free(&wt);
    json_decref(doc);
    hc_response_free(&r);
    free(text);
    json_decref(body);
    srv_st_free(&ref);
}

static json_t *load_cases(void)
{
    size_t len;
    char *text = check_read_file(HF_DIR "/cases.json", &len);
    json_t *doc = text ? json_loadb(text, len, 0, NULL) : NULL;
    free(text);
    return doc;
}

static bool exists(const char *path)
{
    struct stat st;
    return stat(path, &st) == 0;
}

/* ---------------------------------------------------------------------------------------------- */

static void test_cli(json_t *cases)
{
    char dd[128];
    if (td_make(dd, sizeof dd, "import-cli") != 0)
        return;
    size_t i;
    json_t *c;
    int imported = 0;
    json_array_foreach(json_object_get(cases, "cases"), i, c) {
        const char *name = json_string_value(json_object_get(c, "checkpoint"));
        char dir[256], layer[16], check[300], out[2048], err[2048];
        snprintf(dir, sizeof dir, HF_DIR "/%s", name);
        snprintf(layer, sizeof layer, "%lld", (long long)json_integer_value(json_object_get(c, "layer")));
        snprintf(check, sizeof check, "%s/reference.safetensors", dir);
        const char *args[] = {dir, "--layer", layer, "--name", name, "--data-dir", dd, "--check", check, NULL};
        int st = run_import(out, sizeof out, err, sizeof err, args);
        CHECK(st == 0 && strstr(out, "imported layer") && strstr(out, "max |diff|") && !err[0],
              "%s: attnd import exits %d: %s%s", name, st, out, err);
        imported += st == 0;
    }
    CHECK(imported == (int)json_array_size(json_object_get(cases, "cases")) && imported >= 7,
          "every checkpoint imported (%d)", imported);

    /* a daemon started on that data dir serves them with the model's numbers */
    srv_options opt;
    hc_options(&opt);
    snprintf(opt.data_dir, sizeof opt.data_dir, "%s", dd);
    srv_daemon *d = hc_start(&opt);
    if (CHECK(d, "daemon on the imported data dir")) {
        json_array_foreach(json_object_get(cases, "cases"), i, c) {
            const json_t *want = json_object_get(c, "config");
            const char *name = json_string_value(json_object_get(c, "checkpoint"));
            forward_matches(d, name, name, want);
        }
    }
    hc_stop(d);

    /* usage errors: exit 2 */
    char out[2048], err[2048];
    const char *no_layer[] = {HF_DIR "/bert_base", "--name", "x", "--data-dir", dd, NULL};
    CHECK(run_import(out, sizeof out, err, sizeof err, no_layer) == 2 && strstr(err, "--layer"),
          "no --layer: %s", err);
    const char *bad_name[] = {HF_DIR "/bert_base", "--layer", "0", "--name", "../x", "--data-dir", dd, NULL};
    CHECK(run_import(out, sizeof out, err, sizeof err, bad_name) == 2 && strstr(err, "not a layer name"),
          "bad --name: %s", err);
    const char *unknown_last[] = {HF_DIR "/bert_base", "--layer", "0", "--name", "x", "--data-dir", dd,
                                  "--bogus", NULL};
    CHECK(run_import(out, sizeof out, err, sizeof err, unknown_last) == 2 &&
              strstr(err, "unknown option '--bogus'"),
          "an unknown flag last is named as unknown, not as missing its value: %s", err);
    const char *help[] = {"--help", NULL};
    CHECK(run_import(out, sizeof out, err, sizeof err, help) == 0 && strstr(out, "--checkpoints") == NULL &&
              strstr(out, "--layer I"), "--help: %s", out);
    /* a reference the layer does not reproduce: nothing written */
    const char *wrong_ref[] = {HF_DIR "/bert_mlm_sharded_f16", "--layer", "0", "--name", "wrong", "--data-dir",
                               dd, "--check", HF_DIR "/bert_base/reference.safetensors", "--quiet", NULL};
    char p[512];
    snprintf(p, sizeof p, "%s/layers/wrong", dd);
    CHECK(run_import(out, sizeof out, err, sizeof err, wrong_ref) == 1 && strstr(err, "does not reproduce") &&
              strstr(err, "taken from layer 0, the --layer imported?") &&
              !exists(p), "--check with another layer's reference: %s", err);
    td_rm_rf(dd);
}

/* A daemon running with --watch serves a layer `attnd import` writes, without a restart. */
static void test_watch(void)
{
    char dd[128];
    if (td_make(dd, sizeof dd, "import-watch") != 0)
        return;
    srv_options opt;
    hc_options(&opt);
    snprintf(opt.data_dir, sizeof opt.data_dir, "%s", dd);
    opt.watch = true;
    opt.watch_interval_ms = 50;
    srv_daemon *d = hc_start(&opt);
    char out[2048], err[2048];
    const char *args[] = {HF_DIR "/bert_base", "--layer", "1", "--name", "watched", "--data-dir", dd, "--quiet", NULL};
    if (CHECK(d, "daemon with --watch") &&
        CHECK(run_import(out, sizeof out, err, sizeof err, args) == 0, "import: %s", err)) {
        long status = 0;
        for (int t = 0; t < 400 && status != 200; t++) { /* up to 20 s on a loaded machine */
            hc_response r;
            hc_request(d, "GET", "/v1/layers/watched", NULL, NULL, -1, NULL, &r);
            status = r.status;
            hc_response_free(&r);
            if (status != 200)
                usleep(50000);
        }
        CHECK(status == 200, "the watching daemon serves the imported layer (last status %ld)", status);
        json_t *plain = json_object(); /* BERT: no is_causal */
        forward_matches(d, "watched", "bert_base", plain);
        json_decref(plain);
    }
    hc_stop(d);
    td_rm_rf(dd);
}

/* ---------------------------------------------------------------------------------------------- */

static char ckroot[128];

static void put_st(const char *path, const char *header, size_t n, uint64_t hlen_override)
{
    size_t hl = strlen(header);
    uint8_t *b = calloc(1, 8 + hl + n);
    uint64_t h = hlen_override ? hlen_override : hl;
    for (int i = 0; i < 8; i++)
        b[i] = (uint8_t)(h >> (8 * i));
    memcpy(b + 8, header, hl);
    td_put_file(path, b, 8 + hl + n);
    free(b);
}

#define GPT2_CFG "{\"model_type\":\"gpt2\",\"n_embd\":4,\"n_head\":2,\"n_layer\":1}"

/* The hostile checkpoints below ckroot, each named for what is wrong with it. */
static void make_hostile(void)
{
    char d[512], p[600];
    static const struct {
        const char *name, *header;
        size_t data;
        uint64_t hlen;
    } st[] = {
        {"truncated", "{\"h.0.attn.c_attn.weight\":{\"dtype\":\"F32\",\"shape\":[4,12],\"data_offsets\":[0,192]}}", 100, 0},
        {"overlap", "{\"h.0.attn.c_attn.bias\":{\"dtype\":\"F32\",\"shape\":[12],\"data_offsets\":[0,48]},"
                    "\"h.0.attn.c_attn.weight\":{\"dtype\":\"F32\",\"shape\":[4,12],\"data_offsets\":[16,208]}}", 208, 0},
        {"header_past_end", "{}", 0, 4096},
        {"header_2_63", "{}", 0, (uint64_t)1 << 63},
        {"size_2_63", "{\"h.0.attn.c_attn.weight\":{\"dtype\":\"F32\",\"shape\":[9223372036854775807],"
                      "\"data_offsets\":[0,192]}}", 192, 0},
    };
    for (size_t i = 0; i < sizeof st / sizeof st[0]; i++) {
        snprintf(d, sizeof d, "%s/%s", ckroot, st[i].name);
        mkdir(d, 0755);
        snprintf(p, sizeof p, "%s/config.json", d);
        td_put_file(p, GPT2_CFG, strlen(GPT2_CFG));
        snprintf(p, sizeof p, "%s/model.safetensors", d);
        put_st(p, st[i].header, st[i].data, st[i].hlen);
    }
    snprintf(d, sizeof d, "%s/dotdot_shard", ckroot);
    mkdir(d, 0755);
    snprintf(p, sizeof p, "%s/config.json", d);
    td_put_file(p, GPT2_CFG, strlen(GPT2_CFG));
    snprintf(p, sizeof p, "%s/model.safetensors.index.json", d);
    const char *idx = "{\"weight_map\":{\"h.0.attn.c_attn.weight\":\"../bert_base/model.safetensors\"}}";
    td_put_file(p, idx, strlen(idx));
}

static const struct {
    const char *name;
    const char *want; /* in the message */
} HOSTILE[] = {
    {"truncated", "model.safetensors"},
    {"overlap", "overlap"},
    {"header_past_end", "past the end"},
    {"header_2_63", "over the limit"},
    {"size_2_63", "h.0.attn.c_attn.weight"},
    {"dotdot_shard", "not a file name"},
};

static void test_hostile_cli(void)
{
    char dd[128];
    if (td_make(dd, sizeof dd, "import-hostile") != 0)
        return;
    for (size_t i = 0; i < sizeof HOSTILE / sizeof HOSTILE[0]; i++) {
        char dir[300], out[2048], err[2048], p[512];
        snprintf(dir, sizeof dir, "%s/%s", ckroot, HOSTILE[i].name);
        const char *args[] = {dir, "--layer", "0", "--name", "h", "--data-dir", dd, NULL};
        int st = run_import(out, sizeof out, err, sizeof err, args);
        snprintf(p, sizeof p, "%s/layers/h", dd);
        CHECK(st == 1 && strstr(err, HOSTILE[i].want) && !out[0] && !exists(p),
              "attnd import %s: exit %d, '%s' in: %s", HOSTILE[i].name, st, HOSTILE[i].want, err);
    }
    td_rm_rf(dd);
}

static void import_req(srv_daemon *d, const char *layer_name, const char *body, bool key, hc_response *r)
{
    char path[160];
    snprintf(path, sizeof path, "/v1/layers/%s/import", layer_name);
    const char *headers[] = {KEY, NULL};
    hc_opts o = {.headers = key ? headers : NULL};
    hc_request(d, "POST", path, NULL, body, -1, &o, r);
}

static void test_http(json_t *cases)
{
    /* off by default */
    srv_daemon *d = hc_start(NULL);
    hc_response r;
    if (CHECK(d, "daemon")) {
        import_req(d, "x", "{\"checkpoint\": \"bert_base\", \"layer\": 0}", false, &r);
        HC_CHECK_ERROR(r, 403, "forbidden", "checkpoint");
        hc_response_free(&r);
    }
    hc_stop(d);

    /* the checkpoints dir: copies of the golden checkpoints, and the hostile ones */
    size_t i;
    json_t *c;
    json_array_foreach(json_object_get(cases, "cases"), i, c) {
        const char *name = json_string_value(json_object_get(c, "checkpoint"));
        char cmd[1024];
        snprintf(cmd, sizeof cmd, "cp -r " HF_DIR "/%s %s/", name, ckroot);
        CHECK(system(cmd) == 0, "%s", cmd);
    }
    char dd[128];
    if (td_make(dd, sizeof dd, "import-http") != 0)
        return;
    srv_options opt;
    hc_options(&opt);
    snprintf(opt.data_dir, sizeof opt.data_dir, "%s", dd);
    snprintf(opt.checkpoints_dir, sizeof opt.checkpoints_dir, "%s", ckroot);
    snprintf(opt.api_key, sizeof opt.api_key, "k3y");
    d = hc_start(&opt);
    if (!CHECK(d, "daemon with --checkpoints-dir")) {
        td_rm_rf(dd);
        return;
    }
    import_req(d, "nokey", "{\"checkpoint\": \"bert_base\", \"layer\": 1}", false, &r);
    HC_CHECK_ERROR(r, 401, "unauthorized", NULL);
    hc_response_free(&r);

    json_array_foreach(json_object_get(cases, "cases"), i, c) {
        const char *name = json_string_value(json_object_get(c, "checkpoint"));
        const json_t *want = json_object_get(c, "config");
        char body[256];
        snprintf(body, sizeof body, "{\"checkpoint\": \"%s\", \"layer\": %lld}", name,
                 (long long)json_integer_value(json_object_get(c, "layer")));
        import_req(d, name, body, true, &r);
        json_t *doc = hc_json(&r);
        CHECK(r.status == 201 && doc &&
                  json_integer_value(json_object_get(json_object_get(doc, "import"), "tensors")) >= 4,
              "%s: import over HTTP %ld: %.300s", name, r.status, r.body ? r.body : "");
        forward_matches(d, name, name, want);
        json_decref(doc);
        hc_response_free(&r);
    }
    /* again: replaced (200), and on disk for the next start */
    import_req(d, "bert_base", "{\"checkpoint\": \"bert_base\", \"layer\": 0}", true, &r);
    CHECK(r.status == 200, "re-import replaces: %ld", r.status);
    hc_response_free(&r);
    char p[512];
    snprintf(p, sizeof p, "%s/layers/bert_base/weights.safetensors", dd);
    CHECK(exists(p), "the imported layer is in the data dir");

    static const struct {
        const char *body;
        int status;
        const char *code, *field;
    } BAD[] = {
        {"{\"checkpoint\": \"../hf\", \"layer\": 0}", 400, "bad_request", "checkpoint"},
        {"{\"checkpoint\": \"/etc\", \"layer\": 0}", 400, "bad_request", "checkpoint"},
        {"{\"checkpoint\": \"bert_base/../bert_base\", \"layer\": 0}", 400, "bad_request", "checkpoint"},
        {"{\"checkpoint\": \"outside\", \"layer\": 0}", 400, "bad_request", "checkpoint"},
        {"{\"checkpoint\": \"nothing_here\", \"layer\": 0}", 404, "not_found", "checkpoint"},
        {"{\"checkpoint\": \"bert_base\", \"layer\": 2}", 400, "bad_request", "layer"},
        {"{\"checkpoint\": \"bert_base\", \"layer\": -1}", 400, "bad_request", "layer"},
        {"{\"checkpoint\": \"bert_base\", \"layer\": \"0\"}", 400, "bad_request", "layer"},
        {"{\"checkpoint\": \"bert_base\"}", 400, "missing_field", "layer"},
        {"{\"layer\": 0}", 400, "missing_field", "checkpoint"},
        {"{\"checkpoint\": \"bert_base\", \"layer\": 0, \"dtype\": 1}", 400, "unknown_field", "dtype"},
        {"{\"checkpoint\": 7, \"layer\": 0}", 400, "bad_request", "checkpoint"},
        {"[1]", 400, NULL, NULL},
    };
    for (size_t b = 0; b < sizeof BAD / sizeof BAD[0]; b++) {
        import_req(d, "bad", BAD[b].body, true, &r);
        if (BAD[b].code)
            HC_CHECK_ERROR(r, BAD[b].status, BAD[b].code, BAD[b].field);
        else
            CHECK(r.status == BAD[b].status, "%s: %ld", BAD[b].body, r.status);
        hc_response_free(&r);
    }
    for (size_t h = 0; h < sizeof HOSTILE / sizeof HOSTILE[0]; h++) {
        char body[256];
        snprintf(body, sizeof body, "{\"checkpoint\": \"%s\", \"layer\": 0}", HOSTILE[h].name);
        import_req(d, "bad", body, true, &r);
        CHECK(r.status >= 400 && r.status < 500 && r.body && strstr(r.body, HOSTILE[h].want),
              "import of %s over HTTP: %ld %.300s", HOSTILE[h].name, r.status, r.body ? r.body : "");
        hc_response_free(&r);
    }
    snprintf(p, sizeof p, "%s/layers/bad", dd);
    CHECK(!exists(p), "nothing written for the refused imports");
    import_req(d, "..", "{\"checkpoint\": \"bert_base\", \"layer\": 0}", true, &r);
    CHECK(r.status == 400 || r.status == 404, "layer name '..': %ld", r.status);
    hc_response_free(&r);
    hc_stop(d);

    /* --max-weights-bytes is checked from config.json before a tensor is read: a layer too big
     * is a 507 even when its tensors are damaged (they were read, and the layer allocated, first) */
    {
        /* a well-formed GPT-2 checkpoint whose every weight is NaN: reading it is a 400 */
        char nd[512], np[600];
        snprintf(nd, sizeof nd, "%s/nan_weights", ckroot);
        mkdir(nd, 0755);
        snprintf(np, sizeof np, "%s/config.json", nd);
        td_put_file(np, GPT2_CFG, strlen(GPT2_CFG));
        snprintf(np, sizeof np, "%s/model.safetensors", nd);
        const char *hdr =
            "{\"h.0.attn.c_attn.weight\":{\"dtype\":\"F32\",\"shape\":[4,12],\"data_offsets\":[0,192]},"
            "\"h.0.attn.c_attn.bias\":{\"dtype\":\"F32\",\"shape\":[12],\"data_offsets\":[192,240]},"
            "\"h.0.attn.c_proj.weight\":{\"dtype\":\"F32\",\"shape\":[4,4],\"data_offsets\":[240,304]},"
            "\"h.0.attn.c_proj.bias\":{\"dtype\":\"F32\",\"shape\":[4],\"data_offsets\":[304,320]}}";
        size_t hl = strlen(hdr);
        uint8_t *b = malloc(8 + hl + 320);
        for (int k = 0; k < 8; k++)
            b[k] = (uint8_t)((uint64_t)hl >> (8 * k));
        memcpy(b + 8, hdr, hl);
        memset(b + 8 + hl, 0xff, 320); /* NaN */
        td_put_file(np, b, 8 + hl + 320);
        free(b);
    }
    opt.max_weights_bytes = 256; /* a GPT-2 layer of n_embd 4 is 80 parameters, 320 bytes */
    d = hc_start(&opt);
    if (CHECK(d, "daemon with --max-weights-bytes 256")) {
        import_req(d, "small", "{\"checkpoint\": \"nan_weights\", \"layer\": 0}", true, &r);
        HC_CHECK_ERROR(r, 507, "insufficient_storage", NULL);
        hc_response_free(&r);
        hc_response h;
        hc_request(d, "GET", "/metrics", NULL, NULL, 0, NULL, &h);
        CHECK(h.body && strstr(h.body, "attnd_weights_bytes 0\n"),
              "nothing stays reserved after the 507");
        hc_response_free(&h);
    }
    hc_stop(d);
    td_rm_rf(dd);
}

int main(void)
{
    const char *build = getenv("BUILD");
    snprintf(attnd, sizeof attnd, "%s/attnd", build && build[0] ? build : "build");
    if (!CHECK(access(attnd, X_OK) == 0, "%s is built", attnd))
        return check_report();
    json_t *cases = load_cases();
    if (!CHECK(cases, "read " HF_DIR "/cases.json"))
        return check_report();
    if (td_make(ckroot, sizeof ckroot, "checkpoints") == 0) {
        make_hostile();
        /* a link inside the checkpoints dir that leads out of it */
        char link[300];
        snprintf(link, sizeof link, "%s/outside", ckroot);
        CHECK(symlink("/tmp", link) == 0, "symlink: %s", strerror(errno));
        test_cli(cases);
        test_watch();
        test_hostile_cli();
        test_http(cases);
        td_rm_rf(ckroot);
    }
    json_decref(cases);
    return check_report();
}
