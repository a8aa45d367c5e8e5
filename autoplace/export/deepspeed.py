"""DeepSpeed JSON config (`ds_config.json`) and a `deepspeed` launcher script.

Keys and checks follow deepspeedai/DeepSpeed `deepspeed/runtime/config.py` (batch identity),
`runtime/zero/config.py` and `runtime/zero/offload_config.py` (0.19.x; shared doc §1c):

* batch identity ``train_batch_size = train_micro_batch_size_per_gpu × gradient_accumulation_steps ×
  dp`` over the **data-parallel** size: for a PipelineModule the engine passes the module's grid as
  mpu, so dp = W / pp; all three keys are written, with concrete values (never "auto", which only
  the Hugging Face integration fills in);
* ``zero_optimization``: stage, overlap_comm (= the plan's dp_overlap), reduce-scatter, contiguous
  gradients and bucket sizes sized from the hidden width exactly as the HF integration sizes its
  "auto" values (reduce bucket h², stage-3 prefetch 0.9·h², persistence threshold 10·h);
* offload: DeepSpeed's ``offload_optimizer`` keeps the optimizer state *and* the fp32 gradient
  partition on the host — the plan's offload=grads; offload=params adds ``offload_param``
  (ZeRO-3 only); a partial optimizer offload (φ < 1) is ``offload_optimizer.ratio`` (ZeRO-3 only);
* ``activation_checkpointing`` describes what the model code checkpoints (number_checkpoints =
  checkpointed layers per stage); the model itself must call deepspeed.checkpointing / PipelineModule
  ``activation_checkpoint_interval``.

What plain DeepSpeed cannot express is refused: tensor/sequence/context/expert parallelism (these
come from model code — Megatron-DeepSpeed's mpu, AutoTP's 2-D dp×tp mesh, Ulysses, deepspeed.moe —
not from this JSON), ZeRO ≥ 2 with pp > 1 (PipelineEngine: "ZeRO-2 and ZeRO-3 are incompatible
with pipeline parallelism"), interleaved/GPipe pipelines, HSDP (MiCS was removed in 0.19).
"""

from __future__ import annotations

import json

from autoplace.export.common import (ExportJob, LauncherRefusedError, as_job, batch_refusals, common_refusals,
                                     header_lines, partial_job, recompute_per_stage, zero_level)

NAME = "deepspeed"
FILES = ("ds_config.json", "deepspeed_launch.sh")


def supports(plan, model, train=None, world=None, hw=None) -> list[str]:
    return _reasons(partial_job(plan, model, train, world, hw))


def _reasons(job: ExportJob) -> list[str]:
    plan, train = job.plan, job.train
    out = common_refusals(job)
    zero, hold = zero_level(plan)
    if plan.tp > 1:
        out.append(f"tp={plan.tp}: DeepSpeed's JSON has no Megatron-style tensor parallelism (it comes from "
                   "model code: Megatron-DeepSpeed's mpu, or AutoTP, whose dp×tp mesh cannot be combined "
                   "with a PipelineModule); export to megatron instead")
    if plan.sp:
        out.append("sequence parallelism (sp=1) is a Megatron TP feature with no DeepSpeed JSON key")
    if plan.cp > 1:
        out.append(f"cp={plan.cp}: DeepSpeed's sequence parallelism is Ulysses (all-to-all over heads), "
                   "not ring context parallelism")
    if plan.ep > 1:
        out.append(f"ep={plan.ep}: DeepSpeed expert parallelism is set in model code "
                   "(deepspeed.moe.layer.MoE(ep_size=…)), not in the JSON config")
    if plan.pp > 1:
        if zero >= 2:
            out.append(f"ZeRO-{zero} with pp={plan.pp}: DeepSpeed's PipelineEngine rejects ZeRO stage ≥ 2 "
                       "(\"ZeRO-2 and ZeRO-3 are incompatible with pipeline parallelism\")")
        if plan.schedule != "1f1b":
            out.append(f"schedule={plan.schedule}: DeepSpeed's PipelineEngine runs its own 1F1B-style "
                       "TrainSchedule (no interleaving, no GPipe)")
        if plan.layer_split and len(set(plan.layer_split)) > 1:
            out.append(f"uneven layer_split {list(plan.layer_split)}: PipelineModule partitions layers "
                       "evenly (partition_method)")
    if hold:
        out.append("zero=3 with reshard_after_forward=False: DeepSpeed ZeRO-3 releases parameters after "
                   "each use (no keep-gathered-until-backward mode)")
    if plan.dp_replicate > 1 and zero >= 1:
        out.append(f"dp_replicate={plan.dp_replicate} (HSDP): DeepSpeed 0.19 removed MiCS; ZeRO++ hpZ "
                   "only adds a secondary parameter copy and still shards states over all dp ranks")
    if plan.off == 1:
        out.append("offload=optimizer: DeepSpeed's offload_optimizer also keeps the fp32 gradient "
                   "partition on the host, i.e. offload=grads")
    if plan.off >= 1 and plan.offload_fraction < 1 and zero < 3:
        out.append(f"offload_fraction={plan.offload_fraction:g} < 1: partial offload "
                   "(offload_optimizer.ratio) is ZeRO-3 only")
    if plan.off == 3 and zero != 3:
        out.append("offload=params needs ZeRO-3 (offload_param)")
    if train is not None and train.precision == "fp8":
        out.append("precision=fp8: DeepSpeed's JSON has no FP8 switch (FP8 comes from Transformer "
                   "Engine in model code)")
    rc = recompute_per_stage(job)
    if isinstance(rc, str):
        out.append(rc)
    elif rc[0] == "selective":
        out.append("selective recompute: DeepSpeed checkpoints whole layers (activation checkpointing "
                   "or PipelineModule activation_checkpoint_interval); use recompute=full or block")
    elif rc[0] == "block" and plan.pp > 1:
        out.append(f"block recompute of {rc[1]} layers per stage with pp={plan.pp}: PipelineModule's "
                   "activation_checkpoint_interval checkpoints every k-th layer, not the first k")
    return out + batch_refusals(job)


def notes(job) -> list[str]:
    job = as_job(job)
    out = []
    if job.plan.pp > 1:
        out.append(f"the model must be a deepspeed.pipe.PipelineModule(num_stages={job.plan.pp}); "
                   "DeepSpeed then uses dp = W/pp for the batch identity")
    kind, k = recompute_per_stage(job)
    if kind in ("full", "block"):
        out.append("the model code must checkpoint the layers (activation_checkpointing only configures it)")
    return out


def config(job: ExportJob) -> dict:
    plan, m, t = job.plan, job.model, job.train
    zero, _ = zero_level(plan)
    mb = job.micro_batches
    cfg: dict = {
        "train_batch_size": t.global_batch,
        "train_micro_batch_size_per_gpu": plan.mbs,
        "gradient_accumulation_steps": mb,
        "steps_per_print": 10,
        "gradient_clipping": 1.0,
        "wall_clock_breakdown": False,
    }
    if t.precision == "bf16":
        cfg["bf16"] = {"enabled": True}
    elif t.precision == "fp16":
        cfg["fp16"] = {"enabled": True, "loss_scale": 0, "initial_scale_power": 16,
                       "loss_scale_window": 1000, "hysteresis": 2, "min_loss_scale": 1}
    cfg["optimizer"] = {"type": "AdamW",
                        "params": {"lr": 3.0e-4, "betas": [0.9, 0.95], "eps": 1.0e-8, "weight_decay": 0.1}}
    h = m.hidden if job.shaped else 0
    if plan.dp_bucket_mb > 0:        # the plan's DP collective granularity (MB of gradient / parameter bytes)
        reduce_bucket = plan.dp_bucket_mb * 1e6 / t.b_G
        gather_bucket = prefetch = plan.dp_bucket_mb * 1e6 / t.b_P
    else:                            # what the HF integration fills in for "auto"
        reduce_bucket = gather_bucket = h * h if h else 500_000_000
        prefetch = 0.9 * h * h if h else 50_000_000
    z: dict = {"stage": zero,
               "overlap_comm": bool(plan.dp_overlap),
               "contiguous_gradients": True,
               "reduce_scatter": True,
               "reduce_bucket_size": int(round(reduce_bucket)),
               "allgather_partitions": True,
               "allgather_bucket_size": int(round(gather_bucket))}
    if zero == 3:
        z.update({"stage3_prefetch_bucket_size": int(round(prefetch)),
                  "stage3_param_persistence_threshold": 10 * h if h else 100_000,
                  "stage3_max_live_parameters": 1_000_000_000,
                  "stage3_max_reuse_distance": 1_000_000_000,
                  "sub_group_size": 1_000_000_000,
                  "stage3_gather_16bit_weights_on_model_save": True})
    if plan.off >= 2:
        oo = {"device": "cpu", "pin_memory": True}
        if plan.offload_fraction < 1:
            oo["ratio"] = float(plan.offload_fraction)
        z["offload_optimizer"] = oo
    if plan.off == 3:
        z["offload_param"] = {"device": "cpu", "pin_memory": True}
    cfg["zero_optimization"] = z
    kind, k = recompute_per_stage(job)
    if kind in ("full", "block"):
        cfg["activation_checkpointing"] = {"partition_activations": False,
                                           "cpu_checkpointing": False,
                                           "contiguous_memory_optimization": False,
                                           "number_checkpoints": k,
                                           "synchronize_checkpoint_boundary": False,
                                           "profile": False}
    return cfg


def emit(doc_or_job) -> dict[str, str]:
    job = as_job(doc_or_job)
    if job.train is None:
        raise LauncherRefusedError(NAME, ["the DeepSpeed config needs the training spec (batch sizes)"])
    reasons = _reasons(job)
    if reasons:
        raise LauncherRefusedError(NAME, reasons)
    plan = job.plan
    cfg = config(job)
    kind, k = recompute_per_stage(job)
    model_lines = []
    if plan.pp > 1:
        model_lines.append(f"#   model = deepspeed.pipe.PipelineModule(layers=..., num_stages={plan.pp}, "
                           "partition_method='type:<DecoderLayerClass>'"
                           + (", activation_checkpoint_interval=1" if kind == "full" else "") + ")")
        model_lines.append(f"#   (DeepSpeed takes dp = {job.world}/{plan.pp} = {plan.dp} from the module's grid; "
                           f"gradient_accumulation_steps = {cfg['gradient_accumulation_steps']} micro-batches "
                           "flow through the pipe per step)")
    else:
        model_lines.append(f"#   plain data parallelism over all {job.world} ranks (dp = {plan.dp})")
    if kind == "full":
        model_lines.append("#   activation checkpointing: every transformer layer "
                           "(deepspeed.checkpointing.checkpoint or the HF gradient_checkpointing switch)")
    elif kind == "block":
        model_lines.append(f"#   activation checkpointing: the first {k} transformer layers of the model only")
    launch = ["#!/usr/bin/env bash"] + header_lines(job, "DeepSpeed launch") + [
        "# The training script must call deepspeed.initialize(..., config=ds_config.json) (or take",
        "# --deepspeed --deepspeed_config via deepspeed.add_config_arguments). Model-side requirements:",
        *model_lines,
        "set -euo pipefail",
        'HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"',
        'TRAIN_SCRIPT="${TRAIN_SCRIPT:-train.py}"',
    ]
    if job.nodes == 1:
        launch.append(f'exec deepspeed --num_gpus {job.nproc_per_node} "$TRAIN_SCRIPT" '
                      '--deepspeed --deepspeed_config "$HERE/ds_config.json" "$@"')
    else:
        launch += [
            "# multi-node: a hostfile lists each node as '<host> slots=<gpus>'",
            'HOSTFILE="${HOSTFILE:?set HOSTFILE (one line per node: <host> slots=' + str(job.nproc_per_node) + ')}"',
            f'exec deepspeed --hostfile "$HOSTFILE" --num_nodes {job.nodes} --num_gpus {job.nproc_per_node} \\',
            '    --master_addr "${MASTER_ADDR:?set MASTER_ADDR}" --master_port "${MASTER_PORT:-29500}" \\',
            '    "$TRAIN_SCRIPT" --deepspeed --deepspeed_config "$HERE/ds_config.json" "$@"',
        ]
    return {"ds_config.json": json.dumps(cfg, indent=2) + "\n", "deepspeed_launch.sh": "\n".join(launch) + "\n"}
