"""Refinement from short real training runs (probes): two parameters a micro-benchmark sees least
well in a real step, fitted on the predicted/measured step time of six small plans.
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np

REFINED = ("intra_latency", "step_overhead_s")


def probe_setup(backend: str, nproc: int):
    """(model, settings, plans) of the probe runs: six short runs of DP, FSDP, TP, TP+SP and PP at a
    sequence length and batch different from those the calibration is judged on
    (benchmarks/calibration_ranking.py: seq 128, batch 8, and plans not among the probes)."""
    from autoplace.plan import parse_plan
    from autoplace.specs.model import ModelSpec
    from autoplace.specs.presets import get_preset
    if backend == "nccl":
        model = ModelSpec(name="probe-1b", layers=4, hidden=2048, heads=16, kv_heads=4, ffn_hidden=5504,
                          vocab=32000, max_seq_len=2048, source="calibration probe")
        settings = dict(seq_len=1024, global_batch=2 * nproc, steps=3, warmup=2)
    else:
        model = get_preset("llama-tiny")
        settings = dict(seq_len=64, global_batch=2 * nproc, steps=3, warmup=1)
    texts = ["zero=0,mbs=2", "zero=0,mbs=1", "zero=3,mbs=2"]
    if nproc % 2 == 0:
        texts += ["tp=2,mbs=2", "tp=2,sp=1,mbs=1", "pp=2,mbs=1"]
    return model, settings, [parse_plan(t) for t in texts]


def hardware_from_fields(prof: dict):
    """The HardwareSpec of fitted fields (the `_`-prefixed bookkeeping entries left out)."""
    from autoplace.specs.hardware import HardwareSpec
    kw = {k: v for k, v in prof.items() if not k.startswith("_")}
    kw = {k: (float(v) if isinstance(v, np.floating) else v) for k, v in kw.items()}
    return HardwareSpec(**kw)


def refine_with_probes(prof: dict, model, settings: dict, plans, records) -> tuple[dict, dict]:
    """Least squares on log(predicted/measured) step time of the probe runs over the two
    parameters the micro-benchmarks see least well in a real step: the per-step collective latency
    (in a training step the ranks arrive skewed by compute and the communication threads compete
    with it: on the 2-core CPU box ≈ 4 ms per ring step against 0.5 ms in a tight benchmark loop)
    and the fixed per-step overhead (Python, autograd and optimizer dispatch that the kernel count
    of the model does not see). Everything else stays as the micro-benchmarks measured it. (A
    per-kernel overhead refit was tried: it runs to its lower bound, the constant absorbing it.)
    Each probe is predicted as it was executed (`report.executed_plan`)."""
    from scipy.optimize import least_squares

    from autoplace.profile.report import predict_step_time
    from autoplace.profile.settings import DEFAULTS
    full = dict(DEFAULTS, **settings)
    pts = [(p, r["step_s"]) for p, r in zip(plans, records) if r.get("status") == "ok" and r.get("step_s")]
    if len(pts) < 2:
        return prof, {"used": False, "reason": "fewer than 2 probe runs succeeded"}
    world = records[0]["world"]
    x0 = np.log([max(float(prof[k]), 1e-9) for k in REFINED])
    lo = np.log([1e-7, 1e-6])
    hi = np.log([0.1, 1.0])
    x0 = np.clip(x0, lo + 1e-9, hi - 1e-9)

    def fields(x):
        f = dict(prof)
        for k, v in zip(REFINED, np.exp(x)):
            f[k] = float(v)
        f["inter_latency"] = f["intra_latency"] if prof["inter_latency"] == prof["intra_latency"] \
            else prof["inter_latency"]
        return f

    from autoplace.profile.report import executed_plan

    def resid(x):
        hw = hardware_from_fields(fields(x))
        return [math.log(predict_step_time(model, full, executed_plan(p.resolved(world)), world, hw) / m)
                for p, m in pts]

    r0 = resid(x0)
    sol = least_squares(resid, x0, bounds=(lo, hi))
    new = fields(sol.x)
    new["_fit"] = dict(prof.get("_fit", {}))
    info = {"used": True, "model": model.name, "settings": settings,
            "plans": [p.short() for p, _ in pts], "measured_s": [m for _, m in pts],
            "log_residual_rms_before": float(np.sqrt(np.mean(np.square(r0)))),
            "log_residual_rms_after": float(np.sqrt(np.mean(np.square(sol.fun)))),
            "micro": {k: float(prof[k]) for k in REFINED},
            "refined": {k: float(new[k]) for k in REFINED}}
    new["_fit"]["probes"] = info
    return new, info


def run_probes(backend: str, nproc: int, workdir: Path, timeout_s: float = 600.0):
    from autoplace.profile.launch import run_plans
    model, settings, plans = probe_setup(backend, nproc)
    recs = run_plans(model, plans, nproc, backend=backend, out_jsonl=workdir / "probes.jsonl",
                     settings=settings, workdir=workdir / "probe-runs", equivalence=False,
                     plan_timeout_s=timeout_s)
    return model, settings, plans, recs
