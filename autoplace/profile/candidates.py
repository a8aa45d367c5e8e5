"""Candidate profiling: run the search's top-K plans for real, compare with the prediction, re-rank.

`profile_candidates(model, plans, nproc, backend, steps, out_dir)` is what
`autoplace search --profile-top K` calls: it runs each plan with the plan runner (torchrun, a few
steps, scaled to the local devices), and returns one result per plan, ordered by MEASURED step time
(failed/skipped candidates last, with their error), each with the prediction next to it. The
records go to `out_dir/candidates.jsonl` (default: a new `runs/profile-candidates-…/` folder).
"""

from __future__ import annotations

import math
from pathlib import Path

from autoplace.io import default_run_dir


class CandidateResults(list):
    """The results list; str() is the predicted-vs-measured table."""

    def __str__(self) -> str:
        return format_table(self)


def profile_candidates(model, plans, nproc: int | None = None, backend: str | None = None,
                       steps: int = 3, out_dir: str | Path | None = None, *, hardware=None, hw=None,
                       train=None, world: int | None = None, predicted=None, settings: dict | None = None,
                       plan_timeout_s: float = 600.0, equivalence: bool = False,
                       rerank: bool = True) -> "CandidateResults":
    """Measure `plans` on `nproc` local ranks; results sorted by measured step time (a list).

    Each result: {plan, plan_short, status, error, predicted_rank, measured_rank,
    predicted_step_s (the cost model on the profiled configuration), measured_step_s, rel_error,
    search_predicted_step_s (the search's own prediction at full scale, when `predicted` is given),
    state_bytes_exact, record}. Candidates are scaled to what fits here: the world becomes nproc
    (tp, pp shrunk if they do not divide it, dp re-derived), the model keeps its per-layer shapes
    with fewer layers when it is too big for the device (a CPU falls back to `llama-tiny`), and the
    batch/sequence are small. `hw`/`hardware`: the profile used for the predicted step time
    (`autoplace calibrate`'s output for a meaningful comparison). `train`, `world`: accepted for the
    search's call signature (the full-scale job; only seq_len is reused, capped).
    """
    from autoplace.profile.launch import run_plans
    from autoplace.profile.report import predict_step_time
    from autoplace.profile.settings import DEFAULTS
    hardware = hardware if hardware is not None else hw
    backend, nproc = _local_devices(backend, nproc)
    out_dir = Path(out_dir) if out_dir else default_run_dir("profile-candidates", model.name, nproc)
    scaled = [_scale(p, nproc) for p in plans]
    pmodel = scale_model(model, scaled, backend, nproc)
    s = {"steps": int(steps)}
    if train is not None:
        s["seq_len"] = int(min(train.seq_len, 256 if backend == "gloo" else 2048, pmodel.max_seq_len))
    s["global_batch"] = _global_batch(scaled)
    s.update(settings or {})
    recs = run_plans(pmodel, scaled, nproc, backend=backend, out_jsonl=out_dir / "candidates.jsonl",
                     settings=s, hardware=hardware, plan_timeout_s=plan_timeout_s, equivalence=equivalence,
                     workdir=out_dir / "work")
    full = dict(DEFAULTS, **s)
    results = CandidateResults()
    for i, (p, rec) in enumerate(zip(scaled, recs)):
        pred = rec.get("predicted_step_s")
        if pred is None and hardware is not None and rec.get("legal", True):
            pred = predict_step_time(pmodel, full, p.resolved(nproc), nproc, hardware)
        meas = rec.get("step_s") if rec.get("status") == "ok" else None
        sp = None
        if predicted is not None and i < len(predicted):
            sp = ((predicted[i] or {}).get("time") or {}).get("step_s")
        results.append({
            "plan": rec.get("plan"), "plan_short": rec.get("plan_short"), "status": rec.get("status"),
            "error": rec.get("error"), "predicted_rank": i + 1, "predicted_step_s": pred,
            "measured_step_s": meas, "search_predicted_step_s": sp,
            "rel_error": (pred / meas - 1.0) if (pred and meas) else None,
            "state_bytes_exact": rec.get("state_bytes_exact"), "model": pmodel.name, "record": rec})
    if rerank:
        results.sort(key=lambda r: (r["measured_step_s"] is None, r["measured_step_s"] or math.inf))
    for k, r in enumerate(results):
        r["measured_rank"] = k + 1 if r["measured_step_s"] is not None else None
    return results


def select_runnable(model, plans, k: int, nproc: int | None = None, backend: str | None = None,
                    seq_len: int = 128) -> tuple[list[int], list[tuple[int, str]]]:
    """The first k of the ranked `plans` that the plan runner can execute here, after scaling to
    nproc ranks, one per distinct scaled configuration: (indices taken, [(index, why skipped)]).
    The reasons are the runner's own checks (`capabilities.runner_refusals`), without launching
    anything."""
    from autoplace.profile.capabilities import runner_refusals
    from autoplace.profile.settings import DEFAULTS
    backend, nproc = _local_devices(backend, nproc)
    taken, skipped, seen = [], [], set()
    for i, p in enumerate(plans):
        if len(taken) >= k:
            break
        q = _scale(p, nproc)
        spec = scale_model(model, [q], backend, nproc)
        job = dict(DEFAULTS, seq_len=min(seq_len, spec.max_seq_len), global_batch=_global_batch([q]))
        why = runner_refusals(q, spec, job, backend, world=nproc)
        if why:
            skipped.append((i, "; ".join(why)))
            continue
        key = q.short()
        if key in seen:
            skipped.append((i, f"runs as {key} here, like a candidate already taken"))
            continue
        seen.add(key)
        taken.append(i)
    return taken, skipped


def _local_devices(backend, nproc):
    import torch
    if backend is None:
        backend = "nccl" if torch.cuda.is_available() else "gloo"
    if nproc is None:
        nproc = torch.cuda.device_count() if backend == "nccl" else 2
    return backend, max(1, int(nproc))


def _global_batch(plans) -> int:
    """Smallest batch every plan can split: lcm of mbs·dp·pp (≥ pp micro-batches for 1F1B)."""
    import math as _m
    b = 1
    for p in plans:
        b = _m.lcm(b, max(p.mbs, 1) * max(p.dp, 1) * max(p.pp, 1))
    return max(b, 2)


def scale_model(model, plans, backend: str, nproc: int):
    """The real model when it fits, else the same per-layer shapes with fewer layers, else (CPU)
    the llama-tiny preset."""
    from autoplace.specs.presets import get_preset
    if model.states_only or model.is_moe:
        return get_preset("llama-tiny")
    need_layers = 1
    for p in plans:
        need_layers = max(need_layers, p.pp * p.v)
    budget = (4 * 2**30) if backend == "gloo" else _cuda_budget()
    per_layer = 16.0 * model.layer_dense_params()
    rest = 16.0 * (model.embedding_params() + model.output_params())
    if backend == "gloo" and model.total_params() > 50e6:
        # CPU ranks: a few hundred MFLOP per step at most
        return get_preset("llama-tiny")
    if 16.0 * model.total_params() <= budget:
        return model
    L = int((budget - rest) // per_layer)
    L = (L // need_layers) * need_layers
    if L >= need_layers:
        return model.with_(layers=L, name=f"{model.name} ({L} layers)")
    return get_preset("llama-tiny")


def _cuda_budget() -> float:
    import torch
    try:
        return 0.5 * torch.cuda.get_device_properties(0).total_memory
    except (AssertionError, RuntimeError):  # torch without CUDA, or no device visible
        return 8 * 2**30


def _scale(plan, nproc: int):
    """Fit a candidate onto nproc ranks: keep tp·pp·cp when they divide nproc, else shrink tp then pp."""
    from autoplace.plan import Plan
    p = plan if isinstance(plan, Plan) else Plan.from_dict(plan)
    tp, pp, cp = p.tp, p.pp, p.cp
    while tp * pp * cp > nproc or nproc % (tp * pp * cp):
        if tp > 1:
            tp //= 2
        elif pp > 1:
            pp //= 2
        elif cp > 1:
            cp //= 2
        else:
            break
    dp = nproc // (tp * pp * cp)
    rep = p.dp_replicate if dp % max(p.dp_replicate, 1) == 0 else 1
    kw = dict(tp=tp, pp=pp, cp=cp, dp=dp, dp_replicate=rep)
    if pp == 1:
        kw.update(vpp=1, schedule="1f1b" if p.schedule == "interleaved" else p.schedule)
    if tp == 1:
        kw["sp"] = False
    return p.with_(**kw)


def format_table(results: list[dict]) -> str:
    """Plain-text predicted vs measured table (measured order)."""
    rows = [("meas#", "pred#", "plan", "predicted s", "measured s", "error", "status")]
    for r in results:
        rows.append((str(r.get("measured_rank") or "-"), str(r["predicted_rank"]), r["plan_short"] or "",
                     f"{r['predicted_step_s']:.4f}" if r["predicted_step_s"] else "-",
                     f"{r['measured_step_s']:.4f}" if r["measured_step_s"] else "-",
                     f"{100 * r['rel_error']:+.0f}%" if r["rel_error"] is not None else "-",
                     r["status"] + ("" if r["status"] == "ok" else f": {str(r['error'])[:60]}")))
    w = [max(len(x[i]) for x in rows) for i in range(len(rows[0]))]
    return "\n".join("  ".join(c.ljust(w[i]) for i, c in enumerate(row)) for row in rows)


def spearman(a, b) -> float:
    from scipy.stats import spearmanr
    return float(spearmanr(a, b).statistic)
