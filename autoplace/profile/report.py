"""Measured vs predicted: one JSON record per profiled plan.

Record (schema `PROFILE_SCHEMA_VERSION`):
  schema_version, index, status ("ok" | "skipped" | "failed" | "timeout" | "oom"), error,
  model, world, backend, plan (Plan.to_dict), plan_short, legal, violations (rule checker),
  ranks: [{rank, stage, step_s, state_bytes{params,grads,optimizer}, activation_bytes,
           peak_memory_bytes (CUDA max_memory_allocated), peak_reserved_bytes (CUDA
           max_memory_reserved), memory_tracker{tool, peak_bytes, by_category, grouped} (torch's
           FSDPMemTracker / MemTracker over the instrumented step, any device, pp = 1),
           collective_bytes{dp,tp,pp,cp,ep}, ...}],
  predicted: [{rank, stage, step_s, state_bytes{...}, activation_bytes, collective_bytes{...},
               memory{params, grads, optimizer, activations, transient, reserve, allocated,
               reserved} (`cost.memory.stage_memory` of the rank's stage)}],
  state_bytes_exact, activation_gap (measured/predicted − 1, max |.| over ranks),
  peak_memory_gap (measured peak / predicted − 1, max |.| over ranks: CUDA max_memory_reserved vs
  predicted reserved, else the tracker's peak vs predicted allocated),
  collective_match (per axis: max relative gap over ranks),
  equivalence {equivalent, max_abs_diff, max_abs_diff_params, max_abs_diff_loss, steps, tolerance}.
"""

from __future__ import annotations

import math

PROFILE_SCHEMA_VERSION = "1.0"

# fp32, a few Adam steps at lr 1e-3 with eps 1e-4 (runner.DEFAULTS): sharded/parallel runs differ
# from the single process only by summation order (≈1e-7 relative per op); observed on llama-tiny
# max |Δθ| ≤ 1.4e-7 and max |Δloss| ≤ 8e-7 over every legal plan, while removing a required
# reduction moves parameters by ≥ 4e-3. (Adam's eps is 1e-4, not 1e-8, for this check: with a tiny
# eps the update lr·m/(√v+eps) is ≈ lr·sign(g) and amplifies rounding noise in near-zero gradient
# elements into O(lr) parameter differences — 4.8e-4 was observed for a correct DDP run.)
DEFAULT_TOLERANCE = {"params_atol": 1e-5, "loss_atol": 1e-5}


def executed_plan(plan):
    """The plan as this runner executes it, for predictions: ZeRO-1/2 (`ShardedAdam`) reduce the
    gradients after the backward, not bucketed under it (dp_overlap=False). Everything else runs
    as the plan says."""
    if plan.zero in (1, 2) and plan.dp > 1 and plan.dp_overlap:
        return plan.with_(dp_overlap=False)
    return plan


CUDA_RESERVE_FRAC = 0.10
"""The runner's caching-allocator reserve on CUDA (reserved = allocated · (1 + f)): it allocates and
frees FSDP2 gather / reduce-scatter buffers every layer, like torchtitan (`reserve_frac` 0.10). On
CPU there is no caching allocator: the `torch-native` runtime's 0."""


def runner_runtime(settings: dict, backend: str = "gloo"):
    """The RuntimeSpec the runner's runs are predicted with: the default runtime's kernel and
    collective behaviour (what every step-time prediction and `autoplace calibrate` has used) with
    the memory behaviour of the runner's own runtime (`settings.RUNNER_RUNTIME`, torch-native):
    its selective policy replaced by the run's (`selective_policy`), its reserve 0 on CPU and
    `CUDA_RESERVE_FRAC` on CUDA, and the gathered-input saving of its SP implementation
    (`sp_impl` "dtensor": torch's layouts save the gathered QKV / FC1 / output inputs)."""
    import dataclasses

    from autoplace.profile.settings import RUNNER_RUNTIME, selective_policy
    from autoplace.runtimes import load_runtime
    base = load_runtime(None)
    mem = load_runtime(RUNNER_RUNTIME).memory
    mem = dataclasses.replace(mem, selective=selective_policy(settings),
                              reserve_frac=CUDA_RESERVE_FRAC if backend == "nccl" else mem.reserve_frac,
                              tp_saves_gathered_input=settings.get("sp_impl") == "dtensor")
    return dataclasses.replace(base, memory=mem)


def runner_attention(spec, backend: str) -> str:
    """The SDPA kernel the runner's fp32 attention takes: on CPU the flash kernel; on CUDA the
    flash kernel takes no fp32, the memory-efficient one no `enable_gqa`, so a GQA model runs the
    math path (scores kept at 4 B, K and V expanded: H200 run, benchmarks/results/
    h200_device_check_exactness.jsonl) and an MHA model the memory-efficient kernel (LSE only)."""
    if backend == "nccl" and spec is not None and spec.a_kv != spec.heads and not spec.mla:
        return "eager"
    return "flash"


def train_spec(settings: dict, backend: str = "gloo", spec=None):
    from autoplace.specs.training import TrainingSpec
    return TrainingSpec(seq_len=int(settings["seq_len"]), global_batch=int(settings["global_batch"]),
                        precision=settings.get("precision") or "fp32", regime="fp32",
                        attention=runner_attention(spec, backend),
                        moe_capacity_factor=float(settings.get("moe_capacity_factor") or 0.0),
                        vocab_divisible_by=1, runtime=runner_runtime(settings, backend))


def predict(spec, settings: dict, plan, world: int, stage: int, hardware=None,
            backend: str = "gloo") -> dict:
    """The cost model's numbers for one rank of pipeline stage `stage`."""
    import numpy as np

    from autoplace.cost.memory import (
        allocated_bytes,
        model_state_bytes,
        reserved_bytes,
        stage_activation_bytes,
        stage_memory,
    )
    from autoplace.placement.rules import Ctx
    train = train_spec(settings, backend, spec)
    ctx = Ctx(spec, train, world)
    params, grads, optim = model_state_bytes(ctx, plan, stage)
    sm = stage_memory(ctx, None, plan, stage)
    mem = {k: float(np.asarray(v)) for k, v in sm.items() if k not in ("total", "overhead")}
    mem["allocated"] = float(np.asarray(allocated_bytes(sm)))
    mem["reserved"] = float(np.asarray(reserved_bytes(sm)))
    out = {"stage": stage,
           "state_bytes": {"params": float(np.asarray(params)), "grads": float(np.asarray(grads)),
                           "optimizer": float(np.asarray(optim))},
           "activation_bytes": float(np.asarray(stage_activation_bytes(ctx, plan, stage))),
           "memory": mem}
    try:
        from autoplace.cost.comm import comm_bytes_per_step
        cb = comm_bytes_per_step(ctx, plan, stage)
        out["collective_bytes"] = {k: float(np.asarray(cb[k])) for k in ("dp", "tp", "pp", "cp", "ep")}
        out["offload_bytes"] = float(np.asarray(cb.get("offload", 0.0)))
    except Exception as e:  # noqa: BLE001 - written into the record, see below
        # runs in the worker after the plan was measured: a failing prediction must not lose the
        # measurement, so the error goes into the record (`collective_error`, `step_error`); the
        # launching process predicts again where it needs the number and raises there
        # (`candidates.profile_candidates`)
        out["collective_bytes"] = None
        out["collective_error"] = f"{type(e).__name__}: {e}"
    out["step_s"] = None
    if hardware:
        try:
            out["step_s"] = predict_step_time(spec, settings, plan, world, hardware)
        except Exception as e:  # noqa: BLE001 - as above
            out["step_error"] = f"{type(e).__name__}: {e}"
    return out


def predict_step_time(spec, settings: dict, plan, world: int, hardware) -> float | None:
    from autoplace.estimate import estimate
    from autoplace.specs.hardware import HardwareSpec, load_hardware
    hw = hardware if isinstance(hardware, HardwareSpec) else load_hardware(str(hardware))
    doc = estimate(spec, hw, train_spec(settings), executed_plan(plan.resolved(world)), world)
    t = doc.get("time")
    return float(t["step_s"]) if t else None


def _rel(a, b):
    if a is None or b is None:
        return None
    if b == 0:
        return 0.0 if a == 0 else math.inf
    return a / b - 1.0


def measured_peak(r: dict):
    """A rank's measured peak: CUDA's max_memory_reserved when there is one, else the peak of
    torch's memory tracker (allocated tensor bytes; on CPU reserved = allocated)."""
    if r.get("peak_reserved_bytes"):
        return r["peak_reserved_bytes"]
    mt = r.get("memory_tracker")
    return mt["peak_bytes"] if mt else None


def build_record(spec, settings: dict, plan, world: int, ranks, *, status="ok", error=None,
                 backend="gloo", hardware=None, wall_s=None, index=None, tolerance=None) -> dict:
    from autoplace.placement.rules import Ctx, check
    plan = plan.resolved(world)
    tol = dict(DEFAULT_TOLERANCE, **(tolerance or {}))
    ctx = Ctx(spec, train_spec(settings), world)
    viol = [v.to_dict() for v in check(ctx, plan)]
    rec = {"schema_version": PROFILE_SCHEMA_VERSION, "index": index, "status": status, "error": error,
           "model": spec.name, "world": world, "backend": backend,
           "settings": {k: settings[k] for k in ("seq_len", "global_batch", "steps", "warmup", "seed",
                                                 "lr", "selective_policy") if k in settings},
           "plan": plan.to_dict(), "plan_short": plan.short(), "legal": not viol, "violations": viol,
           "wall_s": wall_s}
    if status != "ok" or not ranks:
        rec.update({"ranks": [], "predicted": [], "state_bytes_exact": None, "equivalence": None})
        return rec
    ranks = sorted(ranks, key=lambda r: r["rank"])
    cache = {}
    preds = []
    for r in ranks:
        st = r["stage"]
        if st not in cache:
            cache[st] = predict(spec, settings, plan, world, st, hardware, backend=backend)
        preds.append({"rank": r["rank"], **cache[st]})
    exact = all(all(abs(r["state_bytes"][k] - p["state_bytes"][k]) < 0.5
                    for k in ("params", "grads", "optimizer")) for r, p in zip(ranks, preds))
    gaps = [_rel(r["activation_bytes"], p["activation_bytes"]) for r, p in zip(ranks, preds)]
    gaps = [g for g in gaps if g is not None]
    peak_gaps = [_rel(measured_peak(r), p["memory"]["reserved" if r.get("peak_reserved_bytes") else "allocated"])
                 for r, p in zip(ranks, preds)]
    peak_gaps = [g for g in peak_gaps if g is not None]
    comm_gap = {}
    for ax in ("dp", "tp", "pp"):
        worst = 0.0
        for r, p in zip(ranks, preds):
            if not r.get("collective_bytes") or not p.get("collective_bytes"):
                worst = None
                break
            mv, pv = r["collective_bytes"].get(ax, 0.0), p["collective_bytes"].get(ax, 0.0)
            g = _rel(mv, pv)
            if g is None:
                continue
            worst = g if abs(g) > abs(worst) else worst
        comm_gap[ax] = worst
    eqs = [r["equivalence"] for r in ranks if r.get("equivalence")]
    equivalence = None
    if eqs:
        dp_ = max(e["max_abs_diff_params"] for e in eqs)
        dl = max(e["max_abs_diff_loss"] for e in eqs)
        equivalence = {
            "equivalent": bool(dp_ <= tol["params_atol"] and dl <= tol["loss_atol"]),
            "max_abs_diff": max(dp_, dl), "max_abs_diff_params": dp_, "max_abs_diff_loss": dl,
            "steps": len(ranks[0]["losses"]), "tolerance": tol,
            "losses": ranks[0]["losses"],
        }
    rec.update({
        "dp_kind": ranks[0].get("dp_kind"),
        "ranks": ranks, "predicted": preds, "state_bytes_exact": exact,
        "activation_gap": max(gaps, key=abs) if gaps else None,
        "peak_memory_gap": max(peak_gaps, key=abs) if peak_gaps else None,
        "collective_gap": comm_gap,
        "equivalence": equivalence,
        "step_s": max((r["step_s"] or 0.0) for r in ranks),
        "predicted_step_s": preds[0].get("step_s"),
    })
    return rec
