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
- neither: one constrained search per training stack (megatron, deepspeed, torchtitan, accelerate),
  each under its own runtime and memory model, merged by step time: every plan is priced as the stack
  that runs it runs it, and the headline is the best plan a real stack runs. `best_per_launcher` is
  each stack's own winner (the same searches). torchrun / SLURM alone (`-l torchrun`) are ways to
  launch a stack: the same per-stack searches, with the process launcher's node rules added.
- `--runtime default-kernels`: the idealised physics (the TrainingSpec defaults, no stack's
  capability rules), a what-if over the unconstrained space.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from autoplace.errors import AutoplaceError, InputError, LauncherRefusedError, NoFeasiblePlanError

ROBUST_BAND = 0.005
"""Plans within 0.5 % of the fastest are ties under the model's uncertainty (a stated band until
prediction intervals land): among them the simpler plan is ranked first (`simplicity`)."""
ROBUST_K = 8
"""Plans each search keeps (at least) so the robust choice sees the band around the fastest."""
CP_MIN_SEQ = 16384
"""Context parallelism below this sequence length counts as a complication: the stacks' recipes
use CP for long-context training (Llama 3 405B: CP only in the long-context stage, Dubey et al.
2024 §3.3.2; Megatron-Bridge recipes: CP at ≥ 32K)."""

IDEAL_RUNTIME = "default-kernels"
"""`--runtime default-kernels`: the idealised physics no stack runs (what-if questions)."""


@dataclass
class Target:
    """One constrained search: which launcher (None: unconstrained), which runtime physics."""
    launcher: str | None
    runtime: object | None            # RuntimeSpec (None: the default kernels, TrainingSpec defaults)
    explicit_runtime: bool = False
    via: tuple = ()                   # process launchers (torchrun, slurm) that start this stack
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
        via = f" via {', '.join(self.via)}" if self.via else ""
        return f"{self.launcher or 'any launcher'}{via} ({rt})"


@dataclass
class Outcome:
    targets: list
    ranked: list = field(default_factory=list)          # [(plan, step_s, Target)], fastest first
    best_per_launcher: dict = field(default_factory=dict)   # launcher → (plan, step_s, Target) | error str
    train_note: str = ""
    seq_note: str = ""
    families: list = field(default_factory=list)          # --diverse: the family of each ranked plan
    robust_note: str = ""                                 # set when a simpler plan within the band went first
    stack_trains: dict = field(default_factory=dict)    # stack launcher → (TrainingSpec, Target) it prices under
    union: bool = False                                   # the default: one search per training stack

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
    ideal = runtime is not None and str(runtime).strip().lower() == IDEAL_RUNTIME
    if ideal:
        if launchers:
            raise InputError(f"--runtime {IDEAL_RUNTIME} is the idealised physics no launcher writes; "
                             "drop --launcher, or give a runtime of the launcher")
        if runtime_set:
            raise InputError(f"--runtime-set needs a real runtime, not --runtime {IDEAL_RUNTIME}")
        return [Target(None, None, explicit_runtime=True)]
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
        if rt is None:
            return stack_targets()
        return [Target(None, rt, explicit_runtime=True)]
    procs = [n for n in names if not get_launcher(n).runtime]
    if rt is None and procs and len(procs) == len(names):
        # torchrun / SLURM alone: ways to launch a stack, so the stacks' searches with their node rules
        return stack_targets(via=tuple(procs))
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


def stack_targets(via: tuple = (), runtime_set=()) -> list[Target]:
    """One target per training stack (megatron, deepspeed, torchtitan, accelerate) under its own
    runtime; `via`: process launchers whose format rules apply as well."""
    from autoplace.export.registry import STACKS, get_launcher
    from autoplace.runtimes import load_runtime
    from autoplace.runtimes.switches import apply_settings
    out = []
    for n in STACKS:
        own = load_runtime(get_launcher(n).runtime)
        out.append(Target(n, apply_settings(own, runtime_set) if runtime_set else own, via=tuple(via)))
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
        for v in target.via:
            have = {r.id for r in rules}
            rules += [r for r in get_launcher(v).format_rules() if r.id not in have]
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
    union = len(targets) > 1 and all(t.launcher is not None and not t.explicit_runtime for t in targets) and (
        not launchers or all(t.via for t in targets))
    if families and len(targets) > 1 and not union:
        raise InputError("--diverse takes at most one --launcher (one search); drop the others")
    if seq_len is not None and seq_len < 1:
        raise InputError(f"--seq-len must be ≥ 1, got {seq_len} (omit it for the model's pre-training length)")
    if seq_len is None:
        seq, seq_note = default_seq_len(model, targets if not union else [Target(None, None)])
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
    out = Outcome(targets, train_note=note, seq_note=seq_note, union=union)
    k_run = top_k if families else max(top_k, ROBUST_K)     # candidates for the robust choice
    for t in targets:
        prepare(t, model, hw, build_train(model, t, seq, B, precision, regime, fp8_recipe), space, space_explicit)
        run_target(t, model, hw, world, method=method, top_k=k_run, headroom=headroom, trials=trials,
                   workers=workers, progress=progress, families=families)
    ranked = []
    for t in targets:
        if t.result is None:
            continue
        if families:
            ranked += [(q, float(s), t, f) for f, s, q in t.result["families"]]
        else:
            ranked += [(p, float(s), t, None) for p, s in zip(t.result["plans"], t.result["steps"])]
    from autoplace.safe import check_finite_costs  # never rank (or print) a NaN/negative step
    check_finite_costs({f"step of {r[0].short()}": r[1] for r in ranked}, "search")
    ranked.sort(key=lambda x: x[1])
    if not families and ranked:
        ranked += simpler_alternative(ranked[0], model, hw, world, seq, method=method, headroom=headroom,
                                      trials=trials, workers=workers)
        ranked.sort(key=lambda x: x[1])
        ranked, out.robust_note = prefer_simple(ranked, hw, seq)
    seen, uniq = set(), []
    for p, s, t, f in ranked:
        key = f if families else p
        if key not in seen:
            seen.add(key)
            uniq.append((p, s, t, f))
    uniq = uniq[:top_k] if not families else uniq
    out.ranked = [(p, s, t) for p, s, t, _ in uniq]
    out.families = [f for *_, f in uniq] if families else []
    if not out.ranked:
        errs = [t.error for t in targets if t.error is not None]
        if errs and all(isinstance(e, LauncherRefusedError) for e in errs):
            raise errs[0] if len(errs) == 1 else LauncherRefusedError(
                ", ".join(t.launcher for t in targets), [str(e) for e in errs])
        e = next((e for e in errs if isinstance(e, NoFeasiblePlanError)), None)
        if e is not None:
            if len(targets) > 1:
                head = ("no training stack runs a plan that fits (--runtime default-kernels for the idealised "
                        "what-if): " if union else "")
                near = [t for t in targets if isinstance(t.error, NoFeasiblePlanError)
                        and (getattr(t.error, "result", None) or {}).get("closest") is not None]
                near.sort(key=lambda t: t.error.result.get("closest_ratio", float("inf")))
                e = NoFeasiblePlanError(head + "; ".join(f"{t.launcher}: {t.error}" for t in targets if t.error))
                e.result = near[0].error.result if near else None     # the stack that came closest
                e.train = near[0].train if near else None
            raise e
    out.stack_trains = stack_trains(model, targets, seq, B, precision, regime, fp8_recipe, runtime_set)
    if union:
        out.best_per_launcher = {}
        for t in targets:
            if t.result is not None and t.result["plans"]:
                out.best_per_launcher[t.launcher] = (t.result["plans"][0], float(t.result["steps"][0]), t)
            else:
                out.best_per_launcher[t.launcher] = str(t.error).split(";")[0] if t.error is not None else "no plan"
    elif per_launcher and targets[0].launcher is None:
        out.best_per_launcher = best_per_launcher(model, hw, world, seq, B, precision, regime, space, space_explicit,
                                                  headroom=headroom, trials=trials, workers=workers,
                                                  runtime_set=runtime_set, fp8_recipe=fp8_recipe)
    return out


def simplicity(plan, hw, seq: int) -> tuple:
    """Complications of a plan, fewest first: TP across the NVLink domain, CP below CP_MIN_SEQ, then
    the number of parallel dimensions used (TP, PP, CP, EP, HSDP replication)."""
    dom = int(getattr(hw, "scaleup_domain", 0) or getattr(hw, "gpus_per_node", 8) or 8)
    cross_tp = int(max(plan.tp, plan.t_exp if plan.ep > 1 else 1) > dom)
    short_cp = int(plan.cp > 1 and seq < CP_MIN_SEQ)
    dims = sum(int(x > 1) for x in (plan.tp, plan.pp, plan.cp, plan.ep, plan.dp_replicate))
    return cross_tp, short_cp, dims


def _why_simpler(a, b, hw, seq) -> str:
    sa, sb = simplicity(a, hw, seq), simplicity(b, hw, seq)
    if sa[0] < sb[0]:
        return "no TP across the NVLink domain"
    if sa[1] < sb[1]:
        return f"no context parallelism at seq {seq} < {CP_MIN_SEQ:,}"
    return f"{sa[2]} parallel dimensions instead of {sb[2]}"


def simpler_alternative(first, model, hw, world, seq, *, method, headroom, trials, workers) -> list:
    """When the fastest plan has TP across the NVLink domain or CP below CP_MIN_SEQ, the best plan of
    the same search without them (its winner, [(plan, step, target, None)]), so the robust choice
    can weigh it even when it ranks below the search's top-k."""
    from dataclasses import replace as dc_replace

    from autoplace.search.space import Choice
    p, _, t, _ = first
    cross_tp, short_cp, _ = simplicity(p, hw, seq)
    if not (cross_tp or short_cp) or t.space is None:
        return []
    sp = t.space
    if short_cp:
        sp = sp.with_(cp=Choice((1,)))
    if cross_tp:
        dom = int(getattr(hw, "scaleup_domain", 0) or 8)
        tp = sp.tp
        sp = sp.with_(tp=Choice(tuple(v for v in tp.values if isinstance(v, int) and v <= dom)) if tp.values
                      else dc_replace(tp, hi=min(tp.hi or dom, dom)))
    alt = dc_replace(t, space=sp, result=None, error=None)
    run_target(alt, model, hw, world, method=method, top_k=1, headroom=headroom, trials=trials, workers=workers)
    if alt.result is None:
        return []
    return [(q, float(st), t, None) for q, st in zip(alt.result["plans"][:1], alt.result["steps"][:1])]


def prefer_simple(ranked: list, hw, seq: int, band: float = ROBUST_BAND) -> tuple[list, str]:
    """ranked [(plan, step, target, family)] fastest first → the same list with the plans within
    `band` of the fastest ordered by (simplicity, step), and a note when the first plan changed."""
    if len(ranked) < 2:
        return ranked, ""
    s0 = ranked[0][1]
    inside = [r for r in ranked if r[1] <= s0 * (1 + band)]
    rest = ranked[len(inside):]
    inside2 = sorted(inside, key=lambda r: (simplicity(r[0], hw, seq), r[1]))
    note = ""
    if inside2[0] is not ranked[0]:
        a, b = inside2[0], ranked[0]
        note = (f"#1 is a simpler plan within {band:.1%} of the fastest ({a[1]:.4g} s vs {b[1]:.4g} s, "
                f"+{a[1] / b[1] - 1:.2%}, inside the model's uncertainty): {_why_simpler(a[0], b[0], hw, seq)}; "
                f"the fastest, {b[0].short()}, is listed below")
    return inside2 + rest, note


def stack_trains(model, targets, seq, B, precision, regime, fp8_recipe, runtime_set=()) -> dict:
    """stack launcher → (TrainingSpec, Target) each training stack prices a plan under: the searches'
    own where they ran one, else the stack's runtime (with the --runtime-set settings it accepts)."""
    from autoplace.export.registry import STACKS
    out = {t.launcher: (t.train, t) for t in targets if t.launcher in STACKS and t.train is not None}
    for n in STACKS:
        if n in out:
            continue
        try:
            t = resolve_targets([n], None, runtime_set)[0]
        except AutoplaceError:
            t = resolve_targets([n], None, ())[0]
        out[n] = (build_train(model, t, seq, B, precision, regime, fp8_recipe), t)
    return out


def price_on_stacks(model, hw, world, plan, trains: dict, headroom: float = 0.0) -> list[dict]:
    """The plan as each training stack runs it: per stack launcher {launcher, runtime, runs, step_s,
    peak_bytes, limit_bytes, why}: `runs` when the stack's exporter accepts the plan under its runtime
    and its own memory model says the plan fits; step and memory from that runtime's model."""
    from autoplace.estimate import estimate
    from autoplace.export.common import ExportJob
    from autoplace.export.registry import get_launcher
    out = []
    rp = plan.resolved(world)
    for n, (train, t) in trains.items():
        row = {"launcher": n, "runtime": t.runtime.name if t.runtime is not None else None, "runs": False,
               "step_s": None, "peak_bytes": None, "limit_bytes": None, "why": ""}
        try:
            reasons = get_launcher(n).refusals(ExportJob(model, hw, train, rp, world))
        except AutoplaceError as e:
            reasons = [str(e)]
        if reasons:
            row["why"] = reasons[0]
            out.append(row)
            continue
        d = estimate(model, hw, train, rp, world, headroom)
        if not d["legal"]:
            row["why"] = "; ".join(v["message"] for v in d["violations"])[:200]
            out.append(row)
            continue
        mem = d["memory"]
        row.update(step_s=d.get("time", {}).get("step_s"), peak_bytes=mem["peak_bytes"],
                   limit_bytes=mem["limit_bytes"], runs=bool(mem["fits"]))
        if not mem["fits"]:
            row["why"] = (f"does not fit under {row['runtime']}: {mem['peak_bytes'] / 2**30:.1f} > "
                          f"{mem['limit_bytes'] / 2**30:.1f} GiB")
        out.append(row)
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
