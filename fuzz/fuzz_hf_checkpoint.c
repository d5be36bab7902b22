/*
 * fuzz_hf_checkpoint.c - a Hugging Face checkpoint directory written by anyone (store/hf_checkpoint.h,
 * store/hf_import.h): config.json, model.safetensors or an index and its shards, and links,
 * opened and imported as POST /v1/layers/{name}/import does (confined below the checkpoints dir)
 * or as `attnd import` does (not confined).
 *
 * Input: one byte (bits 0-2: the layer index; bit 3: confined, as the HTTP route; bit 4: ask for
 * layer 2^40 instead), then files, each "NAME" NUL, 3 bytes little-endian length, the bytes; NAME
 * may not hold '/' (one is made '_'). A NAME starting with '@' is a symbolic link NAME[1..] whose
 * target is the bytes ("../../outside/model.safetensors"). The checkpoint is base/ckpt, confined
 * below base/ (the --checkpoints-dir); next to base/ lies outside/, a checkpoint of its own whose
 * config has "fuzz_outside": true and whose weights hold a tensor "fuzz.outside".
 * Checks: a refusal is a client error with a message that never shows the directory's absolute
 * path; confined, nothing of outside/ is ever read (its config or its marker tensor seen through the
 * checkpoint); an import that succeeds gives a config object and finite float32 tensors whose
 * counts are the products of their shapes, which srv_persist_build takes or refuses as a client
 * error (a family whose engine extensions this build lacks).
 */
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <dirent.h>

#include "store/hf_checkpoint.h"
#include "store/hf_import.h"
#include "store/persist.h"
#include "fuzz_fail.h"

#define MAX_EL (1 << 16)

static char root[256], ckpt[300];
static int root_fd = -1; /* base/, below which a confined checkpoint stays */

static void write_at(const char *dir, const char *name, const void *p, size_t n)
{
    char path[600];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_NOFOLLOW | O_CLOEXEC, 0644);
    if (fd < 0)
        return; /* e.g. a name that is a directory already */
    if (n && write(fd, p, n) != (ssize_t)n)
        FAIL("short write to %s", path);
    close(fd);
}

static void empty_ckpt(void)
{
    DIR *d = opendir(ckpt);
    if (!d)
        FAIL("cannot open %s", ckpt);
    struct dirent *de;
    while ((de = readdir(d)) != NULL) {
        if (strcmp(de->d_name, ".") == 0 || strcmp(de->d_name, "..") == 0)
            continue;
        unlinkat(dirfd(d), de->d_name, 0);
    }
    closedir(d);
}

static void setup(void)
{
    const char *tmp = getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp";
    snprintf(root, sizeof root, "%s/attnd-fuzz-hf-%d", tmp, (int)getpid());
    char base[300], outside[300];
    snprintf(base, sizeof base, "%s/base", root);
    snprintf(ckpt, sizeof ckpt, "%s/base/ckpt", root);
    snprintf(outside, sizeof outside, "%s/outside", root);
    mkdir(root, 0700);
    mkdir(base, 0700);
    mkdir(ckpt, 0700);
    mkdir(outside, 0700);
    root_fd = open(base, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (root_fd < 0)
        FAIL("cannot open %s: %s", root, strerror(errno));
    static const char cfg[] = "{\"model_type\": \"bert\", \"hidden_size\": 4, \"num_attention_heads\": "
                              "2, \"num_hidden_layers\": 1, \"fuzz_outside\": true}";
    write_at(outside, "config.json", cfg, sizeof cfg - 1);
    static const char hdr[] = "{\"fuzz.outside\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}}";
    uint8_t st[8 + sizeof hdr + 8] = {0};
    uint64_t hl = sizeof hdr - 1;
    memcpy(st, &hl, 8);
    memcpy(st + 8, hdr, hl);
    write_at(outside, "model.safetensors", st, 8 + hl + 4);
    static const char index[] = "{\"weight_map\": {\"fuzz.outside\": \"model.safetensors\"}}";
    write_at(outside, "model.safetensors.index.json", index, sizeof index - 1);
}

static const uint8_t *input; /* the current input: a message may quote it (a tensor's name) */
static size_t input_size;

static void check_error(const srv_error *err, const char *what)
{
    if (err->code == SRV_OK || err->code == SRV_E_INTERNAL || !err->message[0])
        FAIL("%s refused with code %d: %s", what, err->code, err->message);
    /* libFuzzer learns the path from this very strstr and writes it into names the message may
     * quote: only a path the input does not hold is the server's own */
    if (strstr(err->message, root) && !memmem(input, input_size, root, strlen(root)))
        FAIL("%s: the message shows the server's path: %s", what, err->message);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (root_fd < 0)
        setup();
    if (size < 1)
        return 0;
    input = data;
    input_size = size;
    empty_ckpt();
    bool beneath = data[0] & 8;
    int64_t layer = data[0] & 16 ? (int64_t)1 << 40 : data[0] & 7;
    for (size_t i = 1; i < size;) {
        const uint8_t *nul = memchr(data + i, 0, size - i);
        if (!nul || (size_t)(nul - data) + 4 > size)
            break;
        char name[256];
        size_t nl = (size_t)(nul - (data + i));
        snprintf(name, sizeof name, "%.*s", (int)nl, (const char *)data + i);
        for (char *c = name; *c; c++)
            if (*c == '/')
                *c = '_';
        size_t at = (size_t)(nul - data) + 1;
        size_t len = (size_t)data[at] | (size_t)data[at + 1] << 8 | (size_t)data[at + 2] << 16;
        at += 3;
        if (len > size - at)
            len = size - at;
        if (name[0] == '@' && name[1]) {
            char target[512], path[600];
            snprintf(target, sizeof target, "%.*s", (int)len, (const char *)data + at);
            snprintf(path, sizeof path, "%s/%s", ckpt, name + 1);
            if (symlink(target, path) != 0 && errno != EEXIST && errno != ENOENT &&
                errno != ENAMETOOLONG && errno != EINVAL)
                FAIL("symlink %s: %s", path, strerror(errno));
        } else if (name[0] && strcmp(name, ".") != 0 && strcmp(name, "..") != 0) {
            write_at(ckpt, name, data + at, len);
        }
        i = at + len;
    }

    srv_error err = {0};
    srv_ckpt *ck = beneath ? srv_ckpt_open(root_fd, "ckpt", true, &err)
                           : srv_ckpt_open(AT_FDCWD, ckpt, false, &err);
    if (!ck) {
        check_error(&err, "open");
        return 0;
    }
    if (beneath && (json_object_get(srv_ckpt_config(ck), "fuzz_outside") ||
                    srv_ckpt_has(ck, "fuzz.outside")))
        FAIL("confined, and outside/ was read through a link");
    mha_limits lim;
    mha_limits_default(&lim);
    lim.max_elements = MAX_EL;
    lim.max_dim = 1 << 12;
    srv_hf_layer hl;
    if (srv_hf_import(ck, layer, &lim, NULL, NULL, &hl, &err) != 0) {
        check_error(&err, "import");
        srv_ckpt_free(ck);
        return 0;
    }
    if (!json_is_object(hl.config))
        FAIL("the imported config is not an object");
    for (int i = 0; i < hl.weights.n; i++) {
        const srv_st_tensor *t = &hl.weights.tensors[i];
        int64_t c = 1;
        for (int d = 0; d < t->ndim; d++)
            c *= t->shape[d];
        if (c != t->count || c > MAX_EL)
            FAIL("tensor %s: count %lld, shape product %lld", t->name, (long long)t->count,
                 (long long)c);
        for (int64_t k = 0; k < c; k++)
            if (!isfinite(t->data[k]))
                FAIL("tensor %s element %lld is %g", t->name, (long long)k, t->data[k]);
    }
    srv_layer *l = srv_persist_build("x", hl.config, &hl.weights, &lim, &err);
    if (!l)
        check_error(&err, "build");
    srv_layer_release(l);
    srv_hf_layer_free(&hl);
    srv_ckpt_free(ck);
    return 0;
}
