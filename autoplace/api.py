"""The Python API: what the command line does, as typed requests and results.

```python
import autoplace
res = autoplace.search(autoplace.SearchRequest(model="13b", gpus=64))
res.best.plan, res.best.step_time_s, res.best.memory_per_stage_gib
res.to_json()            # the document `autoplace search --json` prints
res.to_dataframe()       # one row per plan (needs pandas)
```

Each function takes a request object (not a long keyword list) and returns a frozen result whose
`document` is exactly the `--json` document of the matching command (`autoplace/schemas/`). Errors
are the CLI's: `autoplace.errors.InputError` (bad input), `IllegalPlanError`, `NoFeasiblePlanError`,
`LauncherRefusedError`, each with its one-line message and `exit_code`.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field, replace
from pathlib import Path

__all__ = ["SearchRequest", "EstimateRequest", "SweepRequest", "PlanResult", "SearchResult", "CompareResult",
           "SweepResult", "ExportResult", "search", "estimate", "compare", "sweep", "export", "plan_text"]

GiB = 2**30


# ---- requests ------------------------------------------------------------------------------------
@dataclass(frozen=True)
class SearchRequest:
    """What `autoplace search` takes (the same names as its options)."""
    model: str
    """Preset name (`13b`, `llama3-70b`, …; `autoplace list models`) or a Hugging Face config.json path."""
    gpus: int
    """World size."""
    hardware: str | None = None
    """Profile name (`autoplace list hardware`) or .toml path; default H100-SXM-80GB."""
    gpu_memory: str | None = None
    """Override the device memory, e.g. "40GiB"."""
    gpus_per_node: int | None = None
    seq_len: int | None = None
    """Default: the runtime's recipe length, else the model's pre-training length."""
    global_batch: int | None = None
    """Sequences per step (default ~4 M tokens rounded to legal plans)."""
    global_batch_tokens: int | None = None
    precision: str = "bf16"
    fp8_recipe: str = ""
    regime: str | None = None
    """Optimizer bytes/param regime (default: the runtime's)."""
    runtime: str | None = None
    """The stack whose physics prices the plans (`autoplace list runtimes`)."""
    runtime_set: tuple[str, ...] = ()
    """SWITCH=VALUE settings over the runtime (`--runtime-set`)."""
    launchers: tuple[str, ...] = ()
    """Search only what these launchers can run (`autoplace list launchers`)."""
    space: str = "default"
    method: str = "auto"
    top_k: int = 5
    headroom: float = 0.0
    """Fraction of device memory kept free."""
    trials: int = 200
    workers: int | None = None
    diverse: bool = False
    """The best plan of each family instead of the top-k."""


@dataclass(frozen=True)
class EstimateRequest:
    """What `autoplace estimate` takes (the same names as its options): a plan string, a plan file
    (which fixes model and GPUs; the other fields given override its values), or a launcher config
    (`from_file`, which fixes the plan)."""
    model: str | None = None
    """Preset name or a Hugging Face config.json path (with `plan`; with `from_file` when the file names none)."""
    gpus: int | None = None
    """World size (not needed with `plan_file`)."""
    plan: str | None = None
    """e.g. "tp=8,pp=2,zero=1,sp=1,recompute=selective,mbs=1"."""
    plan_file: str | None = None
    """plan.json, a `search --json` document or one of its entries."""
    from_file: str | None = None
    """A launcher config you already have (`--from`): Megatron-LM args or script, DeepSpeed JSON,
    torchtitan TOML, accelerate YAML."""
    params: str | None = None
    """A bare parameter count instead of `model` (model states only), e.g. "7.5e9"."""
    largest_layer: float | None = None
    """Ψ_max with `params` (the DeepSpeed estimator's term)."""
    hardware: str | None = None
    gpu_memory: str | None = None
    gpus_per_node: int | None = None
    calibration: str | None = None
    """A calibration file (`autoplace calibrate --from-log` / `autoplace tune`): its corrections apply."""
    seq_len: int | None = None
    global_batch: int | None = None
    precision: str | None = None
    """bf16 (default), fp16, fp8, fp4, fp32; None keeps the file's (plan file, launcher config)."""
    fp8_recipe: str | None = None
    regime: str | None = None
    runtime: str | None = None
    runtime_set: tuple[str, ...] = ()
    attention: str = "flash"
    dropout: bool = False
    moe_capacity_factor: float = 0.0
    """0 = dropless MoE."""
    states_only: bool = False
    """P+G+O memory and DP traffic only (ZeRO accounting)."""
    headroom: float = 0.0


@dataclass(frozen=True)
class SweepRequest:
    """What `autoplace sweep` takes."""
    model: str
    gpus: str
    """Range or list: "64..4096", "96..768:+96", "64,128,512"."""
    tokens: str | None = None
    """Tokens to train, e.g. "1T" (for time to train and cost)."""
    hardware: tuple[str, ...] = ()
    space: str = "default"
    method: str = "auto"
    precision: str = "bf16"
    regime: str | None = None
    runtime: str | None = None
    """None: each point priced by the stack that runs it (as `search`); a name: every point under it."""
    headroom: float = 0.0
    workers: int | None = 1


# ---- results -------------------------------------------------------------------------------------
@dataclass(frozen=True)
class PlanResult:
    """One plan, priced: the estimate document with its main numbers as fields."""
    plan: str
    """The plan in `--plan` syntax (the knobs that differ from the defaults)."""
    legal: bool
    fits: bool | None
    step_time_s: float | None
    tokens_per_s_per_gpu: float | None
    mfu: float | None
    peak_memory_gib: float | None
    memory_per_stage_gib: tuple[float, ...]
    """Total per pipeline stage (params … overhead), GiB."""
    breakdown_s: dict
    """Step-time terms after overlap (compute, tp_comm, pp_bubble, …)."""
    violations: tuple[str, ...]
    runs_on: tuple[str, ...]
    """Launchers whose stack runs the plan and whose own model says it fits (search results only)."""
    runtime: str | None
    """The runtime (stack physics) the plan was priced under."""
    document: dict = field(repr=False)
    """The estimate document (`autoplace estimate --json`)."""

    @classmethod
    def from_document(cls, doc: dict) -> "PlanResult":
        mem, tm = doc.get("memory") or {}, doc.get("time") or {}
        return cls(plan=plan_text(doc["plan"]), legal=doc["legal"], fits=mem.get("fits"),
                   step_time_s=tm.get("step_s"), tokens_per_s_per_gpu=tm.get("tokens_per_s_per_gpu"),
                   mfu=tm.get("mfu"), peak_memory_gib=mem["peak_bytes"] / GiB if mem else None,
                   memory_per_stage_gib=tuple(s["total"] / GiB for s in mem.get("per_stage", ())),
                   breakdown_s=dict(tm.get("breakdown_s", {})),
                   violations=tuple(f"{v['rule']}: {v['message']}" for v in doc["violations"]),
                   runs_on=tuple(doc.get("runs_on", ())), runtime=(doc.get("training") or {}).get("runtime"),
                   document=doc)

    def to_json(self) -> str:
        return _dumps(self.document)


def plan_text(d: dict) -> str:
    """A plan dict (`Plan.to_dict()`) in `--plan` syntax: the knobs that differ from the defaults
    (`parse_plan(plan_text(d))` resolves to the same plan)."""
    from dataclasses import fields

    from autoplace.plan import Plan
    p, base = Plan.from_dict(d), Plan()
    parts = []
    for f in fields(Plan):
        v = getattr(p, f.name)
        if (v == getattr(base, f.name) and f.name != "dp") or (f.name == "etp" and v == p.tp) \
                or (f.name == "vpp_group" and v == p.pp):
            continue
        if isinstance(v, bool):
            v = int(v)
        elif isinstance(v, tuple):
            v = ("+" if f.name == "recompute_modules" else "/").join(map(str, v))
        elif f.name == "zero_axes":
            v = v.replace(",", ":")
        parts.append(f"{f.name}={v}")
    return ",".join(parts)


@dataclass(frozen=True)
class SearchResult:
    """The ranked plans of a search, fastest first."""
    plans: tuple[PlanResult, ...]
    best_per_launcher: dict
    """launcher → (plan string, step time s) of its own constrained search, or the reason it found none."""
    stats: dict
    """Candidates, legal, feasible, evaluated, method, seconds, … (`search --json` stats)."""
    document: dict = field(repr=False)
    """The document `autoplace search --json` prints."""

    @property
    def best(self) -> PlanResult:
        return self.plans[0]

    def to_json(self) -> str:
        return _dumps(self.document)

    def to_dataframe(self):
        """One row per plan (pandas DataFrame)."""
        from autoplace._imports import require
        pd = require("pandas", "SearchResult.to_dataframe()")
        return pd.DataFrame([{"plan": p.plan, "step_time_s": p.step_time_s, "tokens_per_s_per_gpu":
                              p.tokens_per_s_per_gpu, "mfu": p.mfu, "peak_memory_gib": p.peak_memory_gib,
                              "runs_on": ",".join(p.runs_on)} for p in self.plans])


@dataclass(frozen=True)
class CompareResult:
    sentence: str
    """What decides the difference, in one sentence."""
    faster: str
    plans: tuple[PlanResult, PlanResult]
    document: dict = field(repr=False)

    def to_json(self) -> str:
        return _dumps(self.document)


@dataclass(frozen=True)
class SweepResult:
    rows: tuple[dict, ...]
    """One row per point: gpus, hardware, status, step_s, tokens_per_s, time_to_train_s, cost, …"""
    pareto: tuple[int, ...]
    document: dict = field(repr=False)

    def to_json(self) -> str:
        return _dumps(self.document)

    def to_dataframe(self):
        from autoplace._imports import require
        pd = require("pandas", "SweepResult.to_dataframe()")
        keys = ("gpus", "hardware", "seq_len", "global_batch", "status", "plan_short", "step_s", "tokens_per_s",
                "mfu", "time_to_train_s", "gpu_hours", "cost")
        return pd.DataFrame([{k: r.get(k) for k in keys} for r in self.rows])


@dataclass(frozen=True)
class ExportResult:
    out_dir: str
    written: dict
    """launcher → files written."""
    refused: dict
    """launcher → the reasons it cannot run the plan."""
    document: dict = field(repr=False)


def _dumps(doc: dict) -> str:
    from autoplace.io import to_jsonable
    return json.dumps(to_jsonable(doc), indent=2)


# ---- the calls -----------------------------------------------------------------------------------
def search(req: SearchRequest) -> SearchResult:
    """`autoplace search`: the fastest legal plans that fit (NoFeasiblePlanError when none does)."""
    from autoplace.errors import InputError
    from autoplace.resolve import check_gpus, resolve_hardware, resolve_model
    from autoplace.search import launchers as LS
    from autoplace.search.space import load_space
    world = check_gpus(req.gpus)
    if req.top_k < 1:
        raise InputError(f"top_k must be ≥ 1, got {req.top_k}")
    m = resolve_model(req.model, None, allow_params=False)
    if m.states_only:
        raise InputError("search needs a model shape (a preset or config.json)")
    hw = resolve_hardware(req.hardware, req.gpu_memory, req.gpus_per_node)
    outcome = LS.search(m, hw, world, launchers=list(req.launchers) or None, runtime=req.runtime,
                        seq_len=req.seq_len, global_batch=req.global_batch,
                        global_batch_tokens=req.global_batch_tokens, precision=req.precision, regime=req.regime,
                        space=load_space(req.space), space_explicit=req.space != "default", method=req.method,
                        top_k=req.top_k, headroom=req.headroom, trials=req.trials, workers=req.workers,
                        families=req.diverse, runtime_set=tuple(req.runtime_set), fp8_recipe=req.fp8_recipe)
    doc = search_document(m, hw, world, outcome, req.headroom, req.top_k, req.diverse)
    bpl = {n: (v["plan_short"], v["step_s"]) if "plan" in v else v["error"]
           for n, v in doc.get("best_per_launcher", {}).items()}
    return SearchResult(plans=tuple(PlanResult.from_document(d) for d in doc["plans"]), best_per_launcher=bpl,
                        stats=doc["stats"], document=doc)


def search_document(model, hw, world, outcome, headroom: float, top_k: int, diverse: bool = False,
                    docs: list | None = None) -> dict:
    """The `search --json` document of a search outcome (`autoplace.search.launchers.search`);
    `docs`: the entries when the caller has already built them (`ranked_docs`)."""
    from autoplace.contract import SCHEMA_VERSION
    from autoplace.runtimes.switches import settings_text
    t0 = outcome.ranked[0][2]
    fam_names = None
    if diverse:     # the best plan of each family (outcome.families, one per ranked entry)
        fam_names = list(outcome.families)
    else:
        outcome = replace(outcome, ranked=outcome.ranked[:top_k])
    if docs is None:
        docs = ranked_docs(model, hw, outcome, world, headroom)
    doc = {"schema_version": SCHEMA_VERSION, "plans": docs,
           "stats": stats_json(t0.result["stats"], outcome.train_note),
           "space": t0.space.to_dict(), "seq_note": outcome.seq_note, "robust_note": outcome.robust_note,
           "searches": [{"launcher": t.launcher, "runtime": t.runtime.name if t.runtime else None,
                         "runtime_set": settings_text(t.runtime) if t.runtime else [],
                         "rules": [r.id for r in t.rules],
                         "stats": stats_json(t.result["stats"], "") if t.result else None,
                         "error": str(t.error) if t.error else None} for t in outcome.targets]}
    if fam_names is not None:
        doc["families"] = fam_names
    if outcome.best_per_launcher:
        doc["best_per_launcher"] = {
            n: ({"plan": v[0].resolved(world).to_dict(), "plan_short": v[0].short(), "step_s": v[1],
                 "runtime": v[2].runtime.name} if isinstance(v, tuple) else {"error": v})
            for n, v in outcome.best_per_launcher.items()}
    return doc


def ranked_docs(model, hw, outcome, world, headroom) -> list[dict]:
    """Estimate documents of the ranked plans, each priced by the stack whose search found it, with
    every stack's own verdict (`stacks`: fits, step time, or why not), the launchers that run it,
    the search that found it and its plan file (so `--plan-file` reads any entry)."""
    from autoplace.estimate import estimate as run
    from autoplace.export.planfile import plan_document
    from autoplace.search.launchers import price_on_stacks
    docs = []
    for p, _, tg in outcome.ranked:
        d = run(model, hw, tg.train, p, world, headroom)
        d["stacks"] = price_on_stacks(model, hw, world, p, outcome.stack_trains, headroom)
        d["runs_on"] = [r["launcher"] for r in d["stacks"] if r["runs"]]
        d["search"] = {"launcher": tg.launcher, "runtime": tg.runtime.name if tg.runtime is not None else None}
        d["plan_file"] = plan_document(model, hw, tg.train, p, world)
        docs.append(d)
    return docs


def stats_json(stats: dict, train_note: str) -> dict:
    keys = ("candidates", "legal", "feasible", "pruned_by_rule", "method", "optimal", "seconds", "evaluated",
            "method_reason", "optimal_note", "space_note", "workers", "trials", "seed", "ilp", "pruned_by_bound")
    out = {k: stats[k] for k in keys if k in stats}
    out["global_batch_note"] = train_note
    return out


def resolve_estimate(req: EstimateRequest):
    """(model, hw, train, plan, world, notes) of an estimate request; `notes` are what was read by
    analogy (said on stderr by the CLI)."""
    from autoplace.analysis.common import build_training, training_from_config
    from autoplace.errors import InputError
    from autoplace.plan import parse_plan
    from autoplace.resolve import check_gpus, resolve_hardware, resolve_model, resolve_runtime
    notes: list[str] = []
    rset = list(req.runtime_set)
    if req.from_file and (req.plan or req.plan_file):
        raise InputError("give one of --from, --plan, --plan-file")
    if req.from_file:
        from autoplace.export import from_config
        m, fc, notes = from_config.resolve(req.from_file, model=req.model, gpus=req.gpus,
                                           gpus_per_node=req.gpus_per_node or 8)
        world, p = fc.world, fc.plan()
        hw = resolve_hardware(req.hardware, req.gpu_memory, req.gpus_per_node)
        rt = resolve_runtime(req.runtime, rset) if (req.runtime or rset) else None
        if rset and req.runtime is None:
            rt = resolve_runtime(fc.runtime, rset)
        train = training_from_config(fc, m, seq_len=req.seq_len, global_batch=req.global_batch,
                                     precision=req.precision, regime=req.regime, runtime=rt,
                                     fp8_recipe=req.fp8_recipe or "")
        train = replace(train, attention=req.attention, dropout=req.dropout)
    elif req.plan_file:
        from autoplace.export.planfile import read_plan_file
        if req.plan:
            raise InputError("give either --plan or --plan-file, not both")
        if req.model or req.params or req.largest_layer is not None:
            raise InputError("--plan-file fixes the model; drop --model/--params/--largest-layer "
                             "(or estimate with --model ... --plan ...)")
        m, hw, train, p, world, _ = read_plan_file(req.plan_file)
        if req.gpus is not None and req.gpus != world:
            raise InputError(f"--gpus {req.gpus} disagrees with the plan file's {world} GPUs; drop --gpus "
                             "(the plan file fixes the GPU count)")
        # the fields given override the file's values
        if req.hardware:
            hw = resolve_hardware(req.hardware, req.gpu_memory, req.gpus_per_node)
        elif req.gpu_memory or req.gpus_per_node is not None:
            from autoplace.resolve import hardware_overrides
            from autoplace.specs.hardware import override_hardware
            hw = override_hardware(hw, **hardware_overrides(req.gpu_memory, req.gpus_per_node))
        if (req.runtime is not None or req.precision is not None or req.regime is not None
                or req.fp8_recipe is not None):
            rt = resolve_runtime(req.runtime, rset) if req.runtime is not None else train.runtime
            regime = req.regime if req.regime is not None else (None if req.runtime is not None else train.regime)
            fp8 = req.fp8_recipe if req.fp8_recipe is not None else (
                "" if req.precision is not None or req.runtime is not None else train.fp8_recipe)
            t2, _ = build_training(m, req.seq_len or train.seq_len, req.global_batch or train.global_batch, None,
                                   req.precision or train.precision, regime, world, runtime=rt, fp8_recipe=fp8)
            train = replace(t2, attention=train.attention, dropout=train.dropout, states_only=train.states_only)
        else:
            if req.seq_len is not None:
                if req.seq_len < 1:
                    raise InputError(f"--seq-len must be ≥ 1, got {req.seq_len}")
                train = replace(train, seq_len=req.seq_len)
            if req.global_batch is not None:
                if req.global_batch < 1:
                    raise InputError(f"--global-batch must be ≥ 1, got {req.global_batch}")
                train = replace(train, global_batch=req.global_batch)
        if rset and req.runtime is None:
            from autoplace.runtimes.switches import apply_settings
            train = replace(train, runtime=apply_settings(train.rt, rset))
    else:
        if req.gpus is None:
            raise InputError("--gpus is required (the world size), e.g. --gpus 64; or give --plan-file")
        world = check_gpus(req.gpus)
        m = resolve_model(req.model, req.params, req.largest_layer)
        hw = resolve_hardware(req.hardware, req.gpu_memory, req.gpus_per_node)
        p = parse_plan(req.plan)
        global_batch = req.global_batch
        if global_batch is None and (req.states_only or m.states_only):
            r = p.resolved(world)     # ZeRO accounting: no gradient accumulation (m = 1)
            global_batch = max(r.dp, 1) * r.mbs
        train, _ = build_training(m, req.seq_len, global_batch, None, req.precision or "bf16", req.regime, world,
                                  runtime=resolve_runtime(req.runtime, rset), fp8_recipe=req.fp8_recipe)
        train = replace(train, attention=req.attention, dropout=req.dropout, states_only=req.states_only,
                        moe_capacity_factor=req.moe_capacity_factor)
    if req.calibration:
        from autoplace.profile.corrections import apply_to_hardware
        hw = apply_to_hardware(hw, req.calibration)
    return m, hw, train, p, world, list(notes)


def _specs(req: EstimateRequest):
    """(model, hw, train, plan, world) of an estimate request."""
    return resolve_estimate(req)[:5]


def estimate(req: EstimateRequest) -> PlanResult:
    """`autoplace estimate`: legality, memory per stage, communication and step time of one plan
    (an illegal or non-fitting plan is a result, not an error: see `.legal`, `.fits`)."""
    from autoplace.estimate import estimate as run
    m, hw, train, p, world = _specs(req)
    return PlanResult.from_document(run(m, hw, train, p, world, req.headroom))


def compare(a: EstimateRequest, b: EstimateRequest, labels: tuple[str, str] = ("A", "B")) -> CompareResult:
    """`autoplace compare`: two plans side by side and the sentence on what decides it."""
    from autoplace.analysis.compare import compare_docs
    from autoplace.estimate import estimate as run
    docs = []
    for req in (a, b):
        m, hw, train, p, world = _specs(req)
        docs.append(run(m, hw, train, p.resolved(world), world, req.headroom))
    cmp = compare_docs(docs[0], docs[1], list(labels))
    v = cmp["verdict"]
    return CompareResult(sentence=v["sentence"], faster=v["faster"],
                         plans=(PlanResult.from_document(docs[0]), PlanResult.from_document(docs[1])), document=cmp)


def sweep(req: SweepRequest) -> SweepResult:
    """`autoplace sweep`: the best plan per GPU count (× hardware), time to train and cost."""
    from autoplace.analysis import inputs as I
    from autoplace.analysis.sweep import SweepConfig, grid, run_sweep
    from autoplace.contract import SCHEMA_VERSION
    from autoplace.errors import InputError
    from autoplace.resolve import resolve_hardware, resolve_model
    from autoplace.search.space import load_space
    m = resolve_model(req.model, None)
    if m.states_only:
        raise InputError("sweep needs a model shape (a preset or config.json)")
    hws = [(hw.name, hw) for hw in (resolve_hardware(h) for h in (req.hardware or (None,)))]
    n_tok = I.parse_tokens(req.tokens) if req.tokens is not None else None
    cfg = SweepConfig(precision=req.precision, regime=req.regime, method=req.method, headroom=req.headroom,
                      tokens=n_tok, runtime=req.runtime)
    sp = load_space(req.space)
    res = run_sweep(m, hws, grid(I.parse_gpus(req.gpus), len(hws), [None], [None]), sp, cfg, workers=req.workers)
    doc = {"schema_version": SCHEMA_VERSION, "model": m.name, "tokens": n_tok, "space": sp.name, **res}
    return SweepResult(rows=tuple(doc["rows"]), pareto=tuple(doc["pareto"]), document=doc)


def export(plan_file: str | Path | dict, launchers: tuple[str, ...] = ("all",), out: str | Path = "out") -> ExportResult:
    """`autoplace export`: the launcher files of a plan (a plan file path, a `search --json` document or
    entry, or `SearchResult.best.document["plan_file"]`). LauncherRefusedError when every launcher refuses."""
    from autoplace.errors import LauncherRefusedError
    from autoplace.export import export_all, resolve_launchers
    from autoplace.export.planfile import plan_document, read_plan_file, specs_from_document
    if isinstance(plan_file, dict):
        model, hw, train, plan, world, predicted = specs_from_document(plan_file)
    else:
        model, hw, train, plan, world, predicted = read_plan_file(plan_file)
    doc = plan_document(model, hw, train, plan, world, predicted)
    res = export_all(doc, resolve_launchers(list(launchers)), str(out))
    if not res.written:
        raise LauncherRefusedError(", ".join(res.refused), [r for rs in res.refused.values() for r in rs])
    return ExportResult(out_dir=str(res.out_dir), written=dict(res.written), refused=dict(res.refused),
                        document=res.to_dict())
