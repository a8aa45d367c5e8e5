"""One plan → the `estimate` document: legality, placement, memory per stage, communication, time.

The document is what `autoplace estimate --json` prints and what every entry of `search --json`'s
`plans` is. All numbers come from autoplace.cost (the same functions the vectorized search calls).
"""

from __future__ import annotations

import numpy as np

from autoplace import SCHEMA_VERSION
from autoplace.cost import comm as C
from autoplace.cost import memory as M
from autoplace.cost.step import BREAKDOWN, evaluate
from autoplace.placement import compose
from autoplace.placement.rules import Ctx, check, notes


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


def estimate(model, hw, train, plan, world: int, headroom: float = 0.0) -> dict:
    plan = plan.resolved(world)
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
                     "fp8_recipe": _recipe(train, hw), **_runtime_fields(train)},
        "plan": plan.to_dict(),
        "legal": not violations,
        "violations": [v.to_dict() for v in violations],
        "notes": [v.to_dict() for v in notes(ctx, plan)],
        "placement": compose(plan).table(),
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
    doc["memory"] = {
        "per_stage": stages,
        "peak_bytes": peak,
        "allocated_bytes": max(s["allocated"] for s in stages),
        "reserved_bytes": max(s["reserved"] for s in stages),
        "binding_stage": max(stages, key=lambda s: s["total"])["stage"],
        "limit_bytes": _f(limit),
        "fits": peak <= limit,
        "activation_bytes_per_layer": _f(M.activation_bytes_per_layer(ctx, plan)),
    }
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
        }
    return doc
