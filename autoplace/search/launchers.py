"""Launcher- and runtime-constrained search: the best plan for the stack you run.

`search --launcher L` searches exactly what L's exporter accepts: the default space cut to L's
runtime (`space.space_for_runtime`) and, as a vectorized constraint of the enumerator, the same
rule objects L's exporter refuses with (`Launcher.rules(rt)`: common + runtime capability + format
rules). So every plan it returns exports without refusal (tests/test_launcher_contract.py).

Semantics
- `--runtime R`: the cost model's runtime physics (`runtimes.training_spec(R, ...)`; its plan
  switches through the cut space) and, given explicitly, R's capability rules.
- `--launcher L`: L's rules; implies L's runtime unless `--runtime` is given, which must then be
  one L writes (`R.launcher == L`; torchrun/slurm start any runtime).
- several launchers: one constrained search each (under its own runtime), merged by step time; each
  plan lists the launchers that accept it.
- neither: the unconstrained space under the default (Megatron-Core) kernels; each plan lists the
  launchers that can run it and `best_per_launcher` gives each stack launcher's own winner.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from autoplace.errors import AutoplaceError, InputError, LauncherRefusedError, NoFeasiblePlanError


@dataclass
class Target:
    """One constrained search: which launcher (None: unconstrained), which runtime physics."""
    launcher: str | None
    runtime: object | None            # RuntimeSpec (None: the default kernels, TrainingSpec defaults)
    explicit_runtime: bool = False
    train: object = None
    space: object = None
    rules: tuple = ()
    result: dict | None = None
    error: AutoplaceError | None = None

    @property
    def label(self) -> str:
        if self.runtime is None:
            rt = "default kernels"
        else:
            from autoplace.runtimes.switches import settings_text
            sets = settings_text(self.runtime)
            rt = self.runtime.name + (f"; {', '.join(sets)}" if sets else "")
        return f"{self.launcher or 'any launcher'} ({rt})"


@dataclass
class Outcome:
    targets: list
    ranked: list = field(default_factory=list)          # [(plan, step_s, Target)], fastest first
    best_per_launcher: dict = field(default_factory=dict)   # launcher → (plan, step_s, Target) | error str
    train_note: str = ""
    seq_note: str = ""

    @property
    def train(self):
        return self.ranked[0][2].train if self.ranked else self.targets[0].train


def resolve_targets(launchers, runtime, runtime_set=()) -> list[Target]:
    """(--launcher list, --runtime, --runtime-set) → the searches to run; one-line InputError when
    they disagree. The settings apply to every search's runtime (the default runtime when neither
    --runtime nor a launcher names one)."""
    from autoplace.export.registry import get_launcher
    from autoplace.runtimes import DEFAULT_RUNTIME, load_runtime
    from autoplace.runtimes.switches import apply_settings
    rt = load_runtime(runtime) if runtime else None
    if runtime_set:
        if rt is None and not launchers:
            rt = load_runtime(DEFAULT_RUNTIME)
        if rt is not None:
            rt = apply_settings(rt, runtime_set)
    names = []
    for item in launchers or ():
        for part in str(item).split(","):
            part = part.strip().lower()
            if part == "all":
                from autoplace.export.registry import LAUNCHERS
                names += list(LAUNCHERS)
            elif part:
                names.append(get_launcher(part).name)
    names = list(dict.fromkeys(names))
    if not names:
        return [Target(None, rt, explicit_runtime=rt is not None)]
    out = []
    for n in names:
        L = get_launcher(n)
        if rt is not None:
            if L.runtime and rt.launcher != L.name:
                raise InputError(f"--runtime {rt.name} is written by launcher '{rt.launcher or 'none'}', not '{n}'; "
                                 f"drop --runtime (then {n} implies {L.runtime}) or pick a runtime of {n}")
            out.append(Target(n, rt, explicit_runtime=True))
        else:
            own = load_runtime(L.runtime) if L.runtime else None
            out.append(Target(n, apply_settings(own, runtime_set) if own is not None and runtime_set else own))
    return out


def default_seq_len(model, targets) -> tuple[int, str]:
    """--seq-len default: the runtime's recipe length when every search agrees on one, else the
    model family's pre-training length, else min(max_seq_len, 4096). Returns (seq, header note)."""
    lens = {t.runtime.defaults.seq_len for t in targets if t.runtime is not None and t.runtime.defaults.seq_len}
    if len(lens) == 1 and all(t.runtime is not None for t in targets) and (
            targets[0].explicit_runtime or targets[0].launcher):
        s = lens.pop()
        return s, f"seq {s} (the {targets[0].runtime.name} recipes' length; --seq-len to change)"
    if model.states_only:
        return 2048, "seq 2048 (no model shape)"
    if model.pretrain_seq_len:
        return model.pretrain_seq_len, (f"seq {model.pretrain_seq_len} (the model's pre-training length; "
                                        "--seq-len to change)")
    s = min(model.max_seq_len, 4096)
    return s, (f"seq {s} (pre-training length unknown; min(max_position_embeddings {model.max_seq_len:,}, 4096); "
               "--seq-len to change)")


def build_train(model, target: Target, seq_len: int, global_batch: int, precision: str, regime,
                fp8_recipe: str = ""):
    """The TrainingSpec a target searches under: the runtime's defaults when it has one."""
    from autoplace.specs.training import TrainingSpec
    if target.runtime is None:
        return TrainingSpec(seq_len=seq_len, global_batch=global_batch, precision=precision,
                            regime=regime or "zero", fp8_recipe=fp8_recipe or "")
    from autoplace.specs.training import training_spec
    return training_spec(target.runtime, seq_len=seq_len, global_batch=global_batch, precision=precision,
                         regime=regime, fp8_recipe=fp8_recipe or "")


def prepare(target: Target, model, hw, train, space=None, space_explicit: bool = False) -> Target:
    """Fill the target's space and rules."""
    from autoplace.export.registry import get_launcher
    from autoplace.search.space import load_space, space_for_runtime
    target.train = train
    base = space if space is not None else load_space("default")
    rules = []
    if target.launcher is not None:
        L = get_launcher(target.launcher)
        rt = target.runtime if (target.runtime is not None and (L.runtime or target.explicit_runtime)) else None
        rules += list(L.rules(rt))
    elif target.runtime is not None and target.explicit_runtime:
        from autoplace.runtimes.check import capability_rules
        rules += list(capability_rules(target.runtime))
    cut = target.runtime is not None and (target.launcher is not None or target.explicit_runtime)
    target.space = space_for_runtime(target.runtime, base=base) if cut else base
    target.rules = tuple(rules)
    return target


def run_target(target: Target, model, hw, world, *, method, top_k, headroom, trials, workers, progress=None,
               families: bool = False, bounded: bool | None = None):
    from autoplace.placement.rules import Ctx
    from autoplace.runtimes.check import precision_refusals
    from autoplace.search.driver import run_search
    if target.runtime is not None and target.launcher is not None:
        why = precision_refusals(target.runtime, hw, target.train)
        if why:
            target.error = LauncherRefusedError(target.launcher, why)
            return target
    ctx = Ctx(model, target.train, world, hw)
    try:
        target.result = run_search(ctx, hw, target.space, method=method, top_k=top_k, headroom=headroom,
                                   progress=progress, trials=trials, workers=workers, extra_rules=target.rules,
                                   families=families, bounded=bounded)
    except NoFeasiblePlanError as e:
        e.train = target.train
        target.error = e
    return target


def runs_on(model, hw, train, plan, world) -> list[str]:
    """The launchers whose exporter accepts `plan` (training-stack launchers first)."""
    from autoplace.export.common import ExportJob
    from autoplace.export.registry import LAUNCHERS
    job = ExportJob(model, hw, train, plan.resolved(world), world)
    return [n for n, L in LAUNCHERS.items() if not L.refusals(job)]


def search(model, hw, world, *, launchers=None, runtime=None, seq_len=None, global_batch=None,
           global_batch_tokens=None, precision="bf16", regime=None, space=None, space_explicit=False,
           method="auto", top_k=5, headroom=0.0, trials=200, workers=None, progress=None,
           per_launcher=True, families=False, runtime_set=(), fp8_recipe: str = "") -> Outcome:
    """The searches `autoplace search` runs for --launcher/--runtime (see the module docstring);
    `runtime_set` (--runtime-set) applies over each search's runtime (autoplace.runtimes.switches).
    families (`search --diverse`): the best plan of each family (one search only)."""
    from autoplace.runtimes.recipes import check_recipe
    from autoplace.search.driver import DEFAULT_TOKENS_PER_STEP, default_global_batch
    check_recipe(precision, fp8_recipe)
    targets = resolve_targets(launchers, runtime, runtime_set)
    if families and len(targets) > 1:
        raise InputError("--diverse takes at most one --launcher (one search); drop the others")
    if seq_len is not None and seq_len < 1:
        raise InputError(f"--seq-len must be ≥ 1, got {seq_len} (omit it for the model's pre-training length)")
    if seq_len is None:
        seq, seq_note = default_seq_len(model, targets)
    else:
        seq, seq_note = seq_len, f"seq {seq_len} (--seq-len)"
    if global_batch is not None and global_batch_tokens is not None:
        raise InputError("give either --global-batch (sequences) or --global-batch-tokens, not both")
    if global_batch is not None:
        if global_batch < 1:
            raise InputError(f"--global-batch must be ≥ 1, got {global_batch}")
        B, note = global_batch, (f"global batch {global_batch} sequences × {seq} = {global_batch * seq:,} tokens "
                                 "per step (--global-batch)")
    else:
        tokens = global_batch_tokens if global_batch_tokens is not None else DEFAULT_TOKENS_PER_STEP
        if tokens < 1:
            raise InputError(f"--global-batch-tokens must be ≥ 1, got {tokens}")
        B, note = default_global_batch(seq, world, tokens)
    out = Outcome(targets, train_note=note, seq_note=seq_note)
    for t in targets:
        prepare(t, model, hw, build_train(model, t, seq, B, precision, regime, fp8_recipe), space, space_explicit)
        run_target(t, model, hw, world, method=method, top_k=top_k, headroom=headroom, trials=trials,
                   workers=workers, progress=progress, families=families)
    ranked = []
    for t in targets:
        if t.result is None:
            continue
        for p, s in zip(t.result["plans"], t.result["steps"]):
            ranked.append((p, float(s), t))
    from autoplace.safe import check_finite_costs  # never rank (or print) a NaN/negative step
    check_finite_costs({f"step of {p.short()}": s for p, s, _ in ranked}, "search")
    ranked.sort(key=lambda x: x[1])
    seen, uniq = set(), []
    for p, s, t in ranked:
        if p not in seen:
            seen.add(p)
            uniq.append((p, s, t))
    out.ranked = uniq[:top_k]
    if not out.ranked:
        errs = [t.error for t in targets if t.error is not None]
        if errs and all(isinstance(e, LauncherRefusedError) for e in errs):
            raise errs[0] if len(errs) == 1 else LauncherRefusedError(
                ", ".join(t.launcher for t in targets), [str(e) for e in errs])
        e = next((e for e in errs if isinstance(e, NoFeasiblePlanError)), None)
        if e is not None:
            if len(targets) > 1:
                e = NoFeasiblePlanError("; ".join(f"{t.launcher}: {t.error}" for t in targets if t.error))
                e.result = None
            raise e
    if per_launcher and targets[0].launcher is None:
        out.best_per_launcher = best_per_launcher(model, hw, world, seq, B, precision, regime, space, space_explicit,
                                                  headroom=headroom, trials=trials, workers=workers,
                                                  runtime_set=runtime_set, fp8_recipe=fp8_recipe)
    return out


def best_per_launcher(model, hw, world, seq, B, precision, regime, space, space_explicit, *, headroom, trials,
                      workers, runtime_set=(), fp8_recipe: str = "") -> dict:
    """Each training-stack launcher's own winner (its constrained search, under its runtime with the
    --runtime-set settings)."""
    from autoplace.export.registry import STACKS
    out = {}
    for n in STACKS:
        t = resolve_targets([n], None, runtime_set)[0]
        prepare(t, model, hw, build_train(model, t, seq, B, precision, regime, fp8_recipe), space, space_explicit)
        run_target(t, model, hw, world, method="exhaustive", top_k=1, headroom=headroom, trials=trials,
                   workers=workers, bounded=True)
        if t.result is not None and t.result["plans"]:
            out[n] = (t.result["plans"][0], float(t.result["steps"][0]), t)
        else:
            out[n] = str(t.error).split(";")[0] if t.error is not None else "no plan"
    return out
