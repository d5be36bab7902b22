/*
 * datadir.c - layers on disk: atomic writes, checked reads, crash recovery (see datadir.h).
 */
#include "datadir.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define WEIGHTS_FILE "weights.safetensors"
#define CONFIG_FILE "config.json"
#define TEMP_MARK ".tmp-"
#define DELETED_PREFIX ".deleted-"
#define READ_ATTEMPTS 5

static atomic_uint temp_counter;

bool srv_dd_stamp_equal(const srv_dd_stamp *a, const srv_dd_stamp *b)
{
    return memcmp(a, b, sizeof *a) == 0;
}

bool srv_dd_name_valid(const char *name)
{
    size_t n = strlen(name);
    if (n < 1 || n > 64 || name[0] == '.')
        return false;
    for (size_t i = 0; i < n; i++) {
        char c = name[i];
        if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
              c == '.' || c == '_' || c == '-'))
            return false;
    }
    return true;
}

/* snprintf into a PATH_MAX buffer; -1 (err filled) when the path does not fit. */
static int path_fmt(char out[PATH_MAX], srv_error *err, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static int path_fmt(char out[PATH_MAX], srv_error *err, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(out, PATH_MAX, fmt, ap);
    va_end(ap);
    if (n < 0 || n >= PATH_MAX)
        return srv_error_set(err, SRV_E_INTERNAL, "", "data dir path too long");
    return 0;
}

static uint64_t mtime_ns(const struct stat *st)
{
    return (uint64_t)st->st_mtim.tv_sec * 1000000000u + (uint64_t)st->st_mtim.tv_nsec;
}

static void stamp_weights(srv_dd_stamp *s, const struct stat *st)
{
    s->w_ino = st ? (uint64_t)st->st_ino : 0;
    s->w_mtime_ns = st ? mtime_ns(st) : 0;
    s->w_size = st ? (uint64_t)st->st_size : 0;
}

static void stamp_config(srv_dd_stamp *s, const struct stat *st)
{
    s->c_ino = st ? (uint64_t)st->st_ino : 0;
    s->c_mtime_ns = st ? mtime_ns(st) : 0;
    s->c_size = st ? (uint64_t)st->st_size : 0;
}

static bool same_file(const struct stat *a, const struct stat *b)
{
    return a->st_ino == b->st_ino && a->st_dev == b->st_dev && mtime_ns(a) == mtime_ns(b) &&
           a->st_size == b->st_size;
}

/* Reads a whole regular file of at most cap bytes. Returns 0 (*buf malloc'd, NUL-terminated, *st
 * filled), 1 when the file does not exist, -1 with err filled otherwise. shown names it in errors. */
static int read_file(const char *path, const char *shown, size_t cap, char **buf, size_t *len,
                     struct stat *st, srv_error *err)
{
    *buf = NULL;
    *len = 0;
    /* O_NONBLOCK: opening a FIFO someone left in the data dir would otherwise block until a
     * writer comes (a hung start); it is refused below as not a regular file */
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
    if (fd < 0) {
        if (errno == ENOENT)
            return 1;
        return srv_error_set(err, SRV_E_INTERNAL, "", "cannot open %s: %s", shown,
                             strerror(errno));
    }
    if (fstat(fd, st) != 0 || !S_ISREG(st->st_mode)) {
        close(fd);
        return srv_error_set(err, SRV_E_BAD_REQUEST, "", "%s is not a regular file", shown);
    }
    if ((uint64_t)st->st_size > cap) {
        close(fd);
        return srv_error_set(err, SRV_E_TOO_LARGE, "", "%s is %lld bytes, over the limit of %zu",
                             shown, (long long)st->st_size, cap);
    }
    size_t want = (size_t)st->st_size;
    char *p = malloc(want + 1);
    if (!p) {
        close(fd);
        return srv_error_set(err, SRV_E_NOMEM, "", "out of memory reading %s (%zu bytes)", shown,
                             want);
    }
    size_t got = 0;
    while (got < want) {
        ssize_t r = read(fd, p + got, want - got);
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0) {
            int e = errno;
            free(p);
            close(fd);
            return srv_error_set(err, SRV_E_INTERNAL, "", "cannot read %s: %s", shown,
                                 r < 0 ? strerror(e) : "file shrank while being read");
        }
        got += (size_t)r;
    }
    close(fd);
    p[got] = '\0';
    *buf = p;
    *len = got;
    return 0;
}

static int fsync_dir(const char *path, srv_error *err)
{
    int fd = open(path, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0)
        return srv_error_set(err, SRV_E_INTERNAL, "", "cannot open directory %s: %s", path,
                             strerror(errno));
    int rc = fsync(fd);
    int e = errno;
    close(fd);
    if (rc != 0)
        return srv_error_set(err, SRV_E_INTERNAL, "", "cannot fsync directory %s: %s", path,
                             strerror(e));
    return 0;
}

/* Writes data to a new temp file <dir>/.<base>.tmp-<pid>-<n>, fsync'd and closed; its path goes to
 * tmp. On failure nothing is left behind. */
static int write_temp(const char *dir, const char *base, const void *data, size_t len,
                      char tmp[PATH_MAX], srv_error *err)
{
    unsigned n = atomic_fetch_add(&temp_counter, 1);
    if (path_fmt(tmp, err, "%s/.%s" TEMP_MARK "%ld-%u", dir, base, (long)getpid(), n) != 0)
        return -1;
    int fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
    if (fd < 0)
        return srv_error_set(err, SRV_E_INTERNAL, "", "cannot create %s: %s", tmp,
                             strerror(errno));
    const char *p = data;
    size_t done = 0;
    while (done < len) {
        ssize_t w = write(fd, p + done, len - done);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0) {
            int e = errno;
            close(fd);
            unlink(tmp);
            return srv_error_set(err, SRV_E_INTERNAL, "", "cannot write %s: %s", tmp,
                                 strerror(e));
        }
        done += (size_t)w;
    }
    if (fsync(fd) != 0) {
        int e = errno;
        close(fd);
        unlink(tmp);
        return srv_error_set(err, SRV_E_INTERNAL, "", "cannot fsync %s: %s", tmp, strerror(e));
    }
    if (close(fd) != 0) {
        int e = errno;
        unlink(tmp);
        return srv_error_set(err, SRV_E_INTERNAL, "", "cannot close %s: %s", tmp, strerror(e));
    }
    return 0;
}

/* Makes path a directory (and fsyncs its parent when it created it). */
static int ensure_dir(const char *path, const char *parent, srv_error *err)
{
    if (mkdir(path, 0755) == 0)
        return parent ? fsync_dir(parent, err) : 0;
    struct stat st;
    if (errno == EEXIST && stat(path, &st) == 0 && S_ISDIR(st.st_mode))
        return 0;
    return srv_error_set(err, SRV_E_INTERNAL, "", "cannot create directory %s: %s", path,
                         errno == EEXIST ? "a file of that name exists" : strerror(errno));
}

srv_datadir *srv_datadir_open(const char *path, bool read_only, srv_error *err)
{
    srv_datadir *dd = calloc(1, sizeof *dd);
    char layers[PATH_MAX];
    if (!dd) {
        srv_error_set(err, SRV_E_NOMEM, "", "out of memory");
        return NULL;
    }
    dd->temp_grace_s = 600;
    dd->read_only = read_only;
    if (!path || !path[0]) {
        srv_error_set(err, SRV_E_INTERNAL, "", "data dir path is empty");
        goto error;
    }
    if (path_fmt(layers, err, "%s/layers", path) != 0)
        goto error;
    if (read_only) {
        struct stat st;
        if (stat(layers, &st) != 0 || !S_ISDIR(st.st_mode) || access(layers, R_OK | X_OK) != 0) {
            srv_error_set(err, SRV_E_INTERNAL, "", "data dir %s: cannot read %s: %s", path, layers,
                          errno ? strerror(errno) : "not a directory");
            goto error;
        }
    } else {
        if (ensure_dir(path, NULL, err) != 0 || ensure_dir(layers, path, err) != 0)
            goto error;
        if (access(layers, R_OK | W_OK | X_OK) != 0) {
            srv_error_set(err, SRV_E_INTERNAL, "", "data dir %s is not writable: %s", layers,
                          strerror(errno));
            goto error;
        }
    }
    dd->root = strdup(path);
    dd->layers = strdup(layers);
    if (!dd->root || !dd->layers) {
        srv_error_set(err, SRV_E_NOMEM, "", "out of memory");
        goto error;
    }
    return dd;
error:
    srv_datadir_free(dd);
    return NULL;
}

void srv_datadir_free(srv_datadir *dd)
{
    if (!dd)
        return;
    free(dd->root);
    free(dd->layers);
    free(dd);
}

static int entry_cmp(const void *a, const void *b)
{
    return strcmp(((const srv_dd_entry *)a)->name, ((const srv_dd_entry *)b)->name);
}

int srv_datadir_list(srv_datadir *dd, srv_dd_entry **out, srv_error *err)
{
    *out = NULL;
    DIR *d = opendir(dd->layers);
    if (!d)
        return srv_error_set(err, SRV_E_INTERNAL, "", "cannot read %s: %s", dd->layers,
                             strerror(errno));
    srv_dd_entry *list = NULL;
    int n = 0, cap = 0;
    struct dirent *de;
    while ((de = readdir(d)) != NULL) {
        if (!srv_dd_name_valid(de->d_name))
            continue;
        char wp[PATH_MAX], cp[PATH_MAX];
        if (path_fmt(wp, NULL, "%s/%s/" WEIGHTS_FILE, dd->layers, de->d_name) != 0 ||
            path_fmt(cp, NULL, "%s/%s/" CONFIG_FILE, dd->layers, de->d_name) != 0)
            continue;
        struct stat ws, cs;
        bool hw = stat(wp, &ws) == 0, hc = stat(cp, &cs) == 0;
        if (!hw && !hc)
            continue;
        if (n == cap) {
            cap = cap ? 2 * cap : 16;
            srv_dd_entry *g = realloc(list, (size_t)cap * sizeof *g);
            if (!g) {
                free(list);
                closedir(d);
                return srv_error_set(err, SRV_E_NOMEM, "", "out of memory listing %s",
                                     dd->layers);
            }
            list = g;
        }
        srv_dd_entry *e = &list[n++];
        memset(e, 0, sizeof *e);
        memcpy(e->name, de->d_name, strlen(de->d_name) + 1); /* valid: at most 64 chars */
        stamp_weights(&e->stamp, hw ? &ws : NULL);
        stamp_config(&e->stamp, hc ? &cs : NULL);
    }
    closedir(d);
    if (n > 1)
        qsort(list, (size_t)n, sizeof *list, entry_cmp);
    *out = list;
    return n;
}

void srv_datadir_strays(srv_datadir *dd, void (*fn)(const char *name, void *ctx), void *ctx)
{
    DIR *d = opendir(dd->layers);
    if (!d)
        return;
    struct dirent *de;
    while ((de = readdir(d)) != NULL)
        if (de->d_name[0] != '.' && !srv_dd_name_valid(de->d_name))
            fn(de->d_name, ctx);
    closedir(d);
}

void srv_dd_layer_free(srv_dd_layer *layer)
{
    if (!layer)
        return;
    json_decref(layer->config);
    srv_st_free(&layer->weights);
    memset(layer, 0, sizeof *layer);
}

/* Parses config text as a JSON object (duplicate keys refused); NULL with err filled. */
static json_t *config_parse(const char *text, size_t len, const char *shown, srv_error *err)
{
    json_error_t jerr;
    json_t *c = json_loadb(text, len, JSON_REJECT_DUPLICATES, &jerr);
    if (!c) {
        srv_error_set(err, SRV_E_BAD_REQUEST, "", "%s is not valid JSON: %s (line %d)", shown,
                      jerr.text, jerr.line);
        return NULL;
    }
    if (!json_is_object(c)) {
        json_decref(c);
        srv_error_set(err, SRV_E_BAD_REQUEST, "", "%s is not a JSON object", shown);
        return NULL;
    }
    return c;
}

/* True when the layer dir holds a config temp file whose content equals want: the trace of a
 * commit that passed its commit point but did not rename config.json (yet). */
static bool config_temp_matches(const char *dir, const json_t *want)
{
    DIR *d = opendir(dir);
    if (!d)
        return false;
    bool found = false;
    struct dirent *de;
    while (!found && (de = readdir(d)) != NULL) {
        if (strncmp(de->d_name, "." CONFIG_FILE TEMP_MARK, strlen("." CONFIG_FILE TEMP_MARK)) != 0)
            continue;
        char p[PATH_MAX], *text;
        size_t len;
        struct stat st;
        if (path_fmt(p, NULL, "%s/%s", dir, de->d_name) != 0 ||
            read_file(p, p, SRV_DD_CONFIG_MAX, &text, &len, &st, NULL) != 0)
            continue;
        json_t *c = config_parse(text, len, p, NULL);
        found = c && json_equal(c, want);
        json_decref(c);
        free(text);
    }
    closedir(d);
    return found;
}

/* Writes config.json of layer dir atomically (temp, fsync, rename, fsync dir). */
static int write_config(const char *dir, const json_t *config, srv_error *err)
{
    char *text = json_dumps(config, JSON_INDENT(2));
    char tmp[PATH_MAX], dst[PATH_MAX];
    if (!text)
        return srv_error_set(err, SRV_E_NOMEM, "", "out of memory writing config.json");
    size_t len = strlen(text);
    int rc = path_fmt(dst, err, "%s/" CONFIG_FILE, dir);
    if (rc == 0) {
        /* json_dumps leaves no final newline: write it with the text */
        char *t2 = realloc(text, len + 2);
        if (!t2)
            rc = srv_error_set(err, SRV_E_NOMEM, "", "out of memory writing config.json");
        else {
            text = t2;
            text[len] = '\n';
            text[len + 1] = '\0';
            rc = write_temp(dir, CONFIG_FILE, text, len + 1, tmp, err);
        }
    }
    free(text);
    if (rc != 0)
        return -1;
    if (rename(tmp, dst) != 0) {
        int e = errno;
        unlink(tmp);
        return srv_error_set(err, SRV_E_INTERNAL, "", "cannot rename %s to %s: %s", tmp, dst,
                             strerror(e));
    }
    return fsync_dir(dir, err);
}

/* Turns err's message into "<prefix>: <message>" (cut to fit). */
static void prefix_message(srv_error *err, const char *prefix)
{
    if (!err)
        return;
    char m[sizeof err->message];
    size_t pl = strlen(prefix), ml = strlen(err->message);
    if (pl + 3 > sizeof m)
        return;
    memcpy(m, prefix, pl);
    memcpy(m + pl, ": ", 2);
    if (ml > sizeof m - pl - 3)
        ml = sizeof m - pl - 3;
    memcpy(m + pl + 2, err->message, ml);
    m[pl + 2 + ml] = '\0';
    memcpy(err->message, m, sizeof m);
}

/* One attempt at reading a layer; *retry is set when a file changed under the reader. */
static int read_once(srv_datadir *dd, const char *name, int64_t max_elements, srv_dd_layer *out,
                     bool *retry, srv_error *err)
{
    char dir[PATH_MAX], wp[PATH_MAX], cp[PATH_MAX], wshown[128], cshown[128];
    char *wbuf = NULL, *cbuf = NULL;
    size_t wlen = 0, clen = 0;
    struct stat ws, cs, again;
    json_t *file_config = NULL, *meta_config = NULL;
    *retry = false;
    if (path_fmt(dir, err, "%s/%s", dd->layers, name) != 0 ||
        path_fmt(wp, err, "%s/" WEIGHTS_FILE, dir) != 0 ||
        path_fmt(cp, err, "%s/" CONFIG_FILE, dir) != 0)
        return -1;
    snprintf(wshown, sizeof wshown, "layers/%s/" WEIGHTS_FILE, name);
    snprintf(cshown, sizeof cshown, "layers/%s/" CONFIG_FILE, name);

    /* a weights file holds at most SRV_ST_MAX_TENSORS tensors of max_elements F64 each */
    uint64_t wcap = (uint64_t)max_elements * 8;
    wcap = wcap > SIZE_MAX / 16 ? SIZE_MAX / 2 : wcap * 16 + SRV_ST_MAX_HEADER + 8;
    int wr = read_file(wp, wshown, (size_t)wcap, &wbuf, &wlen, &ws, err);
    if (wr < 0)
        goto error;
    int cr = read_file(cp, cshown, SRV_DD_CONFIG_MAX, &cbuf, &clen, &cs, err);
    if (cr < 0)
        goto error;
    if (wr == 1 && cr == 1) {
        srv_error_set(err, SRV_E_LAYER_NOT_FOUND, "", "layers/%s holds neither " CONFIG_FILE
                      " nor " WEIGHTS_FILE, name);
        goto error;
    }
    if (wr == 1) {
        srv_error_set(err, SRV_E_BAD_REQUEST, "", "%s is missing (a layer needs " CONFIG_FILE
                      " and " WEIGHTS_FILE ")", wshown);
        goto error;
    }
    if (srv_st_parse(&out->weights, (const uint8_t *)wbuf, wlen, max_elements, wshown, err) != 0) {
        prefix_message(err, wshown); /* logs show the message, not the field */
        goto error;
    }
    /* a writer replaced the weights while we read the config: start again */
    if (stat(wp, &again) != 0 || !same_file(&ws, &again)) {
        *retry = true;
        srv_error_set(err, SRV_E_INTERNAL, "", "%s keeps changing while being read", wshown);
        goto error;
    }
    const char *mtext = srv_st_meta(&out->weights, "attnd.config");
    if (mtext) {
        meta_config = config_parse(mtext, strlen(mtext), "the attnd.config metadata", err);
        if (!meta_config) {
            prefix_message(err, wshown);
            goto error;
        }
    }
    if (cr == 0 && !(file_config = config_parse(cbuf, clen, cshown, err)) && !meta_config)
        goto error;

    if (!meta_config) {
        if (!file_config) {
            srv_error_set(err, SRV_E_BAD_REQUEST, "", "%s is missing (a layer needs " CONFIG_FILE
                          " and " WEIGHTS_FILE ")", cshown);
            goto error;
        }
        out->config = file_config;
        file_config = NULL;
        stamp_config(&out->stamp, &cs);
    } else if (file_config && json_equal(file_config, meta_config)) {
        out->config = file_config;
        file_config = NULL;
        stamp_config(&out->stamp, &cs);
    } else if (!file_config || config_temp_matches(dir, meta_config)) {
        /* the commit reached weights.safetensors but not config.json: complete it */
        if (err)
            memset(err, 0, sizeof *err); /* a damaged config.json is what we are repairing */
        out->config = meta_config;
        meta_config = NULL;
        out->repaired = true;
        struct stat ns;
        if (!dd->read_only && write_config(dir, out->config, err) != 0)
            goto error;
        if (stat(cp, &ns) == 0)
            stamp_config(&out->stamp, &ns);
    } else {
        /* config.json changed under us (a writer renamed it just now): start again */
        if (stat(cp, &again) != 0 || !same_file(&cs, &again)) {
            *retry = true;
            srv_error_set(err, SRV_E_INTERNAL, "", "%s keeps changing while being read", cshown);
            goto error;
        }
        out->config = file_config;
        file_config = NULL;
        out->hand_edited = true;
        stamp_config(&out->stamp, &cs);
    }
    stamp_weights(&out->stamp, &ws);
    const char *version = srv_st_meta(&out->weights, "attnd.version");
    snprintf(out->version, sizeof out->version, "%s", version ? version : "");
    json_decref(file_config);
    json_decref(meta_config);
    free(wbuf);
    free(cbuf);
    return 0;

error:
    json_decref(file_config);
    json_decref(meta_config);
    free(wbuf);
    free(cbuf);
    srv_dd_layer_free(out);
    return -1;
}

int srv_datadir_read(srv_datadir *dd, const char *name, int64_t max_elements, srv_dd_layer *out,
                     srv_error *err)
{
    memset(out, 0, sizeof *out);
    if (!srv_dd_name_valid(name))
        return srv_error_set(err, SRV_E_BAD_NAME, "", "\"%.80s\" is not a valid layer name",
                             name);
    for (int attempt = 0;; attempt++) {
        bool retry;
        srv_error local = {0};
        int rc = read_once(dd, name, max_elements, out, &retry, &local);
        if (rc == 0)
            return 0;
        if (!retry || attempt + 1 == READ_ATTEMPTS) {
            if (err && err->code == SRV_OK)
                *err = local;
            return -1;
        }
    }
}

int srv_datadir_write(srv_datadir *dd, const char *name, const json_t *config,
                      const srv_st_view *tensors, int n, const char *version, srv_dd_stamp *stamp,
                      srv_error *err)
{
    char dir[PATH_MAX], wp[PATH_MAX], cp[PATH_MAX], wtmp[PATH_MAX] = "", ctmp[PATH_MAX] = "";
    char *ctext = NULL, *mtext = NULL;
    json_t *meta = NULL;
    srv_buf wbuf;
    srv_buf_init(&wbuf);
    if (!srv_dd_name_valid(name))
        return srv_error_set(err, SRV_E_BAD_NAME, "", "\"%.80s\" is not a valid layer name",
                             name);
    if (!json_is_object(config))
        return srv_error_set(err, SRV_E_INTERNAL, "", "srv_datadir_write: config not an object");
    if (dd->read_only)
        return srv_error_set(err, SRV_E_FORBIDDEN, "", "the data dir is open read-only");
    if (path_fmt(dir, err, "%s/%s", dd->layers, name) != 0 ||
        path_fmt(wp, err, "%s/" WEIGHTS_FILE, dir) != 0 ||
        path_fmt(cp, err, "%s/" CONFIG_FILE, dir) != 0)
        return -1;
    if (ensure_dir(dir, dd->layers, err) != 0)
        return -1;

    mtext = json_dumps(config, JSON_COMPACT | JSON_SORT_KEYS);
    ctext = json_dumps(config, JSON_INDENT(2));
    meta = json_object();
    if (!mtext || !ctext || !meta || json_object_set_new(meta, "format", json_string("pt")) ||
        json_object_set_new(meta, "attnd.config", json_string(mtext)) ||
        (version && version[0] &&
         json_object_set_new(meta, "attnd.version", json_string(version)))) {
        srv_error_set(err, SRV_E_NOMEM, "", "out of memory writing layer %s", name);
        goto error;
    }
    if (srv_st_write(&wbuf, tensors, n, meta, err) != 0)
        goto error;
    size_t clen = strlen(ctext);
    char *c2 = realloc(ctext, clen + 2);
    if (!c2) {
        srv_error_set(err, SRV_E_NOMEM, "", "out of memory writing layer %s", name);
        goto error;
    }
    ctext = c2;
    ctext[clen++] = '\n';
    ctext[clen] = '\0';

    if (write_temp(dir, WEIGHTS_FILE, wbuf.data, wbuf.len, wtmp, err) != 0) {
        wtmp[0] = '\0';
        goto error;
    }
    if (write_temp(dir, CONFIG_FILE, ctext, clen, ctmp, err) != 0) {
        ctmp[0] = '\0';
        goto error;
    }
    if (rename(wtmp, wp) != 0) {
        srv_error_set(err, SRV_E_INTERNAL, "", "cannot rename %s to %s: %s", wtmp, wp,
                      strerror(errno));
        goto error;
    }
    /* commit point passed: from here a reader finds the new layer (see datadir.h) */
    wtmp[0] = '\0';
    if (fsync_dir(dir, err) != 0 || rename(ctmp, cp) != 0 || fsync_dir(dir, err) != 0) {
        srv_error_set(err, SRV_E_INTERNAL, "",
                      "layer %s: the new weights were committed but finishing failed (%s); the "
                      "next start completes it", name, strerror(errno));
        ctmp[0] = '\0'; /* the temp is what a reader repairs from: keep it */
        goto error;
    }
    if (stamp) {
        struct stat ws, cs;
        memset(stamp, 0, sizeof *stamp);
        if (stat(wp, &ws) == 0)
            stamp_weights(stamp, &ws);
        if (stat(cp, &cs) == 0)
            stamp_config(stamp, &cs);
    }
    json_decref(meta);
    free(mtext);
    free(ctext);
    srv_buf_free(&wbuf);
    return 0;

error:
    if (wtmp[0])
        unlink(wtmp);
    if (ctmp[0])
        unlink(ctmp);
    json_decref(meta);
    free(mtext);
    free(ctext);
    srv_buf_free(&wbuf);
    return -1;
}

/* Unlinks the files of dir and removes it; errors ignored. Returns 1 when dir is gone. */
static int remove_dir(const char *dir)
{
    DIR *d = opendir(dir);
    if (d) {
        struct dirent *de;
        while ((de = readdir(d)) != NULL) {
            char p[PATH_MAX];
            if (strcmp(de->d_name, ".") == 0 || strcmp(de->d_name, "..") == 0)
                continue;
            if (path_fmt(p, NULL, "%s/%s", dir, de->d_name) == 0)
                unlink(p);
        }
        closedir(d);
    }
    return rmdir(dir) == 0;
}

int srv_datadir_remove(srv_datadir *dd, const char *name, srv_error *err)
{
    char dir[PATH_MAX], gone[PATH_MAX];
    if (!srv_dd_name_valid(name))
        return srv_error_set(err, SRV_E_BAD_NAME, "", "\"%.80s\" is not a valid layer name",
                             name);
    if (dd->read_only)
        return srv_error_set(err, SRV_E_FORBIDDEN, "", "the data dir is open read-only");
    unsigned n = atomic_fetch_add(&temp_counter, 1);
    if (path_fmt(dir, err, "%s/%s", dd->layers, name) != 0 ||
        path_fmt(gone, err, "%s/" DELETED_PREFIX "%s-%ld-%u", dd->layers, name, (long)getpid(),
                 n) != 0)
        return -1;
    if (rename(dir, gone) != 0) {
        if (errno == ENOENT)
            return 0;
        return srv_error_set(err, SRV_E_INTERNAL, "", "cannot remove layer %s (rename %s): %s",
                             name, dir, strerror(errno));
    }
    if (fsync_dir(dd->layers, err) != 0)
        return -1;
    remove_dir(gone); /* what is left is removed by srv_datadir_clean */
    return 0;
}

static bool stale(const struct stat *st, time_t now, int grace)
{
    time_t t = st->st_mtim.tv_sec > st->st_ctim.tv_sec ? st->st_mtim.tv_sec : st->st_ctim.tv_sec;
    return now - t >= grace;
}

int srv_datadir_clean(srv_datadir *dd)
{
    if (dd->read_only)
        return 0;
    DIR *d = opendir(dd->layers);
    if (!d)
        return 0;
    int removed = 0;
    time_t now = time(NULL);
    struct dirent *de;
    while ((de = readdir(d)) != NULL) {
        char p[PATH_MAX];
        struct stat st;
        if (path_fmt(p, NULL, "%s/%s", dd->layers, de->d_name) != 0 || lstat(p, &st) != 0 ||
            !S_ISDIR(st.st_mode))
            continue;
        if (strncmp(de->d_name, DELETED_PREFIX, strlen(DELETED_PREFIX)) == 0) {
            if (stale(&st, now, dd->temp_grace_s))
                removed += remove_dir(p);
            continue;
        }
        if (!srv_dd_name_valid(de->d_name))
            continue;
        DIR *ld = opendir(p);
        if (!ld)
            continue;
        struct dirent *fe;
        while ((fe = readdir(ld)) != NULL) {
            char fp[PATH_MAX];
            struct stat fs;
            if (fe->d_name[0] != '.' || !strstr(fe->d_name, TEMP_MARK) ||
                path_fmt(fp, NULL, "%s/%s", p, fe->d_name) != 0 || lstat(fp, &fs) != 0 ||
                !S_ISREG(fs.st_mode) || !stale(&fs, now, dd->temp_grace_s))
                continue;
            removed += unlink(fp) == 0;
        }
        closedir(ld);
    }
    closedir(d);
    return removed;
}
