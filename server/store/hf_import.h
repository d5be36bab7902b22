/*
 * hf_import.h - layer I of a Hugging Face model's attention turned into an attnd layer: the family
 * mapping (SPEC §2 "Importing a real model's attention").
 *
 * The family comes from config.json's model_type (or, without one, its architectures), the
 * wrapper prefix a head class adds ("bert.", "transformer.", "model.", ...) from the tensor names:
 *
 *   family    tensors of layer I (after the prefix)               attnd layer
 *   bert,     encoder.layer.I.attention.self.{query,key,value}   in_proj = [q; k; v] rows, biases
 *   roberta   encoder.layer.I.attention.output.dense             out_proj
 *   gpt2      h.I.attn.c_attn (Conv1D: weight [E,3E], x·W + b)    in_proj = Wᵀ; is_causal
 *             h.I.attn.c_proj (Conv1D [E,E])                      out_proj = Wᵀ
 *   llama,    layers.I.self_attn.{q,k,v}_proj [H·hd,E],[Hkv·hd,E] in_proj = [q; k; v]; head_dim,
 *   mistral,  layers.I.self_attn.o_proj [E,H·hd]                  num_kv_heads, rope, is_causal;
 *   qwen2                                                         Mistral/Qwen2's window
 *   bloom     h.I.self_attention.query_key_value [3E,E], rows     in_proj = rows regrouped to
 *             [H,3,hd]; h.I.self_attention.dense                  [3,H,hd]; alibi, is_causal
 *
 * The layer computes exactly what the model's attention module computes for layer I - before its
 * dropout, residual and layer norm - for the same hidden states, with the model's scaling (1/√hd),
 * masks and positions. A config it cannot honour exactly is refused with the reason (RoPE scaling,
 * partial rotary, relative position embeddings, GPT-2's unscaled or per-layer-scaled scores, an
 * unknown family), never turned into a layer that computes something else. Each tensor's shape is
 * checked against the config, its dtype must be F32, F16 or BF16 (converted exactly).
 */
#ifndef ATTND_HF_IMPORT_H
#define ATTND_HF_IMPORT_H

#include <stdint.h>

#include <jansson.h>

#include "base/error.h"
#include "codec/safetensors.h"
#include "hf_checkpoint.h"
#include "mha.h"

/* Progress of the reads, for a terminal: called after each chunk of each tensor. */
typedef struct srv_hf_progress {
    const char *file;       /* the shard being read                                           */
    const char *tensor;     /* the tensor being read                                          */
    int tensors_done;       /* tensors read completely                                        */
    int tensors_total;      /* tensors of the layer                                           */
    uint64_t bytes_done;    /* bytes of the layer's tensors read so far                       */
    uint64_t bytes_total;   /* bytes of the layer's tensors                                   */
} srv_hf_progress;

typedef void (*srv_hf_progress_fn)(void *ctx, const srv_hf_progress *p);

/* What an import produced. */
typedef struct srv_hf_layer {
    json_t *config;         /* owned: the attnd layer config (the PUT "config" form)          */
    srv_st weights;         /* owned: its parameters under torch's names                     */
    char family[16];        /* "bert", "gpt2", "llama", ...                                   */
    char prefix[32];        /* the wrapper prefix found ("model.", "" ...)                     */
    int64_t model_params;   /* parameters the model's attention block has (read)              */
    int tensors;            /* tensors read                                                   */
    uint64_t bytes;         /* bytes of those tensors                                         */
} srv_hf_layer;

/* Imports layer `layer` of ck. limits (may be NULL) caps every tensor before it is allocated.
 * progress (may be NULL) is called as the reads go. Returns 0 (out filled; free with
 * srv_hf_layer_free), or -1 with err (out owns nothing): SRV_E_INVALID_CONFIG for a config or
 * family attnd cannot reproduce (the message says what), SRV_E_BAD_REQUEST for a layer index past
 * num_hidden_layers or a missing, misshapen or damaged tensor (naming the file and the tensor),
 * SRV_E_BAD_VALUE for NaN or infinite weights, SRV_E_TOO_LARGE past the limits. */
int srv_hf_import(srv_ckpt *ck, int64_t layer, const mha_limits *limits,
                  srv_hf_progress_fn progress, void *ctx, srv_hf_layer *out, srv_error *err);

/* The attnd config srv_hf_import would give layer `layer` of ck, from config.json alone, with no
 * tensor read: so that the layer's memory can be reserved (--max-weights-bytes) before any of it is
 * allocated. NULL with err as srv_hf_import's for the config. */
json_t *srv_hf_import_config(srv_ckpt *ck, int64_t layer, const mha_limits *limits,
                             srv_error *err);

void srv_hf_layer_free(srv_hf_layer *l); /* accepts NULL and zeroed structs */

#endif
