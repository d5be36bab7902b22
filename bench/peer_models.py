#!/usr/bin/python3
"""peer_models.py - one shape's inputs, torch's reference outputs and ONNX models, for bench/compare.py.

    /usr/bin/python3 bench/peer_models.py DIR N L E H [--long]

The layer is torch.manual_seed(0); nn.MultiheadAttention(E, H, batch_first=True), self-attention
(query = key = value = x). Every contender loads these weights and this x, and is checked against
torch's output before it is timed. Files written to DIR (nothing is done when DIR/done.json already
describes the same shape, script version and torch version; the .onnx files only when python3-onnx
is installed):

  w_in.f32 [3E,E]  b_in.f32 [3E]  w_out.f32 [E,E]  b_out.f32 [E]   the layer (torch's state_dict)
  x.f32 [N,L,E]          torch.manual_seed(1); uniform in [-1, 1)
  rows.i32 [R]           flat rows (b·L + i) whose outputs are checked: all of them, or with --long 64
                         rows spread over the sequence
  y.f32 [R,E]            torch's output on those rows
  w.f32 [L,L]            per-head weights of batch 0, head 0 (need_weights, average_attn_weights=False);
                         not with --long
  fused.onnx             ONNX Runtime's fused operator: MatMul(x, Wqkv) -> Split -> com.microsoft.
                         MultiHeadAttention(q, k, v, bias; num_heads=H) -> MatMul(Wout) -> Add(bout)
  exported_nw0.onnx      torch.onnx.export of the module, need_weights=False (opset 17, static shape)
  exported_nw1.onnx      ... need_weights=True, average_attn_weights=False (outputs y, w); not with --long

Without --long, y is the module's own output (torch's fast path); with --long (L = S up to 16384,
where the module would need H·L·S floats of scores) y is `reference_rows` below, in float64 on the
checked rows only; every run without --long also checks reference_rows against the module, so that
reference is itself tested against torch.
"""
import json
import os
import sys

import numpy as np
import torch

VERSION = 1  # bump when the files written change


def layer(E, H):
    torch.manual_seed(0)
    return torch.nn.MultiheadAttention(E, H, batch_first=True).eval()


def reference_rows(m, x, rows):
    """torch's MultiheadAttention forward (self-attention, no masks) on the flat rows `rows` of x
    [N,L,E], step by step in float64: [R,E]."""
    N, L, E = x.shape
    H = m.num_heads
    hd = E // H
    W = m.in_proj_weight.detach().double()
    b = m.in_proj_bias.detach().double()
    xd = x.double()
    out = torch.empty(len(rows), E, dtype=torch.float64)
    for n in sorted(set(int(r) // L for r in rows)):
        pick = [i for i, r in enumerate(rows) if int(r) // L == n]
        xi = xd[n, [int(rows[i]) % L for i in pick]]                  # [R_n,E]
        q = (xi @ W[:E].T + b[:E]).view(-1, H, hd).transpose(0, 1)     # [H,R_n,hd]
        k = (xd[n] @ W[E:2 * E].T + b[E:2 * E]).view(L, H, hd).transpose(0, 1)   # [H,S,hd]
        v = (xd[n] @ W[2 * E:].T + b[2 * E:]).view(L, H, hd).transpose(0, 1)     # [H,S,hd]
        p = torch.softmax(q @ k.transpose(1, 2) / hd ** 0.5, dim=-1)  # [H,R_n,S]
        ctx = (p @ v).transpose(0, 1).reshape(-1, E)                   # [R_n,E]
        out[pick] = ctx @ m.out_proj.weight.detach().double().T + m.out_proj.bias.detach().double()
    return out


def fused_model(m, E, H, path):
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    def const(name, a):
        return numpy_helper.from_array(np.ascontiguousarray(a), name)

    W = m.in_proj_weight.detach().numpy()
    inits = [const("Wqkv", W.T), const("b_qkv", m.in_proj_bias.detach().numpy()),
             const("Wout", m.out_proj.weight.detach().numpy().T),
             const("b_out", m.out_proj.bias.detach().numpy()),
             const("split", np.array([E, E, E], np.int64))]
    nodes = [helper.make_node("MatMul", ["x", "Wqkv"], ["qkv"]),
             helper.make_node("Split", ["qkv", "split"], ["q", "k", "v"], axis=2),
             helper.make_node("MultiHeadAttention", ["q", "k", "v", "b_qkv"], ["ctx"],
                              domain="com.microsoft", num_heads=H),
             helper.make_node("MatMul", ["ctx", "Wout"], ["ctx_w"]),
             helper.make_node("Add", ["ctx_w", "b_out"], ["y"])]
    graph = helper.make_graph(nodes, "mha_fused",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", "L", E])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", "L", E])],
                              inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17),
                                                    helper.make_opsetid("com.microsoft", 1)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    onnx.save(model, path)


class SelfAttention(torch.nn.Module):
    """x -> the module's output (and per-head weights): one graph input for the export."""

    def __init__(self, m, need_weights):
        super().__init__()
        self.m, self.need_weights = m, need_weights

    def forward(self, x):
        y, w = self.m(x, x, x, need_weights=self.need_weights, average_attn_weights=False)
        return (y, w) if self.need_weights else y


def exported_model(m, x, need_weights, path):
    # With grad enabled: under no_grad the module takes its fast path,
    # aten::_native_multi_head_attention, which torch 1.13 cannot export.
    with torch.enable_grad():
        torch.onnx.export(SelfAttention(m, need_weights), (x,), path, opset_version=17,
                          input_names=["x"], output_names=["y", "w"] if need_weights else ["y"])


def main():
    args = [a for a in sys.argv[1:] if not a.startswith("--")]
    long_mode = "--long" in sys.argv
    if len(args) != 5:
        sys.exit(__doc__)
    out, (N, L, E, H) = args[0], map(int, args[1:])
    os.makedirs(out, exist_ok=True)
    try:
        import onnx  # noqa: F401  (Debian's python3-onnx builds the fused model)
        have_onnx = True
    except ImportError:
        have_onnx = False
    stamp = {"version": VERSION, "N": N, "L": L, "E": E, "H": H, "long": long_mode,
             "torch": torch.__version__, "onnx": have_onnx}
    done = os.path.join(out, "done.json")
    if os.path.exists(done) and json.load(open(done)) == stamp:
        return
    if os.path.exists(done):
        os.remove(done)

    def save(name, a):
        np.ascontiguousarray(a).tofile(os.path.join(out, name))

    m = layer(E, H)
    save("w_in.f32", m.in_proj_weight.detach().numpy())
    save("b_in.f32", m.in_proj_bias.detach().numpy())
    save("w_out.f32", m.out_proj.weight.detach().numpy())
    save("b_out.f32", m.out_proj.bias.detach().numpy())
    torch.manual_seed(1)
    x = torch.rand(N, L, E) * 2 - 1
    save("x.f32", x.numpy())
    if long_mode:
        rows = np.unique(np.linspace(0, N * L - 1, 64).astype(np.int32))
        save("rows.i32", rows)
        save("y.f32", reference_rows(m, x, rows).float().numpy())
    else:
        with torch.no_grad():
            y, w = m(x, x, x, need_weights=True, average_attn_weights=False)
            y0 = m(x, x, x, need_weights=False)[0]
        rows = np.arange(N * L, dtype=np.int32)
        # the step-by-step reference (what --long checks against) must agree with the module
        check = rows[np.unique(np.linspace(0, N * L - 1, 16).astype(int))]
        err = (reference_rows(m, x, check) - y0.reshape(-1, E)[check].double()).abs().max().item()
        if err > 1e-5:
            sys.exit("peer_models.py: the float64 reference differs from the module by %.2e" % err)
        save("rows.i32", rows)
        save("y.f32", y0.reshape(-1, E).numpy())
        save("w.f32", w[0, 0].numpy())
        if have_onnx:
            exported_model(m, x, False, os.path.join(out, "exported_nw0.onnx"))
            exported_model(m, x, True, os.path.join(out, "exported_nw1.onnx"))
    if have_onnx:
        fused_model(m, E, H, os.path.join(out, "fused.onnx"))
    json.dump(stamp, open(done, "w"))


if __name__ == "__main__":
    main()
