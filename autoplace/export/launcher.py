"""The typed launcher interface: one `Launcher` subclass per export format, one rule set per launcher.

A launcher is a file format (Megatron-LM flags, DeepSpeed JSON, torchtitan job config, accelerate
YAML, a torchrun script, an sbatch script) plus the training stack that reads it (its runtime,
`autoplace/runtimes/<runtime>.toml`). What it can express is **one list of vectorized rules**:

* the common rules every launcher shares (`L-all-…`: negative controls, ZeRO state kept replicated
  over cp);
* the capability rules of its runtime (`RT-…`, `autoplace.runtimes.check.capability_rules`: ZeRO
  stages, TP/SP/CP/EP/PP, schedules, offload, recompute kinds, HSDP, precision) — the facts live in
  the runtime TOML, nowhere else;
* its format rules (`L-<name>-…`): what the file format itself cannot say (Megatron's block
  recompute per virtual chunk, torchtitan's layer-SAC period, DeepSpeed's ZeRO-3-only offload
  ratio, accelerate's shard dimension, whole nodes for torchrun/SLURM).

Every rule is a `placement.rules.Rule` whose predicate broadcasts over a `Plan` or a `PlanBatch`,
so the same objects are the enumerator's constraint (`search --launcher`) and the exporter's
refusal list: `refusals(job)` is exactly the messages of the rules the job's plan violates.
The runtime a job runs under is its TrainingSpec's runtime when that runtime names this launcher
(e.g. `torchtitan-compile` for torchtitan), else the launcher's own (`runtime`).
"""

from __future__ import annotations

import abc
from functools import lru_cache
from typing import ClassVar

import numpy as np

from autoplace.errors import LauncherRefusedError
from autoplace.placement.rules import Ctx, Rule


def _a(x):
    return np.asarray(x)


# ---- vectorized plan facts the format rules read ----------------------------------------------------
def lps(c, p):
    """Transformer layers per pipeline rank (all virtual chunks), per plan; a very large number
    for an explicit layer_split (uneven stages have no single count)."""
    if getattr(p, "layer_split", ()) or not c.shaped:
        return _a(1 << 30)
    return c.model.layers // np.maximum(_a(p.pp), 1)


def recompute_kind(c, p):
    """(kind code, layers) as the launchers read them (`common.recompute_per_stage`, vectorized):
    block with 0 layers is none (0), block covering every layer of the stage is full (2); a uniform
    stage_recompute vector is block with that count."""
    srec = getattr(p, "stage_recompute", ()) or ()
    rc, k = _a(p.rc), _a(p.recompute_layers)
    if srec and len(set(int(v) for v in srec)) == 1:
        rc, k = _a(3), _a(int(srec[0]))
    n = lps(c, p)
    kind = np.where(rc != 3, rc, np.where(k <= 0, 0, np.where(k >= n, 2, 3)))
    return kind, k


def train_is(c, pred) -> bool:
    return c.train is not None and bool(pred(c.train))


def rule(launcher: str, rid: str, title: str, violated, message) -> Rule:
    """A format rule `L-<launcher>-<rid>`."""
    return Rule(f"L-{launcher}-{rid}", "launcher", f"{launcher}: {title}", violated, message)


COMMON_RULES = (
    rule("all", "omit", "negative controls are not runnable",
         lambda c, p: _a(bool(getattr(p, "omit", ()))),
         lambda c, p: f"the plan omits obligations ({', '.join(p.omit)}): it is a negative control, "
                      "not a runnable plan"),
    rule("all", "pp-flushes", "one pipeline schedule per optimizer step",
         lambda c, p: (_a(getattr(p, "pp_flushes", 1)) > 1) & (_a(p.pp) > 1),
         lambda c, p: f"pp_flushes={p.pp_flushes}: the exporters write every micro-batch of a step into one "
                      "pipeline schedule (local batch = B/dp); give pp_flushes=1"),
    rule("all", "zero-axes", "ZeRO/FSDP state sharded over dp×cp",
         lambda c, p: (_a(p.cp) > 1) & (_a(p.zero) >= 1) & ~_a(getattr(p, "zero_over_cp", True)).astype(bool),
         lambda c, p: f"zero_axes='{p.zero_axes}' keeps ZeRO state replicated over cp={p.cp}; launchers shard "
                      "ZeRO/FSDP state over the joint dp×cp group"),
)


class Launcher(abc.ABC):
    """One export format. Subclasses set `name`, `files`, `runtime`, write `format_rules()` and
    `write(job)`; `emit(job)` refuses (LauncherRefusedError, exit 4) whenever `refusals(job)` is
    non-empty, so a written file always says exactly the plan."""

    name: ClassVar[str]
    """`--launcher` name."""
    files: ClassVar[tuple[str, ...]]
    """Every file name it may write (a re-export removes the stale ones)."""
    runtime: ClassVar[str] = ""
    """The RuntimeSpec it runs by default ('' = a process launcher that starts any stack)."""
    needs_train: ClassVar[bool] = True
    """Whether `write` needs the TrainingSpec (batch sizes)."""

    # ---- rules ------------------------------------------------------------------------------------
    def runtime_for(self, train=None):
        """The RuntimeSpec a job runs under: the job's runtime if it names this launcher, else the
        launcher's own (None for a process launcher without a runtime of its own)."""
        from autoplace.runtimes import load_runtime
        rt = getattr(train, "runtime", None) if train is not None else None
        if rt is not None:
            rt = load_runtime(rt)
            if rt.launcher == self.name or not self.runtime:
                return rt
        return load_runtime(self.runtime) if self.runtime else None

    def format_rules(self) -> tuple[Rule, ...]:
        """What the file format cannot say (ids `L-<name>-…`)."""
        return ()

    def rules(self, rt=None) -> tuple[Rule, ...]:
        """Every rule this launcher checks under runtime `rt` (default: its own)."""
        if rt is None and self.runtime:
            from autoplace.runtimes import load_runtime
            rt = load_runtime(self.runtime)
        return _rules(self, rt)

    def ctx(self, job) -> Ctx:
        return Ctx(job.model, job.train, job.world, job.hw)

    def refusals(self, job) -> list[str]:
        """Why this launcher cannot express `job` (empty: it can): the messages of its violated rules."""
        ctx = self.ctx(job)
        out = []
        for r in self.rules(self.runtime_for(job.train)):
            if bool(np.all(r.violated(ctx, job.plan))):
                out.append(r.message(ctx, job.plan))
        return out

    def violated(self, job) -> list[str]:
        """Ids of the violated rules (for tests and the contract check)."""
        ctx = self.ctx(job)
        return [r.id for r in self.rules(self.runtime_for(job.train)) if bool(np.all(r.violated(ctx, job.plan)))]

    def notes(self, job) -> list[str]:
        """Approximations worth telling the user that are not refusals."""
        return []

    # ---- files ------------------------------------------------------------------------------------
    @abc.abstractmethod
    def write(self, job) -> dict[str, str]:
        """File name → text; called only when `refusals(job)` is empty."""

    def emit(self, job) -> dict[str, str]:
        from autoplace.export.common import as_job
        job = as_job(job)
        if self.needs_train and job.train is None:
            raise LauncherRefusedError(self.name, [f"the {self.name} files need the training spec (batch sizes)"])
        reasons = self.refusals(job)
        if reasons:
            raise LauncherRefusedError(self.name, reasons)
        return self.write(job)

    def supports(self, plan, model, train=None, world=None, hw=None) -> list[str]:
        """`refusals` for a plan with only some specs known."""
        from autoplace.export.common import partial_job
        return self.refusals(partial_job(plan, model, train, world, hw))

    def __repr__(self) -> str:
        return f"<launcher {self.name} (runtime {self.runtime or 'any'})>"


@lru_cache(maxsize=128)
def _rules(launcher: Launcher, rt) -> tuple[Rule, ...]:
    from autoplace.runtimes.check import capability_rules
    caps = capability_rules(rt) if rt is not None else ()
    return (*COMMON_RULES, *caps, *launcher.format_rules())
