/*
 * dd_versions.c - what every replica sharing a data dir agrees on: one change at a time (the lock
 * file), versions that never repeat (the counter) and read the same everywhere (see datadir.h,
 * "Replicas").
 *
 * What the shared volume must give (docs/deployment.md): byte-range locks that the file server
 * enforces between its clients and releases when a client dies (local file systems; NFSv4, whose
 * locks are leased; NFSv3 only with a working lockd), rename within a directory that is atomic for
 * every client, and close-to-open consistency (a file opened after another client closed it shows
 * what that client wrote: NFS's default, never mount with nocto). attnd takes the lock as an open
 * file description lock (F_OFD_SETLK): it excludes every other open of the file, in this process
 * (two daemons in one test) as in others, and a process that dies drops it.
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "codec/safetensors.h"
#include "datadir.h"
#include "datadir_internal.h"
#include "fsio.h"

#define LOCK_FILE "attnd.lock"
#define COUNTER_FILE "attnd.counter"
#define VERSION_FILE ".attnd-version"
#define MAX_VERSION ((uint64_t)1 << 53) /* what a JSON client reads exactly */

static void sleep_ms(int ms)
{
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

static long long now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (long long)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

int srv_datadir_lock(srv_datadir *dd, srv_error *err)
{
    if (dd->read_only)
        return srv_ddi_refuse_change(dd, err);
    if (dd->lock_fd < 0) {
        dd->lock_fd = srv_fs_openat(dd->root_fd, LOCK_FILE,
                                    O_RDWR | O_CREAT | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC, 0644);
        if (dd->lock_fd < 0)
            return srv_error_set(err, srv_ddi_io_code(errno), "",
                                 "cannot open the data dir's lock file " LOCK_FILE ": %s",
                                 errno == ELOOP ? "it is a symbolic link" : strerror(errno));
    }
    /* a non-blocking attempt in a loop rather than F_OFD_SETLKW: a replica that holds the lock
     * forever (stopped, or a data dir writer holding it on purpose) costs a 503, not a thread */
    struct flock fl = {.l_type = F_WRLCK, .l_whence = SEEK_SET, .l_start = 0, .l_len = 0};
    long long deadline = now_ms() + SRV_DD_LOCK_WAIT_MS;
    for (int wait = 1;; wait = wait < 50 ? wait * 2 : 50) {
        if (fcntl(dd->lock_fd, F_OFD_SETLK, &fl) == 0)
            return 0;
        if (errno != EAGAIN && errno != EACCES && errno != EINTR)
            return srv_error_set(err, SRV_E_UNAVAILABLE, "",
                                 "cannot lock the data dir's lock file " LOCK_FILE ": %s (the "
                                 "file system must support byte-range locks)",
                                 strerror(errno));
        if (now_ms() >= deadline)
            return srv_error_set(err, SRV_E_UNAVAILABLE, "",
                                 "another process sharing the data dir has held its lock "
                                 "(" LOCK_FILE ") for %d s; retry later",
                                 SRV_DD_LOCK_WAIT_MS / 1000);
        sleep_ms(wait);
    }
}

void srv_datadir_unlock(srv_datadir *dd)
{
    if (dd->lock_fd < 0)
        return;
    struct flock fl = {.l_type = F_UNLCK, .l_whence = SEEK_SET, .l_start = 0, .l_len = 0};
    fcntl(dd->lock_fd, F_OFD_SETLK, &fl);
}

/* A version as written by attnd: a plain decimal number from 1 to SRV_DD_VERSION_TRUSTED, else 0
 * (a larger one is a file's word that versions are used up: not taken). */
static uint64_t parse_version(const char *t, size_t n)
{
    uint64_t v = 0;
    if (n == 0 || n > 16)
        return 0;
    for (size_t i = 0; i < n; i++) {
        if (t[i] < '0' || t[i] > '9')
            return 0;
        v = v * 10 + (uint64_t)(t[i] - '0');
    }
    return v <= SRV_DD_VERSION_TRUSTED ? v : 0;
}

int srv_datadir_next_version(srv_datadir *dd, uint64_t floor, uint64_t *out, srv_error *err)
{
    char *text = NULL, tmp[TEMP_NAME_MAX], line[32];
    size_t len = 0;
    struct stat st;
    /* a damaged counter is read as 0: floor (every version this process saw) still holds it up */
    int r = srv_ddi_read_file_at(dd->root_fd, COUNTER_FILE, COUNTER_FILE, 64, &text, &len, &st,
                                 NULL);
    uint64_t c = r == 0 ? parse_version(text, strcspn(text, "\n")) : 0;
    free(text);
    uint64_t v = (c > floor ? c : floor) + 1;
    if (v > MAX_VERSION)
        return srv_error_set(err, SRV_E_UNAVAILABLE, "", "layer versions are exhausted");
    int n = snprintf(line, sizeof line, "%" PRIu64 "\n", v);
    if (srv_ddi_write_temp(dd->root_fd, "", COUNTER_FILE, line, (size_t)n, tmp, err) != 0)
        return -1;
    if (srv_fs_renameat(dd->root_fd, tmp, dd->root_fd, COUNTER_FILE) != 0) {
        int e = errno;
        srv_fs_unlinkat(dd->root_fd, tmp, 0);
        return srv_error_set(err, srv_ddi_io_code(e), "", "cannot rename a temp file to "
                             COUNTER_FILE ": %s", strerror(e));
    }
    if (srv_ddi_fsync_dir(dd->root_fd, "the data dir", err) != 0)
        return -1;
    *out = v;
    return 0;
}

/* The __metadata__ object of the weights file of layer dir dirfd, read from its header only (new
 * reference, or NULL when it has none); *st its stat. Returns 0, 1 when there is no weights file,
 * -1 when its header is not a valid safetensors header for its size (damaged, truncated). */
static int read_weights_meta(int dirfd, json_t **meta, struct stat *st)
{
    *meta = NULL;
    struct stat ls;
    if (fstatat(dirfd, WEIGHTS_FILE, &ls, AT_SYMLINK_NOFOLLOW) != 0)
        return errno == ENOENT ? 1 : -1;
    if (!S_ISREG(ls.st_mode))
        return -1;
    int fd = openat(dirfd, WEIGHTS_FILE, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
    if (fd < 0)
        return errno == ENOENT ? 1 : -1;
    uint8_t len8[8];
    uint64_t hlen = 0;
    uint8_t *h = NULL;
    srv_st_header hd = {0};
    srv_st_header_limits lim = {SRV_ST_MAX_HEADER, SRV_ST_MAX_TENSORS, INT64_MAX / 8, false};
    int rc = -1;
    if (fstat(fd, st) == 0 && S_ISREG(st->st_mode) && pread(fd, len8, 8, 0) == 8 &&
        srv_st_header_len(len8, (uint64_t)st->st_size, SRV_ST_MAX_HEADER, &hlen, WEIGHTS_FILE,
                          NULL) == 0 &&
        (h = malloc(hlen ? hlen : 1)) != NULL && pread(fd, h, hlen, 8) == (ssize_t)hlen &&
        srv_st_header_parse(&hd, h, (size_t)hlen, (uint64_t)st->st_size - 8 - hlen, &lim,
                            WEIGHTS_FILE, NULL) == 0) {
        if (json_is_object(hd.metadata))
            *meta = json_incref((json_t *)hd.metadata);
        rc = 0;
    }
    srv_st_header_free(&hd);
    free(h);
    close(fd);
    return rc;
}

/* The version .attnd-version of layer dir dirfd records for files of this stamp, or 0. */
static uint64_t recorded_version(int dirfd, const srv_dd_stamp *stamp)
{
    char *text;
    size_t len;
    struct stat st;
    if (srv_ddi_read_file_at(dirfd, VERSION_FILE, VERSION_FILE, 512, &text, &len, &st, NULL) != 0)
        return 0;
    unsigned long long v, f[6];
    int used = 0;
    uint64_t out = 0;
    if (sscanf(text, "%llu %llu %llu %llu %llu %llu %llu\n%n", &v, &f[0], &f[1], &f[2], &f[3],
               &f[4], &f[5], &used) == 7 &&
        (size_t)used == len && v >= 1 && v <= SRV_DD_VERSION_TRUSTED && f[0] == stamp->w_ino &&
        f[1] == stamp->w_mtime_ns && f[2] == stamp->w_size && f[3] == stamp->c_ino &&
        f[4] == stamp->c_mtime_ns && f[5] == stamp->c_size)
        out = v;
    free(text);
    return out;
}

int srv_datadir_version(srv_datadir *dd, const char *name, uint64_t *version, srv_error *err)
{
    *version = 0;
    int entry = srv_datadir_entry(dd, name, err);
    if (entry <= 0)
        return entry;
    int dirfd = srv_ddi_open_layer_dir(dd, name);
    if (dirfd < 0) {
        if (errno == ENOENT)
            return 0;
        return srv_error_set(err, SRV_E_CONFLICT, "name", "layers/%s changed while being read",
                             name);
    }
    json_t *meta = NULL, *mc = NULL, *fc = NULL;
    char *cbuf = NULL;
    size_t clen = 0;
    struct stat ws, cs;
    srv_dd_stamp stamp = {0};
    int wr = read_weights_meta(dirfd, &meta, &ws);
    int cr = srv_ddi_read_file_at(dirfd, CONFIG_FILE, CONFIG_FILE, SRV_DD_CONFIG_MAX, &cbuf, &clen,
                                  &cs, NULL);
    if (wr == 1 && cr == 1) {
        close(dirfd);
        return 0; /* a directory with neither file is no layer (yet) */
    }
    srv_ddi_stamp_weights(&stamp, wr == 0 ? &ws : NULL);
    srv_ddi_stamp_config(&stamp, cr == 0 ? &cs : NULL);
    *version = SRV_DD_NO_VERSION;
    const char *vt = json_string_value(json_object_get(meta, "attnd.version"));
    const char *ct = json_string_value(json_object_get(meta, "attnd.config"));
    uint64_t v = vt ? parse_version(vt, strlen(vt)) : 0;
    if (wr == 0 && v && ct && (mc = json_loads(ct, 0, NULL)) != NULL) {
        /* attnd wrote it: its version, unless config.json was edited by hand since (a missing or
         * different config.json with the matching temp is a commit the next reader completes) */
        if (cr == 1 ||
            (cr == 0 && (fc = srv_ddi_config_parse(cbuf, clen, CONFIG_FILE, NULL, NULL)) != NULL &&
             json_equal(fc, mc)) ||
            srv_ddi_config_temp_matches(dirfd, mc))
            *version = v;
    }
    if (*version == SRV_DD_NO_VERSION) {
        uint64_t r = recorded_version(dirfd, &stamp);
        if (r)
            *version = r;
    }
    json_decref(meta);
    json_decref(mc);
    json_decref(fc);
    free(cbuf);
    close(dirfd);
    return 0;
}

uint64_t srv_datadir_adopt(srv_datadir *dd, const char *name, const srv_dd_stamp *stamp,
                           uint64_t floor, srv_error *err)
{
    int dirfd = srv_ddi_open_layer_dir(dd, name);
    if (dirfd < 0)
        return 0;
    uint64_t v = recorded_version(dirfd, stamp);
    if (v || dd->read_only) {
        close(dirfd);
        return v;
    }
    if (srv_datadir_lock(dd, err) != 0) {
        close(dirfd);
        return 0;
    }
    /* again under the lock: another replica may have recorded one meanwhile */
    v = recorded_version(dirfd, stamp);
    char text[200], tmp[TEMP_NAME_MAX], shown[80];
    snprintf(shown, sizeof shown, "layers/%s", name);
    if (!v && srv_datadir_next_version(dd, floor, &v, err) == 0) {
        int n = snprintf(text, sizeof text,
                         "%" PRIu64 " %" PRIu64 " %" PRIu64 " %" PRIu64 " %" PRIu64 " %" PRIu64
                         " %" PRIu64 "\n",
                         v, stamp->w_ino, stamp->w_mtime_ns, stamp->w_size, stamp->c_ino,
                         stamp->c_mtime_ns, stamp->c_size);
        if (srv_ddi_write_temp(dirfd, shown, VERSION_FILE, text, (size_t)n, tmp, err) != 0) {
            v = 0;
        } else if (srv_fs_renameat(dirfd, tmp, dirfd, VERSION_FILE) != 0) {
            srv_error_set(err, srv_ddi_io_code(errno), "", "cannot rename a temp file to %s/"
                          VERSION_FILE ": %s", shown, strerror(errno));
            srv_fs_unlinkat(dirfd, tmp, 0);
            v = 0;
        } else {
            srv_ddi_fsync_dir(dirfd, shown, NULL); /* the next load records it again if lost */
        }
    }
    srv_datadir_unlock(dd);
    close(dirfd);
    return v;
}
