#!/usr/bin/python3
"""gen_hf_checkpoints.py - small Hugging Face checkpoints of each family attnd imports, and the model's
own outputs for them.

Run with Debian's python3 and torch 1.13 (`/usr/bin/python3 tests/torch/gen_hf_checkpoints.py`); the
files are committed, so the suite needs no torch. There is no transformers on this machine (nor should
the reference depend on attnd's mapping): each family's attention is written out below with explicit
torch ops that follow transformers' modeling_*.py for that family - its projections, layouts (GPT-2's
Conv1D x·W + b, BLOOM's fused rows [H, 3, hd]), head split, scaling, RoPE (rotate_half, inv_freq as
LlamaRotaryEmbedding computes it), repeat_kv, ALiBi (build_alibi_tensor), causal and sliding-window
masks (torch.finfo.min where masked), softmax in float32 - from the checkpoint's own tensors as stored
(an F16 or BF16 tensor is read back as float32 exactly, as attnd reads it).

Every checkpoint is a directory as save_pretrained writes it: config.json with the family's keys, and
model.safetensors or shards model-0000k-of-0000n.safetensors + model.safetensors.index.json, with the
real tensor names (with the wrapper prefix a head class adds, or without), the layer's other tensors
(layer norms, MLP) and buffers (GPT-2's attn.bias, BERT's position_ids) that an import must skip.

Writes tests/data/hf/<case>/ (the checkpoint) and tests/data/hf/<case>/reference.safetensors:
  hidden_states [N,L,E]    the attention module's input for layer I
  attn_output   [N,L,E]    its output (before dropout, residual and layer norm)
  attn_weights  [N,H,L,S]  its attention probabilities per head
and tests/data/hf/cases.json: per case the checkpoint dir, layer I and the attnd config the import
must produce.
"""

import json
import math
import os
import shutil
import sys
import zlib

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import gen_safetensors as st  # noqa: E402  (write_safetensors: the format from its specification)

st.DTYPES[torch.int64] = "I64"
st.DTYPES[torch.bool] = "BOOL"

HERE = os.path.dirname(os.path.abspath(__file__))
OUT = os.path.join(os.path.dirname(HERE), "data", "hf")
N, L = 2, 7


def stored(t, dtype):
    """t as the checkpoint stores it (dtype), and as float32 again (exact for F16/BF16)."""
    s = t.to(dtype)
    return s, s.to(torch.float32)


def save_checkpoint(path, config, tensors, shards=1):
    """config.json and the tensors: one model.safetensors, or `shards` shards and the index."""
    os.makedirs(path, exist_ok=True)
    with open(os.path.join(path, "config.json"), "w") as f:
        json.dump(config, f, indent=2, sort_keys=True)
    if shards == 1:
        st.write_safetensors(os.path.join(path, "model.safetensors"), tensors, {"format": "pt"})
        return
    names = sorted(tensors)
    per = (len(names) + shards - 1) // shards
    weight_map = {}
    total = 0
    for k in range(shards):
        part = names[k * per:(k + 1) * per]
        fname = "model-%05d-of-%05d.safetensors" % (k + 1, shards)
        st.write_safetensors(os.path.join(path, fname), {n: tensors[n] for n in part}, {"format": "pt"})
        for n in part:
            weight_map[n] = fname
            total += tensors[n].numel() * tensors[n].element_size()
    with open(os.path.join(path, "model.safetensors.index.json"), "w") as f:
        json.dump({"metadata": {"total_size": total}, "weight_map": weight_map}, f, indent=2, sort_keys=True)


def split_heads(x, heads, hd):
    """[N,L,heads·hd] -> [N,heads,L,hd] (view, then permute, as every family does)."""
    return x.view(x.shape[0], x.shape[1], heads, hd).permute(0, 2, 1, 3)


def merge_heads(x):
    """[N,H,L,hd] -> [N,L,H·hd]."""
    n, h, l, hd = x.shape
    return x.permute(0, 2, 1, 3).contiguous().view(n, l, h * hd)


def causal(l, s, window=None):
    """[l,s] bool, True = allowed: key j for query i iff j <= i (and j > i - window)."""
    i = torch.arange(l)[:, None]
    j = torch.arange(s)[None, :]
    ok = j <= i
    if window is not None:
        ok = ok & (j > i - window)
    return ok


# ---------------------------------------------------------------------------------------------
# BERT / RoBERTa (modeling_bert.py: BertSelfAttention + BertSelfOutput.dense)

def bert_attention(x, w, H):
    E = x.shape[-1]
    hd = E // H
    q = split_heads(x @ w["q.w"].T + w["q.b"], H, hd)
    k = split_heads(x @ w["k.w"].T + w["k.b"], H, hd)
    v = split_heads(x @ w["v.w"].T + w["v.b"], H, hd)
    scores = torch.matmul(q, k.transpose(-1, -2)) / math.sqrt(hd)
    probs = torch.softmax(scores, dim=-1)
    ctx = merge_heads(torch.matmul(probs, v))
    return ctx @ w["o.w"].T + w["o.b"], probs


def make_bert(name, model_type, prefix, dtype, shards, layer, E=16, H=4, layers=2, extra=None):
    g = torch.Generator().manual_seed(zlib.crc32(name.encode()))
    tensors, f32 = {}, {}
    p = prefix

    def put(n, shape, key=None, scale=0.3):
        s, f = stored(torch.randn(*shape, generator=g) * scale, dtype)
        tensors[p + n] = s
        if key:
            f32[key] = f

    put("embeddings.word_embeddings.weight", (8, E))
    tensors[p + "embeddings.position_ids"] = torch.arange(4, dtype=torch.int64)[None, :]
    for i in range(layers):
        a = "encoder.layer.%d.attention." % i
        mine = i == layer
        for part, key in (("query", "q"), ("key", "k"), ("value", "v")):
            put(a + "self.%s.weight" % part, (E, E), key + ".w" if mine else None)
            put(a + "self.%s.bias" % part, (E,), key + ".b" if mine else None)
        put(a + "output.dense.weight", (E, E), "o.w" if mine else None)
        put(a + "output.dense.bias", (E,), "o.b" if mine else None)
        put(a + "output.LayerNorm.weight", (E,))
        put(a + "output.LayerNorm.bias", (E,))
        put("encoder.layer.%d.intermediate.dense.weight" % i, (2 * E, E))
    config = {"architectures": ["BertForMaskedLM" if model_type == "bert" else "RobertaForMaskedLM"],
              "model_type": model_type, "hidden_size": E, "num_attention_heads": H,
              "num_hidden_layers": layers, "intermediate_size": 2 * E, "hidden_act": "gelu",
              "attention_probs_dropout_prob": 0.1, "hidden_dropout_prob": 0.1,
              "max_position_embeddings": 4, "position_embedding_type": "absolute",
              "type_vocab_size": 2, "vocab_size": 8, "layer_norm_eps": 1e-12,
              "torch_dtype": "float32", "transformers_version": "4.40.0"}
    config.update(extra or {})
    save_checkpoint(os.path.join(OUT, name), config, tensors, shards)
    x = torch.randn(N, L, E, generator=g)
    out, probs = bert_attention(x, f32, H)
    want = {"embed_dim": E, "num_heads": H}
    return x, out, probs, want


# ---------------------------------------------------------------------------------------------
# GPT-2 (modeling_gpt2.py: GPT2Attention with Conv1D c_attn / c_proj, _attn)

def gpt2_attention(x, w, H):
    E = x.shape[-1]
    hd = E // H
    qkv = torch.addmm(w["c_attn.b"], x.reshape(-1, E), w["c_attn.w"]).view(x.shape[0], x.shape[1], 3 * E)
    q, k, v = qkv.split(E, dim=2)
    q, k, v = split_heads(q, H, hd), split_heads(k, H, hd), split_heads(v, H, hd)
    attn = torch.matmul(q, k.transpose(-1, -2))
    attn = attn / torch.full([], v.size(-1) ** 0.5, dtype=attn.dtype)
    mask = causal(q.size(-2), k.size(-2))[None, None]
    attn = torch.where(mask, attn, torch.full([], torch.finfo(attn.dtype).min, dtype=attn.dtype))
    probs = torch.softmax(attn, dim=-1)
    ctx = merge_heads(torch.matmul(probs, v))
    out = torch.addmm(w["c_proj.b"], ctx.reshape(-1, E), w["c_proj.w"]).view(x.shape)
    return out, probs


def make_gpt2(name, prefix, dtype, shards, layer, E=16, H=4, layers=2, extra=None):
    g = torch.Generator().manual_seed(zlib.crc32(name.encode()))
    tensors, f32 = {}, {}
    p = prefix

    def put(n, shape, key=None, scale=0.3):
        s, f = stored(torch.randn(*shape, generator=g) * scale, dtype)
        tensors[p + n] = s
        if key:
            f32[key] = f

    put("wte.weight", (8, E))
    put("wpe.weight", (8, E))
    for i in range(layers):
        a = "h.%d." % i
        mine = i == layer
        put(a + "ln_1.weight", (E,))
        put(a + "attn.c_attn.weight", (E, 3 * E), "c_attn.w" if mine else None)
        put(a + "attn.c_attn.bias", (3 * E,), "c_attn.b" if mine else None)
        put(a + "attn.c_proj.weight", (E, E), "c_proj.w" if mine else None)
        put(a + "attn.c_proj.bias", (E,), "c_proj.b" if mine else None)
        # the old mask buffers, saved by transformers < 4.31: never read by an import
        tensors[p + a + "attn.bias"] = torch.tril(torch.ones(8, 8)).view(1, 1, 8, 8).to(dtype)
        tensors[p + a + "attn.masked_bias"] = torch.tensor(-1e4).to(dtype)
        put(a + "mlp.c_fc.weight", (E, 2 * E))
    config = {"architectures": ["GPT2LMHeadModel"], "model_type": "gpt2", "n_embd": E, "n_head": H,
              "n_layer": layers, "n_positions": 8, "n_ctx": 8, "vocab_size": 8, "n_inner": None,
              "activation_function": "gelu_new", "attn_pdrop": 0.1, "resid_pdrop": 0.1,
              "layer_norm_epsilon": 1e-5, "scale_attn_weights": True,
              "scale_attn_by_inverse_layer_idx": False, "reorder_and_upcast_attn": False}
    config.update(extra or {})
    save_checkpoint(os.path.join(OUT, name), config, tensors, shards)
    x = torch.randn(N, L, E, generator=g)
    out, probs = gpt2_attention(x, f32, H)
    return x, out, probs, {"embed_dim": E, "num_heads": H, "is_causal": True}


# ---------------------------------------------------------------------------------------------
# Llama / Mistral / Qwen2 (modeling_llama.py: LlamaAttention, LlamaRotaryEmbedding, rotate_half,
# apply_rotary_pos_emb, repeat_kv, eager_attention_forward; the masks of the model's forward)

def rotate_half(x):
    x1 = x[..., : x.shape[-1] // 2]
    x2 = x[..., x.shape[-1] // 2:]
    return torch.cat((-x2, x1), dim=-1)


def rope_cos_sin(hd, theta, positions):
    inv_freq = 1.0 / (theta ** (torch.arange(0, hd, 2, dtype=torch.int64).float() / hd))
    pos = positions[None, :].float()                                   # [1, L]
    freqs = (inv_freq[None, :, None].float() @ pos[:, None, :]).transpose(1, 2)  # [1, L, hd/2]
    emb = torch.cat((freqs, freqs), dim=-1)
    return emb.cos(), emb.sin()


def repeat_kv(x, n_rep):
    b, hkv, s, hd = x.shape
    if n_rep == 1:
        return x
    return x[:, :, None, :, :].expand(b, hkv, n_rep, s, hd).reshape(b, hkv * n_rep, s, hd)


def llama_attention(x, w, H, Hkv, hd, theta, window=None):
    n, l, E = x.shape
    q = x @ w["q.w"].T + (w["q.b"] if "q.b" in w else 0)
    k = x @ w["k.w"].T + (w["k.b"] if "k.b" in w else 0)
    v = x @ w["v.w"].T + (w["v.b"] if "v.b" in w else 0)
    q = q.view(n, l, H, hd).transpose(1, 2)
    k = k.view(n, l, Hkv, hd).transpose(1, 2)
    v = v.view(n, l, Hkv, hd).transpose(1, 2)
    cos, sin = rope_cos_sin(hd, theta, torch.arange(l))
    cos, sin = cos.unsqueeze(1), sin.unsqueeze(1)
    q = (q * cos) + (rotate_half(q) * sin)
    k = (k * cos) + (rotate_half(k) * sin)
    k = repeat_kv(k, H // Hkv)
    v = repeat_kv(v, H // Hkv)
    scores = torch.matmul(q, k.transpose(2, 3)) * hd ** -0.5
    minv = torch.finfo(scores.dtype).min
    mask = torch.where(causal(l, l, window), torch.tensor(0.0), torch.tensor(minv))
    scores = scores + mask[None, None]
    probs = torch.softmax(scores, dim=-1, dtype=torch.float32).to(q.dtype)
    ctx = torch.matmul(probs, v).transpose(1, 2).contiguous().reshape(n, l, H * hd)
    out = ctx @ w["o.w"].T + (w["o.b"] if "o.b" in w else 0)
    return out, probs


def make_llama(name, model_type, prefix, dtype, shards, layer, E, H, Hkv, hd, layers, config_extra,
               qkv_bias, o_bias, window, theta, write_head_dim=True):
    g = torch.Generator().manual_seed(zlib.crc32(name.encode()))
    tensors, f32 = {}, {}
    p = prefix

    def put(n, shape, key=None, scale=0.3):
        s, f = stored(torch.randn(*shape, generator=g) * scale, dtype)
        tensors[p + n] = s
        if key:
            f32[key] = f

    put("embed_tokens.weight", (8, E))
    for i in range(layers):
        a = "layers.%d." % i
        mine = i == layer
        put(a + "input_layernorm.weight", (E,))
        for part, key, rows in (("q", "q", H * hd), ("k", "k", Hkv * hd), ("v", "v", Hkv * hd)):
            put(a + "self_attn.%s_proj.weight" % part, (rows, E), key + ".w" if mine else None)
            if qkv_bias:
                put(a + "self_attn.%s_proj.bias" % part, (rows,), key + ".b" if mine else None)
        put(a + "self_attn.o_proj.weight", (E, H * hd), "o.w" if mine else None)
        if o_bias:
            put(a + "self_attn.o_proj.bias", (E,), "o.b" if mine else None)
        put(a + "mlp.gate_proj.weight", (2 * E, E))
    put("norm.weight", (E,))
    arch = {"llama": "LlamaForCausalLM", "mistral": "MistralForCausalLM", "qwen2": "Qwen2ForCausalLM"}
    config = {"architectures": [arch[model_type]], "model_type": model_type, "hidden_size": E,
              "num_attention_heads": H, "num_key_value_heads": Hkv, "num_hidden_layers": layers,
              "intermediate_size": 2 * E, "hidden_act": "silu", "max_position_embeddings": 64,
              "rms_norm_eps": 1e-6, "rope_theta": theta, "rope_scaling": None, "vocab_size": 8,
              "attention_dropout": 0.0, "tie_word_embeddings": False}
    if write_head_dim:
        config["head_dim"] = hd
    config.update(config_extra)
    save_checkpoint(os.path.join(OUT, name), config, tensors, shards)
    x = torch.randn(N, L, E, generator=g)
    out, probs = llama_attention(x, f32, H, Hkv, hd, theta, window)
    want = {"embed_dim": E, "num_heads": H, "rope": {"theta": theta}, "is_causal": True}
    if not (qkv_bias or o_bias):
        want["bias"] = False
    if hd != E // H or E % H:
        want["head_dim"] = hd
    if Hkv != H:
        want["num_kv_heads"] = Hkv
    if window:
        want["window"] = window
    return x, out, probs, want


# ---------------------------------------------------------------------------------------------
# BLOOM (modeling_bloom.py: BloomAttention, _split_heads, build_alibi_tensor, dense)

def build_alibi(attention_mask, H):
    n, s = attention_mask.shape
    closest = 2 ** math.floor(math.log2(H))
    base = torch.tensor(2 ** (-(2 ** -(math.log2(closest) - 3))), dtype=torch.float32)
    slopes = torch.pow(base, torch.arange(1, 1 + closest, dtype=torch.int32))
    if closest != H:
        extra_base = torch.tensor(2 ** (-(2 ** -(math.log2(2 * closest) - 3))), dtype=torch.float32)
        rest = min(closest, H - closest)
        slopes = torch.cat([slopes, torch.pow(extra_base, torch.arange(1, 1 + 2 * rest, 2, dtype=torch.int32))])
    arange = ((attention_mask.cumsum(dim=-1) - 1) * attention_mask)[:, None, :]
    alibi = slopes[..., None] * arange
    return alibi.reshape(n * H, 1, s).to(torch.float32)


def bloom_attention(x, w, H):
    n, l, E = x.shape
    hd = E // H
    fused = x @ w["qkv.w"].T + w["qkv.b"]
    fused = fused.view(n, l, H, 3, hd)
    q, k, v = fused[..., 0, :], fused[..., 1, :], fused[..., 2, :]
    q = q.transpose(1, 2).reshape(n * H, l, hd)
    k = k.permute(0, 2, 3, 1).reshape(n * H, hd, l)
    v = v.transpose(1, 2).reshape(n * H, l, hd)
    alibi = build_alibi(torch.ones(n, l), H)
    scores = alibi.baddbmm(batch1=q, batch2=k, beta=1.0, alpha=1.0 / math.sqrt(hd))
    scores = scores.view(n, H, l, l)
    masked = ~causal(l, l)[None, None]
    scores = torch.masked_fill(scores, masked, torch.finfo(scores.dtype).min)
    probs = torch.softmax(scores, dim=-1, dtype=torch.float32)
    ctx = torch.bmm(probs.view(n * H, l, l), v)
    ctx = ctx.view(n, H, l, hd).permute(0, 2, 1, 3).reshape(n, l, H * hd)
    return ctx @ w["dense.w"].T + w["dense.b"], probs


def make_bloom(name, prefix, dtype, shards, layer, E, H, layers=2):
    g = torch.Generator().manual_seed(zlib.crc32(name.encode()))
    tensors, f32 = {}, {}
    p = prefix

    def put(n, shape, key=None, scale=0.3):
        s, f = stored(torch.randn(*shape, generator=g) * scale, dtype)
        tensors[p + n] = s
        if key:
            f32[key] = f

    put("word_embeddings.weight", (8, E))
    for i in range(layers):
        a = "h.%d." % i
        mine = i == layer
        put(a + "input_layernorm.weight", (E,))
        put(a + "self_attention.query_key_value.weight", (3 * E, E), "qkv.w" if mine else None)
        put(a + "self_attention.query_key_value.bias", (3 * E,), "qkv.b" if mine else None)
        put(a + "self_attention.dense.weight", (E, E), "dense.w" if mine else None)
        put(a + "self_attention.dense.bias", (E,), "dense.b" if mine else None)
    config = {"architectures": ["BloomForCausalLM"], "model_type": "bloom", "n_embed": E, "n_head": H,
              "n_layer": layers, "vocab_size": 8, "layer_norm_epsilon": 1e-5,
              "apply_residual_connection_post_layernorm": False, "attention_dropout": 0.0,
              "hidden_dropout": 0.0, "pretraining_tp": 1, "slow_but_exact": False}
    save_checkpoint(os.path.join(OUT, name), config, tensors, shards)
    x = torch.randn(N, L, E, generator=g)
    out, probs = bloom_attention(x, f32, H)
    return x, out, probs, {"embed_dim": E, "num_heads": H, "alibi": True, "is_causal": True}


# ---------------------------------------------------------------------------------------------

def main():
    torch.manual_seed(0)
    if os.path.isdir(OUT):
        shutil.rmtree(OUT)
    os.makedirs(OUT)
    f16, bf16, f32 = torch.float16, torch.bfloat16, torch.float32
    cases = [
        ("bert_base", 1, lambda n: make_bert(n, "bert", "", f32, 1, 1)),
        ("bert_mlm_sharded_f16", 0, lambda n: make_bert(n, "bert", "bert.", f16, 3, 0)),
        ("roberta_bf16", 1, lambda n: make_bert(n, "roberta", "roberta.", bf16, 1, 1, E=24, H=3)),
        ("gpt2_lmhead_bf16", 1, lambda n: make_gpt2(n, "transformer.", bf16, 1, 1)),
        ("gpt2_base_sharded", 0, lambda n: make_gpt2(n, "", f32, 2, 0, E=24, H=6,
                                                     extra={"scale_attn_by_inverse_layer_idx": True})),
        ("llama_gqa_sharded_bf16", 1, lambda n: make_llama(
            n, "llama", "model.", bf16, 3, 1, E=32, H=4, Hkv=2, hd=8, layers=2,
            config_extra={"attention_bias": False}, qkv_bias=False, o_bias=False, window=None,
            theta=10000.0, write_head_dim=False)),
        ("llama_head_dim_bias", 0, lambda n: make_llama(
            n, "llama", "model.", f32, 1, 0, E=24, H=4, Hkv=4, hd=8, layers=2,
            config_extra={"attention_bias": True, "rope_scaling": {"rope_type": "default"}},
            qkv_bias=True, o_bias=True, window=None, theta=500000.0)),
        ("mistral_window_mqa", 1, lambda n: make_llama(
            n, "mistral", "model.", f16, 2, 1, E=32, H=4, Hkv=1, hd=8, layers=2,
            config_extra={"sliding_window": 3}, qkv_bias=False, o_bias=False, window=3,
            theta=10000.0)),
        ("qwen2_full_layer", 0, lambda n: make_llama(
            n, "qwen2", "model.", bf16, 1, 0, E=32, H=4, Hkv=2, hd=8, layers=3,
            config_extra={"use_sliding_window": True, "sliding_window": 4, "max_window_layers": 2},
            qkv_bias=True, o_bias=False, window=None, theta=1000000.0, write_head_dim=False)),
        ("qwen2_window_layer", 2, lambda n: make_llama(
            n, "qwen2", "", f32, 2, 2, E=32, H=4, Hkv=2, hd=8, layers=3,
            config_extra={"use_sliding_window": True, "sliding_window": 4, "max_window_layers": 2},
            qkv_bias=True, o_bias=False, window=4, theta=1000000.0, write_head_dim=False)),
        ("bloom_f16", 1, lambda n: make_bloom(n, "transformer.", f16, 1, 1, E=32, H=4)),
        ("bloom_h6_sharded", 0, lambda n: make_bloom(n, "", f32, 2, 0, E=36, H=6)),
    ]
    index = []
    for name, layer, make in cases:
        x, out, probs, want = make(name)
        st.write_safetensors(os.path.join(OUT, name, "reference.safetensors"),
                             {"hidden_states": x.contiguous(), "attn_output": out.contiguous(),
                              "attn_weights": probs.contiguous()})
        index.append({"checkpoint": name, "layer": layer, "config": want})
        print("%-26s layer %d  %s" % (name, layer, json.dumps(want)))
    with open(os.path.join(OUT, "cases.json"), "w") as f:
        json.dump({"cases": index}, f, indent=1)


if __name__ == "__main__":
    main()
