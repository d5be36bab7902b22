/*
 * dd_read.c - a layer's checked read (see datadir.h): weights.safetensors and then config.json,
 * each read whole under its cap without following a link or blocking on a FIFO, the weights
 * checked in full and the config parsed as a JSON object; what a client may see quotes neither,
 * the log gets the parsers' own words. The read starts again (READ_ATTEMPTS in all) when a writer
 * replaced weights.safetensors while the config was read, or replaced a config.json that differs
 * from the weights' attnd.config. A write interrupted past its commit point is completed here:
 * attnd.config wins over a missing or damaged config.json, or over a differing one while a config
 * temp holding it is left, and config.json is rewritten from it (unless the data dir is read-only);
 * a differing one with no such temp was edited by hand and is kept.
 */
#include "datadir.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "codec/json_error.h"
#include "datadir_internal.h"
#include "fsio.h"

#define READ_ATTEMPTS 5

void srv_dd_layer_free(srv_dd_layer *layer)
{
    if (!layer)
        return;
    json_decref(layer->config);
    srv_st_free(&layer->weights);
    memset(layer, 0, sizeof *layer);
}

json_t *srv_ddi_config_parse(const char *text, size_t len, const char *shown, srv_error *err,
                             srv_error *log)
{
    json_error_t jerr;
    json_t *c = json_loadb(text, len, JSON_REJECT_DUPLICATES | JSON_DECODE_ANY, &jerr);
    if (!c) {
        srv_error_set(log, SRV_E_BAD_REQUEST, "", "%s is not valid JSON: %s (line %d, column %d)",
                      shown, jerr.text, jerr.line, jerr.column);
        srv_error_set(err, SRV_E_BAD_REQUEST, "", "%s is not valid JSON: %s (line %d, column %d)",
                      shown, srv_json_problem(&jerr), jerr.line, jerr.column);
        return NULL;
    }
    if (!json_is_object(c)) {
        json_decref(c);
        srv_error_set(err, SRV_E_BAD_REQUEST, "", "%s is not a JSON object", shown);
        return NULL;
    }
    return c;
}

/* What is wrong with a safetensors file srv_st_parse refused (code: its error's), in words that
 * quote none of it: the parser's own message names tensors, dtypes and header bytes. */
static int weights_problem(srv_error *err, srv_code code, const char *shown)
{
    switch (code) {
    case SRV_E_BAD_VALUE:
        return srv_error_set(err, code, "",
                             "%s holds a value that is NaN, infinite or past float32's range "
                             "(weights must be finite float32 numbers)",
                             shown);
    case SRV_E_TOO_LARGE:
        return srv_error_set(err, code, "",
                             "%s holds a tensor or a header over attnd's limits "
                             "(--max-tensor-elements)",
                             shown);
    case SRV_E_NOMEM:
        return srv_error_set(err, code, "", "out of memory reading %s", shown);
    default:
        return srv_error_set(err, code, "", "%s is not a valid safetensors file", shown);
    }
}

bool srv_ddi_config_temp_matches(int dirfd, const json_t *want)
{
    DIR *d = srv_ddi_open_dir_stream(dirfd);
    if (!d)
        return false;
    bool found = false;
    struct dirent *de;
    while (!found && (de = readdir(d)) != NULL) {
        if (strncmp(de->d_name, "." CONFIG_FILE TEMP_MARK, strlen("." CONFIG_FILE TEMP_MARK)) != 0)
            continue;
        char *text;
        size_t len;
        struct stat st;
        if (srv_ddi_read_file_at(dirfd, de->d_name, "a config temp file", SRV_DD_CONFIG_MAX, &text,
                                 &len, &st, NULL) != 0)
            continue;
        json_t *c = srv_ddi_config_parse(text, len, "a config temp file", NULL, NULL);
        found = c && json_equal(c, want);
        json_decref(c);
        free(text);
    }
    closedir(d);
    return found;
}

/* Writes config.json of the layer dir dirfd (shown: "layers/<name>") atomically: temp, fsync,
 * rename, fsync dir. */
static int write_config(int dirfd, const char *shown, const json_t *config, srv_error *err)
{
    char *text = json_dumps(config, JSON_INDENT(2));
    char tmp[TEMP_NAME_MAX];
    if (!text)
        return srv_error_set(err, SRV_E_NOMEM, "", "out of memory writing config.json");
    size_t len = strlen(text);
    int rc;
    /* json_dumps leaves no final newline: write it with the text */
    char *t2 = realloc(text, len + 2);
    if (!t2) {
        rc = srv_error_set(err, SRV_E_NOMEM, "", "out of memory writing config.json");
    } else {
        text = t2;
        text[len] = '\n';
        text[len + 1] = '\0';
        rc = srv_ddi_write_temp(dirfd, shown, CONFIG_FILE, text, len + 1, tmp, err);
    }
    free(text);
    if (rc != 0)
        return -1;
    if (srv_fs_renameat(dirfd, tmp, dirfd, CONFIG_FILE) != 0) {
        int e = errno;
        srv_fs_unlinkat(dirfd, tmp, 0);
        return srv_error_set(err, srv_ddi_io_code(e), "",
                             "cannot rename a temp file to %s/" CONFIG_FILE ": %s", shown,
                             strerror(e));
    }
    return srv_ddi_fsync_dir(dirfd, shown, err);
}

/* Looks at the weights file's header before a byte of its data is read, so that the file cannot
 * make the reader allocate past the limits: the header must be valid and its tensors tile the data
 * exactly (a sparse file's holes are no tensor's: refused, not read), and their numbers as float32
 * must fit --max-weights-bytes. *cap gets the file's size, the most the read may take; *st its
 * stat. A file that is missing or not a regular one: 0 with *cap 0, for the read to report. 0, or
 * -1 with err (words fit for /readyz) and log (the parser's own message). */
static int weights_precheck(srv_datadir *dd, int dirfd, const char *wshown, int64_t max_elements,
                            uint64_t *cap, struct stat *st, srv_error *err, srv_error *log)
{
    *cap = 0;
    int fd = openat(dirfd, WEIGHTS_FILE, O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK);
    if (fd < 0)
        return 0;
    int rc = 0;
    uint8_t first8[8];
    uint64_t hlen = 0;
    uint8_t *json = NULL;
    srv_st_header h = {0};
    srv_error e = {0};
    if (fstat(fd, st) != 0 || !S_ISREG(st->st_mode))
        goto out; /* the read says what it is */
    const uint64_t size = (uint64_t)st->st_size;
    if (pread(fd, first8, sizeof first8, 0) != (ssize_t)sizeof first8 ||
        srv_st_header_len(first8, size, SRV_ST_MAX_HEADER, &hlen, wshown, &e) != 0 ||
        !(json = malloc(hlen ? hlen : 1)) || pread(fd, json, hlen, 8) != (ssize_t)hlen) {
        if (e.code == SRV_OK)
            srv_error_set(&e, size < 8 ? SRV_E_BAD_REQUEST : SRV_E_INTERNAL, "",
                          size < 8 ? "shorter than its 8-byte header length"
                                   : "its header could not be read");
        goto refused;
    }
    const srv_st_header_limits limits = {SRV_ST_MAX_HEADER, SRV_ST_MAX_TENSORS, max_elements,
                                         false};
    if (srv_st_header_parse(&h, json, hlen, size - 8 - hlen, &limits, wshown, &e) != 0)
        goto refused;
    int64_t numbers = 0;
    for (int i = 0; i < h.n; i++)
        numbers += h.entries[i].count; /* each at most max_elements, at most 4096 of them */
    if (dd->max_weights_bytes > 0 && numbers > dd->max_weights_bytes / 4) {
        srv_error_set(err, SRV_E_INSUFFICIENT_STORAGE, "",
                      "%s holds %lld numbers, %lld bytes as float32: more than "
                      "--max-weights-bytes (%lld) allows; not read",
                      wshown, (long long)numbers, (long long)numbers * 4,
                      (long long)dd->max_weights_bytes);
        srv_error_set(log, err->code, "", "%s", err->message);
        rc = -1;
        goto out;
    }
    *cap = size;
    goto out;
refused:
    srv_ddi_prefix_message(&e, wshown);
    srv_error_set(log, e.code, "", "%s", e.message);
    weights_problem(err, e.code, wshown);
    rc = -1;
out:
    srv_st_header_free(&h);
    free(json);
    close(fd);
    return rc;
}

/* The Unix time stored as metadata key of w (a plain decimal number of seconds, after 1970 and
 * before the year 5138), else fallback: a file's word is checked like any other. */
static double meta_time(const srv_st *w, const char *key, double fallback)
{
    const char *t = srv_st_meta(w, key);
    if (!t || strlen(t) > 24 || strspn(t, "0123456789.") != strlen(t))
        return fallback;
    char *end;
    const double v = strtod(t, &end);
    return *end == '\0' && v > 0 && v < 1e11 ? v : fallback;
}

/* One attempt at reading a layer; *retry is set when a file changed under the reader. err gets
 * what may be shown to a client, log the full story when it says more (datadir.h). */
static int read_once(srv_datadir *dd, const char *name, int64_t max_elements, srv_dd_layer *out,
                     bool *retry, srv_error *err, srv_error *log)
{
    char dshown[80], wshown[128], cshown[128];
    char *wbuf = NULL, *cbuf = NULL;
    size_t wlen = 0, clen = 0;
    struct stat ws, cs, again;
    json_t *file_config = NULL, *meta_config = NULL;
    *retry = false;
    snprintf(dshown, sizeof dshown, "layers/%s", name);
    snprintf(wshown, sizeof wshown, "layers/%s/" WEIGHTS_FILE, name);
    snprintf(cshown, sizeof cshown, "layers/%s/" CONFIG_FILE, name);
    int dirfd = srv_ddi_open_layer_dir(dd, name);
    if (dirfd < 0) {
        struct stat st;
        if (errno == ENOENT)
            return srv_error_set(err, SRV_E_LAYER_NOT_FOUND, "", "%s does not exist", dshown);
        if ((errno == ELOOP || errno == ENOTDIR) &&
            fstatat(dd->layers_fd, name, &st, AT_SYMLINK_NOFOLLOW) == 0)
            return srv_error_set(err, SRV_E_BAD_REQUEST, "", "%s is %s, not a layer directory%s",
                                 dshown, srv_ddi_kind_of(st.st_mode),
                                 S_ISLNK(st.st_mode) ? " (links are not followed)" : "");
        return srv_error_set(err, SRV_E_INTERNAL, "", "cannot open %s: %s", dshown,
                             strerror(errno));
    }

    /* the header first: the read takes no more than a file within the limits can hold */
    uint64_t wcap;
    struct stat pre;
    if (weights_precheck(dd, dirfd, wshown, max_elements, &wcap, &pre, err, log) != 0)
        goto error;
    int wr = srv_ddi_read_file_at(dirfd, WEIGHTS_FILE, wshown, wcap ? (size_t)wcap : SIZE_MAX,
                                  &wbuf, &wlen, &ws, err);
    if (wr == 0 && (!wcap || !srv_ddi_same_file(&pre, &ws))) {
        /* a writer replaced the file between its header and its read: start again */
        *retry = true;
        srv_error_set(err, SRV_E_INTERNAL, "", "%s keeps changing while being read", wshown);
        goto error;
    }
    if (wr < 0) {
        if (wcap && (fstatat(dirfd, WEIGHTS_FILE, &again, AT_SYMLINK_NOFOLLOW) != 0 ||
                     !srv_ddi_same_file(&pre, &again)))
            *retry = true; /* grown past its header's size by a writer since: look again */
        goto error;
    }
    int cr =
        srv_ddi_read_file_at(dirfd, CONFIG_FILE, cshown, SRV_DD_CONFIG_MAX, &cbuf, &clen, &cs, err);
    if (cr < 0)
        goto error;
    if (wr == 1 && cr == 1) {
        srv_error_set(err, SRV_E_LAYER_NOT_FOUND, "",
                      "%s holds neither " CONFIG_FILE " nor " WEIGHTS_FILE, dshown);
        goto error;
    }
    if (wr == 1) {
        srv_error_set(err, SRV_E_BAD_REQUEST, "",
                      "%s is missing (a layer needs " CONFIG_FILE " and " WEIGHTS_FILE ")", wshown);
        goto error;
    }
    srv_error st_err = {0};
    if (srv_st_parse(&out->weights, (const uint8_t *)wbuf, wlen, max_elements, wshown, &st_err) !=
        0) {
        srv_ddi_prefix_message(&st_err, wshown); /* logs show the message, not the field */
        srv_error_set(log, st_err.code, "", "%s", st_err.message);
        weights_problem(err, st_err.code, wshown);
        goto error;
    }
    /* a writer replaced the weights while we read the config: start again */
    if (fstatat(dirfd, WEIGHTS_FILE, &again, AT_SYMLINK_NOFOLLOW) != 0 ||
        !srv_ddi_same_file(&ws, &again)) {
        *retry = true;
        srv_error_set(err, SRV_E_INTERNAL, "", "%s keeps changing while being read", wshown);
        goto error;
    }
    const char *mtext = srv_st_meta(&out->weights, "attnd.config");
    if (mtext) {
        meta_config =
            srv_ddi_config_parse(mtext, strlen(mtext), "its attnd.config metadata", err, log);
        if (!meta_config) {
            srv_ddi_prefix_message(err, wshown);
            srv_ddi_prefix_message(log, wshown);
            goto error;
        }
    }
    if (cr == 0 && !(file_config = srv_ddi_config_parse(cbuf, clen, cshown, err, log)) &&
        !meta_config)
        goto error;

    if (!meta_config) {
        if (!file_config) {
            srv_error_set(err, SRV_E_BAD_REQUEST, "",
                          "%s is missing (a layer needs " CONFIG_FILE " and " WEIGHTS_FILE ")",
                          cshown);
            goto error;
        }
        out->config = file_config;
        file_config = NULL;
        srv_ddi_stamp_config(&out->stamp, &cs);
    } else if (file_config && json_equal(file_config, meta_config)) {
        out->config = file_config;
        file_config = NULL;
        srv_ddi_stamp_config(&out->stamp, &cs);
    } else if (cr == 0 && !file_config) {
        /* a config.json that is not a config (empty, not JSON): no crash leaves one (each file
         * is renamed into place whole), so it is damage, reported and the layer skipped, with
         * the file kept as it is for whoever looks; err and log say what is wrong with it */
        goto error;
    } else if (!file_config || srv_ddi_config_temp_matches(dirfd, meta_config)) {
        /* the commit reached weights.safetensors but not config.json (missing, or the old one
         * beside the new one's temp): complete it */
        if (err)
            memset(err, 0, sizeof *err); /* a damaged config.json is what we are repairing */
        if (log)
            memset(log, 0, sizeof *log);
        out->config = meta_config;
        meta_config = NULL;
        out->repaired = true;
        struct stat ns;
        if (!dd->read_only && write_config(dirfd, dshown, out->config, err) != 0)
            goto error;
        if (fstatat(dirfd, CONFIG_FILE, &ns, AT_SYMLINK_NOFOLLOW) == 0)
            srv_ddi_stamp_config(&out->stamp, &ns);
    } else {
        /* config.json changed under us (a writer renamed it just now): start again */
        if (fstatat(dirfd, CONFIG_FILE, &again, AT_SYMLINK_NOFOLLOW) != 0 ||
            !srv_ddi_same_file(&cs, &again)) {
            *retry = true;
            srv_error_set(err, SRV_E_INTERNAL, "", "%s keeps changing while being read", cshown);
            goto error;
        }
        out->config = file_config;
        file_config = NULL;
        out->hand_edited = true;
        srv_ddi_stamp_config(&out->stamp, &cs);
    }
    srv_ddi_stamp_weights(&out->stamp, &ws);
    const char *version = srv_st_meta(&out->weights, "attnd.version");
    snprintf(out->version, sizeof out->version, "%s", version ? version : "");
    /* the times attnd stored, else the weights file's: a file by hand was made when it was */
    const double mtime = (double)ws.st_mtim.tv_sec + (double)ws.st_mtim.tv_nsec * 1e-9;
    out->created = meta_time(&out->weights, "attnd.created", mtime);
    out->updated = meta_time(&out->weights, "attnd.updated", mtime);
    json_decref(file_config);
    json_decref(meta_config);
    free(wbuf);
    free(cbuf);
    close(dirfd);
    return 0;

error:
    json_decref(file_config);
    json_decref(meta_config);
    free(wbuf);
    free(cbuf);
    close(dirfd);
    srv_dd_layer_free(out);
    return -1;
}

int srv_datadir_read(srv_datadir *dd, const char *name, int64_t max_elements, srv_dd_layer *out,
                     srv_error *err, srv_error *log)
{
    memset(out, 0, sizeof *out);
    if (!srv_dd_name_valid(name))
        return srv_error_set(err, SRV_E_BAD_NAME, "", "\"%.80s\" is not a valid layer name", name);
    for (int attempt = 0;; attempt++) {
        bool retry;
        srv_error local = {0}, local_log = {0};
        int rc = read_once(dd, name, max_elements, out, &retry, &local, &local_log);
        if (rc == 0)
            return 0;
        if (!retry || attempt + 1 == READ_ATTEMPTS) {
            if (err && err->code == SRV_OK)
                *err = local;
            if (log && log->code == SRV_OK)
                *log = local_log.code != SRV_OK ? local_log : local;
            return -1;
        }
    }
}
