/*
 * golden.h - loads the torch-generated golden cases of tests/golden/ (format: tests/golden/README.md).
 *
 * A case holds a layer config, its weights under torch's state_dict names, the forward inputs (ready
 * to hand to mha_plan_forward / mha_forward through golden_inputs), the expected output and attention
 * weights, every trace stage, and the JSON text of its "config", "inputs" and "weights" objects (for
 * tests that post them over HTTP: PUT {"config": config_json, "weights": weights_json}, then POST
 * inputs_json to .../forward). It uses jansson and its own base64 decoder; nothing here depends on server/ or
 * calls into lib/ (only lib/mha.h's types), so every test can link it.
 */
#ifndef ATTND_GOLDEN_H
#define ATTND_GOLDEN_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "mha.h"

#define GOLDEN_MAX_NDIM 4

typedef struct golden_tensor {
    bool present;               /* false: the case has no such tensor                           */
    bool is_bool;               /* "dtype": "bool" (data in bytes) or "float32" (data in data)   */
    int ndim;
    int64_t shape[GOLDEN_MAX_NDIM];
    int64_t count;              /* product of shape                                              */
    float *data;                /* [count] floats (float32 tensors), else NULL                   */
    uint8_t *bytes;             /* [count] bytes, 0/1 (bool tensors), else NULL                  */
} golden_tensor;

typedef struct golden_positions {
    bool present;
    int ndim;                   /* 1: [len]; 2: [N,len]                                          */
    int64_t shape[2];
    int64_t *data;              /* row-major, owned                                              */
} golden_positions;

typedef struct golden_weight {
    char name[64];              /* torch's state_dict name: "in_proj_weight", "out_proj.bias", ...*/
    golden_tensor t;
} golden_weight;

typedef struct golden_case {
    char *path;                 /* the file it came from                                         */
    char *name;                 /* "name" of the case                                            */
    char *description;
    bool fully_masked_rows;     /* some query row has every key masked                           */
    mha_config config;          /* kdim/vdim as in the file (never 0); the extensions (head_dim,
                                 * num_kv_heads, rope {theta}, alibi, window, is_causal) when the
                                 * file's config has them (tests/golden_variants/)                 */
    int n_weights;
    golden_weight weights[MHA_MAX_PARAMS];
    /* inputs, in the layer's layout (see mha_inputs for shapes) */
    golden_tensor query, key, value, key_padding_mask, attn_mask;
    golden_positions positions, key_positions; /* JSON integer arrays [L] / [N,L], [S] / [N,S] */
    bool is_causal, need_weights, average_attn_weights; /* is_causal left out: config's default */
    bool is_causal_given;       /* the inputs hold is_causal (else a request leaves it out too)  */
    /* expected results, shaped as torch returns them */
    golden_tensor output;       /* [N,L,E] / [L,N,E] !! batch_first / [L,E]                      */
    golden_tensor attn_weights; /* present when need_weights: [N,L,S] / [N,H,L,S] (unbatched: no N) */
    golden_tensor trace[MHA_TRACE_NSTAGES]; /* in mha_trace_stage order, always batch-major      */
    char *config_json;          /* the "config" object as compact JSON: PUT /v1/layers' "config" */
    char *inputs_json;          /* the "inputs" object as compact JSON: a /v1 forward body       */
    char *weights_json;         /* the "weights" object as compact JSON: a PUT weights map       */
} golden_case;

/* Loads the case in the JSON file at path into c (every field owned by c; free with golden_free).
 * Returns 0, or -1 with a message naming the file and the field at fault in err (errlen bytes; err
 * may be NULL); on failure c holds nothing to free, though golden_free(c) is harmless. */
int golden_load(golden_case *c, const char *path, char *err, size_t errlen);

/* Frees everything a case owns and zeroes it; accepts NULL and a zeroed case. */
void golden_free(golden_case *c);

/* The case's inputs as mha_inputs: tensors and masks borrow c's data (valid while c lives). */
mha_inputs golden_inputs(const golden_case *c);

/* Static name of trace stage i ("q_proj", ... "output"), as in the files and the API. */
const char *golden_stage_name(int stage);

/* Lists the *.json files of dir, sorted by name, as malloc'd "dir/file" paths in *paths (free with
 * golden_list_free). Returns how many, or -1 when dir cannot be read. */
int golden_list(char ***paths, const char *dir);
void golden_list_free(char **paths, int n);

/* Loads the cases of dir one at a time, in name order, and hands each to fn(c, index, ctx), index
 * counting from 0 over the listing; fn owns the case from then on (golden_free it, or keep it).
 * Records a check (check.h) that dir holds a case, and a failed check naming the file and the field
 * for each case that does not load (fn is not called for it). Returns how many cases dir lists
 * (<= 0: none, fn never called). */
int golden_each(const char *dir, void (*fn)(golden_case *c, int index, void *ctx), void *ctx);

/* Decodes standard base64 (with or without '=' padding; no whitespace) of in_len characters into out,
 * which has room for out_cap bytes. Returns the number of bytes written, or -1 on a bad character,
 * bad length or not enough room. */
int64_t golden_base64_decode(uint8_t *out, size_t out_cap, const char *in, size_t in_len);

#endif
