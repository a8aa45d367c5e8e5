"""One plan → the `estimate` document: legality, placement, memory per stage, communication, time.

The document is what `autoplace estimate --json` prints and what every entry of `search --json`'s
`plans` is. All numbers come from autoplace.cost (the same functions the vectorized search calls).
"""

from __future__ import annotations

import numpy as np

from autoplace.contract import SCHEMA_VERSION
from autoplace.cost import comm as C
from autoplace.cost import memory as M
from autoplace.cost.step import BREAKDOWN, evaluate
from autoplace.placement import compose
from autoplace.placement.rules import Ctx, check, notes
from autoplace.plan import with_pipeline_accounting


def _f(x) -> float:
    return float(np.asarray(x))


def _recipe(train, hw) -> str:
    """The FP8/FP4 recipe the GEMMs run ('' outside fp8/fp4): the stated one or the runtime's default."""
    if train.precision not in ("fp8", "fp4"):
        return ""
    from autoplace.cost.precision import resolve_recipe
    return resolve_recipe(train, hw)


def _runtime_fields(train) -> dict:
    """The runtime that priced the plan: its name and the settings applied over its file."""
    rt = getattr(train, "runtime", None)
    if rt is None:
        return {"runtime": None, "runtime_set": []}
    from autoplace.runtimes import load_runtime
    from autoplace.runtimes.switches import settings_text
    rt = load_runtime(rt)
    return {"runtime": rt.name, "runtime_set": settings_text(rt)}


def _matmul(train, hw) -> str:
    """The dtype the matmuls run in: the recipe's for fp8/fp4, TF32 for fp32 where it runs."""
    if train.precision in ("fp8", "fp4"):
        return train.precision
    from autoplace.cost.precision import matmul_dtype
    return matmul_dtype(train, hw)


def _intervals(model, hw, train, kind: str, x: float) -> dict:
    """{"80": {...}, "90": {...}}: the prediction x's split-conformal interval at each level
    (autoplace.cost.intervals; empty where no residuals are shipped)."""
    from autoplace.cost import intervals as IV
    out = {}
    for lv in (0.8, 0.9):
        iv = IV.interval(kind, train.rt.name, bool(model.is_moe), getattr(hw, "arch", ""), lv)
        if iv:
            out[f"{round(lv * 100)}"] = {"lo": x * iv["lo"], "hi": x * iv["hi"], "class": iv["class"],
                                         "pool": iv["pool"], "n": iv["n"], "exact": iv["exact"]}
    return out


def estimate(model, hw, train, plan, world: int, headroom: float = 0.0) -> dict:
    plan = plan.resolved(world)
    if not (train.states_only or model.states_only):
        plan = with_pipeline_accounting(plan, model.layers)
    ctx = Ctx(model, train, world)
    violations = check(ctx, plan)
    doc = {
        "schema_version": SCHEMA_VERSION,
        "model": {"name": model.name, "params": model.total_params(),
                  "layers": model.layers if not model.states_only else None,
                  **({"analogy": model.analogy} if getattr(model, "analogy", "") else {})},
        "hardware": {"name": hw.name, "gpus": world, "gpus_per_node": hw.gpus_per_node,
                     "memory_bytes": hw.memory_bytes},
        "training": {"seq_len": train.seq_len, "global_batch": train.global_batch,
                     "precision": train.precision, "regime": train.regime, "attention": train.attention,
                     "states_only": train.states_only or model.states_only,
                     "fp8_recipe": _recipe(train, hw), "matmul_dtype": _matmul(train, hw),
                     **_runtime_fields(train)},
        "plan": plan.to_dict(),
        "legal": not violations,
        "violations": [v.to_dict() for v in violations],
        "notes": [v.to_dict() for v in notes(ctx, plan)],
        "placement": compose(plan, ctx.train.rt.comm.pp_defer_grad_sync).table(),
    }
    if violations:
        return doc
    pp = plan.pp
    stages = []
    for i in range(pp):
        sm = M.stage_memory(ctx, hw, plan, i)
        stages.append({"stage": i, **{k: _f(v) for k, v in sm.items()}})
    peak = max(s["total"] for s in stages)
    states_only = train.states_only or model.states_only
    limit = M.memory_limit(hw, headroom) if not states_only else hw.memory_bytes
    per_stage_comm = [{k: _f(v) for k, v in C.comm_bytes_per_step(ctx, plan, i).items()} for i in range(pp)]
    comm = {k: max(s[k] for s in per_stage_comm) for k in ("dp", "tp", "pp", "cp", "ep", "offload")}
    for st in stages:
        st["allocated"] = st["total"] - st["reserve"] - st["overhead"]
        st["reserved"] = st["total"] - st["overhead"]
        st["device"] = st["total"]
    outside = M.overhead_parts(ctx, hw, plan)
    # offloaded states per rank against the node's host memory (M.host_fits: first and last stage)
    host = _f(M.host_need(ctx, plan)) if plan.off else 0.0
    host_lim = M.host_limit(hw, world)
    doc["memory"] = {
        "per_stage": stages,
        "peak_bytes": peak,
        "allocated_bytes": max(s["allocated"] for s in stages),
        "reserved_bytes": max(s["reserved"] for s in stages),
        "device_bytes": peak,
        "outside_allocator": {f"{k}_bytes": _f(v) for k, v in outside.items()},
        "binding_stage": max(stages, key=lambda s: s["total"])["stage"],
        "limit_bytes": _f(limit),
        "fits": bool(peak <= limit and M.host_fits(ctx, hw, plan)),
        "host_bytes": host,
        "host_limit_bytes": host_lim,
        "activation_bytes_per_layer": _f(M.activation_bytes_per_layer(ctx, plan)),
        "interval": _intervals(model, hw, train, "memory", peak),
    }
    hi90 = (doc["memory"]["interval"].get("90") or {}).get("hi", peak)
    doc["memory"]["near_limit"] = bool(peak <= limit < hi90)       # fits, but not at its 90 % upper bound
    doc["communication"] = {"bytes_per_step": comm, "per_stage": per_stage_comm}
    if not states_only:
        ev = evaluate(ctx, hw, plan, headroom)
        doc["time"] = {
            "step_s": _f(ev["step_s"]),
            "tokens_per_s_per_gpu": _f(ev["tokens_per_s_per_gpu"]),
            "mfu": _f(ev["mfu"]), "hfu": _f(ev["hfu"]),
            "tflops_per_gpu": _f(ev["tflops_per_gpu"]),
            "breakdown_s": {k: _f(ev[k]) for k in BREAKDOWN},
            "overlapped_s": {"dp_comm": _f(ev["dp_comm_overlapped"]), "tp_comm": _f(ev["tp_comm_overlapped"]),
                             "cp_comm": _f(ev["cp_comm_overlapped"])},
            "bubble_fraction": _f(ev["bubble_fraction"]),
            "micro_batches": _f(ev["micro_batches"]),
            "interval": _intervals(model, hw, train, "step", _f(ev["step_s"])),
        }
    _check_costs(doc)
    return doc


def _check_costs(doc: dict) -> None:
    """Every step time, throughput, memory and byte count is finite and ≥ 0 before anyone prints it."""
    from autoplace.safe import check_finite_costs
    mem, t = doc["memory"], doc.get("time") or {}
    vals = {"memory.peak_bytes": mem["peak_bytes"],
            **{f"memory.stage{s['stage']}.total": s["total"] for s in mem["per_stage"]},
            **{f"communication.{k}": v for k, v in doc["communication"]["bytes_per_step"].items()}}
    if t:
        vals.update({f"time.{k}": t[k] for k in ("step_s", "tokens_per_s_per_gpu", "mfu", "hfu", "tflops_per_gpu")})
        vals.update({f"time.breakdown_s.{k}": v for k, v in t["breakdown_s"].items()})
        t["breakdown_s"] = {k: max(v, 0.0) for k, v in t["breakdown_s"].items()}   # −1e-19 rounding → 0
    check_finite_costs(vals, "estimate")


from autoplace._callable import make_callable  # noqa: E402

make_callable(__name__)   # `autoplace.estimate(request)` calls autoplace.api.estimate
