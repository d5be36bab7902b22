/*
 * datadir.c - layers on disk: opening the data dir, atomic writes, removal (see datadir.h), and
 * the helpers the data dir's files share (datadir_internal.h); a layer's checked read is
 * dd_read.c's, listing and the clean-up of what a crash left are dd_scan.c's.
 */
#include "datadir.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "datadir_internal.h"
#include "fsio.h"

atomic_uint srv_ddi_temp_counter;

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

static uint64_t mtime_ns(const struct stat *st)
{
    return (uint64_t)st->st_mtim.tv_sec * 1000000000u + (uint64_t)st->st_mtim.tv_nsec;
}

void srv_ddi_stamp_weights(srv_dd_stamp *s, const struct stat *st)
{
    s->w_ino = st ? (uint64_t)st->st_ino : 0;
    s->w_mtime_ns = st ? mtime_ns(st) : 0;
    s->w_size = st ? (uint64_t)st->st_size : 0;
}

void srv_ddi_stamp_config(srv_dd_stamp *s, const struct stat *st)
{
    s->c_ino = st ? (uint64_t)st->st_ino : 0;
    s->c_mtime_ns = st ? mtime_ns(st) : 0;
    s->c_size = st ? (uint64_t)st->st_size : 0;
}

bool srv_ddi_same_file(const struct stat *a, const struct stat *b)
{
    return a->st_ino == b->st_ino && a->st_dev == b->st_dev && mtime_ns(a) == mtime_ns(b) &&
           a->st_size == b->st_size;
}

const char *srv_ddi_kind_of(mode_t m)
{
    return S_ISLNK(m)    ? "a symbolic link"
           : S_ISDIR(m)  ? "a directory"
           : S_ISREG(m)  ? "a file"
           : S_ISFIFO(m) ? "a FIFO"
           : S_ISSOCK(m) ? "a socket"
           : S_ISCHR(m)  ? "a character device"
           : S_ISBLK(m)  ? "a block device"
                         : "not a regular file";
}

srv_code srv_ddi_io_code(int e)
{
    switch (e) {
    case ENOSPC:
    case EDQUOT:
        return SRV_E_INSUFFICIENT_STORAGE;
    case ENOMEM:
        return SRV_E_NOMEM;
    case EISDIR:    /* a rename onto a directory where a layer's file belongs: put there by hand, */
    case ENOTEMPTY: /* and no retry will change it (409, not a 503 with Retry-After)               */
        return SRV_E_CONFLICT;
    default:
        return SRV_E_UNAVAILABLE;
    }
}

int srv_ddi_not_a_layer_dir(srv_error *err, const char *name, mode_t m)
{
    if (S_ISLNK(m))
        return srv_error_set(err, SRV_E_CONFLICT, "name",
                             "layers/%s in the data dir is a symbolic link, which attnd never "
                             "follows: it is not a layer, and neither the link nor what it points "
                             "to is changed (remove the link to use the name)",
                             name);
    return srv_error_set(err, SRV_E_CONFLICT, "name",
                         "layers/%s in the data dir is %s, not a layer directory: it is left as it "
                         "is (remove it to use the name)",
                         name, srv_ddi_kind_of(m));
}

int srv_ddi_open_layer_dir(const srv_datadir *dd, const char *name)
{
    return openat(dd->layers_fd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
}

int srv_ddi_read_file_at(int dirfd, const char *file, const char *shown, size_t cap, char **buf,
                        size_t *len, struct stat *st, srv_error *err)
{
    *buf = NULL;
    *len = 0;
    struct stat ls;
    if (fstatat(dirfd, file, &ls, AT_SYMLINK_NOFOLLOW) != 0) {
        if (errno == ENOENT)
            return 1;
        return srv_error_set(err, SRV_E_INTERNAL, "", "cannot read %s: %s", shown,
                             strerror(errno));
    }
    if (S_ISLNK(ls.st_mode))
        return srv_error_set(err, SRV_E_BAD_REQUEST, "",
                             "%s is a symbolic link: attnd does not follow links inside the data "
                             "dir (put the file itself there)",
                             shown);
    if (!S_ISREG(ls.st_mode))
        return srv_error_set(err, SRV_E_BAD_REQUEST, "", "%s is %s, not a regular file", shown,
                             srv_ddi_kind_of(ls.st_mode));
    /* O_NOFOLLOW and O_NONBLOCK: the entry may have been replaced since the fstatat */
    int fd = openat(dirfd, file, O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK);
    if (fd < 0) {
        if (errno == ENOENT)
            return 1;
        return srv_error_set(err, SRV_E_INTERNAL, "", "cannot open %s: %s", shown,
                             errno == ELOOP ? "it became a symbolic link" : strerror(errno));
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

int srv_ddi_fsync_dir(int dirfd, const char *shown, srv_error *err)
{
    if (srv_fs_fsync(dirfd) == 0)
        return 0;
    return srv_error_set(err, srv_ddi_io_code(errno), "", "cannot fsync %s: %s", shown, strerror(errno));
}

int srv_ddi_temp_open(srv_ddi_temp *t, int dirfd, const char *shown, const char *base,
                      srv_error *err)
{
    memset(t, 0, sizeof *t);
    t->dirfd = dirfd;
    t->shown = shown;
    t->base = base;
    unsigned n = atomic_fetch_add(&srv_ddi_temp_counter, 1);
    snprintf(t->name, sizeof t->name, ".%s" TEMP_MARK "%ld-%u", base, (long)getpid(), n);
    t->fd = srv_fs_openat(dirfd, t->name, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC,
                          0644);
    if (t->fd >= 0)
        return 0;
    t->name[0] = '\0';
    return srv_error_set(err, srv_ddi_io_code(errno), "", "cannot create a temp file for %s%s%s: %s",
                         shown, shown[0] ? "/" : "", base, strerror(errno));
}

int srv_ddi_temp_write(void *temp, const void *data, size_t len)
{
    srv_ddi_temp *t = temp;
    const char *p = data;
    for (size_t done = 0; !t->step && done < len;) {
        ssize_t w = srv_fs_write(t->fd, p + done, len - done);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0) {
            t->err_no = w < 0 ? errno : EIO;
            t->step = "write";
        } else {
            done += (size_t)w;
        }
    }
    return t->step ? -1 : 0;
}

int srv_ddi_temp_close(srv_ddi_temp *t, bool keep, srv_error *err)
{
    if (keep && !t->step && srv_fs_fsync(t->fd) != 0) {
        t->err_no = errno;
        t->step = "fsync";
    }
    if (close(t->fd) != 0 && keep && !t->step) {
        t->err_no = errno;
        t->step = "close";
    }
    t->fd = -1;
    if (keep && !t->step)
        return 0;
    srv_fs_unlinkat(t->dirfd, t->name, 0);
    t->name[0] = '\0';
    if (!t->step)
        return -1; /* given up by the caller, who says why */
    return srv_error_set(err, srv_ddi_io_code(t->err_no), "", "cannot %s %s%s%s (a temp file): %s",
                         t->step, t->shown, t->shown[0] ? "/" : "", t->base,
                         strerror(t->err_no));
}

int srv_ddi_write_temp(int dirfd, const char *shown, const char *base, const void *data,
                       size_t len, char tmp[TEMP_NAME_MAX], srv_error *err)
{
    srv_ddi_temp t;
    tmp[0] = '\0';
    if (srv_ddi_temp_open(&t, dirfd, shown, base, err) != 0)
        return -1;
    srv_ddi_temp_write(&t, data, len);
    if (srv_ddi_temp_close(&t, true, err) != 0)
        return -1;
    memcpy(tmp, t.name, TEMP_NAME_MAX);
    return 0;
}

/* Makes `name` a directory inside dirfd unless it is one; never follows a link. For the data dir's
 * own layers/ at open: errors name `shown` (an absolute path: the operator reads these at start). */
static int ensure_subdir(int dirfd, const char *name, const char *shown, srv_error *err)
{
    struct stat st;
    if (srv_fs_mkdirat(dirfd, name, 0755) == 0)
        return srv_fs_fsync(dirfd) == 0
                   ? 0
                   : srv_error_set(err, SRV_E_INTERNAL, "", "cannot fsync the directory of %s: %s",
                                   shown, strerror(errno));
    if (errno != EEXIST)
        return srv_error_set(err, SRV_E_INTERNAL, "", "cannot create directory %s: %s", shown,
                             strerror(errno));
    if (fstatat(dirfd, name, &st, AT_SYMLINK_NOFOLLOW) != 0)
        return srv_error_set(err, SRV_E_INTERNAL, "", "cannot read %s: %s", shown,
                             strerror(errno));
    if (S_ISDIR(st.st_mode))
        return 0;
    return srv_error_set(err, SRV_E_INTERNAL, "",
                         "%s is %s, not a directory (attnd does not follow links inside its data "
                         "dir: point --data-dir at the real directory instead)",
                         shown, srv_ddi_kind_of(st.st_mode));
}

/* Checks that layers/ can be written by writing (and removing) a file there: what a write needs,
 * on any file system (access(2) cannot tell an NFS export mounted read-only on the server). A
 * read-only file system turns the data dir read-only (ro_fs: its layers are served, changes get
 * 503); any other refusal is an error (the daemon would accept changes it cannot keep). */
static int probe_write(srv_datadir *dd, srv_error *err)
{
    char name[TEMP_NAME_MAX];
    snprintf(name, sizeof name, ".attnd-probe" TEMP_MARK "%ld-%u", (long)getpid(),
             atomic_fetch_add(&srv_ddi_temp_counter, 1));
    int fd = srv_fs_openat(dd->layers_fd, name, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC,
                           0600);
    if (fd >= 0) {
        close(fd);
        srv_fs_unlinkat(dd->layers_fd, name, 0);
        return 0;
    }
    if (errno == EROFS) {
        dd->read_only = dd->ro_fs = true;
        return 0;
    }
    return srv_error_set(err, SRV_E_INTERNAL, "", "data dir %s is not writable: %s", dd->layers,
                         strerror(errno));
}

int srv_ddi_refuse_change(const srv_datadir *dd, srv_error *err)
{
    if (dd->ro_fs)
        return srv_error_set(err, SRV_E_UNAVAILABLE, "",
                             "the data dir is on a read-only file system: its layers are served, "
                             "but none can be changed");
    return srv_error_set(err, SRV_E_FORBIDDEN, "", "the data dir is open read-only");
}

/* mkdir -p path (mode 0755 for each directory made). 0, or -1 with err naming the directory that
 * could not be made. */
static int make_dirs(const char *path, srv_error *err)
{
    char *p = strdup(path);
    if (!p)
        return srv_error_set(err, SRV_E_NOMEM, "", "out of memory");
    int rc = 0;
    for (char *c = p + 1;; c++) {
        const char was = *c;
        if (was != '/' && was != '\0')
            continue;
        *c = '\0';
        if (mkdir(p, 0755) != 0 && errno != EEXIST) {
            rc = srv_error_set(err, SRV_E_INTERNAL, "", "cannot create data dir %s: %s%s%s", path,
                               strerror(errno), was ? ", making " : "", was ? p : "");
            break;
        }
        *c = was;
        if (!was)
            break;
    }
    free(p);
    return rc;
}

srv_datadir *srv_datadir_open(const char *path, bool read_only, srv_error *err)
{
    srv_datadir *dd = calloc(1, sizeof *dd);
    if (!dd) {
        srv_error_set(err, SRV_E_NOMEM, "", "out of memory");
        return NULL;
    }
    dd->root_fd = dd->layers_fd = dd->lock_fd = -1;
    dd->temp_grace_s = 600;
    dd->read_only = read_only;
    if (!path || !path[0]) {
        srv_error_set(err, SRV_E_INTERNAL, "", "data dir path is empty");
        goto error;
    }
    dd->root = strdup(path);
    if (!dd->root || asprintf(&dd->layers, "%s/layers", path) < 0) {
        dd->layers = NULL;
        srv_error_set(err, SRV_E_NOMEM, "", "out of memory");
        goto error;
    }
    /* the data dir's own path may be a link (a mount, a volume): it is followed, once; it is made
     * when missing, with the directories above it (as mkdir -p) */
    if (!read_only && make_dirs(path, err) != 0)
        goto error;
    dd->root_fd = open(path, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (dd->root_fd < 0) {
        srv_error_set(err, SRV_E_INTERNAL, "", "cannot open data dir %s: %s", path,
                      strerror(errno));
        goto error;
    }
    if (!read_only && ensure_subdir(dd->root_fd, "layers", dd->layers, err) != 0)
        goto error;
    dd->layers_fd = openat(dd->root_fd, "layers", O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (dd->layers_fd < 0) {
        struct stat st;
        bool other = (errno == ELOOP || errno == ENOTDIR) &&
                     fstatat(dd->root_fd, "layers", &st, AT_SYMLINK_NOFOLLOW) == 0;
        srv_error_set(err, SRV_E_INTERNAL, "", "data dir %s: cannot read %s: %s%s", path,
                      dd->layers, other ? srv_ddi_kind_of(st.st_mode) : strerror(errno),
                      other ? " (attnd does not follow links inside its data dir: point "
                              "--data-dir at the real directory instead)"
                            : "");
        goto error;
    }
    if (faccessat(dd->layers_fd, ".", R_OK | X_OK, AT_EACCESS) != 0) {
        srv_error_set(err, SRV_E_INTERNAL, "", "data dir %s is not readable: %s", dd->layers,
                      strerror(errno));
        goto error;
    }
    if (!read_only && probe_write(dd, err) != 0)
        goto error;
    return dd;
error:
    srv_datadir_free(dd);
    return NULL;
}

void srv_datadir_free(srv_datadir *dd)
{
    if (!dd)
        return;
    if (dd->layers_fd >= 0)
        close(dd->layers_fd);
    if (dd->lock_fd >= 0)
        close(dd->lock_fd);
    if (dd->root_fd >= 0)
        close(dd->root_fd);
    free(dd->root);
    free(dd->layers);
    free(dd);
}

DIR *srv_ddi_open_dir_stream(int dirfd)
{
    int fd = openat(dirfd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0)
        return NULL;
    DIR *d = fdopendir(fd);
    if (!d)
        close(fd);
    else
        rewinddir(d);
    return d;
}

void srv_ddi_prefix_message(srv_error *err, const char *prefix)
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


/* Opens the directory of layer name for a change, creating it when create is set and it is
 * missing (*created then tells; the layers dir is fsync'd). Returns the fd, or -1 with err:
 * SRV_E_CONFLICT when the name is taken by anything but a directory (left untouched),
 * SRV_E_LAYER_NOT_FOUND when it is missing (and create is not set). */
static int open_for_change(srv_datadir *dd, const char *name, bool create, bool *created,
                           srv_error *err)
{
    *created = false;
    if (create) {
        if (srv_fs_mkdirat(dd->layers_fd, name, 0755) == 0)
            *created = true;
        else if (errno != EEXIST)
            return srv_error_set(err, srv_ddi_io_code(errno), "", "cannot create layers/%s: %s", name,
                                 strerror(errno));
    }
    int fd = srv_ddi_open_layer_dir(dd, name);
    if (fd < 0) {
        int e = errno;
        struct stat st;
        if (e == ENOENT)
            return srv_error_set(err, SRV_E_LAYER_NOT_FOUND, "", "layers/%s does not exist", name);
        if ((e == ELOOP || e == ENOTDIR) &&
            fstatat(dd->layers_fd, name, &st, AT_SYMLINK_NOFOLLOW) == 0)
            return srv_ddi_not_a_layer_dir(err, name, st.st_mode);
        return srv_error_set(err, srv_ddi_io_code(e), "", "cannot open layers/%s: %s", name,
                             strerror(e));
    }
    if (*created && srv_fs_fsync(dd->layers_fd) != 0) {
        int e = errno;
        close(fd);
        srv_fs_unlinkat(dd->layers_fd, name, AT_REMOVEDIR);
        *created = false;
        return srv_error_set(err, srv_ddi_io_code(e), "", "cannot fsync layers/: %s", strerror(e));
    }
    return fd;
}

/* meta[key] = t as a decimal string of Unix seconds to the millisecond (safetensors metadata holds
 * strings only). 0, or -1 out of memory. */
static int set_time(json_t *meta, const char *key, double t)
{
    char text[32];
    snprintf(text, sizeof text, "%.3f", t);
    return json_object_set_new(meta, key, json_string(text));
}

int srv_datadir_write(srv_datadir *dd, const char *name, const json_t *config,
                      const srv_st_view *tensors, int n, const char *version, const double *times,
                      srv_dd_stamp *stamp, srv_error *err)
{
    char shown[80], wtmp[TEMP_NAME_MAX] = "", ctmp[TEMP_NAME_MAX] = "";
    char *ctext = NULL, *mtext = NULL;
    json_t *meta = NULL;
    int dirfd = -1, rc = -1;
    bool created = false;
    if (!srv_dd_name_valid(name))
        return srv_error_set(err, SRV_E_BAD_NAME, "", "\"%.80s\" is not a valid layer name",
                             name);
    if (!json_is_object(config))
        return srv_error_set(err, SRV_E_INTERNAL, "", "srv_datadir_write: config not an object");
    if (dd->read_only)
        return srv_ddi_refuse_change(dd, err);
    snprintf(shown, sizeof shown, "layers/%s", name);

    mtext = json_dumps(config, JSON_COMPACT | JSON_SORT_KEYS);
    ctext = json_dumps(config, JSON_INDENT(2));
    meta = json_object();
    if (!mtext || !ctext || !meta || json_object_set_new(meta, "format", json_string("pt")) ||
        json_object_set_new(meta, "attnd.config", json_string(mtext)) ||
        (version && version[0] &&
         json_object_set_new(meta, "attnd.version", json_string(version))) ||
        (times && (set_time(meta, "attnd.created", times[0]) ||
                   set_time(meta, "attnd.updated", times[1])))) {
        srv_error_set(err, SRV_E_NOMEM, "", "out of memory writing layer %s", name);
        goto out;
    }
    size_t clen = strlen(ctext);
    char *c2 = realloc(ctext, clen + 2);
    if (!c2) {
        srv_error_set(err, SRV_E_NOMEM, "", "out of memory writing layer %s", name);
        goto out;
    }
    ctext = c2;
    ctext[clen++] = '\n';
    ctext[clen] = '\0';

    dirfd = open_for_change(dd, name, true, &created, err);
    if (dirfd < 0)
        goto out;
    /* the weights go from the layer's memory to the file through a small block: writing a layer
     * never holds a second copy of it */
    srv_ddi_temp wt;
    if (srv_ddi_temp_open(&wt, dirfd, shown, WEIGHTS_FILE, err) != 0)
        goto out;
    srv_error serr = {0};
    int sr = srv_st_write_stream(srv_ddi_temp_write, &wt, tensors, n, meta, &serr);
    if (srv_ddi_temp_close(&wt, sr == 0, err) != 0) {
        if (!wt.step && err) /* the stream itself failed (not the disk): its reason */
            *err = serr;
        goto out;
    }
    memcpy(wtmp, wt.name, sizeof wtmp);
    if (srv_ddi_write_temp(dirfd, shown, CONFIG_FILE, ctext, clen, ctmp, err) != 0)
        goto out;
    if (srv_fs_renameat(dirfd, wtmp, dirfd, WEIGHTS_FILE) != 0) {
        const int e = errno;
        srv_error_set(err, srv_ddi_io_code(e), "", "cannot rename a temp file to %s/" WEIGHTS_FILE
                      ": %s%s", shown, strerror(e),
                      e == EISDIR || e == ENOTEMPTY
                          ? " (a directory is where the file belongs: remove it by hand)"
                          : "");
        goto out;
    }
    /* commit point passed: from here a reader finds the new layer (see datadir.h) */
    wtmp[0] = '\0';
    created = false;
    rc = 0;
    if (srv_ddi_fsync_dir(dirfd, shown, err) != 0) {
        rc = 1; /* durable only once the directory is: the next write or reader tries again */
    } else if (srv_fs_renameat(dirfd, ctmp, dirfd, CONFIG_FILE) != 0) {
        srv_error_set(err, srv_ddi_io_code(errno), "", "cannot rename a temp file to %s/" CONFIG_FILE
                      ": %s (the next reader completes it from the weights)", shown,
                      strerror(errno));
        ctmp[0] = '\0'; /* the temp is what a reader repairs from: keep it */
        rc = 1;
    } else {
        ctmp[0] = '\0';
        if (srv_ddi_fsync_dir(dirfd, shown, err) != 0)
            rc = 1;
    }
    if (rc == 1)
        srv_ddi_prefix_message(err, "the new layer is committed but finishing it failed");
    if (stamp) {
        struct stat ws, cs;
        memset(stamp, 0, sizeof *stamp);
        if (fstatat(dirfd, WEIGHTS_FILE, &ws, AT_SYMLINK_NOFOLLOW) == 0)
            srv_ddi_stamp_weights(stamp, &ws);
        if (fstatat(dirfd, CONFIG_FILE, &cs, AT_SYMLINK_NOFOLLOW) == 0)
            srv_ddi_stamp_config(stamp, &cs);
    }

out:
    if (wtmp[0])
        srv_fs_unlinkat(dirfd, wtmp, 0);
    if (ctmp[0] && rc < 0)
        srv_fs_unlinkat(dirfd, ctmp, 0);
    if (dirfd >= 0)
        close(dirfd);
    if (created) /* a new layer that did not get written: leave no empty directory */
        srv_fs_unlinkat(dd->layers_fd, name, AT_REMOVEDIR);
    json_decref(meta);
    free(mtext);
    free(ctext);
    return rc;
}

int srv_datadir_entry(srv_datadir *dd, const char *name, srv_error *err)
{
    struct stat st;
    if (!srv_dd_name_valid(name))
        return srv_error_set(err, SRV_E_BAD_NAME, "", "\"%.80s\" is not a valid layer name",
                             name);
    if (fstatat(dd->layers_fd, name, &st, AT_SYMLINK_NOFOLLOW) != 0)
        return errno == ENOENT ? 0
                               : srv_error_set(err, SRV_E_INTERNAL, "", "cannot read layers/%s: %s",
                                               name, strerror(errno));
    return S_ISDIR(st.st_mode) ? 1 : srv_ddi_not_a_layer_dir(err, name, st.st_mode);
}

void srv_ddi_empty_dir(int dirfd, int depth)
{
    DIR *d = srv_ddi_open_dir_stream(dirfd);
    if (!d)
        return;
    struct dirent *de;
    while ((de = readdir(d)) != NULL) {
        if (strcmp(de->d_name, ".") == 0 || strcmp(de->d_name, "..") == 0)
            continue;
        if (srv_fs_unlinkat(dirfd, de->d_name, 0) == 0 || errno != EISDIR || depth <= 0)
            continue;
        int sub = openat(dirfd, de->d_name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
        if (sub >= 0) {
            srv_ddi_empty_dir(sub, depth - 1);
            close(sub);
        }
        srv_fs_unlinkat(dirfd, de->d_name, AT_REMOVEDIR);
    }
    closedir(d);
}

int srv_datadir_remove(srv_datadir *dd, const char *name, srv_error *err)
{
    char gone[TEMP_NAME_MAX];
    if (!srv_dd_name_valid(name))
        return srv_error_set(err, SRV_E_BAD_NAME, "", "\"%.80s\" is not a valid layer name",
                             name);
    if (dd->read_only)
        return srv_ddi_refuse_change(dd, err);
    bool created;
    int fd = open_for_change(dd, name, false, &created, err);
    if (fd < 0) {
        if (err && err->code == SRV_E_LAYER_NOT_FOUND) {
            memset(err, 0, sizeof *err); /* not on disk: nothing to remove */
            return 0;
        }
        return -1;
    }
    struct stat held, moved;
    unsigned n = atomic_fetch_add(&srv_ddi_temp_counter, 1);
    snprintf(gone, sizeof gone, DELETED_PREFIX "%s-%ld-%u", name, (long)getpid(), n);
    if (fstat(fd, &held) != 0 || srv_fs_renameat(dd->layers_fd, name, dd->layers_fd, gone) != 0) {
        int e = errno;
        close(fd);
        if (e == ENOENT)
            return 0;
        return srv_error_set(err, srv_ddi_io_code(e), "", "cannot remove layers/%s: %s", name,
                             strerror(e));
    }
    /* the directory opened above is the one that moved; if the name was swapped for a link in
     * between, put it back and change nothing */
    if (fstatat(dd->layers_fd, gone, &moved, AT_SYMLINK_NOFOLLOW) != 0 ||
        moved.st_ino != held.st_ino || moved.st_dev != held.st_dev) {
        srv_fs_renameat(dd->layers_fd, gone, dd->layers_fd, name);
        close(fd);
        return srv_error_set(err, SRV_E_CONFLICT, "name",
                             "layers/%s was replaced while being removed; it is left as it is",
                             name);
    }
    int rc = 0;
    if (srv_ddi_fsync_dir(dd->layers_fd, "layers/", err) != 0) {
        srv_ddi_prefix_message(err, "the layer is removed but the removal may not be durable yet");
        rc = 1;
    }
    /* what is left is removed by srv_datadir_clean */
    srv_ddi_empty_dir(fd, 4);
    close(fd);
    srv_fs_unlinkat(dd->layers_fd, gone, AT_REMOVEDIR);
    return rc;
}
