"""DeepSpeed JSON config (`ds_config.json`) and a `deepspeed` launcher script.

Keys and checks follow deepspeedai/DeepSpeed `deepspeed/runtime/config.py` (batch identity),
`runtime/zero/config.py` and `runtime/zero/offload_config.py` (0.19.x; shared doc §1c):

* batch identity ``train_batch_size = train_micro_batch_size_per_gpu × gradient_accumulation_steps ×
  dp`` over the **data-parallel** size: for a PipelineModule the engine passes the module's grid as
  mpu, so dp = W / pp; all three keys are written, with concrete values (never "auto", which only
  the Hugging Face integration fills in);
* ``zero_optimization``: stage, overlap_comm (= the plan's dp_overlap), reduce-scatter, contiguous
  gradients and the bucket sizes of the DP granularity the cost model reads: the plan's
  dp_bucket_mb (MB of gradient / parameter bytes), else the runtime's (runtimes/deepspeed.toml
  dp_bucket_elements = 5e8, DeepSpeed's reduce_bucket_size default); persistence threshold =
  DeepSpeed's default 1e5;
* offload: DeepSpeed's ``offload_optimizer`` keeps the optimizer state *and* the fp32 gradient
  partition on the host — the plan's offload=grads; offload=params adds ``offload_param``
  (ZeRO-3 only); a partial optimizer offload (φ < 1) is ``offload_optimizer.ratio`` (ZeRO-3 only).
  Stage 3 applies the ratio per optimizer *sub-group* (``zero/stage3.py`` _setup_for_real_optimizer:
  sub-group i of n goes to the host when i ≥ int((1 − ratio)·n)), and sub-groups are whole
  parameters packed up to ``sub_group_size`` partition elements: with the default 1e9 a rank's
  partition is usually one sub-group, which then goes to the host whatever the ratio. So a partial
  offload writes sub_group_size = ⌈Ψ/dp / PARTIAL_OFFLOAD_SUBGROUPS⌉ (at most the 1e9 default),
  about 20 sub-groups per rank, i.e. φ honoured to ~1/20 of the partition (whole parameters
  permitting);
* ``activation_checkpointing`` describes what the model code checkpoints (number_checkpoints =
  checkpointed layers per stage); the model itself must call deepspeed.checkpointing / PipelineModule
  ``activation_checkpoint_interval``.

What DeepSpeed cannot express is refused by rules: the runtime's capability rules
(runtimes/deepspeed.toml: TP/SP/CP/EP from model code, ZeRO ≥ 2 with PP, interleaved/GPipe, HSDP,
optimizer-only offload, selective recompute, fp8) and this format's rules (no TP key in the JSON,
offload ratio ZeRO-3 only, PipelineModule checkpoint interval).
"""

from __future__ import annotations

import json
import math

from autoplace.export.common import ExportJob, as_job, header_lines, recompute_per_stage, zero_level
from autoplace.export.launcher import Launcher, _a, recompute_kind, rule

NAME = "deepspeed"
FILES = ("ds_config.json", "deepspeed_launch.sh")
SUB_GROUP_SIZE = 1_000_000_000      # zero/config.py sub_group_size default (1e9 elements)
PARTIAL_OFFLOAD_SUBGROUPS = 20      # sub-groups per rank for offload_optimizer.ratio < 1 (see module doc)


def _rules() -> tuple:
    """DeepSpeed JSON format rules (capabilities: runtimes/deepspeed.toml)."""
    R = lambda rid, title, v, m: rule(NAME, rid, title, v, m)  # noqa: E731
    return (
        R("tp", "no tensor parallelism in the JSON",
          lambda c, p: _a(p.tp) > 1,
          lambda c, p: f"tp={p.tp}: DeepSpeed's JSON config has no tensor-parallel key (TP comes from model code: "
                       "Megatron-DeepSpeed's mpu or AutoTP); export to megatron instead"),
        R("ratio", "partial optimizer offload is ZeRO-3 only",
          lambda c, p: (_a(p.off) >= 1) & (_a(p.offload_fraction) < 1) & (_a(p.zero) < 3),
          lambda c, p: f"offload_fraction={p.offload_fraction:g} < 1: partial offload (offload_optimizer.ratio) "
                       "is ZeRO-3 only"),
        R("block-pp", "PipelineModule checkpoints every k-th layer",
          lambda c, p: (recompute_kind(c, p)[0] == 3) & (_a(p.pp) > 1),
          lambda c, p: f"block recompute of {p.recompute_layers} layers per stage with pp={p.pp}: PipelineModule's "
                       "activation_checkpoint_interval checkpoints every k-th layer, not the first k"),
    )


class DeepSpeed(Launcher):
    name = NAME
    files = FILES
    runtime = "deepspeed"

    def format_rules(self):
        return _rules()

    def notes(self, job):
        return notes(job)

    def write(self, job):
        return _write(job)


LAUNCHER = DeepSpeed()


def supports(plan, model, train=None, world=None, hw=None) -> list[str]:
    return LAUNCHER.supports(plan, model, train, world, hw)


def emit(doc_or_job) -> dict[str, str]:
    return LAUNCHER.emit(doc_or_job)


def bucket_elements(job: ExportJob) -> tuple[float, float]:
    """(reduce, gather) bucket sizes in elements: the plan's dp_bucket_mb over the gradient /
    parameter bytes, else the runtime's dp_bucket_elements for both (runtimes/deepspeed.toml
    [defaults] = 5e8, DeepSpeed's reduce_bucket_size / allgather_bucket_size default)."""
    if job.plan.dp_bucket_mb > 0:
        return job.plan.dp_bucket_mb * 1e6 / job.train.b_G, job.plan.dp_bucket_mb * 1e6 / job.train.b_P
    n = float(LAUNCHER.runtime_for(job.train).defaults.dp_bucket_elements)
    if n <= 0:      # a runtime without a bucket default (deepspeed-2021): DeepSpeed's own, never 0
        n = DS_DEFAULT_BUCKET
    return n, n


DS_DEFAULT_BUCKET = 5e8
"""reduce_bucket_size / allgather_bucket_size default (elements) of every DeepSpeed version since
0.3 (deepspeed/runtime/zero/config.py); a bucket of 0 elements is not a valid config."""


def sub_group_size(job: ExportJob) -> int:
    """ZeRO-3 ``sub_group_size`` in elements: DeepSpeed's default, except under a partial optimizer
    offload, where offload_optimizer.ratio moves whole sub-groups to the host (the fraction of
    sub-groups i ≥ int((1 − ratio)·n), zero/stage3.py), so the rank's partition Ψ/dp is cut into about
    PARTIAL_OFFLOAD_SUBGROUPS of them."""
    plan = job.plan
    if plan.off < 2 or plan.offload_fraction >= 1:
        return SUB_GROUP_SIZE
    per_rank = job.model.total_params() / max(1, plan.dp)
    return max(1, min(SUB_GROUP_SIZE, math.ceil(per_rank / PARTIAL_OFFLOAD_SUBGROUPS)))


def notes(job) -> list[str]:
    job = as_job(job)
    out = []
    if job.plan.pp > 1:
        out.append(f"the model must be a deepspeed.pipe.PipelineModule(num_stages={job.plan.pp}); "
                   "DeepSpeed then uses dp = W/pp for the batch identity")
    if recompute_per_stage(job).kind in ("full", "block"):
        out.append("the model code must checkpoint the layers (activation_checkpointing only configures it)")
    if job.plan.off >= 2 and job.plan.offload_fraction < 1 and zero_level(job.plan)[0] == 3:
        out.append(f"offload_optimizer.ratio={job.plan.offload_fraction:g}: DeepSpeed offloads whole optimizer "
                   f"sub-groups, so sub_group_size={sub_group_size(job)} cuts each rank's partition into about "
                   f"{PARTIAL_OFFLOAD_SUBGROUPS} of them")
    if job.plan.dp_bucket_mb <= 0:
        out.append(f"dp_bucket_mb unset in the plan: ds_config uses the runtime's {bucket_elements(job)[0]:.3g}-element "
                   "buckets (reduce_bucket_size, DeepSpeed's default)")
    return out


def config(job: ExportJob) -> dict:
    plan, t = job.plan, job.train
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
    # the DP collective granularity the cost model reads (MB of gradient / parameter bytes): the
    # plan's dp_bucket_mb, else the runtime's default (runtimes/deepspeed.toml)
    reduce_bucket, gather_bucket = bucket_elements(job)
    prefetch = gather_bucket
    z: dict = {"stage": zero,
               "overlap_comm": bool(plan.dp_overlap),
               "contiguous_gradients": True,
               "reduce_scatter": True,
               "reduce_bucket_size": int(round(reduce_bucket)),
               "allgather_partitions": True,
               "allgather_bucket_size": int(round(gather_bucket))}
    if zero == 3:
        z.update({"stage3_prefetch_bucket_size": int(round(prefetch)),
                  "stage3_param_persistence_threshold": 100_000,   # zero/config.py default (1e5)
                  "stage3_max_live_parameters": 1_000_000_000,
                  "stage3_max_reuse_distance": 1_000_000_000,
                  "sub_group_size": sub_group_size(job),
                  "stage3_gather_16bit_weights_on_model_save": True})
    if plan.off >= 2:
        oo = {"device": "cpu", "pin_memory": True}
        if plan.offload_fraction < 1:
            oo["ratio"] = float(plan.offload_fraction)
        z["offload_optimizer"] = oo
    if plan.off == 3:
        z["offload_param"] = {"device": "cpu", "pin_memory": True}
    cfg["zero_optimization"] = z
    rc = recompute_per_stage(job)
    kind, k = rc.kind, rc.layers
    if kind in ("full", "block"):
        cfg["activation_checkpointing"] = {"partition_activations": False,
                                           "cpu_checkpointing": False,
                                           "contiguous_memory_optimization": False,
                                           "number_checkpoints": k,
                                           "synchronize_checkpoint_boundary": False,
                                           "profile": False}
    return cfg


def _write(job: ExportJob) -> dict[str, str]:
    plan = job.plan
    cfg = config(job)
    rc = recompute_per_stage(job)
    kind, k = rc.kind, rc.layers
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
