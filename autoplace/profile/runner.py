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
| zero=3, reshard=1 (SG,S,S)    | FSDP2 `fully_shard(reshard_after_forward=True)`: embedding,  | Ψ/n, Ψ/n, Ψ/n         |
|                               | each block, output projection, root (torchtitan's units)     |                       |
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
|   (selective_policy="op-sac") | every block under `create_selective_checkpoint_contexts`     |                       |
|                               | with torchtitan's op-level policy (`model.op_sac_context`)   |                       |
| offload=params (zero=3)       | FSDP2 `CPUOffloadPolicy` (CUDA only; params, grads and       | 0, 0, 0 on device     |
|                               | optimizer together: `capabilities.fsdp2_cpu_offload`)        |                       |
| omit=dp_grad_reduce           | no DDP/FSDP wrapper: gradients stay local (negative control) |                       |
| omit=sp_norm_reduce           | norms left as plain local modules under SP (negative control)|                       |

The instrumented step also runs torch's memory tracker (`peak.PeakMemory`: FSDPMemTracker for
FSDP2, MemTracker otherwise; pp = 1) for the peak of allocated bytes by category.

Modules: `dist` (process group and mesh: `Runtime`), `capabilities` (what the runner can run here:
`runner_refusals`), `parallelize` (TP/SP, recompute, FSDP2 on the model chunks), `build` (`Built`:
mesh, chunks, optimizer, pipeline) and this module, the measured training loop (`run_plan`).
"""

from __future__ import annotations

import contextlib
import time
import traceback

import torch
import torch.distributed as dist

from autoplace.plan import Plan
from autoplace.profile import measure, peak
from autoplace.profile.build import Built
from autoplace.profile.capabilities import Unsupported, check_runnable
from autoplace.profile.dist import Runtime
from autoplace.profile.settings import DEFAULTS

__all__ = ["DEFAULTS", "Runtime", "Unsupported", "describe_exception", "run_plan"]


# ---- run one plan -------------------------------------------------------------------------------
def run_plan(plan: Plan, spec, job: dict, rt: Runtime, reference=None) -> dict:
    """Train `plan` for warmup + steps (+1 instrumented) steps; return this rank's measurements."""
    check_runnable(plan, spec, job, rt.backend, world=rt.world)
    torch.manual_seed(job["seed"])
    b = Built(plan, spec, job, rt)
    warm, steps = int(job["warmup"]), int(job["steps"])
    total = warm + steps + 1
    losses_local = []
    times, cpu_times, runq_times = [], [], []
    act = None
    comm = None
    tracked = None
    sb = None
    if rt.device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(rt.device)
    for step in range(total):
        instrumented = step == total - 1
        dist.barrier()
        rt.sync()
        s0 = sched_times()
        t0 = time.perf_counter()
        if instrumented:
            counter = measure.SavedTensorCounter()
            counter.exclude_module_state(b.chunks, b.all_params())
            cc = measure.CommCounter(b.axis_of_group, b.group_sizes, b.axis_of_ranks)
            tracker = (peak.PeakMemory(b.chunks, b.optimizer, b.dp_kind.startswith("fsdp2"), rt.device)
                       if peak.PeakMemory.supported(plan) else None)
            if tracker is not None:
                b.before_microbatch = tracker.reset
            with tracker or contextlib.nullcontext(), measure.use_counter(counter), counter.hooks(), cc:
                lv = b.train_step(step)
            b.before_microbatch = None
            rt.sync()
            act = counter.report()
            comm = cc.report()
            tracked = tracker.report() if tracker is not None else None
            del tracker
        else:
            lv = b.train_step(step)
            rt.sync()
        dt = time.perf_counter() - t0
        s1 = sched_times()
        if warm <= step < warm + steps:
            times.append(dt)
            if s0 and s1:
                cpu_times.append(s1[0] - s0[0])
                runq_times.append(s1[1] - s0[1])
        losses_local.append(lv)
        if instrumented:
            sb = b.state_bytes()
        b.zero_grad()
    peak_mem = peak_reserved = None
    if rt.device.type == "cuda":
        peak_mem = int(torch.cuda.max_memory_allocated(rt.device))
        peak_reserved = int(torch.cuda.max_memory_reserved(rt.device))
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
        "stage": b.pp_rank, "ep_rank": getattr(b, "ep_rank", 0),
        "moe_dropped": sum(m.dropped for m in b.moe_layers),
        "step_s": float(sorted(times)[len(times) // 2]) if times else None,
        "step_times_s": times,
        "step_cpu_s": cpu_times,
        "step_runq_s": runq_times,
        "state_bytes": sb,
        "activation_bytes": body,
        "activation_bytes_total": act["peak_total"] if act else None,
        "activation_bytes_by_region": act["peak_by_region"] if act else None,
        "peak_memory_bytes": peak_mem,
        "peak_reserved_bytes": peak_reserved,
        "memory_tracker": tracked,
        "collective_bytes": _axes(comm["bytes"]) if comm else None,
        "collectives": comm["ops"] if comm else None,
        "losses": glosses,
        "equivalence": eq,
        "dp_kind": b.dp_kind,
    }
    del b
    return res


def sched_times() -> tuple[float, float] | None:
    """(CPU time, time runnable but waiting for a CPU) of this process, all threads, in seconds
    (Linux `/proc/self/task/*/schedstat`: ns on the CPU, ns on a run queue); None elsewhere. A step's
    run-queue time is what other processes on a shared host took from it."""
    import os
    try:
        cpu = wait = 0
        for t in os.listdir("/proc/self/task"):
            try:
                with open(f"/proc/self/task/{t}/schedstat") as f:
                    a, b, _ = f.read().split()
            except (OSError, ValueError):
                continue            # a thread that ended meanwhile
            cpu += int(a)
            wait += int(b)
        return cpu * 1e-9, wait * 1e-9
    except OSError:
        return None


def _axes(d: dict) -> dict:
    out = {k: 0.0 for k in ("dp", "tp", "pp", "cp", "ep")}
    for k, v in d.items():
        out[k] = out.get(k, 0.0) + v
    return out


def describe_exception(e: BaseException) -> str:
    """The last frames of a traceback and the message (at most 3000 characters), for the record."""
    tb = traceback.format_exception(type(e), e, e.__traceback__)
    return "".join(tb[-6:])[-3000:]

