"""The cluster calibration: multiplicative corrections on named cost-model terms, fitted to measured runs.

A calibration file (JSON, written atomically) holds, for one (hardware, runtime):

* `terms`: per named term a time multiplier x (measured ÷ modelled time of that term) and its
  1-σ uncertainty in log space; each acts on the hardware profile the cost model reads, so the one
  set of cost functions prices every plan with it (no per-plan factor):

  | term        | profile fields it scales                                     |
  |-------------|---------------------------------------------------------------|
  | gemm        | gemm_efficiency (fp8, fp4 too) ÷ x                            |
  | attention   | attention_efficiency and every attention kernel family ÷ x   |
  | host        | kernel_overhead_s, step_overhead_s × x                       |
  | bw_intra    | intra_bw ÷ x (links inside the scale-up domain)              |
  | bw_inter    | inter_bw ÷ x (links across domains: the NICs)                |

* `memory_overhead`: bytes per GPU the runs held beyond the modelled terms (allocator
  fragmentation, framework buffers), added to the profile's fixed overhead (cuda_context_bytes),
  so it narrows the memory every plan may use; with its uncertainty;
* `refused`: the terms the data could not identify, each with the reason;
* `observations`: every measured run (its plan document and measurement), so adding a run refits all.

The fit (`fit`): Gauss–Newton on log step times, θ_k = ln x_k with a prior N(0, σ0²) (σ0 = 0.5:
a term is trusted within ×1.65 before data) and a per-run noise σ (5 %: run-to-run spread plus what
the model leaves out). Sensitivities J_ik = ∂ln T_i/∂θ_k come from the cost model itself
(finite differences through `autoplace.estimate`). The posterior covariance is
(JᵀJ/σ² + I/σ0²)⁻¹; a term whose posterior σ is not below half the prior σ (the runs carry less
than 3/4 of its information, or it is collinear with another term) is refused and held at 1, and the
others are refitted.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from autoplace.errors import InputError

SCHEMA = "autoplace-calibration/1"
PRIOR_SIGMA = 0.5
NOISE_SIGMA = 0.05
IDENTIFY_RATIO = 0.5
TERMS = {
    "gemm": "GEMM rate (gemm_efficiency)",
    "attention": "attention kernel rate (attention_efficiency, attention kernels)",
    "host": "host time per op (kernel_overhead_s, step_overhead_s)",
    "bw_intra": "bandwidth inside the scale-up domain (intra_bw)",
    "bw_inter": "bandwidth across domains (inter_bw)",
}


def apply_terms(hw, x: dict):
    """The hardware profile with time multipliers x[term] applied (missing terms: 1)."""
    g = float(x.get("gemm", 1.0))
    a = float(x.get("attention", 1.0))
    h = float(x.get("host", 1.0))
    kw = {}
    if g != 1.0:
        kw.update(gemm_efficiency=hw.gemm_efficiency / g,
                  gemm_efficiency_fp8=hw.gemm_efficiency_fp8 / g, gemm_efficiency_fp4=hw.gemm_efficiency_fp4 / g)
    if a != 1.0:
        kw.update(attention_efficiency=hw.attention_efficiency / a,
                  attention_kernels={k: v / a for k, v in (hw.attention_kernels or {}).items()})
    if h != 1.0:
        kw.update(kernel_overhead_s=hw.kernel_overhead_s * h, step_overhead_s=hw.step_overhead_s * h)
    if x.get("bw_intra", 1.0) != 1.0:
        kw["intra_bw"] = hw.intra_bw / float(x["bw_intra"])
    if x.get("bw_inter", 1.0) != 1.0:
        kw["inter_bw"] = hw.inter_bw / float(x["bw_inter"])
    return hw.with_(**kw) if kw else hw


@dataclass
class Observation:
    """One measured run: the plan document (autoplace.export.planfile) and what was measured."""
    plan_doc: dict
    step_s: float
    memory_bytes: float | None = None
    memory_kind: str | None = None          # allocated | reserved
    source: str = ""                        # the log / proxy run it came from
    framework: str = ""

    def specs(self):
        from autoplace.export.planfile import specs_from_document
        model, hw, train, plan, world, _ = specs_from_document(self.plan_doc, where=f"observation {self.source}")
        return model, hw, train, plan, world

    def to_dict(self) -> dict:
        return {"plan": self.plan_doc, "step_s": self.step_s, "memory_bytes": self.memory_bytes,
                "memory_kind": self.memory_kind, "source": self.source, "framework": self.framework}

    @classmethod
    def from_dict(cls, d: dict) -> "Observation":
        return cls(d["plan"], float(d["step_s"]), d.get("memory_bytes"), d.get("memory_kind"),
                   d.get("source", ""), d.get("framework", ""))


@dataclass
class Calibration:
    hardware: str
    runtime: str | None
    terms: dict = field(default_factory=dict)          # term → {"x": float, "sigma_log": float}
    refused: dict = field(default_factory=dict)        # term → reason
    memory_overhead: dict | None = None                 # {"bytes": float, "sigma_bytes": float}
    observations: list = field(default_factory=list)    # [Observation]
    fit: dict = field(default_factory=dict)              # residuals before / after

    def multipliers(self) -> dict:
        return {k: float(v["x"]) for k, v in self.terms.items()}

    def apply(self, hw):
        """The hardware profile this calibration prices plans with."""
        out = apply_terms(hw, self.multipliers())
        if self.memory_overhead:
            out = out.with_(cuda_context_bytes=out.cuda_context_bytes + float(self.memory_overhead["bytes"]))
        return out.with_(source=f"{hw.source} + calibration")

    def to_dict(self) -> dict:
        return {"schema": SCHEMA, "hardware": self.hardware, "runtime": self.runtime,
                "terms": self.terms, "refused": self.refused, "memory_overhead": self.memory_overhead,
                "fit": self.fit, "observations": [o.to_dict() for o in self.observations]}

    @classmethod
    def from_dict(cls, d: dict, where: str = "calibration") -> "Calibration":
        if not isinstance(d, dict) or d.get("schema") != SCHEMA:
            raise InputError(f"{where}: not an autoplace calibration file (schema '{SCHEMA}' expected); "
                             "write one with `autoplace calibrate --from-log LOG --plan plan.json --out FILE`")
        bad = sorted(set(d.get("terms") or {}) - set(TERMS))
        if bad:
            raise InputError(f"{where}: unknown term '{bad[0]}'; valid terms: {', '.join(TERMS)}")
        return cls(d["hardware"], d.get("runtime"), dict(d.get("terms") or {}), dict(d.get("refused") or {}),
                   d.get("memory_overhead"), [Observation.from_dict(o) for o in d.get("observations") or []],
                   dict(d.get("fit") or {}))


def load_calibration(path, field_name: str = "--calibration") -> Calibration:
    from autoplace.io import read_json
    p = Path(path)
    if not p.exists():
        raise InputError(f"{field_name}: '{p}' does not exist (write one with `autoplace calibrate --from-log` "
                         "or `autoplace tune`)")
    return Calibration.from_dict(read_json(p, field_name, "pass a file written by autoplace calibrate/tune"),
                                 where=f"{field_name} {p}")


def save_calibration(cal: Calibration, path) -> Path:
    from autoplace.io import atomic_write, to_jsonable
    return atomic_write(path, json.dumps(to_jsonable(cal.to_dict()), indent=2) + "\n")


def apply_to_hardware(hw, path, field_name: str = "--calibration"):
    """`search/estimate --calibration FILE`: the profile with the file's corrections. A calibration
    fitted on another hardware profile is refused (corrections are per hardware and runtime)."""
    cal = load_calibration(path, field_name)
    if cal.hardware != hw.name:
        raise InputError(f"{field_name}: the calibration was fitted on hardware '{cal.hardware}', "
                         f"not '{hw.name}'; pass --hardware {cal.hardware} or calibrate on this one")
    return cal.apply(hw)


# ---- the fit -----------------------------------------------------------------------------------
def _predict(obs_specs, hw_base, x: dict):
    """(step_s, memory dict) of each observation under multipliers x."""
    from autoplace.estimate import estimate
    out = []
    for model, _hw, train, plan, world in obs_specs:
        doc = estimate(model, apply_terms(hw_base, x), train, plan, world)
        if "time" not in doc:
            raise InputError(f"calibration: the plan {plan.short()} is not legal for the cost model "
                             f"({', '.join(v['rule'] for v in doc['violations'])}); fix the plan file")
        out.append((doc["time"]["step_s"], doc["memory"]))
    return out


def fit(observations: list[Observation], *, prior_sigma: float = PRIOR_SIGMA,
        noise_sigma: float = NOISE_SIGMA, eps: float = 0.05) -> Calibration:
    """Fit the named terms to the observations' step times and the memory overhead to their memory."""
    if not observations:
        raise InputError("calibration: no measured run to fit")
    specs = [o.specs() for o in observations]
    hws = {s[1].name for s in specs}
    if len(hws) > 1:
        raise InputError(f"calibration: runs on several hardware profiles ({', '.join(sorted(hws))}); "
                         "one calibration per hardware — split the logs")
    hw = specs[0][1]
    runtimes = {getattr(getattr(s[2], "runtime", None), "name", getattr(s[2], "runtime", None)) for s in specs}
    runtime = sorted(str(r) for r in runtimes)[0] if len(runtimes) == 1 else ",".join(sorted(map(str, runtimes)))
    y = np.log([o.step_s for o in observations])
    names = list(TERMS)
    theta = {k: 0.0 for k in names}
    active = list(names)
    refused: dict = {}
    base = _predict(specs, hw, {})
    r0 = y - np.log([b[0] for b in base])

    def jac(th, cols):
        x = {k: math.exp(v) for k, v in th.items()}
        f0 = np.log([p[0] for p in _predict(specs, hw, x)])
        J = np.zeros((len(specs), len(cols)))
        for j, k in enumerate(cols):
            xk = dict(x, **{k: x[k] * math.exp(eps)})
            J[:, j] = (np.log([p[0] for p in _predict(specs, hw, xk)]) - f0) / eps
        return f0, J

    post_sigma = {}
    for _round in range(len(names) + 1):
        # sensitivities at the prior mean decide which terms the runs exercise at all
        for _it in range(4):
            if not active:
                break
            f0, J = jac(theta, active)
            A = J.T @ J / noise_sigma**2 + np.eye(len(active)) / prior_sigma**2
            t = np.array([theta[k] for k in active])
            g = J.T @ (y - f0) / noise_sigma**2 - t / prior_sigma**2
            step = np.linalg.solve(A, g)
            for k, s in zip(active, step):
                theta[k] += float(s)
            if np.max(np.abs(step)) < 1e-4:
                break
        if not active:
            break
        f0, J = jac(theta, active)
        cov = np.linalg.inv(J.T @ J / noise_sigma**2 + np.eye(len(active)) / prior_sigma**2)
        sig = np.sqrt(np.diag(cov))
        worst = None
        for k, s, col in zip(active, sig, J.T):
            if np.max(np.abs(col)) < 1e-3:
                why = "no measured run exercises it (its share of every step is ~0)"
            elif s > IDENTIFY_RATIO * prior_sigma:
                why = (f"the runs cannot identify it (posterior σ {s:.2f} vs prior {prior_sigma:.2f}: "
                       "its share of the step is small or moves with another term's)")
            else:
                continue
            if worst is None or s > worst[1]:
                worst = (k, s, why)
        if worst is None:
            post_sigma = dict(zip(active, map(float, sig)))
            break
        k, _, why = worst
        refused[k] = why
        theta[k] = 0.0
        active.remove(k)
    terms = {k: {"x": math.exp(theta[k]), "sigma_log": post_sigma[k]} for k in active}
    after = _predict(specs, hw, {k: v["x"] for k, v in terms.items()})
    r1 = y - np.log([a[0] for a in after])
    mem = _memory_overhead(observations, after)
    return Calibration(hw.name, runtime, terms, refused, mem, list(observations),
                       {"n_runs": len(observations), "log_rms_before": float(np.sqrt(np.mean(r0**2))),
                        "log_rms_after": float(np.sqrt(np.mean(r1**2))),
                        "runs": [{"source": o.source, "measured_s": o.step_s, "before_s": b[0], "after_s": a[0]}
                                 for o, b, a in zip(observations, base, after)]})


def _memory_overhead(observations, predicted) -> dict | None:
    """Mean of measured − predicted (the kind the log states: allocated or reserved), ± its error."""
    d, rel = [], []
    for o, (_, mem) in zip(observations, predicted):
        if not o.memory_bytes:
            continue
        pred = mem.get("reserved_bytes" if o.memory_kind == "reserved" else "allocated_bytes")
        if pred is None:
            continue
        d.append(float(o.memory_bytes) - float(pred))
        rel.append(0.02 * float(o.memory_bytes))       # 2 %: a log's rounding and rank-to-rank spread
    if not d:
        return None
    n = len(d)
    spread = float(np.std(d, ddof=1) / math.sqrt(n)) if n > 1 else 0.0
    return {"bytes": float(np.mean(d)), "sigma_bytes": max(spread, float(np.mean(rel)) / math.sqrt(n)), "n_runs": n}


def describe(cal: Calibration) -> list[str]:
    """What the calibration changes, one line per term (for `calibrate --show`)."""
    lines = [f"calibration for {cal.hardware} · runtime {cal.runtime} · {len(cal.observations)} measured run(s)"]
    for k, v in cal.terms.items():
        x, s = float(v["x"]), float(v["sigma_log"])
        lines.append(f"  {k:<10} × {x:.3f} (±{100 * (math.exp(s) - 1):.0f} %)  {TERMS[k]}: modelled time × {x:.3f}")
    for k, why in cal.refused.items():
        lines.append(f"  {k:<10} unchanged: {why}")
    m = cal.memory_overhead
    if m:
        lines.append(f"  memory     {m['bytes'] / 2**30:+.2f} GiB per GPU (±{m['sigma_bytes'] / 2**30:.2f}) "
                     "beyond the modelled terms")
    f = cal.fit
    if f:
        lines.append(f"  step-time log-error rms {f['log_rms_before']:.3f} → {f['log_rms_after']:.3f}")
        for r in f.get("runs", []):
            lines.append(f"    {r['source']}: measured {r['measured_s']:.4g} s, model {r['before_s']:.4g} → "
                         f"{r['after_s']:.4g} s")
    return lines
