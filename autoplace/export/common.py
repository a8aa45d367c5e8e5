"""Shared pieces of the launcher emitters: the export job and plan facts that every emitter reads
the same way (effective ZeRO level, recompute per stage, batch quantities).

The launcher interface itself (rules, refusals, emit) is `autoplace.export.launcher.Launcher`; the
registry of the six launchers is `autoplace.export.registry.LAUNCHERS`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from autoplace import safe
from autoplace.errors import LauncherRefusedError  # noqa: F401  (re-exported)

LAUNCHER_NAMES = ("megatron", "deepspeed", "torchtitan", "accelerate", "torchrun", "slurm")
DEFAULT_GPUS_PER_NODE = 8


@dataclass(frozen=True)
class Recompute:
    """Activation recomputation as a launcher writes it: kind none|selective|full|block and the
    recomputed layers per stage (None when the kind has no count)."""
    kind: str
    layers: int | None



@dataclass(frozen=True)
class ExportJob:
    """Everything an emitter needs: the specs, the (resolved) plan, the GPU count, predictions."""
    model: object                      # ModelSpec
    hw: object | None                  # HardwareSpec
    train: object | None               # TrainingSpec
    plan: object                       # Plan (dp resolved)
    world: int
    predicted: dict | None = None

    # ---- cluster shape -------------------------------------------------------------------------
    @property
    def gpus_per_node(self) -> int:
        return int(getattr(self.hw, "gpus_per_node", 0) or DEFAULT_GPUS_PER_NODE)

    @property
    def nproc_per_node(self) -> int:
        return min(self.world, self.gpus_per_node)

    @property
    def nodes(self) -> int:
        return max(1, math.ceil(self.world / self.gpus_per_node))

    @property
    def hw_name(self) -> str:
        return safe.one_line(getattr(self.hw, "name", "unknown-gpu"))

    # ---- batch ---------------------------------------------------------------------------------
    @property
    def dp(self) -> int:
        return self.plan.dp

    @property
    def global_batch(self) -> int | None:
        return self.train.global_batch if self.train is not None else None

    @property
    def micro_batches(self) -> int | None:
        """m = B / (mbs · dp): micro-batches per optimizer step per data-parallel rank."""
        if self.train is None or self.dp < 1:
            return None
        q, r = divmod(self.train.global_batch, self.plan.mbs * self.dp)
        return q if r == 0 else None

    # ---- model ---------------------------------------------------------------------------------
    @property
    def shaped(self) -> bool:
        return not self.model.states_only

    @property
    def layers_per_stage(self) -> int | None:
        """Transformer layers per pipeline rank (all virtual chunks together), even split only."""
        if not self.shaped or self.plan.layer_split or self.model.layers % self.plan.pp:
            return None
        return self.model.layers // self.plan.pp

    def describe(self) -> str:
        return f"{safe.one_line(self.model.name)} on {self.world} × {self.hw_name}: {self.plan.short()}"


def as_job(x) -> ExportJob:
    """An `ExportJob` from a job, a plan document (dict) or a (model, hw, train, plan, world[, predicted])."""
    if isinstance(x, ExportJob):
        return x
    if isinstance(x, dict):
        from autoplace.export.planfile import specs_from_document
        return ExportJob(*specs_from_document(x))
    if isinstance(x, (tuple, list)) and len(x) in (5, 6):
        model, hw, train, plan, world, *rest = x
        return ExportJob(model, hw, train, plan.resolved(world), world, rest[0] if rest else None)
    raise TypeError(f"cannot export {type(x).__name__}; pass a plan document or an ExportJob")


def partial_job(plan, model, train=None, world=None, hw=None) -> ExportJob:
    """The job `supports(plan, model, ...)` checks when only some specs are known."""
    if world is None:
        world = plan.dp * plan.cp * plan.tp * plan.pp if plan.dp else 0
    plan = plan.resolved(world) if world else plan
    return ExportJob(model, hw, train, plan, world)


# ---- plan facts every emitter reads the same way -------------------------------------------------
def zero_level(plan) -> tuple[int, bool]:
    """(ZeRO stage 0..3, hold) from the plan's placement codes (honours an explicit dp_modes).

    hold = ZeRO-3 parameters kept gathered from forward to backward (FSDP reshard_after_forward=False,
    FSDP1 SHARD_GRAD_OP)."""
    p, g, o = plan.p_mode, plan.g_mode, plan.o_mode
    if p >= 1:
        return 3, p == 2
    if g >= 1:
        return 2, False
    return (1 if o else 0), False


def recompute_per_stage(job: ExportJob) -> Recompute:
    """Canonical activation recomputation: Recompute(kind none|selective|full|block, layers per stage).

    block k with k = 0 is 'none' and with k = layers per stage is 'full'. A per-stage recompute
    vector that is not uniform raises LauncherRefusedError (rule RT-stage-recompute refuses such
    plans before any emitter reads them)."""
    plan = job.plan
    lps = job.layers_per_stage
    kind, k = plan.recompute, plan.recompute_layers
    if plan.stage_recompute:
        vals = set(int(v) for v in plan.stage_recompute)
        if len(vals) > 1:
            raise LauncherRefusedError("launchers", [f"stage_recompute {list(plan.stage_recompute)} recomputes a "
                                                     "different number of layers on each stage"])
        kind, k = "block", vals.pop()
    if kind == "none":
        return Recompute("none", 0)
    if kind == "selective":
        return Recompute("selective", None)
    if kind == "full":
        return Recompute("full", lps)
    if k <= 0:
        return Recompute("none", 0)
    if lps is not None and k >= lps:
        return Recompute("full", lps)
    return Recompute("block", k)


def virtual_chunks(split, v: int) -> list[int]:
    """Layers of each of the pp·v model chunks in virtual-stage order (chunk c of rank r is stage
    c·pp + r — Megatron's layout order and torchtitan's "loop" stage assignment): every stage's layers
    cut into v near-equal chunks, the larger first."""
    split = [int(x) for x in split]
    per = [[n // v + (1 if c < n % v else 0) for c in range(v)] for n in split]
    return [per[r][c] for c in range(v) for r in range(len(split))]


def common_notes(job: ExportJob) -> list[str]:
    """Notes that hold for every launcher."""
    if getattr(job.plan, "fetch_sync", False) and job.plan.zero == 3:
        return ["fetch_sync=True models DeepSpeed ZeRO-3 as released in 2021 (a device synchronize at "
                "every parameter fetch); no current launcher runs that schedule, so the exported job should be "
                "faster than this plan's estimate"]
    return []


# ---- text helpers --------------------------------------------------------------------------------
def header_lines(job: ExportJob, what: str, comment: str = "#") -> list[str]:
    from autoplace._version import __version__
    t = job.train
    lines = [f"{what} — generated by autoplace {__version__} (autoplace export)",
             f"model {job.model.name}; {job.world} GPUs ({job.nodes} node(s) × {job.nproc_per_node}, "
             f"{job.hw_name})",
             f"plan {job.plan.short()}"]
    if t is not None:
        lines.append(f"seq_len {t.seq_len}, global batch {t.global_batch} samples, precision {t.precision}"
                     + (f", {job.micro_batches} micro-batches per step" if job.micro_batches else ""))
    pred = job.predicted or {}
    bits = [f"{k}={v:.4g}" for k, v in pred.items()
            if isinstance(v, (int, float)) and not isinstance(v, bool)][:6]
    if bits:
        lines.append("predicted: " + ", ".join(bits))
    return [f"{comment} {safe.comment(x)}" for x in lines]


def q(s) -> str:
    """One shell word (`autoplace.safe.shell_word`)."""
    return safe.shell_word(s)


def join_flags(flags: list[tuple[str, object]]) -> str:
    """One `--flag value` (or bare `--flag`) per line."""
    out = []
    for f, v in flags:
        if v is None or v is True:
            out.append(f)
        else:
            out.append(f"{f} {v}")
    return "\n".join(out) + "\n"
