"""Hugging Face accelerate config YAML for FSDP (v1 sharding strategies, v2 `parallelism_config`).

Files: ``accelerate_config.yaml`` (FSDP2: ``fsdp_version: 2``, bool ``fsdp_reshard_after_forward``
and, for HSDP/TP/CP, the ``parallelism_config`` sizes), ``accelerate_config_fsdp1.yaml`` when FSDP1
can express the plan too (``fsdp_sharding_strategy`` FULL_SHARD / SHARD_GRAD_OP / HYBRID_SHARD /
HYBRID_SHARD_ZERO2 — HYBRID_* shard inside one node, so only when dp_shard = GPUs per node), and
``accelerate_launch.sh`` (``accelerate launch`` with the batch flags of an HF-Trainer-style script:
``--per_device_train_batch_size``, ``--gradient_accumulation_steps``). A pure data-parallel plan
without sharding (zero=0) is ``distributed_type: MULTI_GPU`` (DDP).

Keys follow huggingface/accelerate `commands/config/config_args.py`, `commands/launch.py`,
`utils/dataclasses.py` (FullyShardedDataParallelPlugin) and `parallelism_config.py` (1.10+; shared
doc §1c). Checks accelerate makes that are pre-checked here: FSDP2 needs a dp_shard or cp dimension
to shard over; replicate > 1 with shard = 1 is rejected; DDP + TP is not supported; the
parallelism sizes must multiply to num_processes (all processes on all machines).
accelerate has no pipeline or expert parallelism, no ZeRO-1/2 under FSDP, and its TP (transformers
``tp_plan``) has no Megatron-style sequence-parallel switch.
"""

from __future__ import annotations

import yaml

from autoplace.export.common import ExportJob, as_job, header_lines, recompute_per_stage, zero_level
from autoplace.export.launcher import Launcher, _a, rule

NAME = "accelerate"
FILES = ("accelerate_config.yaml", "accelerate_config_fsdp1.yaml", "accelerate_launch.sh")


def _rules() -> tuple:
    """accelerate's format rules (capabilities: runtimes/accelerate.toml)."""
    R = lambda rid, title, v, m: rule(NAME, rid, title, v, m)  # noqa: E731
    return (
        R("shard-dim", "FSDP2 needs a dimension to shard over",
          lambda c, p: (_a(p.zero) == 3) & (_a(p.dp_shard) == 1) & (_a(p.cp) == 1) & _a(c.world > 1),
          lambda c, p: "zero=3 with dp_shard=1 and cp=1: FSDP2 has no dimension to shard over (accelerate rejects it)"),
        R("replicate-no-shard", "replication needs a shard dimension",
          lambda c, p: (_a(p.zero) == 3) & (_a(p.dp_replicate) > 1) & (_a(p.dp_shard) == 1) & (_a(p.cp) > 1),
          lambda c, p: f"dp_replicate={p.dp_replicate} with dp_shard=1: accelerate's ParallelismConfig rejects "
                       "replication without a shard dimension (also with cp > 1); set dp_replicate=1"),
    )


class Accelerate(Launcher):
    name = NAME
    files = FILES
    runtime = "accelerate"

    def format_rules(self):
        return _rules()

    def notes(self, job):
        return notes(job)

    def write(self, job):
        return _write(job)


LAUNCHER = Accelerate()


def supports(plan, model, train=None, world=None, hw=None) -> list[str]:
    return LAUNCHER.supports(plan, model, train, world, hw)


def emit(doc_or_job) -> dict[str, str]:
    return LAUNCHER.emit(doc_or_job)


def notes(job) -> list[str]:
    job = as_job(job)
    out = []
    if job.plan.tp > 1:
        out.append("tensor parallelism in accelerate needs a transformers model with a tp_plan")
    if not job.plan.dp_overlap:
        out.append("FSDP always overlaps its collectives (prefetch); dp_overlap=False is ignored")
    if not job.plan.bwd_prefetch and job.plan.zero == 3:
        out.append("bwd_prefetch=False: FSDP1 takes it (NO_PREFETCH); FSDP2 always prefetches backward gathers")
    return out


def _layer_cls(m) -> str | None:
    name = m.name.lower()
    if "mixtral" in name:
        return "MixtralDecoderLayer"
    if "llama" in name:
        return "LlamaDecoderLayer"
    return None


def _mixed(t) -> str:
    return {"bf16": "bf16", "fp16": "fp16", "fp8": "fp8", "fp32": "no"}[t.precision if t else "bf16"]


def _base(job: ExportJob, distributed_type: str) -> dict:
    t = job.train
    d = {"compute_environment": "LOCAL_MACHINE", "debug": False, "distributed_type": distributed_type,
         "downcast_bf16": "no", "enable_cpu_affinity": False, "machine_rank": 0,
         "main_training_function": "main", "mixed_precision": _mixed(t),
         "num_machines": job.nodes, "num_processes": job.world,
         "rdzv_backend": "static" if job.nodes == 1 else "c10d",
         "same_network": True, "use_cpu": False}
    if job.nodes > 1:
        d["main_process_ip"] = "127.0.0.1"       # placeholder: accelerate_launch.sh passes the head node
        d["main_process_port"] = 29500
    if t is not None and t.precision == "fp8":
        d["fp8_config"] = {"backend": "ao"}
    return d


def config_v2(job: ExportJob) -> dict:
    plan, m = job.plan, job.model
    zero, hold = zero_level(plan)
    if zero == 0:
        return _base(job, "MULTI_GPU")
    kind = recompute_per_stage(job).kind
    d = _base(job, "FSDP")
    fc = {"fsdp_version": 2,
          "fsdp_reshard_after_forward": not hold,
          "fsdp_offload_params": plan.off == 3,
          "fsdp_activation_checkpointing": kind == "full",
          "fsdp_auto_wrap_policy": "TRANSFORMER_BASED_WRAP",
          "fsdp_state_dict_type": "SHARDED_STATE_DICT",
          "fsdp_cpu_ram_efficient_loading": True}
    cls = _layer_cls(m)
    if cls:
        fc["fsdp_transformer_layer_cls_to_wrap"] = cls
    d["fsdp_config"] = fc
    if plan.dp_replicate > 1 or plan.tp > 1 or plan.cp > 1:
        pc = {"parallelism_config_dp_replicate_size": plan.dp_replicate,
              "parallelism_config_dp_shard_size": plan.dp_shard,
              "parallelism_config_tp_size": plan.tp,
              "parallelism_config_cp_size": plan.cp}
        if plan.cp > 1:
            pc["parallelism_config_cp_backend"] = "torch"
            pc["parallelism_config_cp_comm_strategy"] = "allgather"
        d["parallelism_config"] = pc
    return d


def fsdp1_strategy(job: ExportJob) -> str | None:
    """The FSDP1 ShardingStrategy name for the plan, or None if FSDP1 cannot express it."""
    plan = job.plan
    zero, hold = zero_level(plan)
    if zero != 3 or plan.tp > 1 or plan.cp > 1:
        return None
    if plan.dp_replicate == 1:
        return "SHARD_GRAD_OP" if hold else "FULL_SHARD"
    if plan.dp_shard == job.gpus_per_node and job.nodes == plan.dp_replicate:
        return "HYBRID_SHARD_ZERO2" if hold else "HYBRID_SHARD"
    return None


def config_v1(job: ExportJob) -> dict | None:
    strat = fsdp1_strategy(job)
    if strat is None:
        return None
    plan = job.plan
    kind = recompute_per_stage(job).kind
    d = _base(job, "FSDP")
    fc = {"fsdp_version": 1,
          "fsdp_sharding_strategy": strat,
          "fsdp_reshard_after_forward": strat,
          "fsdp_offload_params": plan.off == 3,
          "fsdp_activation_checkpointing": kind == "full",
          "fsdp_auto_wrap_policy": "TRANSFORMER_BASED_WRAP",
          "fsdp_backward_prefetch": "BACKWARD_PRE" if plan.bwd_prefetch else "NO_PREFETCH",
          "fsdp_forward_prefetch": False,
          "fsdp_state_dict_type": "SHARDED_STATE_DICT",
          "fsdp_use_orig_params": True,
          "fsdp_sync_module_states": True,
          "fsdp_cpu_ram_efficient_loading": True}
    cls = _layer_cls(job.model)
    if cls:
        fc["fsdp_transformer_layer_cls_to_wrap"] = cls
    d["fsdp_config"] = fc
    return d


def _yaml(job: ExportJob, what: str, d: dict) -> str:
    return "\n".join(header_lines(job, what)) + "\n" + yaml.safe_dump(d, sort_keys=False)


def _write(job: ExportJob) -> dict[str, str]:
    files = {"accelerate_config.yaml": _yaml(job, "accelerate config (FSDP2 / DDP)", config_v2(job))}
    v1 = config_v1(job)
    if v1 is not None:
        files["accelerate_config_fsdp1.yaml"] = _yaml(job, "accelerate config (FSDP1 sharding strategy)", v1)
    plan = job.plan
    kind = recompute_per_stage(job).kind
    launch = ["#!/usr/bin/env bash"] + header_lines(job, "accelerate launch") + [
        "# The batch flags are those of an HF-Trainer-style script; the data-parallel size is",
        f"# dp_replicate·dp_shard = {plan.dp}, so {job.train.global_batch} = {plan.mbs} × "
        f"{job.micro_batches} × {plan.dp}. Run once per node (MACHINE_RANK 0..{job.nodes - 1}).",
        "set -euo pipefail",
        'HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"',
        'CONFIG="${CONFIG:-$HERE/accelerate_config.yaml}"',
        'TRAIN_SCRIPT="${TRAIN_SCRIPT:-train.py}"',
        "exec accelerate launch --config_file \"$CONFIG\" \\",
        f"    --num_machines {job.nodes} --num_processes {job.world} \\",
        '    --machine_rank "${MACHINE_RANK:-${SLURM_NODEID:-0}}" '
        '--main_process_ip "${MAIN_PROCESS_IP:-127.0.0.1}" --main_process_port "${MAIN_PROCESS_PORT:-29500}" \\',
        '    "$TRAIN_SCRIPT" \\',
        f"    --per_device_train_batch_size {plan.mbs} --gradient_accumulation_steps {job.micro_batches} \\",
    ]
    if kind == "full" and zero_level(plan)[0] == 0:
        # DDP: the model checkpoints its layers (under FSDP fsdp_activation_checkpointing does it)
        launch.append("    --gradient_checkpointing \\")
    launch.append('    "$@"')
    files["accelerate_launch.sh"] = "\n".join(launch) + "\n"
    return files
