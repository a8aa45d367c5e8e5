"""Mixture-of-experts layer of the plan runner: top-k router, token dispatch by all-to-all over the
expert-parallel (EP) group, per-expert or grouped GEMMs, dropless and capacity-factor modes.

Parameter FQNs (every rank's shard compares with a single-process copy, `init_weights` by FQN):

    feed_forward.router           nn.Linear(h, E, bias=False)   replicated (dense parameter)
    feed_forward.experts.{e}      FeedForward(h, f_expert)      global expert id e; an EP rank keeps
                                                                experts [r·E/ep, (r+1)·E/ep)

Routing (Mixtral / torchtitan style): p = softmax(x Wᵣᵀ), the top-k experts of each token, their
probabilities renormalised to sum 1 (k > 1). The token copies are sorted by expert (stable, so a
token's order is the same on every rank and in the single process).

Dispatch over EP (Megatron's `MoEAlltoAllTokenDispatcher`, torchtitan's `expert_parallel`):

* **dropless** (capacity_factor = 0): each rank sends every routed copy to the rank owning its
  expert. The split sizes differ per step, so the ranks first exchange their per-expert token counts
  (`all_to_all_single` of E int64 on a separate group, the `ep_meta` axis: metadata the cost model
  does not count), then the tokens (`all_to_all_single` with input/output split sizes: forward
  dispatch + combine, backward the same two with the splits swapped).
* **capacity factor** cf > 0 (GShard / Switch; Megatron `--moe-expert-capacity-factor` with
  `--moe-pad-expert-input-to-capacity`): every expert takes at most C = ⌈cf·T·k/E⌉ copies from each
  source rank (T = the rank's tokens of the micro-batch, first come first served), the rest are
  dropped (they contribute 0), and the buffer is padded to E·C rows, so the all-to-all has fixed,
  equal splits and needs no count exchange.

Bytes (the `CommCounter` convention, (n−1)/n·S per all-to-all, S = the input buffer): dispatch-forward
and combine-backward send the rank's T·k copies; combine-forward and dispatch-backward send what the
rank received, which depends on the routing. So per rank the EP bytes vary with routing, and the mean
over an EP group is exactly 4·(e−1)/e·T·k·h·b per layer and micro-batch (what every rank receives, the
group sends): `cost.comm.ep_bytes_per_layer`. With cf = 1 and T·k divisible by E every buffer is T·k
rows and every rank sends exactly that. Full recompute repeats dispatch and combine (6).

Expert GEMMs: `torch._grouped_mm` over the local experts' stacked weights where torch has it
("grouped", the default), else one `F.linear` per expert ("per-expert").
"""

from __future__ import annotations

import math

import torch
import torch.nn as nn
import torch.nn.functional as F

MOE_GEMMS = ("grouped", "per-expert")
"""`settings.moe_gemm` values."""


def grouped_mm_available() -> bool:
    return hasattr(torch, "_grouped_mm")


class _AllToAll(torch.autograd.Function):
    """Differentiable `all_to_all_single` with split sizes (backward: the same exchange reversed)."""

    @staticmethod
    def forward(ctx, x, out_splits, in_splits, group):
        import torch.distributed as dist
        ctx.group, ctx.out_splits, ctx.in_splits = group, out_splits, in_splits
        out = x.new_empty((sum(out_splits),) + tuple(x.shape[1:]))
        dist.all_to_all_single(out, x.contiguous(), out_splits, in_splits, group=group)
        return out

    @staticmethod
    def backward(ctx, go):
        import torch.distributed as dist
        gx = go.new_empty((sum(ctx.in_splits),) + tuple(go.shape[1:]))
        dist.all_to_all_single(gx, go.contiguous(), ctx.in_splits, ctx.out_splits, group=ctx.group)
        return gx, None, None, None


def all_to_all(x, out_splits, in_splits, group):
    return _AllToAll.apply(x, list(out_splits), list(in_splits), group)


class _ContiguousGrad(torch.autograd.Function):
    """Identity whose backward makes the gradient contiguous (`_grouped_mm`'s CPU backward rejects
    expanded, stride-0 gradients)."""

    @staticmethod
    def forward(ctx, x):
        return x.view_as(x)

    @staticmethod
    def backward(ctx, go):
        return go.contiguous()


def _grouped_linear(x, weights, counts):
    """y[rows of group g] = x[rows of g] @ weights[g]ᵀ, one `_grouped_mm` call."""
    w = torch.stack(weights).transpose(-2, -1)
    offs = torch.cumsum(counts, 0).to(torch.int32)
    return _ContiguousGrad.apply(torch._grouped_mm(x, w, offs=offs))


class MoE(nn.Module):
    """Router + routed experts of one layer (no shared expert)."""

    def __init__(self, spec, ffn_factory):
        super().__init__()
        self.E, self.k = spec.num_experts, spec.top_k
        self.router = nn.Linear(spec.hidden, self.E, bias=False)
        self.experts = nn.ModuleDict({str(e): ffn_factory() for e in range(self.E)})
        self.gated = spec.gated_mlp
        # set by `shard_experts` (EP) and the build (settings)
        self.ep_group = None
        self.meta_group = None
        self.ep_size, self.ep_rank = 1, 0
        self.capacity_factor = 0.0
        self.gemm = "grouped" if grouped_mm_available() else "per-expert"
        self.dropped = 0             # copies dropped by the capacity in the last forward
        self.capacity_block = None   # reference only: tokens per capacity block (None: the whole input)

    @property
    def local_ids(self) -> list[int]:
        el = self.E // self.ep_size
        return list(range(self.ep_rank * el, (self.ep_rank + 1) * el))

    def shard_experts(self, ep_group, meta_group, ep_size: int, ep_rank: int) -> None:
        """Keep only this EP rank's experts (global ids kept in the FQNs)."""
        self.ep_group, self.meta_group = ep_group, meta_group
        self.ep_size, self.ep_rank = ep_size, ep_rank
        keep = set(self.local_ids)
        for e in list(self.experts.keys()):
            if int(e) not in keep:
                del self.experts[e]

    # ---- routing ----------------------------------------------------------------------------------
    def forward(self, x):
        shape = x.shape
        xt = x.reshape(-1, shape[-1])
        B = self.capacity_block
        if self.capacity_factor > 0 and self.ep_size == 1 and B and xt.shape[0] > B:
            # the single-process reference of a capacity run: capacity per block of B tokens (one
            # rank's micro-batch), so it drops exactly the copies the distributed run drops
            return torch.cat([self._route(xt[i:i + B]) for i in range(0, xt.shape[0], B)]).reshape(shape)
        return self._route(xt).reshape(shape)

    def _route(self, xt):
        T = xt.shape[0]
        probs = torch.softmax(self.router(xt), dim=-1)
        w, idx = probs.topk(self.k, dim=-1)
        if self.k > 1:
            w = w / w.sum(-1, keepdim=True)
        flat = idx.reshape(-1)
        order = torch.sort(flat, stable=True).indices           # copies grouped by expert
        token_of = order // self.k
        counts = torch.bincount(flat, minlength=self.E)          # copies per expert from this rank
        xs = xt[token_of]
        if self.capacity_factor > 0:
            y = self._capacity(xs, flat[order], counts, T)
        else:
            y = self._dropless(xs, counts)
        y = y * w.reshape(-1)[order].unsqueeze(-1)
        return torch.zeros_like(xt).index_add(0, token_of, y)

    def _dropless(self, xs, counts):
        el = self.E // self.ep_size
        if self.ep_size == 1:
            return self._experts(xs, counts)
        import torch.distributed as dist
        recv_counts = torch.empty_like(counts)
        dist.all_to_all_single(recv_counts, counts, group=self.meta_group)   # [src, local expert]
        send = counts.view(self.ep_size, el).sum(1).tolist()
        rc = recv_counts.view(self.ep_size, el)
        recv = rc.sum(1).tolist()
        xr = all_to_all(xs, recv, send, self.ep_group)          # rows: by source rank, then expert
        # regroup by local expert (stable: source rank order inside each expert)
        seg = torch.arange(el).repeat(self.ep_size).repeat_interleave(rc.reshape(-1))
        perm = torch.sort(seg, stable=True).indices
        ye = self._experts(xr[perm], rc.sum(0))
        yr = torch.empty_like(ye).index_copy(0, perm, ye)
        return all_to_all(yr, send, recv, self.ep_group)

    def _capacity(self, xs, experts_sorted, counts, T):
        """Fixed-size buffers [E, C]: copies beyond an expert's capacity are dropped, the rest padded."""
        E, el = self.E, self.E // self.ep_size
        C = math.ceil(self.capacity_factor * T * self.k / E)
        starts = torch.cumsum(counts, 0) - counts
        pos = torch.arange(xs.shape[0]) - starts[experts_sorted]
        keep = pos < C
        self.dropped = int((~keep).sum())
        slot = experts_sorted[keep] * C + pos[keep]
        buf = xs.new_zeros((E * C, xs.shape[1])).index_copy(0, slot, xs[keep])
        if self.ep_size > 1:
            rows = [el * C] * self.ep_size
            buf = all_to_all(buf, rows, rows, self.ep_group)    # [src, local expert, C]
            buf = buf.view(self.ep_size, el, C, -1).transpose(0, 1).reshape(el * self.ep_size * C, -1)
        ye = self._experts(buf, torch.full((el,), C * self.ep_size, dtype=torch.long))
        if self.ep_size > 1:
            ye = ye.view(el, self.ep_size, C, -1).transpose(0, 1).reshape(E * C, -1)
            ye = all_to_all(ye, [el * C] * self.ep_size, [el * C] * self.ep_size, self.ep_group)
        y = xs.new_zeros(xs.shape)
        return y.index_copy(0, keep.nonzero().squeeze(1), ye[slot])

    # ---- expert GEMMs -------------------------------------------------------------------------------
    def _experts(self, x, counts):
        """The local experts on rows grouped by local expert (`counts` rows each)."""
        mods = [self.experts[str(e)] for e in self.local_ids]
        if self.gemm == "grouped" and grouped_mm_available() and x.dtype == torch.float32 \
                and not torch.is_autocast_enabled(x.device.type) \
                and not any(m.w1.bias is not None for m in mods):
            g = _grouped_linear(x, [m.w1.weight for m in mods], counts)
            if self.gated:
                z = _swiglu(g, _grouped_linear(x, [m.w3.weight for m in mods], counts))
            else:
                z = F.gelu(g)
            return _grouped_linear(z, [m.w2.weight for m in mods], counts)
        outs = []
        for m, xe in zip(mods, torch.split(x, counts.tolist())):
            outs.append(m(xe))
        return torch.cat(outs) if outs else x.new_zeros((0, x.shape[1]))


def _swiglu(gate, up):
    from autoplace.profile.swiglu import swiglu
    return swiglu(gate, up)


def is_moe_layer(spec, i: int) -> bool:
    """The layers that are MoE (`ModelSpec.n_moe_layers`'s rule)."""
    return spec.is_moe and i not in set(spec.dense_layer_ids) and (i + 1) % spec.moe_layer_freq == 0


__all__ = ["MoE", "MOE_GEMMS", "all_to_all", "grouped_mm_available", "is_moe_layer"]
