/*
 * dd_scan.c - walking layers/ as a whole (see datadir.h): the list of layers, the strays that are
 * not layers, and the clean-up of what interrupted writes and removals left behind once it is
 * stale. Nothing here follows a link; every path is relative to a directory descriptor.
 */
#include "datadir.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "base/sysinfo.h"
#include "datadir_internal.h"
#include "fsio.h"

static int entry_cmp(const void *a, const void *b)
{
    return strcmp(((const srv_dd_entry *)a)->name, ((const srv_dd_entry *)b)->name);
}

int srv_datadir_list(srv_datadir *dd, srv_dd_entry **out, srv_error *err)
{
    *out = NULL;
    DIR *d = srv_ddi_open_dir_stream(dd->layers_fd);
    if (!d)
        return srv_error_set(err, SRV_E_INTERNAL, "", "cannot read layers/: %s", strerror(errno));
    srv_dd_entry *list = NULL;
    int n = 0, cap = 0;
    struct dirent *de;
    while ((de = readdir(d)) != NULL) {
        if (!srv_dd_name_valid(de->d_name))
            continue;
        int lfd = srv_ddi_open_layer_dir(dd, de->d_name); /* a link or a file: not a layer (strays) */
        if (lfd < 0)
            continue;
        struct stat ws, cs;
        bool hw = fstatat(lfd, WEIGHTS_FILE, &ws, AT_SYMLINK_NOFOLLOW) == 0;
        bool hc = fstatat(lfd, CONFIG_FILE, &cs, AT_SYMLINK_NOFOLLOW) == 0;
        close(lfd);
        if (!hw && !hc)
            continue;
        if (n == cap) {
            cap = cap ? 2 * cap : 16;
            srv_dd_entry *g = realloc(list, (size_t)cap * sizeof *g);
            if (!g) {
                free(list);
                closedir(d);
                return srv_error_set(err, SRV_E_NOMEM, "", "out of memory listing layers/");
            }
            list = g;
        }
        srv_dd_entry *e = &list[n++];
        memset(e, 0, sizeof *e);
        memcpy(e->name, de->d_name, strlen(de->d_name) + 1); /* valid: at most 64 chars */
        srv_ddi_stamp_weights(&e->stamp, hw ? &ws : NULL);
        srv_ddi_stamp_config(&e->stamp, hc ? &cs : NULL);
    }
    closedir(d);
    if (n > 1)
        qsort(list, (size_t)n, sizeof *list, entry_cmp);
    *out = list;
    return n;
}

void srv_datadir_strays(srv_datadir *dd,
                        void (*fn)(const char *name, const char *reason, void *ctx), void *ctx)
{
    DIR *d = srv_ddi_open_dir_stream(dd->layers_fd);
    if (!d)
        return;
    struct dirent *de;
    char reason[sizeof ((srv_error *)0)->message];
    while ((de = readdir(d)) != NULL) {
        struct stat st;
        if (de->d_name[0] == '.')
            continue; /* hidden: temps, deleted layers */
        if (!srv_dd_name_valid(de->d_name)) {
            snprintf(reason, sizeof reason,
                     "layers/%.64s is not a layer name (1-64 of A-Z a-z 0-9 . _ -, not starting "
                     "with .): rename it to serve it",
                     de->d_name);
        } else if (fstatat(dd->layers_fd, de->d_name, &st, AT_SYMLINK_NOFOLLOW) != 0 ||
                   S_ISDIR(st.st_mode)) {
            continue;
        } else if (S_ISLNK(st.st_mode)) {
            snprintf(reason, sizeof reason,
                     "layers/%.64s is a symbolic link: attnd does not follow links inside the "
                     "data dir, so it is not a layer (put the layer's directory itself there)",
                     de->d_name);
        } else {
            snprintf(reason, sizeof reason, "layers/%.64s is %s, not a directory: not a layer",
                     de->d_name, srv_ddi_kind_of(st.st_mode));
        }
        fn(de->d_name, reason, ctx);
    }
    closedir(d);
}

/* Empties and removes the directory `name` of layers/ (never following a link). Returns 1 when
 * it is gone. */
static int remove_tree(srv_datadir *dd, const char *name)
{
    int fd = srv_ddi_open_layer_dir(dd, name);
    if (fd < 0)
        return 0;
    srv_ddi_empty_dir(fd, 4);
    close(fd);
    return srv_fs_unlinkat(dd->layers_fd, name, AT_REMOVEDIR) == 0;
}

static bool stale(const struct stat *st, time_t now, int grace)
{
    time_t t = st->st_mtim.tv_sec > st->st_ctim.tv_sec ? st->st_mtim.tv_sec : st->st_ctim.tv_sec;
    return now - t >= grace;
}

/* Removes the stale temp files (".<file>.tmp-<pid>-<n>", regular files only) of directory dirfd;
 * returns how many. */
static int clean_temps(int dirfd, time_t now, int grace)
{
    DIR *d = srv_ddi_open_dir_stream(dirfd);
    struct dirent *fe;
    int removed = 0;
    while (d && (fe = readdir(d)) != NULL) {
        struct stat fs;
        if (fe->d_name[0] != '.' || !strstr(fe->d_name, TEMP_MARK) ||
            fstatat(dirfd, fe->d_name, &fs, AT_SYMLINK_NOFOLLOW) != 0 || !S_ISREG(fs.st_mode) ||
            !stale(&fs, now, grace))
            continue;
        removed += srv_fs_unlinkat(dirfd, fe->d_name, 0) == 0;
    }
    if (d)
        closedir(d);
    return removed;
}

int srv_datadir_clean(srv_datadir *dd)
{
    if (dd->read_only)
        return 0;
    /* srv_now, not time(NULL): that is the clock of the last tick, and Linux (6.13 on) stamps a
     * file's ctime from the fine clock, so a file made a moment ago could look a second in the
     * future and never become stale with a grace of 0 (test_datadir failed so, once, under ASan). */
    const time_t now = (time_t)srv_now();
    /* the version counter's temps (dd_versions.c) and the start's write probe, in the data dir
     * itself and in layers/ */
    int removed = clean_temps(dd->root_fd, now, dd->temp_grace_s) +
                  clean_temps(dd->layers_fd, now, dd->temp_grace_s);
    DIR *d = srv_ddi_open_dir_stream(dd->layers_fd);
    if (!d)
        return removed;
    struct dirent *de;
    while ((de = readdir(d)) != NULL) {
        struct stat st;
        if (fstatat(dd->layers_fd, de->d_name, &st, AT_SYMLINK_NOFOLLOW) != 0 ||
            !S_ISDIR(st.st_mode))
            continue;
        if (strncmp(de->d_name, DELETED_PREFIX, strlen(DELETED_PREFIX)) == 0) {
            if (stale(&st, now, dd->temp_grace_s))
                removed += remove_tree(dd, de->d_name);
            continue;
        }
        if (!srv_dd_name_valid(de->d_name))
            continue;
        int lfd = srv_ddi_open_layer_dir(dd, de->d_name);
        if (lfd < 0)
            continue;
        removed += clean_temps(lfd, now, dd->temp_grace_s);
        close(lfd);
    }
    closedir(d);
    return removed;
}
