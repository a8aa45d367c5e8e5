"""Host time: the CPU issuing a layer's work, and what it costs when the GPU waits for it.

Per layer and micro-batch, one rank (numpy-broadcastable):

  H_f = ((ops_f − g + ops_moe)·c_f + g·c_gemm)·x,   H_b = ((ops_b − g + ops_moe)·c_b + g·c_gemm_b)·x

ops the kernels one layer issues (`compute.layer_compute_times`: kern_f / kern_b), g of them GEMM
module calls (gemm_ops; a module's backward runs its dgrad and wgrad), ops_moe the router and dispatcher bookkeeping
of a MoE layer (runtime `[host] moe_ops`, `flex_moe_ops` under a DeepEP / HybridEP dispatcher), c_f / c_b the runtime's host time per forward / backward
op and c_gemm / c_gemm_b per GEMM module (`[host] fwd_op_us`, `bwd_op_us`, `gemm_op_us`,
`gemm_bwd_op_us`), x the host CPU class (`hw.host_op_factor`: Grace runs PyTorch's op path ~2.5×
slower than a Xeon 8480C, TransformerEngine issue #2053). CUDA graphs collapse the ops they capture into one replay: per-layer graphs
(`kernels.cuda_graphs`) leave only the routed experts and the dispatcher eager when the experts are
outside them (`kernels.cuda_graph_experts` false), full-iteration graphs leave nothing.

Composition (`exposed`): without a synchronisation the CPU runs ahead of the GPU across layers and
directions, so a layer costs max(D_f + D_b, H_f + H_b) — the host is exposed only where it is the
longer of the two. A dropless token dispatcher synchronises device → host once per MoE layer forward
(`[host] dropless_sync`, no capacity factor, no full-iteration graph): the queue empties, so forward
and backward each cost max(D, H) on their own, plus the synchronisation itself (`[host] sync_us`).

The synced forward is a serialised segment: one sync per layer, so the segment from one sync to
the next is one layer's forward (Megatron-Core's alltoall dispatcher syncs at `before_ep_alltoall`,
the counts' all-gather over the EP group just before it: token_dispatcher.py `preprocess`), and the
host cannot run ahead of it. Every op then costs max(d_i, h_i) rather than the segment
max(Σd, Σh) — a short kernel waits for its own launch. Per op class c of the layer forward
(`serialised_excess`): non-expert GEMM modules, the attention kernel(s), the memory-bound passes,
the routed experts' launches (per local expert under a looped grouped GEMM), and the router /
dispatcher bookkeeping (device time ≈ 0: index, split and count ops), with the class's ops taken
as alike:

  S_f = Σ_c max(0, n_c·h_c − d_c),   x_f = max(H_f − D_f, S_f, 0) + sync

(collectives are device time only: their calls' host time is in the bookkeeping). The backward
issues from saved host-side splits (no sync), so its host runs ahead as before.
"""

from __future__ import annotations

import numpy as np

from autoplace.cost.memory import _w


def layer_host_times(ctx, hw, lt):
    """(H_f, H_b, sync, S_f): host seconds per layer forward and backward, the dropless
    synchronisation per layer forward (0 where the layer does not sync) and the serialised
    forward's excess over its device time (`serialised_excess`; 0 where the layer does not sync)."""
    t, m = ctx.train, ctx.model
    rt = t.rt
    H, kern = rt.host, rt.kernels
    x = float(getattr(hw, "host_op_factor", 1.0))
    cf, cb = H.fwd_op_us * 1e-6 * x, H.bwd_op_us * 1e-6 * x
    fm = (m.n_moe_layers / m.layers) if m.is_moe else 0.0
    # per-expert grouped GEMMs: each expert launch costs expert_gemm_ops host ops (the FP8/FP4
    # quantization launches are counted per recipe in the kernels: compute `quant_k`)
    per_exp = H.expert_gemm_ops if kern.moe_grouped_gemm_per_expert else 1.0
    exp_f, exp_b = _w(lt["kern_exp_f"]) * per_exp, _w(lt["kern_exp_b"]) * per_exp
    ops_f = _w(lt["kern_f"]) - _w(lt["kern_exp_f"]) + exp_f
    ops_b = _w(lt["kern_b"]) - _w(lt["kern_exp_b"]) + exp_b
    # GEMM module calls cost their own (`gemm_op_us`, `gemm_bwd_op_us`) in place of a plain op each
    g = _w(lt["gemm_ops"])
    gf = (H.gemm_op_us * 1e-6 * x - cf) if H.gemm_op_us else 0.0
    gb = (H.gemm_bwd_op_us * 1e-6 * x - cb) if H.gemm_bwd_op_us else 0.0
    flex = kern.fused_dispatch
    moe = fm * ((H.flex_moe_ops or H.moe_ops) if flex else H.moe_ops)
    full_graph = kern.cuda_graphs and kern.cuda_graph_experts
    if full_graph:
        return _w(0.0) * ops_f, _w(0.0) * ops_b, 0.0, 0.0
    synced = m.is_moe and H.dropless_sync and not t.moe_capacity_factor
    sync = fm * H.sync_us * 1e-6 * x if synced else 0.0
    ge = np.minimum(g, 2.0 * fm)                 # the experts' two grouped-GEMM modules
    # the serialised forward's op classes (n·h host, d device): experts, bookkeeping, then the rest
    cls = [(exp_f * cf + ge * gf, _w(lt.get("gemm_exp_f", 0.0))), (moe * cf, 0.0)]
    if kern.cuda_graphs:
        # per-layer graphs: the captured part (attention, router, preprocess) is one replay; the
        # experts (their two grouped-GEMM modules) and the token dispatch stay eager
        d_ops = (H.flex_dispatch_ops or H.dispatch_ops) if flex else H.dispatch_ops
        moe = fm * d_ops if d_ops else moe
        cls[1] = (moe * cf, 0.0)
        cls.append((cf, _w(lt["gemm_f"]) - _w(lt.get("gemm_exp_f", 0.0)) + _w(lt["attn_f"]) + _w(lt["elem_f"])))
        h_f, h_b = (1.0 + exp_f + moe) * cf + ge * gf, (1.0 + exp_b + moe) * cb + ge * gb
    else:
        cls += [((g - ge) * (cf + gf), _w(lt["gemm_f"]) - _w(lt.get("gemm_exp_f", 0.0))),
                (_w(lt.get("attn_k", 1.0)) * cf, _w(lt["attn_f"]) + _w(lt["attn_elem_f"])),
                (_w(lt.get("elem_k_f", 0.0)) * cf, _w(lt["elem_f"]))]
        h_f, h_b = (ops_f + moe) * cf + g * gf, (ops_b + moe) * cb + g * gb
    return h_f, h_b, sync, (serialised_excess(cls) if synced else 0.0)


def serialised_excess(classes):
    """S = Σ_c max(0, H_c − D_c) over op classes (H_c host, D_c device seconds of class c): what a
    serialised segment — no host run-ahead, every op max(d_i, h_i) — costs beyond its device time
    when a class's ops are alike (module docstring)."""
    return sum(np.maximum(hc - dc, 0.0) for hc, dc in classes)


def exposed(D_f, D_b, H_f, H_b, sync, S_f=0.0):
    """(x_f, x_b): host time the GPU waits for per layer, forward and backward (module docstring):
    synced layers max(H_f − D_f, S_f, 0) + sync forward (S_f the serialised segment's excess) and
    max(H_b − D_b, 0) backward; otherwise max(D_f + D_b, H_f + H_b) for the pair, charged to the
    backward."""
    if np.all(np.asarray(sync) == 0):
        return 0.0 * D_f, np.maximum(H_f + H_b - D_f - D_b, 0.0)
    return np.maximum(np.maximum(H_f - D_f, 0.0), S_f) + sync, np.maximum(H_b - D_b, 0.0)
