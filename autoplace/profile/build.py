"""One rank's built plan (`Built`): mesh, model chunks, data-parallel wrapping, optimizer, pipeline.

The construction follows the plan → torch table of `autoplace.profile.runner`; the model surgery
itself is `autoplace.profile.parallelize`. `Built.train_step` runs forward, backward, the gradient
reductions and the optimizer step of one global batch.
"""

from __future__ import annotations

import contextlib

import numpy as np
import torch
import torch.distributed as dist

from autoplace.profile import measure
from autoplace.profile.model import Decoder, cross_entropy, init_weights, make_batch
from autoplace.profile.parallelize import apply_fsdp, apply_recompute, apply_tp, stage_layers
from autoplace.profile.settings import selective_policy


class Built:
    """Everything one rank needs to train the plan: the mesh and its process groups (named by
    axis for the collective counter), the model chunks of its pipeline stages after TP,
    recompute and data-parallel wrapping, the optimizer and the pipeline schedule."""

    def __init__(self, plan, spec, job, rt):
        self.plan, self.spec, self.job, self.rt = plan, spec, job, rt
        self.before_microbatch = None   # called with k before micro-batch k's forward (pp = 1)
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
        layers_of_stage = stage_layers(spec, plan)
        S = len(layers_of_stage)
        self.stage_ids = [self.pp_rank + k * pp for k in range(plan.v)]
        self.chunks = []
        for s in self.stage_ids:
            c = Decoder(spec, job["seq_len"], layers_of_stage[s], first=(s == 0), last=(s == S - 1))
            init_weights(c, job["seed"])
            c.to(rt.device)
            self.chunks.append(c)
        self.has_first = any(s == 0 for s in self.stage_ids)
        self.has_last = any(s == S - 1 for s in self.stage_ids)
        self.n_stages = S
        if tp > 1:
            for c in self.chunks:
                apply_tp(c, m["tp"], plan, job.get("sp_impl", "megatron"))
        if job.get("precision") == "fp8":     # TE linears (tp = 1: capabilities.fp8_refusal)
            from autoplace.profile.fp8 import swap_linears
            for c in self.chunks:
                swap_linears(c)
        apply_recompute(self.chunks, plan, selective_policy(job))
        # mixture of experts: EP groups, experts sharded over them (before any DP wrapping)
        from autoplace.profile.moe import MoE
        self.moe_layers = [layer.feed_forward for c in self.chunks for layer in c.layers.values()
                           if isinstance(layer.feed_forward, MoE)]
        self.expert_dp_group = None
        if self.moe_layers:
            self._build_ep()
        # data parallelism
        self.dp_kind = "none"
        self.wrapped = list(self.chunks)
        self.zero_opt = None
        dp_mesh = m["dp"]
        lr, eps = job["lr"], job["adam_eps"]
        if plan.dp > 1 and "dp_grad_reduce" not in plan.omit:
            if plan.zero == 3:
                fmesh = m["dp_replicate", "dp_shard"] if dpr > 1 else m["dp_shard"]
                apply_fsdp(self.chunks, fmesh, plan)
                self.dp_kind = "fsdp2-hsdp" if dpr > 1 else "fsdp2"
            elif plan.zero in (1, 2):
                self.dp_kind = f"zero{plan.zero}-flat"
            else:
                from torch.nn.parallel import DistributedDataParallel as DDP
                wrapped = []
                for c in self.chunks:
                    experts = [n for n, _ in c.named_parameters() if ".experts." in n]
                    if experts:   # reduced over the expert-DP group instead (`_reduce_expert_grads`)
                        DDP._set_params_and_buffers_to_ignore_for_model(c, experts)
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

    def _build_ep(self):
        """EP groups: consecutive blocks of `ep` ranks of each data-parallel group (Megatron's order
        tp-cp-ep-dp-pp with tp = cp = 1); expert-DP groups: the ranks holding the same experts
        (stride ep); a metadata group per EP group for dropless token counts. Every rank creates
        every group, in the same order (`dist.new_group`)."""
        plan, job = self.plan, self.job
        ep = plan.ep
        cf = float(job.get("moe_capacity_factor", 0.0) or 0.0)
        gemm = job.get("moe_gemm") or None
        ranks = np.asarray(self.mesh.mesh.tolist())           # [pp, dpr, dps, cp, tp]
        me = dist.get_rank()
        mine = {}
        for ipp in range(ranks.shape[0]):
            for icp in range(ranks.shape[3]):
                for itp in range(ranks.shape[4]):
                    dpl = [int(r) for r in ranks[ipp, :, :, icp, itp].reshape(-1)]
                    for j in range(len(dpl) // ep):
                        blk = dpl[j * ep:(j + 1) * ep]
                        if ep > 1:
                            g = dist.new_group(blk)
                            gm = dist.new_group(blk) if cf == 0 else None
                            if me in blk:
                                mine["ep"], mine["meta"] = g, gm
                                mine["ep_rank"] = blk.index(me)
                    for i in range(ep):
                        col = dpl[i::ep]
                        if len(col) > 1:
                            g = dist.new_group(col)
                            if me in col:
                                mine["edp"] = g
        self.expert_dp_group = mine.get("edp")
        for name, axis in (("ep", "ep"), ("meta", "ep_meta"), ("edp", "dp")):
            g = mine.get(name)
            if g is not None:
                self.axis_of_group[g.group_name] = axis
                self.group_sizes[g.group_name] = dist.get_world_size(g)
        self.ep_rank = mine.get("ep_rank", 0)
        for moe in self.moe_layers:
            moe.capacity_factor = cf
            if gemm:
                moe.gemm = gemm
            moe.shard_experts(mine.get("ep"), mine.get("meta"), ep, self.ep_rank)

    def _reduce_expert_grads(self):
        """Expert gradients: summed over the expert-DP group, then ÷ dp (each rank's experts already
        hold the gradient of every token its EP group routed to them; dense gradients are the DDP
        mean over dp — Megatron scales expert gradients the same way)."""
        if not self.moe_layers:
            return
        scale = 1.0 / self.plan.dp
        for moe in self.moe_layers:
            for p in moe.experts.parameters():
                if p.grad is None:
                    p.grad = torch.zeros_like(p)
                if self.expert_dp_group is not None and "dp_grad_reduce" not in self.plan.omit:
                    dist.all_reduce(p.grad, group=self.expert_dp_group)
                if scale != 1.0:
                    p.grad.mul_(scale)

    def _build_tied_group(self):
        m = self.mesh
        # ranks holding stage 0 and stage S−1 with the same (dp, tp) coordinates
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
        from torch.distributed.pipelining import PipelineStage, Schedule1F1B, ScheduleGPipe, ScheduleInterleaved1F1B
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

    def _precision_ctx(self):
        """bf16 mixed precision (torch AMP): the forward's matmuls and attention run under
        `torch.autocast(dtype=bfloat16)`, parameters, gradients and Adam state stay fp32 (the `fp32`
        byte regime); fp32 (the default) runs as is — the exactness checks run in fp32."""
        prec = self.job.get("precision", "fp32")
        if prec == "bf16":
            return torch.autocast(self.rt.device.type, dtype=torch.bfloat16)
        if prec == "fp8":
            from autoplace.profile.fp8 import fp8_ctx
            return fp8_ctx()
        return contextlib.nullcontext()

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
        with self._loss_ctx(), self._precision_ctx():
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
                    if self.before_microbatch is not None:
                        self.before_microbatch(k)
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
        self._reduce_expert_grads()
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
