"""What the torch-native plan runner (`autoplace.profile.runner`) can run, as refusals.

`runner_refusals(plan, model, train, backend)` lists why a plan cannot run here ([] when it can).
`select_runnable` (before launching anything) and `run_plan` (on every rank, before any
collective) ask the same function. The reasons fall in two kinds, kept apart:

* **Not on this machine** (`machine_refusals`): facts about the devices, whatever the runner
  implements: the ranks launched, CUDA-only kernels, host offload on a CPU "device".
* **The runner cannot express it** (`capability_refusals`): what the torch-native stack as built
  here implements. The switches are `TORCH_NATIVE`, a `RunnerCapabilities`; they are the part to
  be read from the `torch-native` runtime file of `autoplace/runtimes/` once it exists. The
  divisibility requirements next to them (heads ∣ tp, layers ∣ pp·vpp, m ≥ pp, …) follow from how
  the runner builds the model (`parallelize`, `build`), not from the stack.

One fact lives here and nowhere else in `autoplace.profile`: **FSDP2 offloads params, grads and
optimizer state together** (`CPUOffloadPolicy`, torch's only native offload), so the one offload
plan the runner expresses is zero=3, offload=params, offload_fraction=1 (`fsdp2_cpu_offload`).

Torch-free: importing this module does not import torch.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from autoplace.plan import Plan
from autoplace.profile.settings import DEFAULTS


class Unsupported(Exception):
    """A plan this runner cannot execute here; raised identically on every rank before any
    collective, so the worker records it as skipped and goes on to the next plan."""


def fsdp2_cpu_offload(plan: Plan) -> bool:
    """True when the plan runs with FSDP2 `CPUOffloadPolicy`: params, grads and optimizer state
    all on the host (the only offload torch has natively; zero=3, offload=params)."""
    return plan.off >= 3


@dataclass(frozen=True, kw_only=True)
class RunnerCapabilities:
    """Switches of what a plan runner implements (the future `torch-native` runtime file)."""
    moe: bool = True
    """MoE layers and expert parallelism (`autoplace.profile.moe`: top-k router, all-to-all dispatch
    over EP, per-expert / grouped GEMMs, dropless and capacity-factor modes)."""
    moe_with_tp: bool = False
    """MoE layers together with tp > 1 (expert TP, EP carved from TP×DP)."""
    moe_zero: frozenset = frozenset({0})
    """ZeRO stages with MoE layers (experts are reduced over their expert-DP group next to DDP;
    ZeRO-1/2/FSDP2 shards of experts over that group are not implemented)."""
    shared_experts: bool = False
    """Always-on shared experts (Qwen-MoE / DeepSeek)."""
    context_parallel: bool = False
    """cp > 1 (torch's `context_parallel` ring attention)."""
    offload: frozenset = frozenset({"none", "params"})
    """`Plan.offload` values; "params" is FSDP2 CPUOffloadPolicy (params + grads + optimizer)."""
    offload_needs_zero: int = 3
    """The ZeRO stage offload comes with (FSDP2 = ZeRO-3)."""
    partial_offload: bool = False
    """offload_fraction < 1."""
    kv_head_replication: bool = False
    """kv_heads < tp (replicating KV heads over TP ranks)."""
    tied_embeddings_with_tp: bool = False
    """Tied input/output embeddings under TP."""
    sp_with_bias: bool = False
    """Sequence-parallel linears with biases."""
    layer_split_with_interleaving: bool = False
    """Uneven `layer_split` together with the interleaved schedule."""
    omit: frozenset = frozenset({"dp_grad_reduce", "sp_norm_reduce"})
    """Obligations that can be left out as negative controls (`Plan.omit`)."""
    precisions: frozenset = frozenset({"fp32", "bf16"})
    """Training precisions: fp32, and bf16 mixed precision (torch.autocast, fp32 parameters and Adam
    state). fp8 runs through Transformer Engine only: `fp8_refusal`."""
    selective_policies: frozenset = frozenset({"attention", "op-sac"})
    """What recompute=selective can mean (`settings.selective_policy`)."""
    op_sac_with_tp: bool = False
    """Op-level SAC together with tp > 1 (the TP/SP collectives inside a checkpointed layer are
    not in the runner's save list, so they would run again in the recomputation)."""


TORCH_NATIVE = RunnerCapabilities()
"""The plan runner of `autoplace.profile` (torch DDP / FSDP2 / DTensor TP / torch.distributed.pipelining)."""


def _setting(train, key: str):
    """A job setting from a settings mapping (runner.DEFAULTS keys) or a TrainingSpec."""
    if isinstance(train, Mapping):
        return train.get(key, DEFAULTS[key])
    return getattr(train, key)


def _selective_policy(train) -> str:
    """recompute=selective's policy: the settings' `selective_policy` (None: the runner runtime's),
    or a TrainingSpec's runtime `memory.selective`."""
    if isinstance(train, Mapping):
        pol = train.get("selective_policy")
        if pol is None:
            from autoplace.profile.settings import selective_policy
            return selective_policy({})
        return str(pol)
    return train.rt.memory.selective


def machine_refusals(plan: Plan, backend: str, world: int | None = None) -> list[str]:
    """Why `plan` cannot run on `world` ranks of this backend ("nccl" = CUDA, "gloo" = CPU)."""
    out = []
    if world is not None and plan.dp * plan.tp * plan.pp * plan.cp != world:
        out.append(f"dp·tp·pp·cp = {plan.dp}·{plan.tp}·{plan.pp}·{plan.cp} ≠ {world} ranks")
    cuda = backend == "nccl"
    if plan.cp > 1 and not cuda:
        out.append("cp > 1: torch's context_parallel (ring attention) dispatches CUDA SDPA kernels only")
    if plan.off >= 1 and not cuda:
        out.append(f"offload={plan.offload} moves state from the accelerator to host memory; the CPU "
                   "device has nothing to offload to")
    return out


def capability_refusals(plan: Plan, model, train, caps: RunnerCapabilities = TORCH_NATIVE) -> list[str]:
    """Why the runner cannot express `plan` for `model` with the job settings `train`."""
    out = []
    B, seq = int(_setting(train, "global_batch")), int(_setting(train, "seq_len"))
    # -- switches (the runtime file's part) --
    if plan.cp > 1 and not caps.context_parallel:
        out.append("cp > 1: context parallelism is not implemented by the plan runner")
    if (plan.ep > 1 or model.is_moe) and not caps.moe:
        out.append("MoE / expert parallelism is not implemented by the plan runner")
    elif plan.ep > 1 and not model.is_moe:
        out.append(f"ep={plan.ep} on a dense model (num_experts = 0)")
    elif model.is_moe:
        if plan.tp > 1 and not caps.moe_with_tp:
            out.append("MoE with tp > 1 (expert tensor parallelism) is not implemented by the plan runner")
        if plan.zero not in caps.moe_zero:
            out.append(f"MoE with zero={plan.zero}: the runner reduces experts over their expert-DP "
                       "group next to DDP (zero=0 only)")
        if model.shared_expert_ffn_hidden and not caps.shared_experts:
            out.append("shared experts are not implemented by the plan runner")
        if model.expert_bias:
            out.append("expert / router biases are not implemented by the plan runner")
        if plan.dp % plan.ep or model.num_experts % plan.ep:
            out.append(f"ep={plan.ep} must divide dp={plan.dp} and num_experts={model.num_experts}")
        if (plan.etp or plan.tp) != plan.tp:
            out.append("etp ≠ tp is not implemented by the plan runner")
    if plan.off >= 1:
        if plan.offload not in caps.offload or plan.zero != caps.offload_needs_zero:
            out.append(f"offload={plan.offload}: torch's only native offload is FSDP2 CPUOffloadPolicy "
                       "(params + grads + optimizer, zero=3 offload=params)")
        if plan.offload_fraction != 1.0 and not caps.partial_offload:
            out.append("CPUOffloadPolicy offloads everything (offload_fraction must be 1)")
    if plan.tp > 1:
        if model.a_kv % plan.tp and not caps.kv_head_replication:
            out.append(f"tp={plan.tp} must divide kv_heads={model.a_kv} (KV-head replication for "
                       "a_kv < tp is not implemented)")
        if model.tied_embeddings and not caps.tied_embeddings_with_tp:
            out.append("tied embeddings with tp > 1 are not implemented")
        if plan.sp and (model.attn_bias or model.mlp_bias) and not caps.sp_with_bias:
            out.append("Megatron-style SP linears without biases only")
    if plan.pp > 1 and plan.layer_split and plan.v > 1 and not caps.layer_split_with_interleaving:
        out.append("layer_split with interleaving")
    bad = [o for o in plan.omit if o not in caps.omit]
    if bad:
        out.append(f"omit={bad}: only {' and '.join(sorted(caps.omit))} can be removed")
    if plan.recompute == "selective":
        pol = _selective_policy(train)
        if pol not in caps.selective_policies:
            out.append(f"selective_policy={pol}: the runner implements "
                       f"{' and '.join(sorted(caps.selective_policies))}")
        elif pol == "op-sac" and plan.tp > 1 and not caps.op_sac_with_tp:
            out.append("op-level SAC with tp > 1: the layer's TP collectives would be recomputed "
                       "(not saved, as the cost model assumes)")
    precision = _setting(train, "precision")
    if precision == "fp8":
        why = fp8_refusal()
        if why:
            out.append(why)
        elif plan.tp > 1 or model.is_moe:
            out.append("precision=fp8 with tp > 1 or MoE layers is not implemented by the plan runner")
    elif precision not in caps.precisions:
        out.append(f"the runner trains in {'/'.join(sorted(caps.precisions))} (precision={precision})")
    # -- how the runner builds the model (parallelize, build) --
    if plan.dp < 1 or plan.dp_replicate < 1:
        return out + [f"dp={plan.dp}, dp_replicate={plan.dp_replicate}: resolve the plan on the ranks first"]
    if plan.dp % plan.dp_replicate:
        out.append(f"dp={plan.dp} not divisible by dp_replicate={plan.dp_replicate}")
    if B % (plan.mbs * plan.dp):
        out.append(f"global batch {B} not divisible by mbs·dp = {plan.mbs * plan.dp}")
    if plan.tp > 1:
        if model.heads % plan.tp:
            out.append(f"tp={plan.tp} must divide heads={model.heads}")
        if model.ffn_hidden % plan.tp or model.vocab % plan.tp:
            out.append(f"tp={plan.tp} must divide ffn_hidden and vocab")
    if plan.sp and seq % plan.tp:
        out.append(f"seq_len {seq} not divisible by tp={plan.tp}")
    if plan.pp > 1:
        if not plan.layer_split and model.layers % (plan.pp * plan.v):
            out.append(f"layers={model.layers} not divisible by pp·vpp = {plan.pp * plan.v}")
        m = B // (plan.mbs * plan.dp)
        if m < plan.pp and plan.schedule != "gpipe":
            out.append(f"{plan.schedule} needs micro-batches m={m} ≥ pp={plan.pp}")
        if plan.schedule == "interleaved" and m % plan.pp:
            out.append(f"ScheduleInterleaved1F1B needs m={m} divisible by pp={plan.pp}")
    if plan.rc == 3 and plan.recompute_layers < 0:
        out.append("recompute_layers must be ≥ 0")
    if "dp_grad_reduce" in plan.omit and (plan.zero != 0 or plan.pp > 1):
        out.append("omit=dp_grad_reduce is implemented for zero=0, pp=1")
    if "sp_norm_reduce" in plan.omit and not (plan.sp and plan.tp > 1):
        out.append("omit=sp_norm_reduce needs sp=1, tp > 1")
    return out


def fp8_refusal() -> str | None:
    """Why the runner cannot train in FP8 here (one line), None where Transformer Engine is installed
    and a CUDA device with FP8 GEMMs (compute capability ≥ 8.9) is present."""
    import importlib.util
    if importlib.util.find_spec("transformer_engine") is None:
        return "precision=fp8 needs Transformer Engine (transformer_engine is not installed)"
    import torch
    if not torch.cuda.is_available():
        return "precision=fp8 needs a CUDA device (Transformer Engine's FP8 GEMMs)"
    if torch.cuda.get_device_capability() < (8, 9):
        return "precision=fp8 needs compute capability ≥ 8.9 (Ada / Hopper / Blackwell)"
    return None


def runner_refusals(plan: Plan, model, train, backend: str, *, world: int | None = None) -> list[str]:
    """Every reason the plan runner cannot run the resolved `plan` of `model` here: the machine's
    first, then the runner's. [] when it can. train: job settings (a mapping with runner.DEFAULTS
    keys, or a TrainingSpec); world: the ranks launched (None: not checked)."""
    machine = machine_refusals(plan, backend, world)
    if world is not None and plan.dp * plan.tp * plan.pp * plan.cp != world:
        return machine          # the other checks assume the plan is laid out on these ranks
    return machine + capability_refusals(plan, model, train)


def check_runnable(plan: Plan, model, train, backend: str, *, world: int | None = None) -> None:
    """Raise Unsupported with every refusal (joined by "; ") unless the runner can run `plan`."""
    why = runner_refusals(plan, model, train, backend, world=world)
    if why:
        raise Unsupported("; ".join(why))
