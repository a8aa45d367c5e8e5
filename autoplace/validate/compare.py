"""One record → predicted metrics, compared with what the record measured.

Per record type:

- measured_throughput: `estimate(model, hw, train, plan, world, headroom=0)`. Throughput metrics are
  re-expressed under the record's own FLOP convention (autoplace.validate.flops) divided by the
  *predicted* step time; time metrics compare with `time.step_s`; peak memory with
  `memory.peak_bytes`.
- measured_memory: a run whose source states its memory and no throughput (Megatron-LM's CI
  memory tests, torchao's tables): the same `estimate`, its memory compared like with like
  (`memory_kind`, at the rank the record names: `MEMORY_STAGE`); not a throughput record.
- measured_layer_time: per-layer forward / backward time from `autoplace.cost.step.stage_times`,
  taken as the difference between the stage with L and with L + pp layers (so it carries exactly the
  cost model's per-layer compute, recompute and exposed TP communication, and no embedding/logits).
- measured_max_model_size: the largest parameter count of the record's family (known only by its
  size: a states-only model) whose model states fit the device, by bisection on `estimate`'s
  `memory.fits` — the paper's own analysis (ZeRO §3.1 accounting: 2Ψ + 2Ψ + 12Ψ, regime "zero").
- analytic_estimate: per-GPU peak of `estimate` on a states-only model in the "deepspeed" regime
  (model states + the planner's states-only working set; no activations), in GiB (the DeepSpeed
  estimator prints GiB as "GB").

error_pct = (predicted − measured) / measured · 100 on the metric's own scale. For throughput
metrics `time_error_pct` = (measured / predicted − 1) · 100 is the implied step-time error.
"""

from __future__ import annotations

import math
import re

import numpy as np

from autoplace.cost import compute as K
from autoplace.errors import AutoplaceError
from autoplace.estimate import estimate
from autoplace.placement.rules import Ctx
from autoplace.validate import flops as F
from autoplace.validate.mapping import (
    GIB,
    Mapped,
    Skip,
    as_float,
    map_shaped,
    map_states_only,
    parse_recompute,
    source_key,
    table_key,
)

THROUGHPUT = ("tflops_per_gpu", "mfu", "hfu", "pct_of_peak", "tokens_per_sec_per_gpu",
              "tokens_per_sec_total", "aggregate_pflops")
TIME = ("iteration_time_s", "iteration_time_s_derived")
MEMORY = {f"{w}_memory_{u}": m for w in ("peak", "allocated", "reserved", "device")
          for u, m in (("gib", GIB), ("gb", 1e9))}
"""Memory keys a record states: `peak_` is what the framework's log prints (torch's reserved peak unless
its `<key>_definition` says otherwise), the other words name the counter; see `memory_kind`."""


def memory_kind(key: str, measured: dict) -> str:
    """"allocated", "reserved" or "device" — which memory a record's memory key states, so that it is
    compared like with like: the key's own word (allocated_/reserved_/device_memory_*), else its
    `<key>_definition` ("nvidia-smi"/"device" → device, "allocated" → allocated, "reserved" →
    reserved), else reserved: torchtitan's and Megatron-LM's memory lines print
    torch.cuda.max_memory_reserved (torchtitan `utils/metrics.py`, Megatron `report_memory`)."""
    word = key.split("_memory_")[0]
    if word in ("allocated", "reserved", "device"):
        return word
    d = str(measured.get(f"{key}_definition") or measured.get("memory_definition") or "").lower()
    if "nvidia-smi" in d or "device" in d or "nvml" in d:
        return "device"
    if "allocated" in d:
        return "allocated"
    return "reserved"
MEMORY_STAGE = "memory_pp_stage"
"""A qualifier, not a metric: which pipeline stage's rank printed the memory ("first", "last" or
the stage index; Megatron's `--log-memory-to-tensorboard` writes from the last rank only). Absent:
the number is the maximum over ranks (torchtitan's tables) and is compared with the binding stage."""


def memory_predicted(est: dict, kind: str, measured: dict) -> float:
    """The predicted bytes of `kind` at the rank the record measured (`MEMORY_STAGE`), else at the
    binding stage."""
    stage = measured.get(MEMORY_STAGE)
    if stage is None:
        return est["memory"][f"{kind}_bytes"]
    per = est["memory"]["per_stage"]
    i = len(per) - 1 if stage == "last" else 0 if stage == "first" else stage
    if isinstance(i, bool) or not isinstance(i, int) or not 0 <= i < len(per):
        raise Skip(f"measured.{MEMORY_STAGE} '{stage}': use \"first\", \"last\" or a stage index 0–{len(per) - 1}")
    return per[i][kind]


LAYER = ("layer_forward_ms", "layer_backward_ms", "layer_total_ms")
NOT_COMPARED = {
    "samples_per_sec": "rounded to whole samples in the source; tokens_per_sec_* carry the same rate",
    "est_training_days_300B_tokens": "the paper's own end-to-end estimate (Eq. 4), not a measurement",
    "throughput_increase_vs_full_recompute": "ratio between two records; both iteration times are compared",
    "mfu_gain_vs_sp_selective": "ratio between two records",
    "overhead_vs_baseline": "ratio between two records; both layer times are compared",
    "model_states_gb_per_cpu": "host memory is not modelled by the planner",
    "zero_init": "an estimator input flag, not a metric",
}
PRIMARY_ORDER = ("iteration_time_s", "tflops_per_gpu", "mfu", "tokens_per_sec_per_gpu", "hfu",
                 "pct_of_peak", "aggregate_pflops", "tokens_per_sec_total", "iteration_time_s_derived",
                 "peak_memory_gib", "peak_memory_gb", "device_memory_gib", "device_memory_gb",
                 "reserved_memory_gib", "reserved_memory_gb", "allocated_memory_gib", "allocated_memory_gb",
                 "layer_total_ms", "layer_forward_ms",
                 "layer_backward_ms", "max_trainable_params_billion", "model_states_gb_per_gpu")


def base_metric(key: str) -> tuple[str, str | None]:
    """('tflops_per_gpu', 'lower') for 'tflops_per_gpu_lower_bound'; approx suffixes dropped."""
    if key.endswith("_lower_bound"):
        return key[: -len("_lower_bound")], "lower"
    if key.endswith("_upper_bound"):
        return key[: -len("_upper_bound")], "upper"
    if key.endswith("_approx"):
        return key[: -len("_approx")], None
    return key, None


def _num(x) -> float | None:
    v = as_float(x)
    return v if v is not None and math.isfinite(v) else None


def _entry(rid, src, metric, measured, predicted, **extra) -> dict:
    e = {"id": rid, "source": src, "metric": metric, "measured": measured,
         "predicted": float(_round(predicted))}
    e["error_pct"] = round((predicted - measured) / measured * 100.0, 3) if measured else None
    e.update({k: v for k, v in extra.items() if v is not None})
    return e


def _round(x, sig=6):
    x = float(x)
    if x == 0 or not math.isfinite(x):
        return x
    return round(x, sig - 1 - int(math.floor(math.log10(abs(x)))))


def _violations(est) -> str:
    return "illegal plan: " + "; ".join(f"{v['rule']}: {v['message']}" for v in est["violations"])


class Result:
    """What one record produced: comparison entries, or a skip reason; plus mapping details."""

    def __init__(self, rec: dict):
        self.id = str(rec.get("id") or "<no id>")
        self.source = source_key(rec)
        self.table = table_key(rec)
        self.record_type = str(rec.get("record_type") or "")
        self.entries: list[dict] = []
        self.skipped: str | None = None
        self.not_compared: list[dict] = []
        self.mapping: dict | None = None

    @property
    def is_throughput(self) -> bool:
        return self.record_type == "measured_throughput"

    def primary(self) -> dict | None:
        usable = [e for e in self.entries if not e.get("bound") and e.get("error_pct") is not None]
        for m in PRIMARY_ORDER:
            for e in usable:
                if e["metric"] == m or base_metric(e["metric"])[0] == m:
                    return e
        return usable[0] if usable else None


# ---- throughput -------------------------------------------------------------------------------
def _shape(mp: Mapped, rec: dict) -> F.Shape:
    m = mp.model
    params = _num((rec.get("model") or {}).get("params_billion"))
    return F.Shape(layers=m.layers, hidden=m.hidden, heads=m.heads, kv_heads=m.a_kv,
                   ffn_hidden=m.ffn_hidden, vocab=m.vocab, seq_len=mp.train.seq_len,
                   gated_mlp=m.gated_mlp, q_width=m.q_width,
                   params=params * 1e9 if params else float(m.total_params()),
                   top_k=m.top_k if m.is_moe else 1)


def _map_with_recompute(rec: dict) -> tuple[Mapped, dict]:
    """Map and estimate; a record silent on recompute gets the least recompute with which its plan
    fits the device — the run evidently fitted: none, then selective, then whole-layer recompute of
    the fewest layers per stage (Megatron's block method), then full."""
    stated = parse_recompute((rec.get("plan") or {}).get("recompute"))
    if stated is not None:
        mp = map_shaped(rec)
        return mp, estimate(mp.model, mp.hw, mp.train, mp.plan, mp.world, headroom=0.0)
    probe = map_shaped(rec, recompute_override="none")
    rt_rc = probe.train.rt.defaults.recompute
    if rt_rc:
        mp = map_shaped(rec, recompute_override=rt_rc)
        mp.assumptions.append(f"recompute not stated → '{rt_rc}' ({mp.train.rt.name}'s recipes switch it on)")
        return mp, estimate(mp.model, mp.hw, mp.train, mp.plan, mp.world, headroom=0.0)

    def fits(est):
        return est["legal"] and est["memory"]["fits"]

    last = None
    for mode in ("none", "selective", "block", "full"):
        mp = map_shaped(rec, recompute_override=mode if mode != "block" else "full")
        if mode == "block":
            # memory falls as k grows: bisect for the fewest recomputed layers per stage that fit
            def block(k):
                plan = mp.plan.with_(recompute="block", recompute_layers=k)
                return plan, estimate(mp.model, mp.hw, mp.train, plan, mp.world, headroom=0.0)
            lo, hi = 1, max(mp.plan.layer_split or (mp.model.layers // max(mp.plan.pp, 1),)) - 1
            if hi < 1 or not fits(block(hi)[1]):
                continue
            while lo < hi:
                mid = (lo + hi) // 2
                lo, hi = (lo, mid) if fits(block(mid)[1]) else (mid + 1, hi)
            mp.plan, est = block(lo)
            mp.recompute = "block"
            mp.assumptions.append(f"recompute not stated → whole-layer recompute of {lo} layer(s) per stage "
                                  "(least recompute with which the plan fits)")
            return mp, est
        est = estimate(mp.model, mp.hw, mp.train, mp.plan, mp.world, headroom=0.0)
        last = (mp, est)
        if fits(est):
            mp.assumptions.append(f"recompute not stated → '{mode}' (least recompute with which the plan fits)")
            return mp, est
    mp, est = last
    mp.assumptions.append("recompute not stated and no mode fits → 'full'")
    return mp, est


def source_definitions(records) -> dict:
    """{source: {definition key: text}} — the first `*_definition` each source states anywhere in the
    file. A record that gives a metric without restating its convention (e.g. a number quoted in the
    paper's text) uses its source's stated definition."""
    out: dict[str, dict] = {}
    for rec in records:
        if not isinstance(rec, dict) or not isinstance(rec.get("measured"), dict):
            continue
        d = out.setdefault(source_key(rec), {})
        for k, v in rec["measured"].items():
            if k.endswith("_definition") and isinstance(v, str):
                d.setdefault(k, v)
    return out


def _throughput(res: Result, rec: dict, defs: dict | None = None) -> None:
    mp, est = _map_with_recompute(rec)
    res.mapping = mp.describe()
    if not est["legal"]:
        raise Skip(_violations(est))
    tm = est["time"]
    step = tm["step_s"]
    W = mp.world
    res.mapping.update({"step_s": _round(step), "breakdown_s": {k: _round(v) for k, v in tm["breakdown_s"].items()},
                        "peak_memory_gib": _round(est["memory"]["peak_bytes"] / GIB),
                        "reserved_gib": _round(est["memory"]["reserved_bytes"] / GIB),
                        "allocated_gib": _round(est["memory"]["allocated_bytes"] / GIB),
                        "memory_utilization": _round(est["memory"]["peak_bytes"] / est["memory"]["limit_bytes"], 4),
                        "fits": bool(est["memory"]["fits"])})
    measured = rec.get("measured") or {}
    sh = _shape(mp, rec)
    B = mp.train.global_batch
    if mp.peak_stated:
        peak, peak_note = mp.peak_stated, None
    else:
        dt = mp.train.precision if mp.train.precision in ("fp8", "fp16", "fp32") else "bf16"
        peak, peak_note = mp.hw.peak(dt), f"peak not stated by the source: profile {dt} peak"
    for key, val in measured.items():
        if key.endswith("_definition") or key == MEMORY_STAGE:
            continue
        meas = _num(val)
        base, bound = base_metric(key)
        if val is None:
            continue
        if meas is None:
            res.not_compared.append({"metric": key, "reason": "not a number"})
            continue
        extra = {"bound": bound}
        if base in TIME:
            extra["derived"] = True if base.endswith("_derived") or key in _inferred(rec) else None
            res.entries.append(_entry(res.id, res.source, key, meas, step, unit="s", **extra))
            res.entries[-1]["time_error_pct"] = res.entries[-1]["error_pct"]
            continue
        if base in MEMORY:
            # like with like: allocated ↔ max_memory_allocated, reserved ↔ max_memory_reserved (what a
            # framework's memory line prints), device ↔ nvidia-smi (reserved + context + NCCL buffers)
            kind = memory_kind(base, measured)
            res.entries.append(_entry(res.id, res.source, key, meas, memory_predicted(est, kind, measured) / MEMORY[base],
                                      unit="GiB" if base.endswith("gib") else "GB", compared=kind, **extra))
            continue
        if base not in THROUGHPUT:
            res.not_compared.append({"metric": key, "reason": NOT_COMPARED.get(key, "metric not modelled")})
            continue
        if base in ("tokens_per_sec_per_gpu", "tokens_per_sec_total"):
            pred = mp.train.tokens_per_step / step / (W if base.endswith("per_gpu") else 1)
            conv_name = None
        else:
            text = F.definition_for(measured, key)
            if text is None and defs:
                text = F.definition_for(defs.get(res.source, {}), key)
                extra["convention_from"] = "the definition another record of this source states" if text else None
            conv = F.detect(text, base)
            if conv is None:
                # unrecognised convention: autoplace's own model/hardware FLOPs
                mflops = tm["tflops_per_gpu"] * 1e12 * W * step
                flops = mflops * (tm["hfu"] / tm["mfu"] if base == "hfu" and tm["mfu"] else 1.0)
                conv_name = "autoplace (definition not recognised)"
            elif conv.from_model is not None:
                flops = K.model_flops_per_step(Ctx(mp.model, mp.train, mp.world), **conv.from_model)
                conv_name = conv.name
            elif mp.recompute == "block" and conv.takes_recompute:
                # some layers recomputed in full: the hardware count between none and full, by layer share
                frac = min(mp.plan.recompute_layers * mp.plan.pp / max(mp.model.layers, 1), 1.0)
                flops = frac * conv.flops(sh, B, "full") + (1 - frac) * conv.flops(sh, B, "none")
                conv_name = conv.name
            else:
                flops = conv.flops(sh, B, mp.recompute)
                conv_name = conv.name
            rate = flops / step
            pred = {"tflops_per_gpu": rate / W / 1e12, "aggregate_pflops": rate / 1e15,
                    "mfu": rate / W / peak, "hfu": rate / W / peak, "pct_of_peak": rate / W / peak}[base]
            if base in ("mfu", "hfu", "pct_of_peak") and peak_note:
                extra["note"] = peak_note
        e = _entry(res.id, res.source, key, meas, pred, convention=conv_name, **extra)
        if e["error_pct"] is not None and pred:
            e["time_error_pct"] = round((meas / pred - 1.0) * 100.0, 3)
        res.entries.append(e)


def _inferred(rec: dict) -> set:
    out = set()
    for s in rec.get("inferred_fields") or []:
        m = re.match(r"\s*measured\.(\w+)", str(s))
        if m:
            out.add(m.group(1))
    return out


# ---- per-layer time ---------------------------------------------------------------------------
def layer_times(mp: Mapped) -> tuple[float, float]:
    """(forward, backward incl. recompute) seconds of one transformer layer, one micro-batch."""
    from autoplace.cost.step import stage_times
    from autoplace.placement.rules import Ctx
    L, pp = mp.model.layers, mp.plan.pp
    out = []
    for layers in (L, L + pp):
        ctx = Ctx(mp.model.with_(layers=layers), mp.train, mp.world)
        st, _, _ = stage_times(ctx, mp.hw, mp.plan)
        out.append((float(np.asarray(st["first"]["f"])), float(np.asarray(st["first"]["b"]))))
    return out[1][0] - out[0][0], out[1][1] - out[0][1]


def _layer(res: Result, rec: dict, defs=None) -> None:
    mp = map_shaped(rec)
    res.mapping = mp.describe()
    f, b = layer_times(mp)
    pred = {"layer_forward_ms": f * 1e3, "layer_backward_ms": b * 1e3, "layer_total_ms": (f + b) * 1e3}
    res.mapping.update({k: _round(v) for k, v in pred.items()})
    for key, val in (rec.get("measured") or {}).items():
        if key.endswith("_definition") or val is None:
            continue
        meas = _num(val)
        if key in pred and meas is not None:
            res.entries.append(_entry(res.id, res.source, key, meas, pred[key], unit="ms"))
        else:
            res.not_compared.append({"metric": key, "reason": NOT_COMPARED.get(key, "metric not modelled")})


# ---- max model size ---------------------------------------------------------------------------
def _fits(rec: dict, psi: float) -> bool:
    mp = map_states_only(rec, psi, regime="zero")
    est = estimate(mp.model, mp.hw, mp.train, mp.plan, mp.world, headroom=0.0)
    if not est["legal"]:
        raise Skip(_violations(est))
    return bool(est["memory"]["fits"])


def max_model_params(rec: dict, rel_tol: float = 1e-4) -> float:
    """Largest Ψ whose model states fit (bisection; model states grow monotonically with Ψ)."""
    lo = 1e6
    if not _fits(rec, lo):
        return 0.0
    hi = lo * 2
    while _fits(rec, hi):
        lo, hi = hi, hi * 2
        if hi > 1e16:
            return float("inf")
    while hi / lo - 1 > rel_tol:
        mid = math.sqrt(lo * hi)
        lo, hi = (mid, hi) if _fits(rec, mid) else (lo, mid)
    return lo


def _max_size(res: Result, rec: dict, defs=None) -> None:
    mp = map_states_only(rec, 1e9, regime="zero")
    res.mapping = mp.describe()
    res.mapping["method"] = ("largest Ψ whose model states (regime 'zero': 2Ψ + 2Ψ + 12Ψ, placed by the "
                             "plan's tp / ZeRO stage) fit the profile's memory; activations excluded")
    res.mapping.pop("params", None)
    psi = max_model_params(rec)
    for key, val in (rec.get("measured") or {}).items():
        if key.endswith("_definition") or val is None:
            continue
        meas = _num(val)
        if key == "max_trainable_params_billion" and meas is not None:
            e = _entry(res.id, res.source, key, meas, psi / 1e9, unit="B params",
                       measured_fits=bool(psi / 1e9 >= meas))
            ana = _paper_analytic(rec)
            if ana is not None:
                e["paper_analytic"] = ana
            res.entries.append(e)
        else:
            res.not_compared.append({"metric": key, "reason": NOT_COMPARED.get(key, "metric not modelled")})


def _paper_analytic(rec: dict) -> float | None:
    """The analytic maximum the notes quote for this record's ZeRO stage, if they quote one."""
    notes = str(rec.get("notes") or "")
    z = (rec.get("plan") or {}).get("zero_stage")
    label = {0: r"Baseline", 1: r"Pos", 2: r"Pos\+g", 3: r"Pos\+g\+p"}.get(z if isinstance(z, int) else -1)
    if not label:
        return None
    m = re.search(label + r"\s+([\d.]+)\s*([BT])(?![\w+])", notes)
    if not m:
        return None
    return float(m.group(1)) * (1000.0 if m.group(2) == "T" else 1.0)


# ---- analytic estimator records ---------------------------------------------------------------
def _analytic(res: Result, rec: dict, defs=None) -> None:
    params = _num((rec.get("model") or {}).get("params_billion"))
    if params is None:
        raise Skip("model.params_billion not stated")
    mp = map_states_only(rec, params * 1e9, regime="deepspeed", any_hw=True)
    res.mapping = mp.describe()
    est = estimate(mp.model, mp.hw, mp.train, mp.plan, mp.world, headroom=0.0)
    if not est["legal"]:
        raise Skip(_violations(est))
    # states-only estimate: activations and fixed overheads are zero, so the peak is the model
    # states plus the planner's states-only working set (the estimators' un-sharded largest layer)
    st = est["memory"]["per_stage"][0]
    states = est["memory"]["peak_bytes"]
    res.mapping["model_states_bytes"] = {k: st[k] for k in ("params", "grads", "optimizer", "transient")}
    for key, val in (rec.get("measured") or {}).items():
        if key.endswith("_definition") or val is None:
            continue
        meas = _num(val)
        if key in ("model_states_gb_per_gpu", "model_states_gib_per_gpu") and meas is not None:
            res.entries.append(_entry(res.id, res.source, key, meas, states / GIB, unit="GiB"))
        else:
            res.not_compared.append({"metric": key, "reason": NOT_COMPARED.get(key, "metric not modelled")})


HANDLERS = {"measured_throughput": _throughput, "measured_memory": _throughput, "measured_layer_time": _layer,
            "measured_max_model_size": _max_size, "analytic_estimate": _analytic}


def evaluate_record(rec, definitions: dict | None = None) -> Result:
    """Never raises: any failure becomes `skipped` with a reason. `definitions`: see
    `source_definitions` (the runner passes the file's)."""
    if not isinstance(rec, dict):
        r = Result({})
        r.skipped = "record is not a JSON object"
        return r
    res = Result(rec)
    handler = HANDLERS.get(res.record_type)
    try:
        if handler is None:
            raise Skip(f"unsupported record_type '{res.record_type}'")
        if not isinstance(rec.get("measured"), dict) or not rec["measured"]:
            raise Skip("no measured values")
        handler(res, rec, definitions)
        if not res.entries and res.skipped is None:
            keys = ", ".join(n["metric"] for n in res.not_compared) or "none"
            raise Skip(f"no comparable measured metric (has: {keys})")
    except Skip as e:
        res.entries = []
        res.skipped = str(e)
    except AutoplaceError as e:
        res.entries = []
        res.skipped = f"rejected by the planner: {e}"
    except Exception as e:  # noqa: BLE001 — one bad record must never stop the run
        res.entries = []
        res.skipped = f"internal error: {type(e).__name__}: {e}"
    return res
