"""torch_stages.py - the forward pass of nn.MultiheadAttention in torch ops, every stage kept.

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
