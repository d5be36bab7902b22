/*
 * test_datadir.c - layers on disk (server/store/datadir.c): write/read bit for bit, stamps for --watch,
 * crash at every step of a commit (simulated by leaving the files a crash leaves), damaged files,
 * hand-written torch layers (tests/golden_datadir/), delete, leftovers cleaned.
 */
#define _XOPEN_SOURCE 700
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "check.h"
#include "store/datadir.h"
#include "tmpdir.h"

static char root[64];

static bool exists(const char *p)
{
    struct stat st;
    return stat(p, &st) == 0;
}

/* A small packed layer: E = 4, H = 2: in_proj_weight [12,4], in_proj_bias [12], out_proj.* */
typedef struct small_layer {
    int64_t s_in[2], s_inb[1], s_out[2], s_outb[1];
    float in[48], inb[12], out[16], outb[4];
    srv_st_view v[4];
} small_layer;

static void small_init(small_layer *l, float seed)
{
    l->s_in[0] = 12, l->s_in[1] = 4, l->s_inb[0] = 12, l->s_out[0] = 4, l->s_out[1] = 4;
    l->s_outb[0] = 4;
    for (int i = 0; i < 48; i++)
        l->in[i] = seed * (float)(i - 20) / 7.0f;
    for (int i = 0; i < 12; i++)
        l->inb[i] = seed / (float)(i + 3);
    for (int i = 0; i < 16; i++)
        l->out[i] = -seed * (float)i / 3.0f;
    for (int i = 0; i < 4; i++)
        l->outb[i] = seed * 1e-7f * (float)i;
    l->v[0] = (srv_st_view){"in_proj_weight", 2, l->s_in, l->in};
    l->v[1] = (srv_st_view){"in_proj_bias", 1, l->s_inb, l->inb};
    l->v[2] = (srv_st_view){"out_proj.weight", 2, l->s_out, l->out};
    l->v[3] = (srv_st_view){"out_proj.bias", 1, l->s_outb, l->outb};
}

/* True when the read layer holds exactly l's tensors, bit for bit. */
static bool same_weights(const srv_dd_layer *got, const small_layer *l)
{
    if (got->weights.n != 4)
        return false;
    for (int k = 0; k < 4; k++) {
        const srv_st_tensor *t = srv_st_find(&got->weights, l->v[k].name);
        if (!t || t->ndim != l->v[k].ndim)
            return false;
        int64_t count = 1;
        for (int d = 0; d < t->ndim; d++) {
            if (t->shape[d] != l->v[k].shape[d])
                return false;
            count *= t->shape[d];
        }
        if (t->count != count || memcmp(t->data, l->v[k].data, (size_t)count * 4) != 0)
            return false;
    }
    return true;
}

static json_t *cfg(int batch_first)
{
    return json_pack("{s:i, s:i, s:b}", "embed_dim", 4, "num_heads", 2, "batch_first", batch_first);
}

static void test_write_read(srv_datadir *dd)
{
    small_layer a;
    small_init(&a, 1.0f);
    json_t *c = cfg(1);
    srv_error err = {0};
    srv_dd_stamp st1;
    const double times[2] = {1700000000.125, 1800000000.5};
    CHECK(srv_datadir_write(dd, "alpha", c, a.v, 4, "v1", times, &st1, &err) == 0, "write: %s",
          err.message);
    char p[512];
    snprintf(p, sizeof p, "%s/layers/alpha/config.json", root);
    CHECK(exists(p), "config.json written");
    size_t len;
    char *text = check_read_file(p, &len);
    json_t *on_disk = text ? json_loads(text, 0, NULL) : NULL;
    CHECK(on_disk && json_equal(on_disk, c), "config.json holds PUT's config object as it is");
    json_decref(on_disk);
    free(text);

    srv_dd_layer l;
    CHECK(srv_datadir_read(dd, "alpha", 1 << 20, &l, &err, NULL) == 0, "read: %s", err.message);
    CHECK(same_weights(&l, &a), "weights read back bit for bit");
    CHECK(json_equal(l.config, c), "config read back");
    CHECK(l.created == 1700000000.125 && l.updated == 1800000000.5,
          "the times stored with it read back (%.3f, %.3f)", l.created, l.updated);
    CHECK(strcmp(l.version, "v1") == 0, "version read back (%s)", l.version);
    CHECK(!l.repaired && !l.hand_edited, "clean read");
    CHECK(srv_dd_stamp_equal(&l.stamp, &st1), "read stamp = write stamp");
    CHECK(strcmp(srv_st_meta(&l.weights, "format"), "pt") == 0, "format=pt for HF tools");
    srv_dd_layer_free(&l);

    srv_dd_entry *list;
    int n = srv_datadir_list(dd, &list, &err);
    CHECK(n == 1 && strcmp(list[0].name, "alpha") == 0 && srv_dd_stamp_equal(&list[0].stamp, &st1),
          "list: alpha with its stamp (n=%d)", n);
    free(list);

    /* replace: the stamp changes, the new weights are read */
    small_layer b;
    small_init(&b, -2.0f);
    srv_dd_stamp st2;
    CHECK(srv_datadir_write(dd, "alpha", c, b.v, 4, "v2", NULL, &st2, &err) == 0, "replace");
    CHECK(!srv_dd_stamp_equal(&st1, &st2), "stamp changes on replace");
    CHECK(srv_datadir_read(dd, "alpha", 1 << 20, &l, &err, NULL) == 0 && same_weights(&l, &b) &&
              strcmp(l.version, "v2") == 0,
          "replaced weights read back");
    srv_dd_layer_free(&l);
    n = srv_datadir_list(dd, &list, &err);
    CHECK(n == 1 && srv_dd_stamp_equal(&list[0].stamp, &st2), "list shows the new stamp");
    free(list);

    /* no temp file left behind by a successful write */
    snprintf(p, sizeof p, "%s/layers/alpha", root);
    CHECK(srv_datadir_clean(dd) == 0, "nothing to clean after clean writes");
    json_decref(c);
}

/* Simulates crashes at each step of a commit of layer "beta" from v1 to v2. */
static void test_crashes(srv_datadir *dd)
{
    char other[128], dir[256], p[512], q[512];
    snprintf(other, sizeof other, "%s/other", root);
    srv_error err = {0};
    srv_datadir *od = srv_datadir_open(other, false, &err);
    if (!CHECK(od, "open second dir: %s", err.message))
        return;
    small_layer v1, v2;
    small_init(&v1, 0.5f);
    small_init(&v2, 3.0f);
    json_t *c1 = cfg(1), *c2 = cfg(0);
    srv_dd_layer l;
    snprintf(dir, sizeof dir, "%s/layers/beta", root);

    /* v2's files, as the commit would write them, made in another data dir */
    CHECK(srv_datadir_write(od, "beta", c2, v2.v, 4, "v2", NULL, NULL, &err) == 0, "v2 files");

    /* 1. crash before the commit point: temps of v2 left next to v1 (one truncated) */
    CHECK(srv_datadir_write(dd, "beta", c1, v1.v, 4, "v1", NULL, NULL, &err) == 0, "v1");
    snprintf(p, sizeof p, "%s/.weights.safetensors.tmp-99999-1", dir);
    snprintf(q, sizeof q, "%s/layers/beta/weights.safetensors", other);
    size_t len;
    char *w2 = check_read_file(q, &len);
    CHECK(w2 && td_put_file(p, w2, len / 2) == 0, "truncated weights temp");
    snprintf(p, sizeof p, "%s/.config.json.tmp-99999-2", dir);
    snprintf(q, sizeof q, "%s/layers/beta/config.json", other);
    CHECK(td_copy_file(p, q) == 0, "config temp");
    CHECK(srv_datadir_read(dd, "beta", 1 << 20, &l, &err, NULL) == 0 && same_weights(&l, &v1) &&
              json_equal(l.config, c1) && !l.repaired,
          "crash before commit: v1 loads, the temps are ignored (%s)", err.message);
    srv_dd_layer_free(&l);
    dd->temp_grace_s = 3600;
    CHECK(srv_datadir_clean(dd) == 0, "young temps are left alone (another writer's?)");
    dd->temp_grace_s = 0;
    CHECK(srv_datadir_clean(dd) == 2, "stale temps removed");
    dd->temp_grace_s = 600;

    /* 2. crash between the two renames: v2 weights committed, config.json still v1, temp there */
    snprintf(p, sizeof p, "%s/weights.safetensors", dir);
    CHECK(w2 && td_put_file(p, w2, len) == 0, "v2 weights in place");
    snprintf(p, sizeof p, "%s/.config.json.tmp-99999-3", dir);
    CHECK(td_copy_file(p, q) == 0, "v2 config temp");
    CHECK(srv_datadir_read(dd, "beta", 1 << 20, &l, &err, NULL) == 0 && same_weights(&l, &v2) &&
              json_equal(l.config, c2) && l.repaired && strcmp(l.version, "v2") == 0,
          "crash between renames: v2 loads whole, commit completed (%s)", err.message);
    srv_dd_layer_free(&l);
    snprintf(p, sizeof p, "%s/config.json", dir);
    char *ct = check_read_file(p, &len);
    json_t *cj = ct ? json_loads(ct, 0, NULL) : NULL;
    CHECK(cj && json_equal(cj, c2), "config.json rewritten to v2");
    json_decref(cj);
    free(ct);

    /* 3. a new layer whose commit stopped after the weights: config.json missing */
    snprintf(p, sizeof p, "%s/config.json", dir);
    unlink(p);
    CHECK(srv_datadir_read(dd, "beta", 1 << 20, &l, &err, NULL) == 0 && json_equal(l.config, c2) &&
              l.repaired && exists(p),
          "weights carrying their config restore a missing config.json");
    srv_dd_layer_free(&l);

    /* 3b. a config.json that is not JSON beside weights that carry their config: damage (no crash
     * between atomic renames leaves one), refused and named, the file left for whoever looks */
    CHECK(td_put_file(p, "not json", 8) == 0, "damage config.json");
    memset(&err, 0, sizeof err);
    CHECK(srv_datadir_read(dd, "beta", 1 << 20, &l, &err, NULL) == -1 &&
              strstr(err.message, "config.json") && l.config == NULL,
          "a damaged config.json is refused, not rewritten from the weights: %s", err.message);
    srv_dd_layer_free(&l);
    ct = check_read_file(p, &len);
    CHECK(ct && len == 8 && !memcmp(ct, "not json", 8), "the damaged file is left as it was");
    free(ct);
    CHECK(td_put_file(p, "", 0) == 0, "empty config.json");
    memset(&err, 0, sizeof err);
    CHECK(srv_datadir_read(dd, "beta", 1 << 20, &l, &err, NULL) == -1 && l.config == NULL,
          "an empty config.json is refused too: %s", err.message);
    srv_dd_layer_free(&l);
    unlink(p);

    /* 4. config.json edited by hand after the write (no temp): the edit wins */
    dd->temp_grace_s = 0;
    srv_datadir_clean(dd);
    json_t *edited = json_pack("{s:i, s:i, s:b}", "embed_dim", 4, "num_heads", 1, "batch_first",
                               1);
    CHECK(json_dump_file(edited, p, 0) == 0, "hand edit");
    CHECK(srv_datadir_read(dd, "beta", 1 << 20, &l, &err, NULL) == 0 && json_equal(l.config, edited) &&
              l.hand_edited && !l.repaired,
          "hand-edited config.json is used");
    srv_dd_layer_free(&l);
    json_decref(edited);

    /* 5. a truncated weights.safetensors (damaged disk, or a copy cut short): refused, named */
    snprintf(p, sizeof p, "%s/weights.safetensors", dir);
    CHECK(td_put_file(p, w2, len > 100 ? 100 : len) == 0, "truncate weights");
    memset(&err, 0, sizeof err);
    CHECK(srv_datadir_read(dd, "beta", 1 << 20, &l, &err, NULL) == -1 &&
              strstr(err.message, "layers/beta/weights.safetensors") &&
              l.config == NULL && l.weights.n == 0,
          "truncated weights refused, nothing half-loaded: %s", err.message);
    srv_dd_entry *list;
    int n = srv_datadir_list(dd, &list, &err);
    bool listed = false;
    for (int i = 0; i < n; i++)
        listed |= strcmp(list[i].name, "beta") == 0;
    CHECK(listed, "a damaged layer is still listed (so it can be reported)");
    free(list);

    /* 6. weights missing, config present */
    unlink(p);
    memset(&err, 0, sizeof err);
    CHECK(srv_datadir_read(dd, "beta", 1 << 20, &l, &err, NULL) == -1 &&
              strstr(err.message, "weights.safetensors is missing"),
          "missing weights reported: %s", err.message);

    /* 7. hand-written config.json that is not JSON, weights without attnd metadata */
    CHECK(td_copy_file(p, "tests/golden_datadir/layers/torch_mha/weights.safetensors") == 0, "copy");
    snprintf(p, sizeof p, "%s/config.json", dir);
    CHECK(td_put_file(p, "{\"embed_dim\": 8,", 16) == 0, "bad config");
    memset(&err, 0, sizeof err);
    CHECK(srv_datadir_read(dd, "beta", 1 << 20, &l, &err, NULL) == -1 &&
              strstr(err.message, "config.json is not valid JSON"),
          "bad config.json reported: %s", err.message);

    /* 8. a dir with only temps is not a layer */
    char tdir[256];
    snprintf(tdir, sizeof tdir, "%s/layers/gamma", root);
    mkdir(tdir, 0755);
    snprintf(p, sizeof p, "%s/.weights.safetensors.tmp-1-1", tdir);
    td_put_file(p, "x", 1);
    n = srv_datadir_list(dd, &list, &err);
    listed = false;
    for (int i = 0; i < n; i++)
        listed |= strcmp(list[i].name, "gamma") == 0;
    CHECK(!listed, "a dir holding only temps is not listed");
    free(list);
    memset(&err, 0, sizeof err);
    CHECK(srv_datadir_read(dd, "gamma", 1 << 20, &l, &err, NULL) == -1 &&
              err.code == SRV_E_LAYER_NOT_FOUND,
          "reading it: not found");
    dd->temp_grace_s = 600;

    free(w2);
    json_decref(c1);
    json_decref(c2);
    srv_datadir_free(od);
}

static void test_hand_written(srv_datadir *dd)
{
    const char *names[] = {"torch_mha", "torch_kv"};
    for (int k = 0; k < 2; k++) {
        char dir[256], p[512], src[256];
        snprintf(dir, sizeof dir, "%s/layers/%s", root, names[k]);
        mkdir(dir, 0755);
        const char *files[] = {"config.json", "weights.safetensors"};
        for (int f = 0; f < 2; f++) {
            snprintf(p, sizeof p, "%s/%s", dir, files[f]);
            snprintf(src, sizeof src, "tests/golden_datadir/layers/%s/%s", names[k], files[f]);
            CHECK(td_copy_file(p, src) == 0, "copy %s", src);
        }
        srv_dd_layer l;
        srv_error err = {0};
        CHECK(srv_datadir_read(dd, names[k], 1 << 20, &l, &err, NULL) == 0, "%s loads: %s", names[k],
              err.message);
        CHECK(l.version[0] == '\0' && !l.repaired && !l.hand_edited, "%s: hand-written",
              names[k]);
        CHECK(json_integer_value(json_object_get(l.config, "embed_dim")) > 0, "%s config",
              names[k]);
        CHECK(srv_st_find(&l.weights, "out_proj.weight") != NULL, "%s: torch names", names[k]);
        struct stat ws;
        snprintf(p, sizeof p, "%s/weights.safetensors", dir);
        CHECK(stat(p, &ws) == 0 &&
                  l.created == (double)ws.st_mtim.tv_sec + (double)ws.st_mtim.tv_nsec * 1e-9 &&
                  l.updated == l.created,
              "%s: written by hand, its times are the weights file's (%.3f)", names[k], l.created);
        srv_dd_layer_free(&l);
    }
}

/* A weights file is looked at from its header before its data is read: one whose tensors would
 * take more than --max-weights-bytes as float32 is refused unread (a sparse file of gigabytes, a few
 * KB on disk, made the daemon allocate three times its size before), and one with bytes no tensor
 * covers (a hole after the tensors) is no valid file. */
static void test_sized_from_header(srv_datadir *dd)
{
    char dir[256], p[512];
    snprintf(dir, sizeof dir, "%s/layers/sparse", root);
    mkdir(dir, 0755);
    snprintf(p, sizeof p, "%s/config.json", dir);
    static const char cfg_text[] = "{\"embed_dim\": 4, \"num_heads\": 2}";
    td_put_file(p, cfg_text, sizeof cfg_text - 1);
    /* 16 F16 tensors of 8M elements: 256 MiB of data, 512 MiB as float32, a hole on disk */
    char hdr[2048];
    int at = snprintf(hdr, sizeof hdr, "{");
    const long long n = 8LL << 20;
    for (int t = 0; t < 16; t++)
        at += snprintf(hdr + at, sizeof hdr - (size_t)at,
                       "%s\"t%d\":{\"dtype\":\"F16\",\"shape\":[%lld],\"data_offsets\":[%lld,%lld]}",
                       t ? "," : "", t, n, 2 * n * t, 2 * n * (t + 1));
    at += snprintf(hdr + at, sizeof hdr - (size_t)at, "}");
    snprintf(p, sizeof p, "%s/weights.safetensors", dir);
    FILE *f = fopen(p, "wb");
    unsigned long long hlen = (unsigned long long)at;
    uint8_t len8[8];
    for (int i = 0; i < 8; i++)
        len8[i] = (uint8_t)(hlen >> (8 * i));
    CHECK(f && fwrite(len8, 1, 8, f) == 8 && fwrite(hdr, 1, hlen, f) == hlen &&
              ftruncate(fileno(f), (off_t)(8 + hlen + 2 * n * 16)) == 0,
          "a sparse weights file written");
    if (f)
        fclose(f);
    const int64_t before = dd->max_weights_bytes;
    dd->max_weights_bytes = 64 << 20;
    srv_dd_layer l;
    srv_error err = {0}, log = {0};
    CHECK(srv_datadir_read(dd, "sparse", 16 << 20, &l, &err, &log) == -1 &&
              err.code == SRV_E_INSUFFICIENT_STORAGE && strstr(err.message, "134217728 numbers") &&
              strstr(err.message, "--max-weights-bytes") && strstr(err.message, "not read"),
          "a file past --max-weights-bytes is refused from its header: %s", err.message);
    /* the same file with a hole after its tensors: no valid safetensors file */
    f = fopen(p, "r+b");
    CHECK(f && ftruncate(fileno(f), (off_t)(8 + hlen + 2 * n * 16 + 4096)) == 0, "a hole added");
    if (f)
        fclose(f);
    dd->max_weights_bytes = 0;
    memset(&err, 0, sizeof err);
    CHECK(srv_datadir_read(dd, "sparse", 16 << 20, &l, &err, &log) == -1 &&
              err.code == SRV_E_BAD_REQUEST && strstr(err.message, "not a valid safetensors"),
          "bytes no tensor covers: not valid (%s; the log: %s)", err.message, log.message);
    dd->max_weights_bytes = before;
    char rm[600];
    snprintf(rm, sizeof rm, "%s/weights.safetensors", dir);
    unlink(rm);
    snprintf(rm, sizeof rm, "%s/config.json", dir);
    unlink(rm);
    rmdir(dir);
}

/* Files that are not regular files: a FIFO where a layer's file should be must be refused at
 * once (opening one blocks until a writer comes, which would hang the daemon's start), as must a
 * directory or a device. A hang ends the test by SIGALRM. */
static void test_not_regular(srv_datadir *dd)
{
    const char *files[] = {"config.json", "weights.safetensors"};
    for (int f = 0; f < 2; f++) {
        char dir[256], p[512], other[512];
        snprintf(dir, sizeof dir, "%s/layers/odd%d", root, f);
        mkdir(dir, 0755);
        snprintf(p, sizeof p, "%s/%s", dir, files[f]);
        snprintf(other, sizeof other, "%s/%s", dir, files[1 - f]);
        CHECK(td_copy_file(other, f ? "tests/golden_datadir/layers/torch_mha/config.json"
                                 : "tests/golden_datadir/layers/torch_mha/weights.safetensors") == 0,
              "copy");
        CHECK(mkfifo(p, 0644) == 0, "mkfifo %s", p);
        srv_dd_layer l;
        srv_error err = {0};
        alarm(20);
        CHECK(srv_datadir_read(dd, f ? "odd1" : "odd0", 1 << 20, &l, &err, NULL) == -1 && err.code != SRV_OK,
              "a FIFO as %s is refused: %s", files[f], err.message);
        alarm(0);
        remove(p);
        if (symlink("/dev/zero", p) == 0) {
            memset(&err, 0, sizeof err);
            CHECK(srv_datadir_read(dd, f ? "odd1" : "odd0", 1 << 20, &l, &err, NULL) == -1,
                  "/dev/zero as %s is refused: %s", files[f], err.message);
            remove(p);
        }
        mkdir(p, 0755);
        memset(&err, 0, sizeof err);
        CHECK(srv_datadir_read(dd, f ? "odd1" : "odd0", 1 << 20, &l, &err, NULL) == -1,
              "a directory as %s is refused: %s", files[f], err.message);
        rmdir(p);
        remove(other);
        rmdir(dir);
    }
}

static void test_remove(srv_datadir *dd)
{
    srv_error err = {0};
    small_layer a;
    small_init(&a, 1.5f);
    json_t *c = cfg(1);
    CHECK(srv_datadir_write(dd, "delta", c, a.v, 4, NULL, NULL, NULL, &err) == 0, "write delta");
    CHECK(srv_datadir_remove(dd, "delta", &err) == 0, "remove: %s", err.message);
    char p[512];
    snprintf(p, sizeof p, "%s/layers/delta", root);
    CHECK(!exists(p), "delta's dir is gone");
    srv_dd_layer l;
    CHECK(srv_datadir_read(dd, "delta", 1 << 20, &l, &err, NULL) == -1, "delta no longer reads");
    CHECK(srv_datadir_remove(dd, "delta", &err) == 0, "removing it again is fine");
    /* a delete interrupted after its rename leaves a hidden dir: never a layer, cleaned */
    snprintf(p, sizeof p, "%s/layers/.deleted-zeta-1-1", root);
    mkdir(p, 0755);
    char f[600];
    snprintf(f, sizeof f, "%s/weights.safetensors", p);
    td_put_file(f, "x", 1);
    srv_dd_entry *list;
    int n = srv_datadir_list(dd, &list, &err);
    bool hidden = false;
    for (int i = 0; i < n; i++)
        hidden |= list[i].name[0] == '.';
    CHECK(!hidden, "hidden dirs never listed");
    free(list);
    /* a version counter's temp left by a crash, in the data dir itself */
    char ct[256];
    snprintf(ct, sizeof ct, "%s/.attnd.counter.tmp-1-1", root);
    td_put_file(ct, "7\n", 2);
    dd->temp_grace_s = 0;
    CHECK(srv_datadir_clean(dd) >= 2 && !exists(p) && !exists(ct),
          "interrupted delete and the counter's temp cleaned");
    dd->temp_grace_s = 600;

    CHECK(!srv_dd_name_valid("../x") && !srv_dd_name_valid(".hidden") && !srv_dd_name_valid("") &&
              !srv_dd_name_valid("a/b") && srv_dd_name_valid("Layer_1.v-2"),
          "layer names checked");
    memset(&err, 0, sizeof err);
    CHECK(srv_datadir_write(dd, "../evil", c, a.v, 4, NULL, NULL, NULL, &err) == -1 &&
              err.code == SRV_E_BAD_NAME,
          "path traversal refused");
    json_decref(c);
}

static void test_open(void)
{
    srv_error err = {0};
    char p[128];
    snprintf(p, sizeof p, "%s/file", root);
    td_put_file(p, "x", 1);
    CHECK(srv_datadir_open(p, false, &err) == NULL && err.code == SRV_E_INTERNAL &&
              strstr(err.message, p),
          "a file as data dir refused: %s", err.message);
    memset(&err, 0, sizeof err);
    snprintf(p, sizeof p, "%s/file/below", root);
    CHECK(srv_datadir_open(p, false, &err) == NULL && strstr(err.message, "Not a directory"),
          "a data dir below a file refused: %s", err.message);
    memset(&err, 0, sizeof err);
    snprintf(p, sizeof p, "%s/nothing", root);
    CHECK(srv_datadir_open(p, true, &err) == NULL, "read-only open of a missing dir refused");

    /* a missing data dir is made with the directories above it, as mkdir -p */
    memset(&err, 0, sizeof err);
    snprintf(p, sizeof p, "%s/new/deeper/dd", root);
    srv_datadir *made = srv_datadir_open(p, false, &err);
    char lp[160];
    snprintf(lp, sizeof lp, "%s/layers", p);
    CHECK(made && exists(lp), "a data dir two levels below what exists is made: %s", err.message);
    srv_datadir_free(made);

    /* read-only: reads work, nothing is ever written or removed */
    memset(&err, 0, sizeof err);
    srv_datadir *ro = srv_datadir_open(root, true, &err);
    if (!CHECK(ro, "read-only open: %s", err.message))
        return;
    small_layer a;
    small_init(&a, 1.0f);
    json_t *c = cfg(1);
    CHECK(srv_datadir_write(ro, "ro", c, a.v, 4, NULL, NULL, NULL, &err) == -1 &&
              err.code == SRV_E_FORBIDDEN,
          "read-only: write refused");
    memset(&err, 0, sizeof err);
    CHECK(srv_datadir_remove(ro, "alpha", &err) == -1, "read-only: remove refused");
    char t[256];
    snprintf(t, sizeof t, "%s/layers/alpha/.config.json.tmp-1-1", root);
    td_put_file(t, "{}", 2);
    ro->temp_grace_s = 0;
    CHECK(srv_datadir_clean(ro) == 0 && exists(t), "read-only: leftovers left alone");
    srv_dd_layer l;
    CHECK(srv_datadir_read(ro, "alpha", 1 << 20, &l, &err, NULL) == 0, "read-only: alpha reads");
    srv_dd_layer_free(&l);
    json_decref(c);
    srv_datadir_free(ro);
}

int main(void)
{
    if (td_make(root, sizeof root, "datadir") != 0)
        return 1;
    char dpath[128];
    snprintf(dpath, sizeof dpath, "%s", root);
    srv_error err = {0};
    srv_datadir *dd = srv_datadir_open(dpath, false, &err);
    if (CHECK(dd, "open: %s", err.message)) {
        test_write_read(dd);
        test_crashes(dd);
        test_hand_written(dd);
        test_sized_from_header(dd);
        test_not_regular(dd);
        test_remove(dd);
    }
    test_open();
    srv_datadir_free(dd);
    td_rm_rf(root);
    return check_report();
}
