/*
 * test_storage_faults.c - a full, read-only or failing disk under the data dir (issue 16), injected
 * deterministically through store/fsio.h into an in-process daemon:
 *
 *   - a full disk (ENOSPC, EDQUOT) at any step of a write - creating the layer's directory or a temp
 *     file, writing it, renaming it into place - is 507 insufficient_storage; a read-only or failing
 *     disk (EROFS, EIO) a 503 saying so; a DELETE that cannot rename the layer away likewise;
 *   - in every case the old layer keeps serving, bit for bit; no temp file (nor the empty directory of
 *     a new layer) is left behind;
 *   - a failure after the commit point (the weights renamed into place) is answered as written: the
 *     layer is committed, and the log says what did not finish;
 *   - a restart loads exactly the layers whose writes were acknowledged, with their content;
 *   - a data dir on a read-only file system at start: its layers are served, every change is a 503
 *     naming the read-only file system, and nothing on disk changes.
 */
#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "check.h"
#include "http_client.h"
#include "store/fsio.h"
#include "tmpdir.h"

static char root[64];

static srv_daemon *start_dir(const char *dir)
{
    srv_options opt;
    hc_options(&opt);
    snprintf(opt.data_dir, sizeof opt.data_dir, "%s", dir);
    return hc_start(&opt);
}

static const char *layer_body(int seed)
{
    static char b[160];
    snprintf(b, sizeof b,
             "{\"config\": {\"embed_dim\": 8, \"num_heads\": 2}, \"init\": {\"seed\": %d}}", seed);
    return b;
}

/* The layer's weights as safetensors (malloc'd; NULL when it is not served). */
static char *weights_of(srv_daemon *d, const char *name, size_t *len)
{
    static const char *const octet[] = {"Accept: application/octet-stream", NULL};
    char path[128];
    snprintf(path, sizeof path, "/v1/layers/%s/weights", name);
    hc_opts o = {.headers = octet};
    hc_response r;
    hc_request(d, "GET", path, NULL, NULL, 0, &o, &r);
    char *b = NULL;
    if (r.status == 200) {
        b = malloc(r.len + 1);
        memcpy(b, r.body, r.len);
        *len = r.len;
    }
    hc_response_free(&r);
    return b;
}

static bool same_bytes(const char *a, size_t al, const char *b, size_t bl)
{
    return a && b && al == bl && memcmp(a, b, al) == 0;
}

/* Entries below dir whose name holds ".tmp-" (temp files), one level of subdirectories deep, and
 * directories named like a layer that hold nothing; returns how many. */
static int leftovers(const char *dir)
{
    int n = 0;
    DIR *d = opendir(dir);
    struct dirent *de;
    while (d && (de = readdir(d)) != NULL) {
        if (de->d_name[0] == '.' && (strcmp(de->d_name, ".") == 0 || strcmp(de->d_name, "..") == 0))
            continue;
        if (strstr(de->d_name, ".tmp-")) {
            printf("  left behind: %s/%s\n", dir, de->d_name);
            n++;
        }
        char sub[512];
        snprintf(sub, sizeof sub, "%s/%s", dir, de->d_name);
        struct stat st;
        if (lstat(sub, &st) == 0 && S_ISDIR(st.st_mode)) {
            DIR *s = opendir(sub);
            struct dirent *se;
            int entries = 0;
            while (s && (se = readdir(s)) != NULL) {
                if (strcmp(se->d_name, ".") == 0 || strcmp(se->d_name, "..") == 0)
                    continue;
                entries++;
                if (strstr(se->d_name, ".tmp-")) {
                    printf("  left behind: %s/%s\n", sub, se->d_name);
                    n++;
                }
            }
            if (s)
                closedir(s);
            if (entries == 0) {
                printf("  left behind: empty %s\n", sub);
                n++;
            }
        }
    }
    if (d)
        closedir(d);
    return n;
}

typedef struct fault_case {
    const char *what;
    srv_fs_op op;
    const char *match;
    int skip, errnum;
    bool create;   /* a new layer (else: a replacement of "a") */
    bool remove;   /* a DELETE of "a" */
    int status;
    const char *code;
    const char *says; /* in the message */
} fault_case;

static const fault_case cases[] = {
    {"ENOSPC writing the weights", SRV_FS_WRITE, NULL, 0, ENOSPC, false, false, 507,
     "insufficient_storage", "No space left on device"},
    /* writes of a replacement of this 4-tensor layer: the version counter's (1), the weights'
     * 8-byte length, header and each tensor (2-7), config.json (8) */
    {"EDQUOT partway through the weights", SRV_FS_WRITE, NULL, 2, EDQUOT, false, false, 507,
     "insufficient_storage", "layers/a/weights.safetensors"},
    {"ENOSPC writing the config", SRV_FS_WRITE, NULL, 7, ENOSPC, false, false, 507,
     "insufficient_storage", "layers/a/config.json"},
    {"ENOSPC creating a temp file", SRV_FS_OPEN, ".weights", 0, ENOSPC, false, false, 507,
     "insufficient_storage", "layers/a/weights.safetensors"},
    {"ENOSPC creating a new layer's directory", SRV_FS_MKDIR, "n", 0, ENOSPC, true, false, 507,
     "insufficient_storage", "layers/n"},
    {"ENOSPC writing a new layer", SRV_FS_WRITE, NULL, 0, ENOSPC, true, false, 507,
     "insufficient_storage", "No space left on device"},
    {"EIO at fsync of the weights", SRV_FS_FSYNC, NULL, 0, EIO, false, false, 503, "unavailable",
     "Input/output error"},
    {"EROFS renaming the weights into place", SRV_FS_RENAME, ".weights", 0, EROFS, false, false,
     503, "unavailable", "Read-only file system"},
    {"EROFS renaming a layer away (DELETE)", SRV_FS_RENAME, "a", 0, EROFS, false, true, 503,
     "unavailable", "Read-only file system"},
    {"EIO creating a temp file", SRV_FS_OPEN, ".config", 0, EIO, false, false, 503,
     "unavailable", "Input/output error"},
};

static void test_faults(void)
{
    char dir[128], layers[160];
    snprintf(dir, sizeof dir, "%s/faults", root);
    snprintf(layers, sizeof layers, "%s/layers", dir);
    srv_daemon *d = start_dir(dir);
    if (!CHECK(d, "daemon"))
        return;
    hc_response r;
    hc_request(d, "PUT", "/v1/layers/a", NULL, layer_body(1), -1, NULL, &r);
    CHECK(r.status == 201, "PUT a");
    hc_response_free(&r);
    size_t alen = 0;
    char *a = weights_of(d, "a", &alen);

    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        const fault_case *c = &cases[i];
        srv_fs_fail(c->op, c->match, c->skip, -1, c->errnum);
        if (c->remove)
            hc_request(d, "DELETE", "/v1/layers/a", NULL, NULL, 0, NULL, &r);
        else
            hc_request(d, "PUT", c->create ? "/v1/layers/n" : "/v1/layers/a", NULL,
                       layer_body(100 + (int)i), -1, NULL, &r);
        int injected = srv_fs_failed(c->op);
        srv_fs_fail_clear();
        CHECK(injected > 0, "%s: the fault was hit", c->what);
        HC_CHECK_ERROR(r, c->status, c->code, NULL);
        CHECK(r.body && strstr(r.body, c->says) && !strstr(r.body, root),
              "%s: the message says what and where, without the server's path: %s", c->what,
              r.body);
        hc_response_free(&r);
        size_t len = 0;
        char *now = weights_of(d, "a", &len);
        CHECK(same_bytes(now, len, a, alen), "%s: the old layer keeps serving, bit for bit",
              c->what);
        free(now);
        hc_request(d, "GET", "/v1/layers/n", NULL, NULL, 0, NULL, &r);
        CHECK(r.status == 404, "%s: no new layer", c->what);
        hc_response_free(&r);
        CHECK(leftovers(layers) == 0, "%s: no temp file, no empty directory left", c->what);
    }

    /* after the commit point: the directory fsync after the rename (the fifth fsync of a
     * replacement: the version counter's temp and the data dir, the weights temp, the config
     * temp, then the layer's directory) fails; the layer is written */
    hc_request(d, "PUT", "/v1/layers/b", NULL, layer_body(6), -1, NULL, &r);
    hc_response_free(&r);
    srv_fs_fail(SRV_FS_FSYNC, NULL, 4, 1, EIO);
    hc_request(d, "PUT", "/v1/layers/b", NULL, layer_body(7), -1, NULL, &r);
    CHECK(srv_fs_failed(SRV_FS_FSYNC) == 1, "the fsync after the commit failed");
    srv_fs_fail_clear();
    CHECK(r.status == 200, "a failure after the commit point is answered as written (%ld %s)",
          r.status, r.body);
    hc_response_free(&r);
    size_t blen = 0;
    char *b = weights_of(d, "b", &blen);
    CHECK(b != NULL, "b is served");

    /* a replaced by seed 2 while config.json cannot be renamed into place: past the commit point
     * too (the weights carry the config; the next reader completes config.json) */
    srv_fs_fail(SRV_FS_RENAME, ".config", 0, 1, EIO);
    hc_request(d, "PUT", "/v1/layers/a", NULL, layer_body(2), -1, NULL, &r);
    CHECK(srv_fs_failed(SRV_FS_RENAME) == 1, "config.json's rename failed");
    srv_fs_fail_clear();
    CHECK(r.status == 200, "answered as written (%ld %s)", r.status, r.body);
    hc_response_free(&r);
    free(a);
    a = weights_of(d, "a", &alen);
    hc_stop(d);

    /* a restart loads exactly what was acknowledged */
    d = start_dir(dir);
    if (!CHECK(d, "restart"))
        goto out;
    size_t len = 0;
    char *now = weights_of(d, "a", &len);
    CHECK(same_bytes(now, len, a, alen), "a: the acknowledged version");
    free(now);
    now = weights_of(d, "b", &len);
    CHECK(same_bytes(now, len, b, blen), "b: written after its commit point, so loaded");
    free(now);
    hc_request(d, "GET", "/v1/layers", NULL, NULL, 0, NULL, &r);
    json_t *doc = hc_json(&r);
    CHECK(json_array_size(json_object_get(doc, "layers")) == 2, "a and b, nothing else: %s",
          r.body);
    json_decref(doc);
    hc_response_free(&r);
    hc_stop(d);
out:
    free(a);
    free(b);
}

static void test_read_only_fs(void)
{
    char dir[128];
    snprintf(dir, sizeof dir, "%s/rofs", root);
    srv_daemon *d = start_dir(dir);
    hc_response r;
    if (!CHECK(d, "daemon"))
        return;
    hc_request(d, "PUT", "/v1/layers/a", NULL, layer_body(1), -1, NULL, &r);
    hc_response_free(&r);
    size_t alen = 0;
    char *a = weights_of(d, "a", &alen);
    hc_stop(d);

    /* the start's write probe meets a read-only file system */
    srv_fs_fail(SRV_FS_OPEN, ".attnd-probe", 0, 1, EROFS);
    d = start_dir(dir);
    CHECK(srv_fs_failed(SRV_FS_OPEN) == 1, "the start probed the disk");
    srv_fs_fail_clear();
    if (!CHECK(d, "a read-only file system does not stop the start"))
        goto out;
    size_t len = 0;
    char *now = weights_of(d, "a", &len);
    CHECK(same_bytes(now, len, a, alen), "its layers are served");
    free(now);
    hc_request(d, "PUT", "/v1/layers/a", NULL, layer_body(5), -1, NULL, &r);
    HC_CHECK_ERROR(r, 503, "unavailable", NULL);
    CHECK(strstr(r.body, "read-only file system") != NULL, "the PUT says why: %s", r.body);
    hc_response_free(&r);
    hc_request(d, "PUT", "/v1/layers/new", NULL, layer_body(5), -1, NULL, &r);
    HC_CHECK_ERROR(r, 503, "unavailable", NULL);
    hc_response_free(&r);
    hc_request(d, "DELETE", "/v1/layers/a", NULL, NULL, 0, NULL, &r);
    HC_CHECK_ERROR(r, 503, "unavailable", NULL);
    hc_response_free(&r);
    now = weights_of(d, "a", &len);
    CHECK(same_bytes(now, len, a, alen), "and a is unchanged");
    free(now);
    hc_stop(d);
    d = start_dir(dir);
    now = d ? weights_of(d, "a", &len) : NULL;
    CHECK(same_bytes(now, len, a, alen), "on disk too");
    free(now);
    hc_request(d, "GET", "/v1/layers/new", NULL, NULL, 0, NULL, &r);
    CHECK(r.status == 404, "and nothing new");
    hc_response_free(&r);
    hc_stop(d);
out:
    free(a);
}

int main(void)
{
    if (td_make(root, sizeof root, "faults") != 0)
        return 1;
    test_faults();
    test_read_only_fs();
    td_rm_rf(root);
    return check_report();
}
