/*
 * hf_checkpoint.h - a Hugging Face model directory, as save_pretrained writes it, read one tensor at
 * a time: config.json, and either model.safetensors or the shards model-0000k-of-0000n.safetensors
 * that model.safetensors.index.json maps every tensor name to.
 *
 * Nothing is read whole: opening reads config.json and the index; a shard's header (checked in
 * full: dtypes, shapes, offsets, exact tiling - safetensors.h) is read the first time one of its
 * tensors is located; a tensor's bytes are read with pread at their offset, in bounded chunks, and
 * converted to float32 (F32, F16, BF16 exactly). So importing one layer of a 100 GB checkpoint reads
 * that layer's bytes, the shards' headers and two small JSON files.
 *
 * Every byte is untrusted: file names from the index must be plain names in the checkpoint's own
 * directory; sizes are capped before anything is allocated; a shard that changes under the reader
 * (shorter than its header says) is an error. Messages name the file (relative to the checkpoint)
 * and the tensor, never the server's absolute path.
 *
 * Confinement (POST /v1/layers/{name}/import): opened with `beneath`, every file is resolved below
 * base_fd with openat2(RESOLVE_BENEATH) - links are followed only while they stay below it (a
 * Hugging Face cache's snapshots/ links into blobs/ work), an absolute path, "..", or a link out is
 * refused. Where the kernel has no openat2, no link is followed at all. Without `beneath` (the CLI,
 * run by the checkpoint's owner) paths resolve as usual.
 */
#ifndef ATTND_HF_CHECKPOINT_H
#define ATTND_HF_CHECKPOINT_H

#include <stdbool.h>
#include <stdint.h>

#include <jansson.h>

#include "base/error.h"
#include "codec/safetensors.h"

#define SRV_CKPT_CONFIG_MAX (1 << 20)       /* bytes of config.json                        */
#define SRV_CKPT_INDEX_MAX (64 << 20)       /* bytes of model.safetensors.index.json       */
/* A shard's header is parsed whole (jansson: about 1.2 KB a tensor, 17 times the header's bytes),
 * so these bound an import's memory for it to about 160 MB; real shards hold hundreds to a few
 * thousand tensors in headers of tens to hundreds of KB (DeepSeek-V3's largest: under 1,000) */
#define SRV_CKPT_HEADER_MAX (16 << 20)      /* bytes of one shard's safetensors header     */
#define SRV_CKPT_MAX_TENSORS (1 << 17)      /* tensors in one shard                         */

typedef struct srv_ckpt srv_ckpt;

/* Opens the checkpoint directory path, relative to base_fd (AT_FDCWD: the working directory),
 * confined below base_fd when beneath (path must then be relative, without "." or ".." parts).
 * Reads config.json (must be a JSON object) and finds the weights: model.safetensors, else
 * model.safetensors.index.json (its weight_map checked: every value a plain file name). Returns
 * the checkpoint (free with srv_ckpt_free), or NULL with err: SRV_E_NOT_FOUND when path is not
 * there, SRV_E_BAD_REQUEST for a bad path (one leaving base_fd), a missing or damaged file
 * (pytorch_model.bin alone is named as such), SRV_E_NOMEM. */
srv_ckpt *srv_ckpt_open(int base_fd, const char *path, bool beneath, srv_error *err);
void srv_ckpt_free(srv_ckpt *ck); /* accepts NULL */

/* config.json (borrowed; lives as long as ck). */
const json_t *srv_ckpt_config(const srv_ckpt *ck);

/* True when the checkpoint names a tensor called name (in the index, or in model.safetensors'
 * header, which this reads if it was not read yet; a damaged header is an error at locate). */
bool srv_ckpt_has(srv_ckpt *ck, const char *name);

/* Where a tensor is: its shard's file name and its header entry (both borrowed from ck). */
typedef struct srv_ckpt_tensor {
    const char *file;           /* "model.safetensors", "model-00002-of-00004.safetensors"     */
    const srv_st_entry *entry;  /* dtype, shape, count, offsets                                */
    int shard;                  /* private                                                     */
} srv_ckpt_tensor;

/* Finds tensor name, reading (and checking in full) its shard's header the first time. Returns 0,
 * or -1 with err (SRV_E_BAD_REQUEST naming the file and the tensor: not in the checkpoint, a
 * damaged shard, the index naming a shard that lacks it). */
int srv_ckpt_locate(srv_ckpt *ck, const char *name, srv_ckpt_tensor *out, srv_error *err);

/* Reads the tensor t (from srv_ckpt_locate) into out[0 .. t->entry->count) as float32, in chunks;
 * after each chunk calls on_chunk(ctx, bytes of it) (on_chunk may be NULL). Returns 0, or -1 with
 * err: SRV_E_BAD_REQUEST for a dtype that is not F32/F16/BF16 or a file shorter than its header,
 * SRV_E_BAD_VALUE for NaN or infinities, SRV_E_INTERNAL for an I/O error. */
int srv_ckpt_read(srv_ckpt *ck, const srv_ckpt_tensor *t, float *out,
                  void (*on_chunk)(void *ctx, uint64_t bytes), void *ctx, srv_error *err);

/* Bytes read from the checkpoint's files so far (JSON files, headers and tensors). */
uint64_t srv_ckpt_bytes_read(const srv_ckpt *ck);

/* Number of weight files (1, or the shards the index names). */
int srv_ckpt_files(const srv_ckpt *ck);

#endif
