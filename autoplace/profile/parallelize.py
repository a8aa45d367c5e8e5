"""Model surgery for a plan: pipeline stage layers, tensor/sequence parallelism, activation
recomputation and FSDP2 sharding on the decoder chunks of one rank (cf. torchtitan's
`models/llama3/parallelize.py`). `autoplace.profile.build` calls these in that order.
"""

from __future__ import annotations

from autoplace.plan import Plan
from autoplace.profile.capabilities import fsdp2_cpu_offload
from autoplace.profile.model import Decoder


def stage_layers(spec, plan: Plan) -> list[list[int]]:
    """Global stage index → list of layer ids (S = pp·v stages)."""
    S = plan.pp * plan.v
    if plan.layer_split and plan.v == 1:
        out, lo = [], 0
        for n in plan.layer_split:
            out.append(list(range(lo, lo + n)))
            lo += n
        return out
    per = spec.layers // S
    return [list(range(s * per, (s + 1) * per)) for s in range(S)]


def apply_tp(chunk: Decoder, tp_mesh, plan: Plan, sp_impl: str) -> None:
    """Tensor (and sequence) parallelism on one pipeline chunk with DTensor `parallelize_module`:
    ColwiseParallel wq/wk/wv/w1/w3/output, RowwiseParallel wo/w2 and the vocab-parallel embedding;
    with SP the norms are SequenceParallel and the row outputs Shard(1) (sp_impl "megatron":
    column inputs gathered by `_SPGatherLinear`, which saves the local shard and re-gathers in
    backward; "dtensor": torch's own layouts)."""
    from torch.distributed.tensor import Replicate, Shard
    from torch.distributed.tensor.parallel import (
        ColwiseParallel,
        PrepareModuleInput,
        RowwiseParallel,
        SequenceParallel,
        parallelize_module,
    )
    sp = bool(plan.sp)
    omit_norm = "sp_norm_reduce" in plan.omit
    megatron = sp and sp_impl == "megatron"
    tp_group = tp_mesh.get_group()
    top = {}
    if chunk.tok_embeddings is not None:
        top["tok_embeddings"] = RowwiseParallel(input_layouts=Replicate(),
                                                output_layouts=Shard(1) if sp else Replicate())
    if chunk.last:
        if sp and not omit_norm:
            top["norm"] = SequenceParallel(use_local_output=megatron)
        top["output"] = ColwiseParallel(input_layouts=Shard(1) if sp else Replicate(),
                                        output_layouts=Shard(-1), use_local_output=False)
    if top:
        parallelize_module(chunk, tp_mesh, top)
    if chunk.last and megatron:
        chunk.output_sp = (tp_group, tp_mesh)
    for layer in chunk.layers.values():
        lp = {
            "attention.wq": ColwiseParallel(), "attention.wk": ColwiseParallel(),
            "attention.wv": ColwiseParallel(),
            "attention.wo": RowwiseParallel(output_layouts=Shard(1) if sp else Replicate()),
            "feed_forward.w1": ColwiseParallel(),
            "feed_forward.w2": RowwiseParallel(output_layouts=Shard(1) if sp else Replicate()),
        }
        if layer.feed_forward.gated:
            lp["feed_forward.w3"] = ColwiseParallel()
        if sp and not omit_norm:
            lp["attention_norm"] = SequenceParallel(use_local_output=megatron)
            lp["ffn_norm"] = SequenceParallel(use_local_output=megatron)
        if not megatron:
            # one DTensor input shared by wq/wk/wv (w1/w3): its gradient is reduced once, like
            # Megatron's fused QKV / gate-up projections (separate from_local per projection would
            # all-reduce each input gradient separately)
            src = Shard(1) if sp else Replicate()
            lp["attention"] = PrepareModuleInput(input_layouts=(src, None, None),
                                                 desired_input_layouts=(Replicate(), None, None),
                                                 use_local_output=False)
            lp["feed_forward"] = PrepareModuleInput(input_layouts=(src,),
                                                    desired_input_layouts=(Replicate(),),
                                                    use_local_output=False)
        parallelize_module(layer, tp_mesh, lp)
        if megatron:
            layer.attention.sp_group = tp_group
            layer.feed_forward.sp_group = tp_group


def apply_recompute(chunks, plan: Plan, selective_policy: str = "attention") -> None:
    """Activation recomputation: selective = the attention core of every layer (policy
    "attention", Megatron's selective recompute) or op-level SAC on every layer (policy "op-sac",
    torchtitan's `selective_ac_option = "op"`: `model.op_sac_context`); full = every layer; block =
    the first k layers of this stage (`recompute_layers`, or `stage_recompute`)."""
    if plan.recompute == "none":
        return
    if plan.recompute == "selective":
        if selective_policy == "op-sac":
            from autoplace.profile.model import op_sac_context
            for c in chunks:
                c.checkpoint_layers = {int(i) for i in c.layers.keys()}
                c.checkpoint_context = op_sac_context
            return
        for c in chunks:
            for layer in c.layers.values():
                layer.attention.recompute_core = True
        return
    ids = sorted(int(i) for c in chunks for i in c.layers.keys())
    if plan.recompute == "full":
        chosen = set(ids)
    else:  # block: the first k layers of this stage
        srec = plan.stage_recompute
        k = plan.recompute_layers
        chosen = set(ids[:k])
        if srec:
            chosen = set(ids[:int(srec[0])])
    for c in chunks:
        c.checkpoint_layers = {i for i in map(int, c.layers.keys()) if i in chosen}


def apply_fsdp(chunks, dp_mesh, plan: Plan) -> None:
    """FSDP2 `fully_shard` units as torchtitan makes them (models/llama3/infra/parallelize.py
    `apply_fsdp`): the token embedding, every layer, the output projection, then each chunk as the
    root (ZeRO-3; reshard_after_forward: FULL_SHARD vs SHARD_GRAD_OP; HSDP when `dp_mesh` is 2-D).
    Every unit follows the plan's reshard_after_forward (torchtitan's "default" policy keeps the
    last unit gathered; the plan says it here). Two differences from torchtitan: the final norm
    (h parameters) stays in the root instead of sharing the output's unit — torch's
    FSDPMemTracker replaces a multi-module unit's group hooks by per-module ones, which reshards
    between the norm and the output and gathers the unit twice —, and a tied embedding that the
    chunk's head reuses stays in the root. Offload = `CPUOffloadPolicy`, which moves params,
    grads and optimizer state together (`capabilities.fsdp2_cpu_offload`).

    Separate embedding and head units matter for memory: FSDP2 never reshards the root between
    its forward and backward and reduce-scatters the root's gradients only after the whole
    backward, so an embedding + output held by the root would stay gathered, with their unsharded
    gradients, through every layer's backward; as their own units they are gathered only around
    their own forward and backward, as `cost.memory.transient_bytes` assumes."""
    from torch.distributed.fsdp import CPUOffloadPolicy, OffloadPolicy, fully_shard
    raf = bool(plan.reshard_after_forward)
    off = CPUOffloadPolicy() if fsdp2_cpu_offload(plan) else OffloadPolicy()
    kw = dict(mesh=dp_mesh, reshard_after_forward=raf, offload_policy=off)
    for c in chunks:
        head_uses_embedding = c.last and c.output is None
        if c.tok_embeddings is not None and not head_uses_embedding:
            fully_shard(c.tok_embeddings, **kw)
        for layer in c.layers.values():
            fully_shard(layer, **kw)
        if c.last and c.output is not None:
            fully_shard(c.output, **kw)
        fully_shard(c, **kw)
