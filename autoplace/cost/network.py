"""Collective time on a hierarchical topology (alpha-beta, bus-bandwidth factors; §3.1, §6).

Which ranks an axis groups depends on the rank order: Megatron `tp-cp-ep-dp-pp` and torchtitan
`pp-dp_replicate-fsdp-cp-tp` both make tp innermost (contiguous ranks). An axis of size n and stride
σ keeps k = clamp(D/σ, 1, n) members inside one scale-up domain of D GPUs; the other n/k groups are
reached over the NIC. Hierarchical algorithms (intra reduce-scatter → inter all-reduce of the 1/k
shard → intra all-gather) give

  AR(S) = 2(k−1)/k · S/B_intra + 2(g−1)/g · (S/k)/B_inter + α terms,      g = n/k
  RS(S) = AG(S) = half of that;  A2A(S) = (k−1)/n · S/B_intra + (n−k)/n · S/B_inter
  P2P(S) = S/B + α (B intra when both ends share a domain)

with B_intra the profile's achievable bus bandwidth inside the domain and B_inter the achievable per-GPU
NIC bandwidth (every GPU drives its own NIC on DGX-class nodes). Latency: α_intra per ring step
inside the domain, α_inter·2⌈log₂ g⌉ (tree) across domains.
"""

from __future__ import annotations

import numpy as np

from autoplace.cost.memory import _w

# A kernel launched from a CUDA graph keeps its GPU-side tail but not the host launch: ~40 % of the
# per-kernel overhead remains (CUDA graphs remove the launch latency, ~2–3 µs of ~5 µs per kernel)
CUDA_GRAPH_KERNEL_SHARE = 0.4


def eager_kernel_overhead(hw, kern) -> float:
    """Per-kernel overhead of a kernel launched outside the captured graphs, on the `hardware_view`
    of a runtime whose CUDA graphs scaled it to CUDA_GRAPH_KERNEL_SHARE."""
    return hw.kernel_overhead_s / CUDA_GRAPH_KERNEL_SHARE if kern.cuda_graphs else hw.kernel_overhead_s


def hardware_view(ctx, hw):
    """The hardware as the job's runtime uses it: its collectives reach `comm.gather_rails` NICs
    across nodes when the runtime says fewer than the hardware has (the 2021 stacks); CUDA graphs
    remove most of the per-kernel launch overhead and the per-step host overhead."""
    if ctx is None or getattr(hw, "_viewed", False):
        return hw
    rt = ctx.train.rt
    kw = {}
    rails = rt.comm.gather_rails
    if rails and rails < hw.gather_rails:
        kw["gather_rails"] = float(rails)
    if rt.kernels.cuda_graphs:
        kw["kernel_overhead_s"] = hw.kernel_overhead_s * CUDA_GRAPH_KERNEL_SHARE
    return hw.with_(**kw) if kw else hw


def axis_strides(p):
    """Stride of each mesh axis in global rank order (numpy-broadcastable)."""
    tp, cp, dp, r = _w(p.tp), _w(p.cp), _w(p.dp), _w(p.dp_replicate)
    n = dp / r
    order = _w(p.order)
    s_tp = 1.0 + 0 * tp
    s_cp = tp
    s_dp_shard = tp * cp
    s_dp_rep = tp * cp * n
    s_pp = tp * cp * dp
    # expert axis: Megatron carves ep right after etp inside the dp×cp×tp block; torchtitan from fsdp
    s_ep = np.where(order == 0, _w(p.t_exp), tp)
    return {"tp": s_tp, "cp": s_cp, "dp_shard": s_dp_shard, "dp_replicate": s_dp_rep, "dp": s_dp_shard,
            "pp": s_pp, "ep": s_ep}


def members_per_domain(n, stride, domain):
    n, stride = _w(n), _w(stride)
    return np.minimum(np.maximum(np.floor(_w(domain) / stride), 1.0), n)     # clip to [1, n]


def _links(hw, n, stride):
    k = members_per_domain(n, stride, hw.scaleup_domain)
    g = np.maximum(_w(n) / k, 1.0)
    return k, g


def allreduce_time(hw, S, n, stride, n_coll=1.0):
    """All-reduce: ring inside the domain, tree (2⌈log₂ g⌉ steps) across domains."""
    k, g = _links(hw, n, stride)
    bw = 2.0 * (k - 1.0) / k * S / hw.intra_bw + 2.0 * (g - 1.0) / g * (S / k) / hw.inter_bw
    lat = 2.0 * (k - 1.0) * hw.intra_latency + np.where(g > 1, 2.0 * np.ceil(np.log2(g)) * hw.inter_latency, 0.0)
    return np.where(_w(n) > 1, bw + _w(n_coll) * lat, 0.0)


def gather_time(hw, S, n, stride, n_coll=1.0, op: str = "ag"):
    """All-gather (op "ag") or reduce-scatter ("rs") of a tensor of full size S, issued as n_coll
    collectives.

    NCCL runs AG/RS as rings only: n − 1 steps, each as slow as its slowest hop (α_inter once the
    ring leaves the domain), so latency grows linearly with the group (unlike the all-reduce tree).
    A reduce-scatter's bandwidth term is scaled by the profile's `rs_cost_factor` (1 on NCCL; gloo
    implements it as an all-reduce plus a copy)."""
    k, g = _links(hw, n, stride)
    rails = np.minimum(k, hw.gather_rails)
    bw = (k - 1.0) / k * S / hw.intra_bw + (g - 1.0) / g * (S / rails) / hw.inter_bw
    if op == "rs":
        bw = bw * hw.rs_cost_factor
    lat = (_w(n) - 1.0) * np.where(g > 1, hw.inter_latency, hw.intra_latency)
    return np.where(_w(n) > 1, bw + _w(n_coll) * lat, 0.0)


def alltoall_time(hw, S, n, stride, dedup_k=0.0, efficiency=1.0, span=0, experts=0):
    """All-to-all of S bytes per rank: k routed copies of each token, spread evenly over the n ranks.

    `dedup_k` > 0 (DeepEP / hybrid-EP, DeepEP `get_dispatch_layout`: `is_token_in_rank`): a token is
    sent once per destination *rank* holding any of its experts (random routing: n(1 − (1 − 1/n)^k)
    of them; `span` > 0, a gate that picks k consecutive of the `experts`: 1 + (k − 1)·n/E ranks),
    and once per remote *domain* across the NIC, then forwarded over NVLink inside that domain
    (g(1 − (1 − 1/g)^k) distinct domains, or `span`). `dedup_k` = 0: the NCCL all-to-all of the
    permuted tokens, one copy per routed expert."""
    k, g = _links(hw, n, stride)
    n = _w(n)
    dk = _w(dedup_k)
    kk = np.maximum(dk, 1.0)
    distinct = np.minimum(_w(span), g) if span else g * (1.0 - (1.0 - 1.0 / g) ** kk)
    dedup = np.where((dk > 0) & (g > 1), distinct / kk, 1.0)
    if span and experts:
        ranks_hit = np.minimum(1.0 + (kk - 1.0) * n / float(experts), np.minimum(kk, n))
    else:
        ranks_hit = n * (1.0 - (1.0 - 1.0 / n) ** kk)
    rank_dedup = np.where(dk > 0, ranks_hit / kk, 1.0)
    bw = ((k - 1.0) / n * S * rank_dedup / hw.intra_bw + (n - k) / n * S * dedup / hw.inter_bw) / efficiency
    lat = (k - 1.0) * hw.intra_latency + (n - k) * hw.inter_latency / np.maximum(k, 1.0)
    return np.where(n > 1, bw + lat, 0.0)


def p2p_time(hw, S, stride):
    """One message to the next pipeline stage (stride σ ranks away)."""
    intra = _w(stride) < hw.scaleup_domain
    return np.where(intra, S / hw.intra_bw + hw.intra_latency, S / hw.inter_bw + hw.inter_latency)
