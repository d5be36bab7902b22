/*
 * hf_checkpoint.c - a Hugging Face checkpoint read one tensor at a time (see hf_checkpoint.h).
 */
#include "hf_checkpoint.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <linux/openat2.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "codec/json_error.h"

#define CONFIG_FILE "config.json"
#define SINGLE_FILE "model.safetensors"
#define INDEX_FILE "model.safetensors.index.json"
#define CHUNK_BYTES ((size_t)4 << 20) /* a tensor is read and converted this much at a time */

typedef struct ck_shard {
    char *file;             /* owned: plain file name in the checkpoint directory            */
    int fd;                 /* -1 until its header is read                                    */
    uint64_t data_start;    /* file offset of the data buffer: 8 + header length              */
    srv_st_header header;   /* read on first use                                              */
    bool loaded;
} ck_shard;

struct srv_ckpt {
    int base_fd;            /* borrowed                                                       */
    char *dir;              /* owned: the checkpoint's path relative to base_fd               */
    bool beneath;
    json_t *config;         /* owned                                                          */
    json_t *weight_map;     /* owned reference into the index, or NULL (single file)         */
    ck_shard *shards;       /* owned: [nshards]                                               */
    int nshards;
    uint64_t bytes_read;
    uint8_t *chunk;         /* owned: CHUNK_BYTES of read buffer, allocated on first read     */
};

/* ---------------------------------------------------------------------------------------------- */
/* Opening files, confined or not                                                                 */

/* A path to confine: relative, no empty, "." or ".." part. */
static bool rel_path_ok(const char *p)
{
    if (!p[0] || p[0] == '/' || strlen(p) >= PATH_MAX / 2)
        return false;
    const char *s = p;
    while (*s) {
        const char *e = strchr(s, '/');
        size_t n = e ? (size_t)(e - s) : strlen(s);
        if (n == 0 || (n == 1 && s[0] == '.') || (n == 2 && s[0] == '.' && s[1] == '.'))
            return false;
        s += n + (e ? 1 : 0);
        if (e && !*s)
            return false; /* trailing slash */
    }
    return true;
}

/* Opens rel below base without following any link (for kernels without openat2). */
static int open_nofollow_walk(int base, const char *rel, int flags)
{
    char buf[PATH_MAX];
    snprintf(buf, sizeof buf, "%s", rel);
    int dir = base, fd = -1;
    char *save = NULL;
    char *part = strtok_r(buf, "/", &save);
    while (part) {
        char *next = strtok_r(NULL, "/", &save);
        int f = next ? (O_RDONLY | O_DIRECTORY | O_CLOEXEC | O_NOFOLLOW) : (flags | O_NOFOLLOW);
        fd = openat(dir, part, f);
        if (dir != base)
            close(dir);
        if (fd < 0)
            return -1;
        dir = fd;
        part = next;
    }
    return fd;
}

/* Opens rel (relative to base, confined when beneath) with flags; -1 with errno. */
static int open_at(int base, const char *rel, bool beneath, int flags)
{
    if (!beneath)
        return openat(base, rel, flags);
    struct open_how how = {.flags = (uint64_t)flags,
                           .resolve = RESOLVE_BENEATH | RESOLVE_NO_MAGICLINKS};
    int fd = (int)syscall(SYS_openat2, base, rel, &how, sizeof how);
    if (fd < 0 && errno == ENOSYS)
        return open_nofollow_walk(base, rel, flags);
    return fd;
}

/* Why an open failed, for a message. */
static const char *open_reason(int e, bool beneath)
{
    if (e == ENOENT)
        return "does not exist";
    if (beneath && (e == EXDEV || e == ELOOP))
        return "leads out of the checkpoints directory (a link or '..')";
    return strerror(e);
}

/* Opens the checkpoint's file `file` as a regular file for reading: *fd and *size. */
static int ck_open_file(srv_ckpt *ck, const char *file, int *fd, uint64_t *size, srv_error *err)
{
    char rel[PATH_MAX];
    int n = snprintf(rel, sizeof rel, "%s/%s", ck->dir, file);
    if (n < 0 || n >= (int)sizeof rel)
        return srv_error_set(err, SRV_E_BAD_REQUEST, "checkpoint", "%s: path too long", file);
    /* O_NONBLOCK: a FIFO planted as a shard must not block the open */
    *fd = open_at(ck->base_fd, rel, ck->beneath, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
    if (*fd < 0)
        return srv_error_set(err, SRV_E_BAD_REQUEST, "checkpoint", "%s %s", file,
                             open_reason(errno, ck->beneath));
    struct stat st;
    if (fstat(*fd, &st) != 0 || !S_ISREG(st.st_mode)) {
        close(*fd);
        *fd = -1;
        return srv_error_set(err, SRV_E_BAD_REQUEST, "checkpoint", "%s is not a regular file", file);
    }
    *size = (uint64_t)st.st_size;
    return 0;
}

/* preads exactly n bytes at off; -1 with err on a short read (the file shrank) or an error. */
static int ck_pread(srv_ckpt *ck, int fd, void *buf, size_t n, uint64_t off, const char *file,
                    srv_error *err)
{
    size_t got = 0;
    while (got < n) {
        ssize_t r = pread(fd, (char *)buf + got, n - got, (off_t)(off + got));
        if (r < 0 && errno == EINTR)
            continue;
        if (r < 0)
            return srv_error_set(err, SRV_E_INTERNAL, "checkpoint", "reading %s: %s", file,
                                 strerror(errno));
        if (r == 0)
            return srv_error_set(err, SRV_E_BAD_REQUEST, "checkpoint",
                                 "%s ends at byte %" PRIu64 ", before what its header says (truncated, "
                                 "or changed while reading)", file, off + got);
        got += (size_t)r;
    }
    ck->bytes_read += n;
    return 0;
}

/* Reads a whole small file (at most max bytes) and parses it as a JSON object. */
static json_t *ck_read_json(srv_ckpt *ck, const char *file, size_t max, srv_error *err)
{
    int fd;
    uint64_t size;
    if (ck_open_file(ck, file, &fd, &size, err) != 0)
        return NULL;
    json_t *doc = NULL;
    char *buf = NULL;
    if (size > max) {
        srv_error_set(err, SRV_E_BAD_REQUEST, "checkpoint",
                      "%s is %" PRIu64 " bytes, over the limit of %zu", file, size, max);
        goto done;
    }
    buf = malloc(size ? (size_t)size : 1);
    if (!buf) {
        srv_error_set(err, SRV_E_NOMEM, "checkpoint", "out of memory reading %s", file);
        goto done;
    }
    if (ck_pread(ck, fd, buf, (size_t)size, 0, file, err) != 0)
        goto done;
    json_error_t jerr;
    doc = json_loadb(buf, (size_t)size, JSON_REJECT_DUPLICATES, &jerr);
    if (!doc)
        srv_error_set(err, SRV_E_BAD_REQUEST, "checkpoint",
                      "%s is not valid JSON: %s (line %d, column %d)", file,
                      srv_json_problem(&jerr), jerr.line, jerr.column); /* never its text */
    else if (!json_is_object(doc)) {
        srv_error_set(err, SRV_E_BAD_REQUEST, "checkpoint", "%s is not a JSON object", file);
        json_decref(doc);
        doc = NULL;
    }
done:
    free(buf);
    close(fd);
    return doc;
}

/* True when the checkpoint has file (any kind of entry). */
static bool ck_exists(srv_ckpt *ck, const char *file)
{
    char rel[PATH_MAX];
    int n = snprintf(rel, sizeof rel, "%s/%s", ck->dir, file);
    if (n < 0 || n >= (int)sizeof rel)
        return false;
    int fd = open_at(ck->base_fd, rel, ck->beneath, O_PATH | O_CLOEXEC);
    if (fd < 0)
        return errno != ENOENT;
    close(fd);
    return true;
}

/* A shard file name from the index: a plain name in the checkpoint directory. */
static bool shard_name_ok(const char *s)
{
    size_t n = strlen(s);
    if (n == 0 || n > 255 || s[0] == '.')
        return false;
    for (size_t i = 0; i < n; i++)
        if (s[i] == '/' || s[i] == '\\' || (unsigned char)s[i] < 0x20)
            return false;
    return true;
}

static int add_shard(srv_ckpt *ck, const char *file, srv_error *err)
{
    for (int i = 0; i < ck->nshards; i++)
        if (strcmp(ck->shards[i].file, file) == 0)
            return 0;
    ck_shard *g = realloc(ck->shards, (size_t)(ck->nshards + 1) * sizeof *g);
    if (!g)
        return srv_error_set(err, SRV_E_NOMEM, "checkpoint", "out of memory");
    ck->shards = g;
    ck_shard *s = &ck->shards[ck->nshards];
    memset(s, 0, sizeof *s);
    s->fd = -1;
    s->file = strdup(file);
    if (!s->file)
        return srv_error_set(err, SRV_E_NOMEM, "checkpoint", "out of memory");
    ck->nshards++;
    return 0;
}

static int load_shard(srv_ckpt *ck, int i, srv_error *err);

srv_ckpt *srv_ckpt_open(int base_fd, const char *path, bool beneath, srv_error *err)
{
    if (beneath && !rel_path_ok(path)) {
        srv_error_set(err, SRV_E_BAD_REQUEST, "checkpoint",
                      "checkpoint must be a directory name below the checkpoints directory: relative, "
                      "without '.' or '..' parts");
        return NULL;
    }
    if (!path[0] || strlen(path) >= PATH_MAX / 2) {
        srv_error_set(err, SRV_E_BAD_REQUEST, "checkpoint", "checkpoint path is empty or too long");
        return NULL;
    }
    srv_ckpt *ck = calloc(1, sizeof *ck);
    if (!ck || !(ck->dir = strdup(path))) {
        free(ck);
        srv_error_set(err, SRV_E_NOMEM, "checkpoint", "out of memory");
        return NULL;
    }
    ck->base_fd = base_fd;
    ck->beneath = beneath;
    size_t dl = strlen(ck->dir);
    while (dl > 1 && ck->dir[dl - 1] == '/')
        ck->dir[--dl] = '\0';

    int dfd = open_at(base_fd, ck->dir, beneath, O_RDONLY | O_CLOEXEC | O_DIRECTORY);
    if (dfd < 0) {
        int e = errno;
        srv_error_set(err, e == ENOENT ? SRV_E_NOT_FOUND : SRV_E_BAD_REQUEST, "checkpoint",
                      e == ENOTDIR ? "the checkpoint is not a directory" : "the checkpoint directory %s",
                      open_reason(e, beneath));
        goto error;
    }
    close(dfd);

    if (!(ck->config = ck_read_json(ck, CONFIG_FILE, SRV_CKPT_CONFIG_MAX, err)))
        goto error;
    if (ck_exists(ck, SINGLE_FILE)) {
        /* its header says which tensors there are: read (and check) it now */
        if (add_shard(ck, SINGLE_FILE, err) != 0 || load_shard(ck, 0, err) != 0)
            goto error;
        return ck;
    }
    if (!ck_exists(ck, INDEX_FILE)) {
        srv_error_set(err, SRV_E_BAD_REQUEST, "checkpoint",
                      ck_exists(ck, "pytorch_model.bin") || ck_exists(ck, "pytorch_model.bin.index.json")
                          ? "the checkpoint holds pytorch_model.bin (a pickle), which attnd does not "
                            "read: save it again with safe_serialization=True (model.safetensors)"
                          : "the checkpoint has neither " SINGLE_FILE " nor " INDEX_FILE);
        goto error;
    }
    json_t *index = ck_read_json(ck, INDEX_FILE, SRV_CKPT_INDEX_MAX, err);
    if (!index)
        goto error;
    json_t *map = json_object_get(index, "weight_map");
    if (!json_is_object(map)) {
        json_decref(index);
        srv_error_set(err, SRV_E_BAD_REQUEST, "checkpoint",
                      INDEX_FILE " has no \"weight_map\" object (tensor name -> shard file)");
        goto error;
    }
    ck->weight_map = json_incref(map);
    json_decref(index);
    const char *name;
    json_t *file;
    json_object_foreach(ck->weight_map, name, file) {
        if (!json_is_string(file) || !shard_name_ok(json_string_value(file))) {
            srv_error_set(err, SRV_E_BAD_REQUEST, "checkpoint",
                          INDEX_FILE ": tensor \"%.80s\" maps to %s, not a file name in the checkpoint "
                          "directory", name, json_is_string(file) ? "a path" : "a non-string");
            goto error;
        }
        if (add_shard(ck, json_string_value(file), err) != 0)
            goto error;
    }
    if (ck->nshards == 0) {
        srv_error_set(err, SRV_E_BAD_REQUEST, "checkpoint", INDEX_FILE " maps no tensor");
        goto error;
    }
    return ck;

error:
    srv_ckpt_free(ck);
    return NULL;
}

void srv_ckpt_free(srv_ckpt *ck)
{
    if (!ck)
        return;
    for (int i = 0; i < ck->nshards; i++) {
        if (ck->shards[i].fd >= 0)
            close(ck->shards[i].fd);
        srv_st_header_free(&ck->shards[i].header);
        free(ck->shards[i].file);
    }
    free(ck->shards);
    json_decref(ck->config);
    json_decref(ck->weight_map);
    free(ck->chunk);
    free(ck->dir);
    free(ck);
}

const json_t *srv_ckpt_config(const srv_ckpt *ck)
{
    return ck->config;
}

uint64_t srv_ckpt_bytes_read(const srv_ckpt *ck)
{
    return ck->bytes_read;
}

int srv_ckpt_files(const srv_ckpt *ck)
{
    return ck->nshards;
}

/* Puts "file: " in front of err's message (the codec's messages do not know the file). */
static void prefix_file(srv_error *err, const char *file)
{
    if (!err)
        return;
    char m[sizeof err->message + 300];
    snprintf(m, sizeof m, "%s: %s", file, err->message);
    size_t n = strlen(m);
    if (n >= sizeof err->message)
        n = sizeof err->message - 1;
    memcpy(err->message, m, n);
    err->message[n] = '\0';
}

/* Reads and checks shard i's header (once). */
static int load_shard(srv_ckpt *ck, int i, srv_error *err)
{
    ck_shard *s = &ck->shards[i];
    if (s->loaded)
        return 0;
    uint64_t size, hlen;
    uint8_t first8[8];
    if (ck_open_file(ck, s->file, &s->fd, &size, err) != 0)
        return -1;
    if (size >= 8 && ck_pread(ck, s->fd, first8, 8, 0, s->file, err) != 0)
        return -1;
    if (srv_st_header_len(first8, size, SRV_CKPT_HEADER_MAX, &hlen, "checkpoint", err) != 0)
        goto prefix;
    uint8_t *h = malloc(hlen ? (size_t)hlen : 1);
    if (!h)
        return srv_error_set(err, SRV_E_NOMEM, "checkpoint", "out of memory reading %s", s->file);
    if (ck_pread(ck, s->fd, h, (size_t)hlen, 8, s->file, err) != 0) {
        free(h);
        return -1;
    }
    const srv_st_header_limits lim = {SRV_CKPT_HEADER_MAX, SRV_CKPT_MAX_TENSORS,
                                      INT64_C(1) << 50, true};
    int rc = srv_st_header_parse(&s->header, h, (size_t)hlen, size - 8 - hlen, &lim, "checkpoint", err);
    free(h);
    if (rc != 0)
        goto prefix;
    s->data_start = 8 + hlen;
    s->loaded = true;
    return 0;

prefix:
    prefix_file(err, s->file);
    return -1;
}

static int shard_of(const srv_ckpt *ck, const char *file)
{
    for (int i = 0; i < ck->nshards; i++)
        if (strcmp(ck->shards[i].file, file) == 0)
            return i;
    return -1;
}

bool srv_ckpt_has(srv_ckpt *ck, const char *name)
{
    if (ck->weight_map)
        return json_object_get(ck->weight_map, name) != NULL;
    if (load_shard(ck, 0, NULL) != 0)
        return false;
    return srv_st_header_find(&ck->shards[0].header, name) != NULL;
}

int srv_ckpt_locate(srv_ckpt *ck, const char *name, srv_ckpt_tensor *out, srv_error *err)
{
    int i = 0;
    if (ck->weight_map) {
        const json_t *f = json_object_get(ck->weight_map, name);
        if (!f)
            return srv_error_set(err, SRV_E_BAD_REQUEST, "checkpoint",
                                 INDEX_FILE " has no tensor \"%s\"", name);
        i = shard_of(ck, json_string_value(f));
    }
    if (load_shard(ck, i, err) != 0)
        return -1;
    const srv_st_entry *e = srv_st_header_find(&ck->shards[i].header, name);
    if (!e)
        return srv_error_set(err, SRV_E_BAD_REQUEST, "checkpoint", "%s has no tensor \"%s\"%s",
                             ck->shards[i].file, name,
                             ck->weight_map ? " though " INDEX_FILE " says it does" : "");
    out->file = ck->shards[i].file;
    out->entry = e;
    out->shard = i;
    return 0;
}

int srv_ckpt_read(srv_ckpt *ck, const srv_ckpt_tensor *t, float *out,
                  void (*on_chunk)(void *ctx, uint64_t bytes), void *ctx, srv_error *err)
{
    const srv_st_entry *e = t->entry;
    const ck_shard *s = &ck->shards[t->shard];
    if (e->dtype != SRV_ST_F32 && e->dtype != SRV_ST_F16 && e->dtype != SRV_ST_BF16)
        return srv_error_set(err, SRV_E_BAD_REQUEST, "checkpoint",
                             "%s: tensor \"%s\" has dtype %s; attnd imports F32, F16 and BF16 "
                             "(converted to float32 exactly)", s->file, e->name, e->dtype_name);
    if (!ck->chunk && !(ck->chunk = malloc(CHUNK_BYTES)))
        return srv_error_set(err, SRV_E_NOMEM, "checkpoint", "out of memory");
    size_t esize = srv_st_dtype_size(e);
    int64_t per_chunk = (int64_t)(CHUNK_BYTES / esize);
    for (int64_t done = 0; done < e->count;) {
        int64_t n = e->count - done < per_chunk ? e->count - done : per_chunk;
        size_t bytes = (size_t)n * esize;
        if (ck_pread(ck, s->fd, ck->chunk, bytes, s->data_start + e->begin + (uint64_t)done * esize,
                     s->file, err) != 0)
            return -1;
        if (srv_st_convert(out + done, e, ck->chunk, done, n, "checkpoint", err) != 0) {
            prefix_file(err, s->file);
            return -1;
        }
        done += n;
        if (on_chunk)
            on_chunk(ctx, bytes);
    }
    return 0;
}
