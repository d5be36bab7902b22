"""torch_stages.py - the forward pass of nn.MultiheadAttention in torch ops, every stage kept, and
the same with the extensions of today's models (head_dim, GQA, RoPE, ALiBi) from HF's conventions.

Shared by the scripts that check attnd against torch (gen_golden.py writes the committed golden files,
http_random.py drives a live daemon); imported from tests/torch/, needs torch (Debian's python3-torch 1.13).

attention_stages() is torch 1.13's order of operations (F.multi_head_attention_forward's general
path), written out so that every intermediate can be compared with attnd's /trace stages, with one
departure attnd makes (README.md, "Coming from torch"): a query row whose every key is masked gets weights 0 (torch: NaN).
"""
import math

import torch
import torch.nn.functional as F


def attention_stages(q_in, k_in, v_in, sd, H, mask, add_bias_kv, add_zero_attn, dtype):
    """q_in [L,N,E], k_in [S0,N,kdim], v_in [S0,N,vdim] (sequence-first, already in dtype); sd the
    state_dict in dtype; mask the merged additive mask [N*H,L,S0] in dtype, or None.
    Returns (stages, out, w, dead): stages maps attnd's trace names to batch-major tensors
    (q_proj [N,L,E] ... output [N,L,E]); out [L,N,E]; w the weights [N*H,L,S] (S = S0 plus the
    keys add_bias_kv and add_zero_attn append); dead [N*H,L], True where a row had no allowed key."""
    L, N, E = q_in.shape
    hd = E // H
    if "in_proj_weight" in sd:
        w_q, w_k, w_v = sd["in_proj_weight"].chunk(3)
    else:
        w_q, w_k, w_v = sd["q_proj_weight"], sd["k_proj_weight"], sd["v_proj_weight"]
    b_q = b_k = b_v = None
    if "in_proj_bias" in sd:
        b_q, b_k, b_v = sd["in_proj_bias"].chunk(3)
    q = F.linear(q_in, w_q, b_q)  # [L,N,E]
    k = F.linear(k_in, w_k, b_k)  # [S0,N,E]
    v = F.linear(v_in, w_v, b_v)
    st = {"q_proj": q.transpose(0, 1), "k_proj": k.transpose(0, 1), "v_proj": v.transpose(0, 1)}

    if add_bias_kv:
        k = torch.cat([k, sd["bias_k"].repeat(1, N, 1)])
        v = torch.cat([v, sd["bias_v"].repeat(1, N, 1)])
        if mask is not None:
            mask = F.pad(mask, (0, 1))
    q = q.contiguous().view(L, N * H, hd).transpose(0, 1)            # [N*H, L, hd]
    k = k.contiguous().view(k.shape[0], N * H, hd).transpose(0, 1)   # [N*H, S, hd]
    v = v.contiguous().view(v.shape[0], N * H, hd).transpose(0, 1)
    if add_zero_attn:
        k = torch.cat([k, torch.zeros((N * H, 1, hd), dtype=dtype)], dim=1)
        v = torch.cat([v, torch.zeros((N * H, 1, hd), dtype=dtype)], dim=1)
        if mask is not None:
            mask = F.pad(mask, (0, 1))
    S = k.shape[1]
    st["q_heads"] = q.reshape(N, H, L, hd)
    st["k_heads"] = k.reshape(N, H, S, hd)
    st["v_heads"] = v.reshape(N, H, S, hd)

    q_scaled = q / math.sqrt(hd)
    if mask is not None:
        scores = torch.baddbmm(mask, q_scaled, k.transpose(-2, -1))
    else:
        scores = torch.bmm(q_scaled, k.transpose(-2, -1))
    st["scores"] = scores.reshape(N, H, L, S)
    dead = torch.isneginf(scores).all(dim=-1)                         # [N*H, L]
    w = torch.softmax(scores, dim=-1)
    w = torch.where(dead.unsqueeze(-1), torch.zeros((), dtype=dtype), w)
    st["attn_weights"] = w.reshape(N, H, L, S)
    ho = torch.bmm(w, v)                                              # [N*H, L, hd]
    st["head_outputs"] = ho.reshape(N, H, L, hd)
    concat = ho.transpose(0, 1).contiguous().view(L, N, E)
    st["concat"] = concat.transpose(0, 1)
    out = F.linear(concat, sd["out_proj.weight"], sd.get("out_proj.bias"))  # [L,N,E]
    st["output"] = out.transpose(0, 1)
    st = {name: t.contiguous() for name, t in st.items()}
    return st, out, w, dead


def head_weights(w, N, H, average):
    """w [N*H,L,S] -> per-head [N,H,L,S], or their mean over heads [N,L,S] (torch's sum / H)."""
    L, S = w.shape[1], w.shape[2]
    weights = w.view(N, H, L, S)
    return weights.sum(dim=1) / H if average else weights


# ---------------------------------------------------------------------------------------------------
# The attention of today's models (docs/api.md), in torch ops written from Hugging Face
# transformers' conventions; torch 1.13 has none of them.

def rope_inv_freq(hd, theta):
    """inv_freq[d] = theta^(-2d/hd), d < hd/2, computed in float64 and rounded once to float32.
    (HF's LlamaRotaryEmbedding computes it with float32 ops, which can land an ulp away.)"""
    return (1.0 / (theta ** (torch.arange(0, hd, 2, dtype=torch.float64) / hd))).to(torch.float32)


def rope_inv_freq_hf(hd, theta):
    """HF's own float32 formula (modeling_llama.py), for the generator's cross-check."""
    return 1.0 / (theta ** (torch.arange(0, hd, 2, dtype=torch.int64).float() / hd))


def rope_cos_sin(inv_freq, pos, dtype):
    """HF LlamaRotaryEmbedding.forward: freqs = inv_freq @ position_ids (float32: one product per
    entry), emb = cat(freqs, freqs); cos/sin of that float32 angle, taken in float64 (rounded to
    float32 for the float32 pass: the correctly rounded values). pos [N,T] int64 -> [N,1,T,hd]."""
    n = pos.shape[0]
    inv = inv_freq[None, :, None].expand(n, -1, 1).to(torch.float32)
    freqs = (inv @ pos[:, None, :].to(torch.float32)).transpose(1, 2)   # [N,T,hd/2] float32
    emb = torch.cat((freqs, freqs), dim=-1).to(torch.float64)
    return emb.cos().to(dtype).unsqueeze(1), emb.sin().to(dtype).unsqueeze(1)


def rotate_half(x):
    """HF: rotates half the hidden dims of the input."""
    x1 = x[..., : x.shape[-1] // 2]
    x2 = x[..., x.shape[-1] // 2:]
    return torch.cat((-x2, x1), dim=-1)


def apply_rotary_pos_emb(x, cos, sin):
    """HF apply_rotary_pos_emb for one tensor: x * cos + rotate_half(x) * sin."""
    return (x * cos) + (rotate_half(x) * sin)


def repeat_kv(hidden_states, n_rep):
    """HF repeat_kv: [N, Hkv, S, hd] -> [N, Hkv*n_rep, S, hd]; kv head j serves query heads
    j*n_rep .. (j+1)*n_rep - 1."""
    batch, num_key_value_heads, slen, head_dim = hidden_states.shape
    if n_rep == 1:
        return hidden_states
    hidden_states = hidden_states[:, :, None, :, :].expand(batch, num_key_value_heads, n_rep, slen,
                                                           head_dim)
    return hidden_states.reshape(batch, num_key_value_heads * n_rep, slen, head_dim)


def alibi_slopes(H):
    """BLOOM's slopes (build_alibi_tensor): n = 2^floor(log2 H), base 2^(-8/n) to the powers 1..n,
    then 2^(-4/n) to the odd powers 1, 3, ... for the remaining heads; in float64, rounded once."""
    n = 2 ** math.floor(math.log2(H))
    base = 2.0 ** (-(2.0 ** -(math.log2(n) - 3)))
    slopes = [base ** p for p in range(1, 1 + n)]
    if n != H:
        extra = 2.0 ** (-(2.0 ** -(math.log2(2 * n) - 3)))
        rem = min(n, H - n)
        slopes += [extra ** p for p in range(1, 1 + 2 * rem, 2)]
    return torch.tensor(slopes, dtype=torch.float64).to(torch.float32)


def build_alibi_tensor_bloom(attention_mask, num_heads, dtype):
    """HF BLOOM's build_alibi_tensor, as written there (float32 slopes): +m_h * key position, the
    key position counted over unmasked keys. [N*H, 1, S]. For the generator's cross-check only."""
    batch_size, seq_length = attention_mask.shape
    closest_power_of_2 = 2 ** math.floor(math.log2(num_heads))
    base = torch.tensor(2 ** (-(2 ** -(math.log2(closest_power_of_2) - 3))), dtype=torch.float32)
    powers = torch.arange(1, 1 + closest_power_of_2, dtype=torch.int32)
    slopes = torch.pow(base, powers)
    if closest_power_of_2 != num_heads:
        extra_base = torch.tensor(2 ** (-(2 ** -(math.log2(2 * closest_power_of_2) - 3))),
                                  dtype=torch.float32)
        num_remaining_heads = min(closest_power_of_2, num_heads - closest_power_of_2)
        extra_powers = torch.arange(1, 1 + 2 * num_remaining_heads, 2, dtype=torch.int32)
        slopes = torch.cat([slopes, torch.pow(extra_base, extra_powers)], dim=0)
    arange_tensor = ((attention_mask.cumsum(dim=-1) - 1) * attention_mask)[:, None, :]
    alibi = slopes[..., None] * arange_tensor
    return alibi.reshape(batch_size * num_heads, 1, seq_length).to(dtype)


def variant_stages(q_in, k_in, v_in, sd, H, Hkv, hd, mask, add_bias_kv, add_zero_attn, dtype,
                   rope_theta=None, alibi=False, qpos=None, kpos=None):
    """The forward pass with head_dim, num_kv_heads, RoPE and ALiBi, every stage kept.
    q_in [L,N,E], k_in [S0,N,kdim], v_in [S0,N,vdim] (sequence-first, in dtype); sd the state_dict
    in dtype; mask the merged additive mask [N*H,L,S0] (key_padding_mask + attn_mask + the causal
    and window rules as -inf) or None; qpos [N,L], kpos [N,S0] int64 positions.
    Order (attnd's, lib/mha.h): in-projection (+bias); RoPE on q and the S0 given keys (Llama's
    apply_rotary_pos_emb); bias_k/bias_v appended, then the zero key/value (no position: never
    rotated, ALiBi 0, never masked); q / sqrt(hd); scores = q·kᵀ with kv head h*Hkv/H
    (repeat_kv); + ALiBi slope_h * (p_j - p_i) (float32 product, like a float mask added first);
    + mask; softmax (rows with every key masked: 0); weights·v; concat; out-projection.
    Returns (stages, out [L,N,E], w [N*H,L,S], dead [N*H,L]) as attention_stages does; k_heads and
    v_heads hold the Hkv kv heads (not repeated), q_heads/k_heads after RoPE."""
    L, N, E = q_in.shape
    S0 = k_in.shape[0]
    Dq, Dkv = H * hd, Hkv * hd
    if "in_proj_weight" in sd:
        w_q, w_k, w_v = sd["in_proj_weight"].split([Dq, Dkv, Dkv])
    else:
        w_q, w_k, w_v = sd["q_proj_weight"], sd["k_proj_weight"], sd["v_proj_weight"]
    b_q = b_k = b_v = None
    if "in_proj_bias" in sd:
        b_q, b_k, b_v = sd["in_proj_bias"].split([Dq, Dkv, Dkv])
    q = F.linear(q_in, w_q, b_q)  # [L,N,Dq]
    k = F.linear(k_in, w_k, b_k)  # [S0,N,Dkv]
    v = F.linear(v_in, w_v, b_v)
    st = {"q_proj": q.transpose(0, 1), "k_proj": k.transpose(0, 1), "v_proj": v.transpose(0, 1)}

    q = q.reshape(L, N, H, hd).permute(1, 2, 0, 3)        # [N,H,L,hd]
    k = k.reshape(S0, N, Hkv, hd).permute(1, 2, 0, 3)     # [N,Hkv,S0,hd]
    v = v.reshape(S0, N, Hkv, hd).permute(1, 2, 0, 3)
    if rope_theta is not None:
        inv_freq = rope_inv_freq(hd, rope_theta)
        cq, sq = rope_cos_sin(inv_freq, qpos, dtype)
        ck, sk = rope_cos_sin(inv_freq, kpos, dtype)
        q = apply_rotary_pos_emb(q, cq, sq)
        k = apply_rotary_pos_emb(k, ck, sk)
    extra = []
    if add_bias_kv:
        k = torch.cat([k, sd["bias_k"].reshape(1, Hkv, 1, hd).expand(N, Hkv, 1, hd)], dim=2)
        v = torch.cat([v, sd["bias_v"].reshape(1, Hkv, 1, hd).expand(N, Hkv, 1, hd)], dim=2)
        extra.append(1)
    if add_zero_attn:
        k = torch.cat([k, torch.zeros((N, Hkv, 1, hd), dtype=dtype)], dim=2)
        v = torch.cat([v, torch.zeros((N, Hkv, 1, hd), dtype=dtype)], dim=2)
        extra.append(1)
    S = k.shape[2]
    if mask is not None and S > S0:
        mask = F.pad(mask, (0, S - S0))
    st["q_heads"] = q
    st["k_heads"] = k
    st["v_heads"] = v

    n_rep = H // Hkv
    kr = repeat_kv(k, n_rep).reshape(N * H, S, hd)
    vr = repeat_kv(v, n_rep).reshape(N * H, S, hd)
    q_scaled = q.reshape(N * H, L, hd) / math.sqrt(hd)
    if alibi:
        slopes = alibi_slopes(H).to(dtype)                                 # [H]
        dist = (kpos[:, None, :] - qpos[:, :, None]).to(dtype)             # [N,L,S0]: p_j - p_i
        bias = slopes.reshape(1, H, 1, 1) * dist.reshape(N, 1, L, S0)      # [N,H,L,S0]
        bias = F.pad(bias.reshape(N * H, L, S0), (0, S - S0))              # appended keys: 0
        scores = torch.baddbmm(bias, q_scaled, kr.transpose(-2, -1))
        if mask is not None:
            scores = scores + mask
    elif mask is not None:
        scores = torch.baddbmm(mask, q_scaled, kr.transpose(-2, -1))
    else:
        scores = torch.bmm(q_scaled, kr.transpose(-2, -1))
    st["scores"] = scores.reshape(N, H, L, S)
    dead = torch.isneginf(scores).all(dim=-1)                              # [N*H, L]
    w = torch.softmax(scores, dim=-1)
    w = torch.where(dead.unsqueeze(-1), torch.zeros((), dtype=dtype), w)
    st["attn_weights"] = w.reshape(N, H, L, S)
    ho = torch.bmm(w, vr)                                                  # [N*H, L, hd]
    st["head_outputs"] = ho.reshape(N, H, L, hd)
    concat = ho.reshape(N, H, L, hd).permute(2, 0, 1, 3).reshape(L, N, Dq)
    st["concat"] = concat.transpose(0, 1)
    out = F.linear(concat, sd["out_proj.weight"], sd.get("out_proj.bias"))  # [L,N,E]
    st["output"] = out.transpose(0, 1)
    st = {name: t.contiguous() for name, t in st.items()}
    return st, out, w, dead


def repeated_kv_state_dict(H, Hkv, hd, sd):
    """The MHA state_dict equal to a grouped-query layer (H query heads, Hkv kv heads of hd): kv
    head j's rows copied for query heads j*g .. (j+1)*g - 1 (what HF's repeat_kv does to the
    projections' output)."""
    if Hkv == H:
        return sd
    Dq, Dkv, g = H * hd, Hkv * hd, H // Hkv

    def rep(t):  # [Dkv, ...] -> [Dq, ...]
        return t.reshape(Hkv, 1, hd, *t.shape[1:]).expand(Hkv, g, hd, *t.shape[1:]).reshape(
            Dq, *t.shape[1:])

    out = {}
    if "in_proj_weight" in sd:
        wq, wk, wv = sd["in_proj_weight"].split([Dq, Dkv, Dkv])
        out["in_proj_weight"] = torch.cat([wq, rep(wk), rep(wv)])
    else:
        out["q_proj_weight"] = sd["q_proj_weight"]
        out["k_proj_weight"] = rep(sd["k_proj_weight"])
        out["v_proj_weight"] = rep(sd["v_proj_weight"])
    if "in_proj_bias" in sd:
        bq, bk, bv = sd["in_proj_bias"].split([Dq, Dkv, Dkv])
        out["in_proj_bias"] = torch.cat([bq, rep(bk), rep(bv)])
    for name in ("bias_k", "bias_v"):
        if name in sd:
            out[name] = rep(sd[name].reshape(Dkv)).reshape(1, 1, Dq)
    out["out_proj.weight"] = sd["out_proj.weight"]
    if "out_proj.bias" in sd:
        out["out_proj.bias"] = sd["out_proj.bias"]
    return out


def select_slice(full, sel, average):
    """weights_select's heads and ranges: full [N,H,L,S] -> the chosen slice [N,h',L',S'], or
    torch's mean over the chosen heads (sum / h') [N,L',S']."""
    H = full.shape[1]
    heads = sel.get("heads", list(range(H)))
    q0, q1 = sel.get("queries", [0, full.shape[2]])
    k0, k1 = sel.get("keys", [0, full.shape[3]])
    x = full[:, heads][:, :, q0:q1, k0:k1]
    if average:
        x = x.sum(dim=1) / len(heads)
    return x.contiguous()
