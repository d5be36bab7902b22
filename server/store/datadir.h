/*
 * datadir.h - layers kept on disk, so that they outlive the daemon (--data-dir, docs/persistence.md).
 *
 * Layout: <dir>/layers/<name>/config.json          the layer's config, the object PUT takes as "config"
 *         <dir>/layers/<name>/weights.safetensors  its parameters under torch's state_dict names
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
typedef struct srv_dd_stamp {
    uint64_t w_ino, w_mtime_ns, w_size; /* weights.safetensors */
    uint64_t c_ino, c_mtime_ns, c_size; /* config.json         */
} srv_dd_stamp;

bool srv_dd_stamp_equal(const srv_dd_stamp *a, const srv_dd_stamp *b);

typedef struct srv_datadir {
    char *root;        /* owned: the data dir                                              */
    char *layers;      /* owned: <root>/layers                                             */
    int temp_grace_s;  /* temps/deleted dirs younger than this are left alone (default 600) */
    bool read_only;    /* never write (no crash repair on disk either)                      */
} srv_datadir;

/* Opens the data dir at path, creating path and path/layers when missing, and checks that it is a
 * writable directory (read_only: only that it can be read). NULL with err filled (SRV_E_INTERNAL
 * with the path and the system's reason) on failure. Free with srv_datadir_free. */
srv_datadir *srv_datadir_open(const char *path, bool read_only, srv_error *err);
void srv_datadir_free(srv_datadir *dd);

/* True when name is a valid layer name: 1-64 of [A-Za-z0-9._-], not starting with '.'. */
bool srv_dd_name_valid(const char *name);

typedef struct srv_dd_entry {
    char name[65];
    srv_dd_stamp stamp;
} srv_dd_entry;

/* Lists the layer directories (valid names holding config.json or weights.safetensors), sorted by
 * name, with their stamps: cheap (a readdir and two stats per layer), for polling (--watch).
 * *out gets a malloc'd array the caller frees (NULL when there are none). Returns the count, or -1
 * with err filled when the layers dir cannot be read. */
int srv_datadir_list(srv_datadir *dd, srv_dd_entry **out, srv_error *err);

/* Calls fn(name, ctx) for every entry of the layers dir that is neither hidden nor a valid layer
 * name ("my layer", a name over 64 characters): never loaded, so reported to say why. */
void srv_datadir_strays(srv_datadir *dd, void (*fn)(const char *name, void *ctx), void *ctx);

/* One layer as read from disk. */
typedef struct srv_dd_layer {
    json_t *config;      /* owned reference: the config object                                */
    srv_st weights;      /* owned: the parameters as float32                                  */
    char version[64];    /* the weights' "attnd.version" metadata, or "" (written by hand)   */
    srv_dd_stamp stamp;  /* of the files that were read                                       */
    bool repaired;       /* an interrupted commit was completed (config.json rewritten)       */
    bool hand_edited;    /* config.json differs from the config stored with the weights      */
} srv_dd_layer;

/* Reads layer name (every byte checked; each tensor at most max_elements). Completes a commit that
 * a crash interrupted (see above; unless the data dir was opened read_only). Returns 0, or -1 with
 * err filled with a message naming the file and what is wrong with it (SRV_E_LAYER_NOT_FOUND when
 * the directory does not exist or holds neither file; SRV_E_BAD_REQUEST / SRV_E_BAD_VALUE /
 * SRV_E_TOO_LARGE for a damaged file; SRV_E_INTERNAL for an I/O error). out is zeroed first; on
 * error it owns nothing. */
int srv_datadir_read(srv_datadir *dd, const char *name, int64_t max_elements, srv_dd_layer *out,
                     srv_error *err);
void srv_dd_layer_free(srv_dd_layer *layer); /* accepts NULL and zeroed layers */

/* Writes (creates or replaces) layer name with config (a JSON object) and the n tensors, as
 * described above; version (may be NULL) is stored as "attnd.version". When it returns 0 the new
 * layer is committed and durable, and *stamp (may be NULL) is its stamp. When it returns -1 (err:
 * SRV_E_INTERNAL naming the file and the reason, e.g. "No space left on device") the old layer, if
 * any, is what a reader finds, except when the message says the commit point was passed. */
int srv_datadir_write(srv_datadir *dd, const char *name, const json_t *config,
                      const srv_st_view *tensors, int n, const char *version, srv_dd_stamp *stamp,
                      srv_error *err);

/* Removes layer name from disk (atomic: after a crash it is either all there or gone). A layer that
 * is not on disk is not an error. Returns 0, or -1 with err filled (SRV_E_INTERNAL). */
int srv_datadir_remove(srv_datadir *dd, const char *name, srv_error *err);

/* Removes leftovers older than temp_grace_s: temp files in layer dirs and deleted layer dirs
 * (nothing when read_only; write and remove are refused then too). Returns how many entries it
 * removed. Errors are ignored (the next call tries again). */
int srv_datadir_clean(srv_datadir *dd);

#endif
