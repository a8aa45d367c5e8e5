"""Apply one `Plan` to the decoder with torch-native parallelism and train it for a few steps.

Runs inside a torchrun worker (`autoplace.profile.worker`); every rank calls `run_plan` with the same
arguments. Mapping of plan fields to torch constructs (bytes: what each rank holds at rest, after the
optimizer step, which is where `state_bytes` is read):

| plan                          | torch construct                                              | P, G, O per rank      |
|-------------------------------|--------------------------------------------------------------|-----------------------|
| zero=0 (DDP)                  | `DistributedDataParallel(gradient_as_bucket_view=True)`     | Ψ, Ψ, Ψ (full)        |
|                               | (TP: `tensor.parallel.ddp._pre_dp_module_transform` first)   |                       |
| zero=1 (R,R,S)                | `ShardedAdam` (autoplace.profile.zero): Adam on flat 1/n     | Ψ, Ψ, Ψ/n             |
|                               | shard views + reduce_scatter_tensor / all_gather_into_tensor |                       |
| zero=2 (R,S,S)                | same, gradients reduce-scattered per micro-batch and freed   | Ψ, Ψ/n, Ψ/n           |
| zero=3, reshard=1 (SG,S,S)    | FSDP2 `fully_shard(reshard_after_forward=True)` per block +  | Ψ/n, Ψ/n, Ψ/n         |
|                               | root                                                         |                       |
| zero=3, reshard=0 (SG-hold)   | FSDP2 `fully_shard(reshard_after_forward=False)`             | Ψ/n, Ψ/n, Ψ/n at rest |
| dp_replicate=r (HSDP)         | FSDP2 on the 2-D mesh (dp_replicate, dp_shard); ZeRO-1/2:    | shard over dp_shard   |
|                               | RS over dp_shard + AR over dp_replicate                      |                       |
| tp=t                          | `parallelize_module`: ColwiseParallel wq/wk/wv/w1/w3/output, | matrices ÷ t, norms   |
|                               | RowwiseParallel wo/w2 and the vocab-parallel embedding,      | replicated            |
|                               | `loss_parallel` cross-entropy                                |                       |
| sp=1                          | SequenceParallel norms; RowwiseParallel(output Shard(1));    |                       |
|                               | column inputs gathered by `_SPGatherLinear` (Megatron SP:    |                       |
|                               | saves the local shard, re-gathers in backward)               |                       |
| pp=p                          | `torch.distributed.pipelining.PipelineStage` per chunk;      | layers of the stage   |
|                               | ScheduleGPipe / Schedule1F1B / ScheduleInterleaved1F1B       |                       |
| recompute=full / block:k      | `torch.utils.checkpoint.checkpoint(use_reentrant=False)` per |                       |
|                               | layer (all, or the first k of the stage)                     |                       |
| recompute=selective           | checkpoint of the attention core only (Megatron's selective) |                       |
| offload=params (zero=3)       | FSDP2 `CPUOffloadPolicy` (CUDA only)                         | 0, 0, 0 on device     |
| omit=dp_grad_reduce           | no DDP/FSDP wrapper: gradients stay local (negative control) |                       |
| omit=sp_norm_reduce           | norms left as plain local modules under SP (negative control)|                       |
"""

from __future__ import annotations

import contextlib
import math
import os
import time
import traceback

import torch
import torch.distributed as dist

from autoplace.plan import Plan
from autoplace.profile import measure
from autoplace.profile.model import Decoder, cross_entropy, init_weights, make_batch


class Unsupported(Exception):
    """A plan this runner cannot execute here; raised identically on every rank before any
    collective, so the worker records it and goes on to the next plan."""


# ---- runtime ------------------------------------------------------------------------------------
class Runtime:
    def __init__(self, backend: str | None = None):
        self.rank = int(os.environ.get("RANK", 0))
        self.world = int(os.environ.get("WORLD_SIZE", 1))
        self.local_rank = int(os.environ.get("LOCAL_RANK", 0))
        if backend is None:
            backend = "nccl" if torch.cuda.is_available() else "gloo"
        self.backend = backend
        if backend == "nccl":
            if not torch.cuda.is_available():
                raise RuntimeError("--backend nccl needs CUDA devices")
            torch.cuda.set_device(self.local_rank)
            self.device = torch.device("cuda", self.local_rank)
        else:
            self.device = torch.device("cpu")
        self.device_type = self.device.type
        self._meshes = {}

    def init(self, timeout_s: float = 300.0):
        import datetime
        if not dist.is_initialized():
            kw = {"backend": self.backend, "timeout": datetime.timedelta(seconds=timeout_s)}
            if self.backend == "nccl":
                kw["device_id"] = self.device
            dist.init_process_group(**kw)

    def mesh(self, shape: tuple):
        from torch.distributed.device_mesh import init_device_mesh
        if shape not in self._meshes:
            names = ("pp", "dp_replicate", "dp_shard", "cp", "tp")
            m = init_device_mesh(self.device_type, shape, mesh_dim_names=names)
            m["dp_replicate", "dp_shard"]._flatten("dp")
            self._meshes[shape] = m
        return self._meshes[shape]

    def sync(self):
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)


# ---- job settings -------------------------------------------------------------------------------
DEFAULTS = dict(seq_len=64, global_batch=8, steps=2, warmup=1, seed=1234, lr=1e-3, adam_eps=1e-4,
                sp_impl="megatron", precision="fp32")


def _validate(plan: Plan, spec, job: dict, rt: Runtime) -> None:
    W = rt.world
    if plan.dp * plan.tp * plan.pp * plan.cp != W:
        raise Unsupported(f"dp·tp·pp·cp = {plan.dp}·{plan.tp}·{plan.pp}·{plan.cp} ≠ {W} ranks")
    if plan.cp > 1:
        raise Unsupported("cp > 1: torch's context_parallel (ring attention) dispatches CUDA SDPA "
                          "kernels only; not run by this runner")
    if plan.ep > 1 or spec.is_moe:
        raise Unsupported("MoE / expert parallelism is not implemented by the plan runner")
    if plan.dp % plan.dp_replicate:
        raise Unsupported(f"dp={plan.dp} not divisible by dp_replicate={plan.dp_replicate}")
    B = job["global_batch"]
    if B % (plan.mbs * plan.dp):
        raise Unsupported(f"global batch {B} not divisible by mbs·dp = {plan.mbs * plan.dp}")
    if plan.tp > 1:
        if spec.heads % plan.tp or spec.a_kv % plan.tp:
            raise Unsupported(f"tp={plan.tp} must divide heads={spec.heads} and kv_heads={spec.a_kv} "
                              "(KV-head replication for a_kv < tp is not implemented)")
        if spec.ffn_hidden % plan.tp or spec.vocab % plan.tp:
            raise Unsupported(f"tp={plan.tp} must divide ffn_hidden and vocab")
        if spec.tied_embeddings:
            raise Unsupported("tied embeddings with tp > 1 are not implemented")
        if plan.sp and (spec.attn_bias or spec.mlp_bias):
            raise Unsupported("Megatron-style SP linears without biases only")
    if plan.sp and job["seq_len"] % plan.tp:
        raise Unsupported(f"seq_len {job['seq_len']} not divisible by tp={plan.tp}")
    v = plan.v
    if plan.pp > 1:
        if plan.layer_split and v > 1:
            raise Unsupported("layer_split with interleaving")
        if not plan.layer_split and spec.layers % (plan.pp * v):
            raise Unsupported(f"layers={spec.layers} not divisible by pp·vpp = {plan.pp * v}")
        m = B // (plan.mbs * plan.dp)
        if m < plan.pp and plan.schedule != "gpipe":
            raise Unsupported(f"{plan.schedule} needs micro-batches m={m} ≥ pp={plan.pp}")
        if plan.schedule == "interleaved" and m % plan.pp:
            raise Unsupported(f"ScheduleInterleaved1F1B needs m={m} divisible by pp={plan.pp}")
    if plan.off >= 1:
        if plan.off < 3 or plan.zero != 3:
            raise Unsupported(f"offload={plan.offload}: torch's only native offload is FSDP2 "
                              "CPUOffloadPolicy (params + grads + optimizer, zero=3 offload=params)")
        if rt.device.type != "cuda":
            raise Unsupported("offload=params (FSDP2 CPUOffloadPolicy) moves state from the "
                              "accelerator to host memory; the CPU device has nothing to offload to")
        if plan.offload_fraction != 1.0:
            raise Unsupported("CPUOffloadPolicy offloads everything (offload_fraction must be 1)")
    if plan.zero in (1, 2) and plan.pp > 1 and plan.zero == 2:
        pass  # supported: one reduce-scatter after the schedule (K1)
    if plan.rc == 3 and plan.recompute_layers < 0:
        raise Unsupported("recompute_layers must be ≥ 0")
    bad = [o for o in plan.omit if o not in ("dp_grad_reduce", "sp_norm_reduce")]
    if bad:
        raise Unsupported(f"omit={bad}: only dp_grad_reduce and sp_norm_reduce can be removed")
    if "dp_grad_reduce" in plan.omit and (plan.zero != 0 or plan.pp > 1):
        raise Unsupported("omit=dp_grad_reduce is implemented for zero=0, pp=1")
    if "sp_norm_reduce" in plan.omit and not (plan.sp and plan.tp > 1):
        raise Unsupported("omit=sp_norm_reduce needs sp=1, tp > 1")
    if job.get("precision", "fp32") != "fp32":
        raise Unsupported("the runner trains in fp32 (precision=fp32, regime=fp32)")


# ---- model construction -------------------------------------------------------------------------
def _stage_layers(spec, plan: Plan):
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


def _apply_tp(chunk: Decoder, tp_mesh, plan: Plan, sp_impl: str) -> None:
    from torch.distributed.tensor import Replicate, Shard
    from torch.distributed.tensor.parallel import (ColwiseParallel, PrepareModuleInput,
                                                   RowwiseParallel, SequenceParallel,
                                                   parallelize_module)
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


def _apply_recompute(chunks, plan: Plan) -> None:
    if plan.recompute == "none":
        return
    if plan.recompute == "selective":
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


def _fsdp(chunks, dp_mesh, plan: Plan, rt: Runtime):
    from torch.distributed.fsdp import CPUOffloadPolicy, OffloadPolicy, fully_shard
    raf = bool(plan.reshard_after_forward)
    off = CPUOffloadPolicy() if plan.off >= 3 else OffloadPolicy()
    for c in chunks:
        for layer in c.layers.values():
            fully_shard(layer, mesh=dp_mesh, reshard_after_forward=raf, offload_policy=off)
        fully_shard(c, mesh=dp_mesh, reshard_after_forward=raf, offload_policy=off)


# ---- a built plan ---------------------------------------------------------------------------------
class Built:
    """Everything one rank needs to train the plan."""

    def __init__(self, plan, spec, job, rt):
        self.plan, self.spec, self.job, self.rt = plan, spec, job, rt
        pp, dpr, dps, tp = plan.pp, plan.dp_replicate, plan.dp // plan.dp_replicate, plan.tp
        self.mesh = rt.mesh((pp, dpr, dps, plan.cp, tp))
        m = self.mesh
        self.pp_rank = m.get_local_rank("pp")
        self.tp_rank = m.get_local_rank("tp")
        self.dp_rank = m.get_local_rank("dp_replicate") * dps + m.get_local_rank("dp_shard")
        self.axis_of_group, self.group_sizes, self.axis_of_ranks = {}, {}, {}
        for name, axis in (("pp", "pp"), ("tp", "tp"), ("dp_shard", "dp"), ("dp_replicate", "dp"),
                           ("dp", "dp"), ("cp", "cp")):
            # the root mesh's group and the sliced sub-mesh's group can be distinct objects
            cands = [m[name].get_group()] + ([m.get_group(name)] if name != "dp" else [])
            for g in cands:
                sz = dist.get_world_size(g)
                if sz > 1:
                    self.axis_of_group.setdefault(g.group_name, axis)
                    self.group_sizes[g.group_name] = sz
                    self.axis_of_ranks.setdefault(frozenset(dist.get_process_group_ranks(g)), axis)
        self.m = job["global_batch"] // (plan.mbs * plan.dp)
        self.local_batch = job["global_batch"] // plan.dp
        stage_layers = _stage_layers(spec, plan)
        S = len(stage_layers)
        self.stage_ids = [self.pp_rank + k * pp for k in range(plan.v)]
        self.chunks = []
        for s in self.stage_ids:
            c = Decoder(spec, job["seq_len"], stage_layers[s], first=(s == 0), last=(s == S - 1))
            init_weights(c, job["seed"])
            c.to(rt.device)
            self.chunks.append(c)
        self.has_first = any(s == 0 for s in self.stage_ids)
        self.has_last = any(s == S - 1 for s in self.stage_ids)
        self.n_stages = S
        if tp > 1:
            for c in self.chunks:
                _apply_tp(c, m["tp"], plan, job.get("sp_impl", "megatron"))
        _apply_recompute(self.chunks, plan)
        # data parallelism
        self.dp_kind = "none"
        self.wrapped = list(self.chunks)
        self.zero_opt = None
        dp_mesh = m["dp"]
        lr, eps = job["lr"], job["adam_eps"]
        if plan.dp > 1 and "dp_grad_reduce" not in plan.omit:
            if plan.zero == 3:
                fmesh = m["dp_replicate", "dp_shard"] if dpr > 1 else m["dp_shard"]
                _fsdp(self.chunks, fmesh, plan, rt)
                self.dp_kind = "fsdp2-hsdp" if dpr > 1 else "fsdp2"
            elif plan.zero in (1, 2):
                self.dp_kind = f"zero{plan.zero}-flat"
            else:
                from torch.nn.parallel import DistributedDataParallel as DDP
                wrapped = []
                for c in self.chunks:
                    if tp > 1:
                        from torch.distributed.tensor.parallel.ddp import _pre_dp_module_transform
                        _pre_dp_module_transform(c)
                    kw = {"device_ids": [rt.device.index]} if rt.device.type == "cuda" else {}
                    wrapped.append(DDP(c, process_group=dp_mesh.get_group(),
                                       gradient_as_bucket_view=True, broadcast_buffers=False, **kw))
                self.wrapped = wrapped
                self.dp_kind = "ddp"
        elif plan.dp > 1:
            self.dp_kind = "none (dp_grad_reduce omitted)"
        # The parameters as registered now. (`_pre_dp_module_transform` swaps DTensor parameters for
        # local ones and, after the first forward, leaves the rebuilt DTensors as plain attributes:
        # `module.parameters()` then lists only the norms. These lists keep every parameter.)
        self.named_params = [list(c.named_parameters()) for c in self.chunks]
        # optimizer
        params = [p for npl in self.named_params for _, p in npl]
        if self.dp_kind.startswith("zero"):
            from autoplace.profile.zero import ShardedAdam
            shard_g = m.get_group("dp_shard") if dps > 1 else None
            rep_g = m.get_group("dp_replicate") if dpr > 1 else None
            self.zero_opt = ShardedAdam(params, plan.zero, shard_g, rep_g, dp_world=plan.dp,
                                        lr=lr, eps=eps)
            self.optimizer = self.zero_opt
        else:
            self.optimizer = torch.optim.Adam(params, lr=lr, eps=eps, foreach=False)
        # tied embeddings split over pipeline stages: the embedding group all-reduce
        self.tied_group = None
        if spec.tied_embeddings and S > 1:   # every rank takes part in new_group
            self._build_tied_group()
        # pipeline
        self.schedule = None
        if pp > 1:
            self._build_pipeline()

    def _build_tied_group(self):
        m = self.mesh
        # ranks holding stage 0 and stage S−1 with the same (dp, tp) coordinates
        import numpy as np
        ranks = np.asarray(m.mesh.tolist())           # [pp, dpr, dps, cp, tp]
        mine = None
        for idx in np.ndindex(*ranks.shape[1:]):
            first = int(ranks[(0,) + idx])
            last = int(ranks[(ranks.shape[0] - 1,) + idx])
            g = dist.new_group([first, last])
            if dist.get_rank() in (first, last):
                mine = g
        self.tied_group = mine
        if mine is None:
            return
        self.axis_of_group.setdefault(mine.group_name, "pp")
        self.group_sizes[mine.group_name] = 2
        self.axis_of_ranks.setdefault(frozenset(dist.get_process_group_ranks(mine)), "pp")

    def _build_pipeline(self):
        from torch.distributed.pipelining import (PipelineStage, Schedule1F1B, ScheduleGPipe,
                                                  ScheduleInterleaved1F1B)
        pp_group = self.mesh.get_group("pp")
        stages = [PipelineStage(w, s, self.n_stages, self.rt.device, group=pp_group)
                  for w, s in zip(self.wrapped, self.stage_ids)]
        self.stages = stages
        loss_fn = self._loss
        if self.plan.schedule == "interleaved":
            self.schedule = ScheduleInterleaved1F1B(stages, n_microbatches=self.m, loss_fn=loss_fn)
        elif self.plan.schedule == "gpipe":
            self.schedule = ScheduleGPipe(stages[0], n_microbatches=self.m, loss_fn=loss_fn)
        else:
            self.schedule = Schedule1F1B(stages[0], n_microbatches=self.m, loss_fn=loss_fn)

    # -- one step -------------------------------------------------------------------------------
    def _loss(self, logits, labels):
        with measure.region("head"):
            return cross_entropy(logits, labels)

    def _loss_ctx(self):
        if self.plan.tp > 1:
            from torch.distributed.tensor.parallel import loss_parallel
            return loss_parallel()
        return contextlib.nullcontext()

    def local_data(self, step: int):
        ids, labels = make_batch(self.spec, self.job["seq_len"], self.job["global_batch"],
                                 self.job["seed"], step)
        lo = self.dp_rank * self.local_batch
        sl = slice(lo, lo + self.local_batch)
        return ids[sl].to(self.rt.device), labels[sl].to(self.rt.device)

    def train_step(self, step: int):
        """Forward + backward + gradient reduction + optimizer step. Returns this rank's loss
        contribution (mean over its tokens) or None where this rank computes no loss."""
        ids, labels = self.local_data(step)
        plan = self.plan
        loss_val = None
        with self._loss_ctx():
            if self.schedule is not None:
                losses = []
                kw = {}
                if self.has_last:
                    kw = {"target": labels, "losses": losses}
                if self.has_first:
                    self.schedule.step(ids, **kw)
                else:
                    self.schedule.step(**kw)
                if self.has_last:
                    loss_val = sum(_scalar(x) for x in losses) / len(losses)
                if self.zero_opt is not None:
                    self._finalize_dtensor_grads()
                    self.zero_opt.after_backward(True)
            else:
                model = self.wrapped[0]
                mbs = plan.mbs
                tot = 0.0
                for k in range(self.m):
                    sl = slice(k * mbs, (k + 1) * mbs)
                    last = k == self.m - 1
                    ctx = (model.no_sync() if (self.dp_kind == "ddp" and not last)
                           else contextlib.nullcontext())
                    with ctx:
                        out = model(ids[sl])
                        loss = self._loss(out, labels[sl])
                        (loss / self.m).backward()
                    tot += _scalar(loss)
                    if self.zero_opt is not None and (last or plan.zero == 2):
                        self._finalize_dtensor_grads()
                        self.zero_opt.after_backward(last)
                loss_val = tot / self.m
        if self.tied_group is not None:
            self._tied_reduce()
        self._finalize_dtensor_grads()
        self.optimizer.step()
        if self.tp_rank != 0:
            loss_val = None
        return loss_val

    def _finalize_dtensor_grads(self):
        """Bring DTensor gradients to their parameter's placement once per step, before the
        optimizer: SequenceParallel norm weights accumulate Partial gradients (→ one all-reduce per
        norm per step, the sp_norm_reduce obligation; left Partial, every optimizer op would
        all-reduce again), and DTensor's embedding backward yields a Replicate (full V×h) gradient
        for the Shard(0) vocab-parallel weight (→ keep the local rows: no communication)."""
        if self.plan.tp == 1:
            return
        for p in self.all_params():
            if True:
                g = p.grad
                if g is not None and hasattr(g, "placements") and hasattr(p, "placements") \
                        and tuple(g.placements) != tuple(p.placements):
                    p.grad = g.redistribute(placements=p.placements)

    def _tied_reduce(self):
        c = self.chunks
        w = None
        for ch in c:
            if ch.first and ch.tok_embeddings is not None:
                w = ch.tok_embeddings.weight
            elif ch.last and ch.output is not None:
                w = ch.output.weight
        if w is None or w.grad is None:
            return
        g = measure._local(w.grad)
        dist.all_reduce(g, group=self.tied_group)

    def zero_grad(self):
        self.optimizer.zero_grad(set_to_none=True)
        for p in self.all_params():
            p.grad = None

    def all_params(self):
        return [p for npl in self.named_params for _, p in npl]

    def state_bytes(self):
        extra = self.zero_opt.held_grads() if self.zero_opt is not None else []
        dev = "cuda" if (self.rt.device.type == "cuda" and self.plan.off >= 1) else None
        opt = [self.optimizer]
        return measure.state_bytes(self.chunks, opt, extra, device_only=dev,
                                   params=self.all_params())

    def full_params(self):
        """(FQN → full tensor) of the parameters this rank holds, DTensors gathered."""
        out = {}
        for npl in self.named_params:
            for name, p in npl:
                t = p.detach()
                if hasattr(p, "_st_info"):  # a TP shard made local for DDP
                    from torch.distributed.tensor.parallel._data_parallel_utils import _unflatten_tensor
                    t = _unflatten_tensor(t, p._st_info)
                if hasattr(t, "full_tensor"):
                    t = t.full_tensor()
                key = "tok_embeddings.weight" if (name == "output.weight" and self.spec.tied_embeddings) else name
                out[key if key not in out else name] = t.cpu()
        return out


def _scalar(x) -> float:
    if hasattr(x, "full_tensor"):
        x = x.full_tensor()
    return float(x.detach())


# ---- run one plan -------------------------------------------------------------------------------
def run_plan(plan: Plan, spec, job: dict, rt: Runtime, reference=None) -> dict:
    """Train `plan` for warmup + steps (+1 instrumented) steps; return this rank's measurements."""
    _validate(plan, spec, job, rt)
    torch.manual_seed(job["seed"])
    b = Built(plan, spec, job, rt)
    warm, steps = int(job["warmup"]), int(job["steps"])
    total = warm + steps + 1
    losses_local = []
    times = []
    act = None
    comm = None
    sb = None
    if rt.device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(rt.device)
    for step in range(total):
        instrumented = step == total - 1
        dist.barrier()
        rt.sync()
        t0 = time.perf_counter()
        if instrumented:
            counter = measure.SavedTensorCounter()
            counter.exclude_module_state(b.chunks, b.all_params())
            cc = measure.CommCounter(b.axis_of_group, b.group_sizes, b.axis_of_ranks)
            with measure.use_counter(counter), counter.hooks(), cc:
                lv = b.train_step(step)
            rt.sync()
            act = counter.report()
            comm = cc.report()
        else:
            lv = b.train_step(step)
            rt.sync()
        dt = time.perf_counter() - t0
        if warm <= step < warm + steps:
            times.append(dt)
        losses_local.append(lv)
        if instrumented:
            sb = b.state_bytes()
        b.zero_grad()
    peak_mem = None
    if rt.device.type == "cuda":
        peak_mem = int(torch.cuda.max_memory_allocated(rt.device))
    # global loss per step: mean of the contributions of loss-owning ranks
    glosses = []
    for lv in losses_local:
        t = torch.tensor([lv if lv is not None else 0.0, 1.0 if lv is not None else 0.0],
                         dtype=torch.float64, device=rt.device)
        dist.all_reduce(t)
        glosses.append(float(t[0] / t[1]) if float(t[1]) > 0 else float("nan"))
    # equivalence against the single-process reference
    eq = None
    if reference is not None:
        ref_losses, ref_params = reference
        full = b.full_params()
        pdiff = 0.0
        n_cmp = 0
        for k, v in full.items():
            if k in ref_params:
                pdiff = max(pdiff, float((v - ref_params[k]).abs().max()))
                n_cmp += 1
        t = torch.tensor([pdiff], dtype=torch.float64, device=rt.device)
        dist.all_reduce(t, op=dist.ReduceOp.MAX)
        ldiff = max(abs(a - r) for a, r in zip(glosses, ref_losses[:len(glosses)]))
        eq = {"max_abs_diff_params": float(t[0]), "max_abs_diff_loss": float(ldiff),
              "params_compared": n_cmp}
    body = act["peak_by_region"].get("body", 0) if act else None
    res = {
        "rank": rt.rank, "pp_rank": b.pp_rank, "tp_rank": b.tp_rank, "dp_rank": b.dp_rank,
        "stage": b.pp_rank,
        "step_s": float(sorted(times)[len(times) // 2]) if times else None,
        "step_times_s": times,
        "state_bytes": sb,
        "activation_bytes": body,
        "activation_bytes_total": act["peak_total"] if act else None,
        "activation_bytes_by_region": act["peak_by_region"] if act else None,
        "peak_memory_bytes": peak_mem,
        "collective_bytes": _axes(comm["bytes"]) if comm else None,
        "collectives": comm["ops"] if comm else None,
        "losses": glosses,
        "equivalence": eq,
        "dp_kind": b.dp_kind,
    }
    del b
    return res


def _axes(d: dict) -> dict:
    out = {k: 0.0 for k in ("dp", "tp", "pp", "cp", "ep")}
    for k, v in d.items():
        out[k] = out.get(k, 0.0) + v
    return out


def describe_exception(e: BaseException) -> str:
    tb = traceback.format_exception(type(e), e, e.__traceback__)
    return "".join(tb[-6:])[-3000:]


_ = math
