/*
 * datadir.h - layers kept on disk, so that they outlive the daemon (--data-dir, docs/persistence.md).
 *
 * Layout: <dir>/layers/<name>/config.json          the layer's config, the object PUT takes as "config"
 *         <dir>/layers/<name>/weights.safetensors  its parameters under torch's state_dict names
 *         <dir>/layers/<name>/.attnd-version       the version of a layer written by hand (below)
 *         <dir>/attnd.lock, <dir>/attnd.counter    one change at a time, versions (below)
 * A directory written by hand (a torch state_dict saved as safetensors, plus config.json) is a layer
 * like one written by attnd. Hidden entries (names starting with '.') are never layers: they hold
 * temp files (".<file>.tmp-<pid>-<n>") and deleted layers (".deleted-<name>-<pid>-<n>").
 *
 * Crash safety. Two files cannot be replaced in one atomic step, so the weights file is the commit
 * record: when attnd writes a layer, weights.safetensors carries the config too, in its __metadata__
 * ("attnd.config", compact JSON; also "attnd.version" and "format": "pt").
 *   write: 1. both files are written as temps in the layer dir, each fsync'd;
 *          2. rename(temp, weights.safetensors), fsync(dir)   <- the commit point
 *          3. rename(temp, config.json), fsync(dir)
 *   A crash before 2 leaves the old layer (the temps are ignored, and removed once stale). A crash
 *   between 2 and 3 leaves the new weights with the old (or no) config.json and the config temp:
 *   the reader sees that config.json differs from the weights' attnd.config while a config temp
 *   holding attnd.config exists (or config.json is missing), takes attnd.config - the new layer -
 *   and rewrites config.json (the same three steps). When config.json differs and no such temp exists,
 *   config.json was edited by hand after the layer was written: the hand edit wins.
 *   A reader racing a live writer re-reads when weights.safetensors changed under it, so it never
 *   pairs old weights with a new config.
 * Delete renames the layer dir to a hidden name (one atomic step, fsync'd), then empties and
 * removes it. Every file read is untrusted: safetensors are checked in full (safetensors.h),
 * config.json must be a JSON object; sizes are capped before reading.
 *
 * Never out of the data dir (issue 22). The data dir's own path may be a symbolic link; nothing
 * below it is followed. The layers dir is opened once (O_NOFOLLOW) and every file under it is
 * reached from that descriptor with openat/mkdirat/renameat/unlinkat and O_NOFOLLOW /
 * AT_SYMLINK_NOFOLLOW, so a link placed anywhere inside - as a layer's directory or as one of its
 * files - is never followed, written through or deleted through. An entry of layers/ that is not a
 * directory (a link, a file, a FIFO, a socket, a device) is not a layer: srv_datadir_strays reports
 * it, and a write or remove of that name is SRV_E_CONFLICT and touches nothing. A file that is not a
 * regular file where one is expected is refused without being opened for real (checked with
 * fstatat first, then opened O_NONBLOCK and checked again), so a FIFO never blocks a reader.
 * Every message names files relative to the data dir ("layers/x/config.json"), never by the
 * server's absolute path, and never quotes what a file holds: they may reach a client.
 *
 * Several daemons may share one data dir (replicas with --watch): temp files are unique per
 * process, and stale leftovers are removed only once older than temp_grace_s, so that one process
 * never removes a temp another is about to rename.
 */
#ifndef ATTND_DATADIR_H
#define ATTND_DATADIR_H

#include <stdbool.h>
#include <stdint.h>

#include <jansson.h>

#include "base/error.h"
#include "codec/safetensors.h"

#define SRV_DD_CONFIG_MAX (64 * 1024) /* bytes of config.json accepted */

/* What identifies one committed state of a layer's two files: changes whenever either is replaced
 * or modified. Zero fields stand for a missing file. */
/* The largest version believed when read from a file (a layer's "attnd.version", the records of
 * .attnd-version, the counter attnd.counter): 2^52. Versions are handed out up to 2^53 (what a JSON
 * client reads exactly); a file claiming more than half of that is taken for damaged, so that one
 * written by hand (2^53) cannot use up the versions and leave every later change refused. A
 * million changes a second would take 142 years to get there. */
#define SRV_DD_VERSION_TRUSTED ((uint64_t)1 << 52)

typedef struct srv_dd_stamp {
    uint64_t w_ino, w_mtime_ns, w_size; /* weights.safetensors */
    uint64_t c_ino, c_mtime_ns, c_size; /* config.json         */
} srv_dd_stamp;

bool srv_dd_stamp_equal(const srv_dd_stamp *a, const srv_dd_stamp *b);

typedef struct srv_datadir {
    char *root;        /* owned: the data dir as given (for logs; replies never show it)     */
    char *layers;      /* owned: <root>/layers (for logs and inotify)                        */
    int root_fd;       /* the data dir, opened once (its own path may be a link)             */
    int layers_fd;     /* <root>/layers, opened O_NOFOLLOW: every file below is reached from it */
    int lock_fd;       /* <root>/attnd.lock once a change took it (srv_datadir_lock), or -1  */
    int temp_grace_s;  /* temps/deleted dirs younger than this are left alone (default 600) */
    bool read_only;    /* never write (no crash repair on disk either)                      */
    bool ro_fs;        /* read_only because the file system is (found at open): writes get 503 */
    int64_t max_weights_bytes; /* --max-weights-bytes (0: none): a layer's file whose tensors
                                * would take more as float32 is refused from its header, before
                                * its data is read (srv_datadir_read)                          */
} srv_datadir;

/* Opens the data dir at path, creating path and path/layers when missing, and checks that it is a
 * writable directory by writing a file there (read_only: only that it can be read); layers/ must be
 * a directory, not a link. On a read-only file system it opens read-only (ro_fs): what is there is
 * served, and every write or remove is refused with SRV_E_UNAVAILABLE saying why.
 * NULL with err filled (SRV_E_INTERNAL with the path and the system's reason: this is for the
 * operator at start) on failure. Free with srv_datadir_free. */
srv_datadir *srv_datadir_open(const char *path, bool read_only, srv_error *err);
void srv_datadir_free(srv_datadir *dd);

/* ---------------------------------------------------------------------------------------------- */
/* Replicas: one writer at a time, versions that never repeat (dd_versions.c)                      */
/*
 * Every process that shares a data dir (replicas behind a load balancer, on one machine or on an
 * NFS volume) takes <root>/attnd.lock - an open file description (OFD) byte-range lock, which NFSv4
 * carries to the server - for each change: the If-Match check against the version on disk, the
 * write and the new version then happen as one step across all of them, so of two writers
 * conditional on the same version exactly one wins. Versions come from <root>/attnd.counter, read
 * and advanced under the lock and fsync'd before the layer that uses it is written: they never
 * repeat or go backwards, across replicas and restarts. A layer attnd wrote carries its version in
 * its weights ("attnd.version"); one written or edited by hand gets one the first time a replica
 * loads it, recorded next to its files in layers/<name>/.attnd-version with the stamp of the files
 * it is for, so every replica reads the same version for the same files.
 */

#define SRV_DD_NO_VERSION UINT64_MAX /* the layer exists but no version names it (see below) */
#define SRV_DD_LOCK_WAIT_MS 30000    /* how long a change waits for another replica's          */

/* Takes the data dir's lock for one change, waiting up to SRV_DD_LOCK_WAIT_MS for another process
 * that holds it. Returns 0, or -1 with err: SRV_E_UNAVAILABLE (held too long, or the lock file
 * cannot be used), the refusal of a read-only data dir. */
int srv_datadir_lock(srv_datadir *dd, srv_error *err);
void srv_datadir_unlock(srv_datadir *dd);

/* The version layer name has on disk now, as every replica reads it: 0 when there is no layer of
 * that name (no directory, or one holding neither file); the weights' attnd.version when attnd
 * wrote it and config.json is still the config written with it; else the version recorded for
 * exactly these files in .attnd-version, or SRV_DD_NO_VERSION when none is (written or edited by
 * hand and not loaded since, or damaged). Call it with the lock held. Returns 0, or -1 with err:
 * SRV_E_CONFLICT when name is not a layer directory (a link, a file), an I/O error. */
int srv_datadir_version(srv_datadir *dd, const char *name, uint64_t *version, srv_error *err);

/* A new version, greater than floor and than every version any process sharing the data dir gave:
 * attnd.counter advanced and made durable first. Call it with the lock held. Returns 0, or -1
 * with err (the disk's refusal: 507 full, 503 otherwise). */
int srv_datadir_next_version(srv_datadir *dd, uint64_t floor, uint64_t *out, srv_error *err);

/* The version of layer name's files as read with stamp, for a layer attnd did not version (written
 * or edited by hand): the one recorded for exactly these files, or a new one (> floor) recorded now
 * (takes the lock). 0 when none can be recorded (a read-only data dir: the caller numbers it
 * itself), with err saying why when it was an error. */
uint64_t srv_datadir_adopt(srv_datadir *dd, const char *name, const srv_dd_stamp *stamp,
                           uint64_t floor, srv_error *err);

/* ---------------------------------------------------------------------------------------------- */

/* True when name is a valid layer name: 1-64 of [A-Za-z0-9._-], not starting with '.'. */
bool srv_dd_name_valid(const char *name);

typedef struct srv_dd_entry {
    char name[65];
    srv_dd_stamp stamp;
} srv_dd_entry;

/* Lists the layer directories (valid names of real directories - never links - holding
 * config.json or weights.safetensors), sorted by name, with their stamps: cheap (a readdir, an
 * open and two stats per layer), for polling (--watch).
 * *out gets a malloc'd array the caller frees (NULL when there are none). Returns the count, or -1
 * with err filled when the layers dir cannot be read. */
int srv_datadir_list(srv_datadir *dd, srv_dd_entry **out, srv_error *err);

/* Calls fn(name, reason, ctx) for every entry of the layers dir that is not hidden and is not a
 * layer: a name that is not a layer name ("my layer", over 64 characters), or anything but a
 * directory (a symbolic link, a file, a FIFO, a socket, a device). Never loaded, so reported to
 * say why; reason names the entry relative to the data dir. */
void srv_datadir_strays(srv_datadir *dd,
                        void (*fn)(const char *name, const char *reason, void *ctx), void *ctx);

/* One layer as read from disk. */
typedef struct srv_dd_layer {
    json_t *config;      /* owned reference: the config object                                */
    srv_st weights;      /* owned: the parameters as float32                                  */
    char version[64];    /* the weights' "attnd.version" metadata, or "" (written by hand)   */
    double created;      /* Unix time the layer's name was first created ("attnd.created"), or,
                          * for a file written by hand, its weights file's modification time    */
    double updated;      /* Unix time of this version ("attnd.updated"), likewise               */
    srv_dd_stamp stamp;  /* of the files that were read                                       */
    bool repaired;       /* an interrupted commit was completed (config.json rewritten)       */
    bool hand_edited;    /* config.json differs from the config stored with the weights      */
} srv_dd_layer;

/* Reads layer name (every byte checked; each tensor at most max_elements). Completes a commit that
 * a crash interrupted (see above; unless the data dir was opened read_only). Returns 0, or -1 with
 * err filled with a message naming the file and what is wrong with it (SRV_E_LAYER_NOT_FOUND when
 * the directory does not exist or holds neither file; SRV_E_BAD_REQUEST / SRV_E_BAD_VALUE /
 * SRV_E_TOO_LARGE for a damaged file; SRV_E_INTERNAL for an I/O error) - a message fit for a
 * client: it never quotes the file (a JSON error is given by line and column, a safetensors one by
 * what kind it is). log (may be NULL) gets the same error with the parser's own words, for the
 * log. out is zeroed first; on error it owns nothing. */
int srv_datadir_read(srv_datadir *dd, const char *name, int64_t max_elements, srv_dd_layer *out,
                     srv_error *err, srv_error *log);
void srv_dd_layer_free(srv_dd_layer *layer); /* accepts NULL and zeroed layers */

/* Writes (creates or replaces) layer name with config (a JSON object) and the n tensors, as
 * described above; version (may be NULL) is stored as "attnd.version", and times (may be NULL) as
 * "attnd.created" and "attnd.updated" (times[0], times[1]: Unix seconds). When it returns 0 the new
 * layer is committed and durable, and *stamp (may be NULL) is its stamp. It returns 1 when the
 * commit point was passed (the new layer is what every reader finds) but finishing failed: err then
 * says what (for the log), and the next reader completes it. When it returns -1 the old layer, if
 * any, is what a reader finds and no temp file is left: err is SRV_E_CONFLICT when name is taken by
 * something that is not a layer directory (a link, a file: left untouched), else the file and the
 * system's reason ("No space left on device"). */
int srv_datadir_write(srv_datadir *dd, const char *name, const json_t *config,
                      const srv_st_view *tensors, int n, const char *version, const double *times,
                      srv_dd_stamp *stamp, srv_error *err);

/* Removes layer name from disk (atomic: after a crash it is either all there or gone). A layer that
 * is not on disk is not an error. Returns 0, 1 when the layer is gone but the removal may not be
 * durable yet (err says why, for the log), or -1 with err filled: SRV_E_CONFLICT when name is
 * anything but a directory (a link is never followed: the link and its target stay as they are),
 * else the system's reason. */
int srv_datadir_remove(srv_datadir *dd, const char *name, srv_error *err);

/* What layers/<name> is on disk: 0 nothing, 1 a directory (a layer, or one being written or
 * damaged), -1 with err: SRV_E_CONFLICT when it is anything else (a link, a file, a FIFO: not a
 * layer, and never changed through), else an I/O error. */
int srv_datadir_entry(srv_datadir *dd, const char *name, srv_error *err);

/* Removes leftovers older than temp_grace_s: temp files in layer dirs and deleted layer dirs
 * (nothing when read_only; write and remove are refused then too). Returns how many entries it
 * removed. Errors are ignored (the next call tries again). */
int srv_datadir_clean(srv_datadir *dd);

#endif
