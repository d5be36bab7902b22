/*
 * datadir_internal.h - what the data dir's files share: datadir.c (a layer: write, remove),
 * dd_read.c (a layer: its checked read), dd_scan.c (layers/ as a whole: list, strays, clean-up)
 * and dd_versions.c (what replicas agree on: the lock and the versions). Not for any other file;
 * every path is relative to a directory descriptor and never follows a link.
 */
#ifndef ATTND_DATADIR_INTERNAL_H
#define ATTND_DATADIR_INTERNAL_H

#include <dirent.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <sys/stat.h>

#include <jansson.h>

#include "base/error.h"

/* datadir.h's types (not included: it includes nothing of this file's, and the files that
 * include this one include it first) */
typedef struct srv_datadir srv_datadir;
typedef struct srv_dd_stamp srv_dd_stamp;

#define WEIGHTS_FILE "weights.safetensors"
#define CONFIG_FILE "config.json"
#define TEMP_MARK ".tmp-"
#define TEMP_NAME_MAX 128 /* ".weights.safetensors.tmp-<pid>-<n>", ".deleted-<name>-<pid>-<n>" */
#define DELETED_PREFIX ".deleted-" /* a removed layer's directory, renamed before it is emptied */

/* Makes temp and deleted names unique within the process (with the pid: across processes). */
extern atomic_uint srv_ddi_temp_counter;

/* Fill one half of a stamp from a file's stat (NULL: the file is missing). */
void srv_ddi_stamp_weights(srv_dd_stamp *s, const struct stat *st);
void srv_ddi_stamp_config(srv_dd_stamp *s, const struct stat *st);

/* True when two stats are of the same file, unchanged: inode, device, mtime and size (what a
 * reader compares to see that a writer replaced or changed a file between two looks). */
bool srv_ddi_same_file(const struct stat *a, const struct stat *b);

/* What kind of thing a mode is, for messages ("a FIFO"). */
const char *srv_ddi_kind_of(mode_t m);

/* The code of a failed change of the data dir, from the system's errno: a full disk or quota is a
 * 507; a read-only file system, an I/O error or any other refusal a 503. */
srv_code srv_ddi_io_code(int e);

/* Turns err's message into "<prefix>: <message>" (cut to fit); NULL err: nothing. */
void srv_ddi_prefix_message(srv_error *err, const char *prefix);

/* layers/<name> is taken by something that is not a layer directory (mode m): SRV_E_CONFLICT, a
 * change of that name touches nothing. Returns -1. */
int srv_ddi_not_a_layer_dir(srv_error *err, const char *name, mode_t m);

/* The error of a change refused because the data dir is read-only (503 for a read-only file
 * system, 403 for --read-only). Returns -1. */
int srv_ddi_refuse_change(const srv_datadir *dd, srv_error *err);

/* Opens the directory of layer name below dd->layers_fd without following a link (O_NONBLOCK: a
 * FIFO of that name is refused, never waited on). Returns the fd, or -1 with errno set (ELOOP or
 * ENOTDIR: the name is not a directory). */
int srv_ddi_open_layer_dir(const srv_datadir *dd, const char *name);

/* A readdir stream over dirfd (which stays the caller's), or NULL. */
DIR *srv_ddi_open_dir_stream(int dirfd);

/* Unlinks everything in the directory dirfd (subdirectories too, to depth levels; links are
 * unlinked, never followed); errors ignored. */
void srv_ddi_empty_dir(int dirfd, int depth);

/* Reads the whole regular file `file` of directory dirfd, of at most cap bytes, never following a
 * link and never blocking on a FIFO or a device (checked before it is opened, and again after).
 * Returns 0 (*buf malloc'd, NUL-terminated, *st filled), 1 when the file does not exist, -1 with
 * err filled otherwise. shown names it in errors (relative to the data dir). */
int srv_ddi_read_file_at(int dirfd, const char *file, const char *shown, size_t cap, char **buf,
                         size_t *len, struct stat *st, srv_error *err);

/* fsync of an open directory; -1 with err naming shown. */
int srv_ddi_fsync_dir(int dirfd, const char *shown, srv_error *err);

/* A temp file being written: .<base>.tmp-<pid>-<n> in directory dirfd (shown: that directory
 * relative to the data dir, "" for the data dir itself). */
typedef struct srv_ddi_temp {
    int dirfd, fd;
    char name[TEMP_NAME_MAX];
    const char *shown, *base;
    const char *step; /* the step that failed ("write"), or NULL */
    int err_no;       /* its errno                                */
} srv_ddi_temp;

/* Creates the temp file. 0, or -1 with err (nothing left behind). */
int srv_ddi_temp_open(srv_ddi_temp *t, int dirfd, const char *shown, const char *base,
                      srv_error *err);

/* Appends data (an srv_st_sink: t is the srv_ddi_temp). 0, or -1 once a write failed (kept in t). */
int srv_ddi_temp_write(void *t, const void *data, size_t len);

/* keep: fsyncs and closes it, 0 (t->name is its name); else, or when any step failed, removes it:
 * -1 with err naming the failed step (err untouched when nothing failed: the caller gave up). */
int srv_ddi_temp_close(srv_ddi_temp *t, bool keep, srv_error *err);

/* Writes data to a new temp file (open, write, close), fsync'd and closed; its name goes to tmp.
 * On failure nothing is left behind. */
int srv_ddi_write_temp(int dirfd, const char *shown, const char *base, const void *data,
                       size_t len, char tmp[TEMP_NAME_MAX], srv_error *err);

/* Parses config text as a JSON object (duplicate keys refused); NULL with err filled with what is
 * wrong and where (never the text itself: err may reach a client) and log (may be NULL) with the
 * parser's own words, which quote the text. */
json_t *srv_ddi_config_parse(const char *text, size_t len, const char *shown, srv_error *err,
                             srv_error *log);

/* True when the layer dir holds a config temp file whose content equals want: the trace of a
 * commit that passed its commit point but did not rename config.json (yet). */
bool srv_ddi_config_temp_matches(int dirfd, const json_t *want);

#endif
