"""The fits of `autoplace calibrate`: calib_worker measurements → the `HardwareSpec` fields.

Pure numpy/scipy (no torch): NNLS on the ring model of the collectives, the additive roofline of
the GEMMs and memory-bound kernels, medians for the rest. `fit_profile(raw)` is the entry point;
the table of fields and what each is fitted from is in `autoplace.profile.calibrate`.
"""

from __future__ import annotations

import math

import numpy as np


def _nnls(A, y, w):
    from scipy.optimize import nnls
    A = np.asarray(A, dtype=float)
    y = np.asarray(y, dtype=float)
    w = np.asarray(w, dtype=float)
    # column scaling for conditioning
    sc = np.maximum(np.abs(A).max(axis=0), 1e-30)
    x, _ = nnls(A / sc * w[:, None], y * w)
    return x / sc


def _rel_errors(pred, meas):
    pred, meas = np.asarray(pred, float), np.asarray(meas, float)
    return np.abs(pred - meas) / np.maximum(meas, 1e-30)


def fit_compute(raw: dict) -> dict:
    """Roofline parameters from the compute micro-benchmarks.

    kernel overhead t_k: median time of the smallest memory-bound kernels net of their bytes
    (launch/dispatch);
    memory bandwidth: the streaming rate of the largest arrays (beyond the caches — what the
    optimizer step and large activations see); GEMM math efficiency: median over shapes of
    2MNK/(t − t_k − bytes/B) relative to the best measured rate (the peak)."""
    comp = raw["compute"]
    peak = {}
    for dt in ("fp32", "bf16", "fp16"):
        r = [g["tflops"] for g in comp["gemm"] if g["dtype"] == dt and g["s"] > 0]
        if r:
            peak[dt] = max(r) * 1e12
    mem = [m for m in comp["membound"] if m["s"] > 0]
    sizes = sorted({m["elements"] for m in mem})
    t_k, bw = 0.0, 1e10
    for _ in range(3):   # t_k from the smallest kernels, bandwidth from the largest, each net of the other
        large = [m["bytes"] / max(m["s"] - t_k, 1e-12) for m in mem if m["elements"] in sizes[-2:]]
        bw = float(np.median(large)) if large else 1e10
        small = [max(m["s"] - m["bytes"] / bw, 0.0) for m in mem if m["elements"] in sizes[:2]]
        t_k = float(np.median(small)) if small else 5e-6
    gemms = [g for g in comp["gemm"] if g["dtype"] == "fp32" and g["s"] > 0]
    # the cost model's additive roofline (autoplace.cost.compute.gemm_time): t = 2MNK/(peak·η_math)
    # + (MK + KN + MN)·b/B + t_k; η_math from the median shape, then the profile's gemm_efficiency is
    # the rate that η_math gives the MAMF_REF_N³ reference GEMM (the inverse of gemm_math_efficiency)
    from autoplace.cost.compute import gemm_efficiency_for

    def _bytes(g):
        return (g["m"] * g["k"] + g["k"] * g["n"] + g["m"] * g["n"]) * 4.0
    rates = [2.0 * g["m"] * g["n"] * g["k"] / max(g["s"] - t_k - _bytes(g) / bw, 1e-12) for g in gemms]
    eta_math = float(np.median(rates) / peak["fp32"]) if rates else 0.8
    gemm_eff = float(min(gemm_efficiency_for(eta_math, peak["fp32"], bw, 4.0), 1.0)) if rates else 0.8
    # residuals of the roofline with these parameters
    pk = peak["fp32"] * eta_math
    g_err = _rel_errors([2.0 * g["m"] * g["n"] * g["k"] / pk + _bytes(g) / bw + t_k for g in gemms],
                        [g["s"] for g in gemms])
    m_err = _rel_errors([m["bytes"] / bw + t_k for m in mem], [m["s"] for m in mem])
    # attention: t = 3.5·F/(peak·η_a) + 3·t_k (flash fwd + 2.5× bwd, as autoplace.cost.compute)
    etas = []
    for a in comp.get("attention", []):
        pk_a = peak.get(a.get("dtype", "fp32"), peak["fp32"])
        etas.append(3.5 * a["flops_fwd_causal"] / (pk_a * max(a["s"] - 3 * t_k, 1e-9)))
    eta_attn = float(np.median(etas)) if etas else 0.3
    return {"peak_flops": peak, "gemm_efficiency": gemm_eff, "hbm_bw": bw, "hbm_efficiency": 1.0,
            "kernel_overhead_s": t_k, "attention_efficiency": eta_attn,
            "residuals": {"gemm_median_rel_err": float(np.median(g_err)) if len(g_err) else None,
                          "membound_median_rel_err": float(np.median(m_err)) if len(m_err) else None,
                          "attention_eta_spread": [float(min(etas)), float(max(etas))] if etas else None}}


_COEF = {  # op → (bandwidth coefficient, latency coefficient) as functions of n
    "all_reduce": (lambda n: 2.0 * (n - 1) / n, lambda n: 2.0 * (n - 1)),
    "all_gather": (lambda n: (n - 1) / n, lambda n: float(n - 1)),
    "reduce_scatter": (lambda n: (n - 1) / n, lambda n: float(n - 1)),
    "all_to_all": (lambda n: (n - 1) / n, lambda n: float(n - 1)),
}


RS_MIN_BYTES = 2**20       # reduce-scatter points above this set rs_cost_factor (bandwidth-bound)


def fit_rs_factor(raw: dict, net: dict | None, scope: str = "intra") -> float:
    """Reduce-scatter bandwidth time ÷ the ring model fitted on AR/AG (median over messages of
    ≥ 1 MiB): ≈ 1 on NCCL, ≈ 2 on gloo (an all-reduce plus a copy underneath)."""
    if not net or not math.isfinite(net["bw"]):
        return 1.0
    bwc, latc = _COEF["reduce_scatter"]
    ratios = [(c["s"] - latc(c["group"]) * net["latency"]) / (bwc(c["group"]) * c["bytes"] / net["bw"])
              for c in raw["comm"]["collectives"]
              if c["scope"] == scope and c["op"] == "reduce_scatter" and c.get("error") is None
              and c["s"] == c["s"] and c["s"] > 0 and c["bytes"] >= RS_MIN_BYTES]
    return float(np.clip(np.median(ratios), 0.5, 4.0)) if ratios else 1.0


def fit_network(raw: dict, scope: str = "intra", ops=("all_reduce", "all_gather")):
    pts = [c for c in raw["comm"]["collectives"]
           if c["scope"] == scope and c["op"] in ops and c.get("error") is None
           and c["s"] == c["s"] and c["s"] > 0]
    if not pts:
        return None
    A, y = [], []
    for c in pts:
        bwc, latc = _COEF[c["op"]]
        n = c["group"]
        A.append([bwc(n) * c["bytes"], latc(n)])
        y.append(c["s"])
    y = np.asarray(y)
    x = _nnls(A, y, 1.0 / y)
    bw = 1.0 / x[0] if x[0] > 0 else math.inf
    alpha = float(x[1])
    err = _rel_errors(np.asarray(A) @ x, y)
    return {"bw": bw, "latency": alpha, "points": len(pts), "median_rel_err": float(np.median(err))}


def fit_profile(raw: dict, name: str | None = None) -> dict:
    """HardwareSpec fields (SI units) fitted from a calib_worker RAW document."""
    comp = fit_compute(raw)
    intra = fit_network(raw, "intra")
    inter = fit_network(raw, "inter") or intra
    rs_factor = fit_rs_factor(raw, intra)
    ovl = (raw["comm"].get("overlap") or {}).get("overlap")
    comm_overlap = float(ovl) if ovl is not None else 1.0
    if intra is None:  # a single rank: no collectives measured
        intra = inter = {"bw": 1e12, "latency": 0.0, "points": 0, "median_rel_err": None}
    dev = raw["device"]
    local = int(raw.get("local_world", raw.get("world", 1)))
    if dev["type"] == "cuda":
        memory = dev["memory_bytes"]
        tile, sms = 128, int(dev.get("sm_count", 108))
        hc = [h for h in raw["compute"]["host_copy"]]
        host_bw = float(np.median([h["bytes"] / h["s"] for h in hc])) if hc else 25e9
    else:
        memory = dev["memory_bytes"] / max(local, 1) if dev["memory_bytes"] else 8 * 2**30
        tile, sms = 1, 1          # CPU BLAS: no GPU tile/wave quantization
        hc = raw["compute"]["host_copy"]
        host_bw = float(np.median([h["bytes"] / h["s"] for h in hc])) if hc else comp["hbm_bw"]
    adam = [a for a in raw["compute"]["adam"] if a["device"] == "cpu"]
    cpu_adam = float(adam[0]["params_per_s"]) if adam else 1e8
    launch = {x["what"]: x["s"] for x in raw["compute"].get("launch", [])}
    step_over = float(launch.get("tiny_train_step", 0.0))
    sw = raw.get("software", {})
    nm = name or (f"calibrated-{dev['type']}-{sw.get('backend', '')}-{local}x"
                  f"{raw.get('nnodes', 1)}")
    return {
        "name": nm,
        "memory_bytes": float(memory),
        "peak_flops": comp["peak_flops"],
        "hbm_bw": comp["hbm_bw"], "hbm_efficiency": comp["hbm_efficiency"],
        "gemm_efficiency": comp["gemm_efficiency"], "gemm_tile": tile, "sm_count": sms,
        "kernel_overhead_s": comp["kernel_overhead_s"],
        "attention_efficiency": comp["attention_efficiency"],
        "gpus_per_node": local, "scaleup_domain": local,
        "intra_bw": intra["bw"], "intra_latency": intra["latency"],
        "inter_bw": inter["bw"], "inter_latency": inter["latency"],
        "host_bw": host_bw, "cpu_adam_params_per_s": cpu_adam, "rs_cost_factor": rs_factor, "host_is_device": dev["type"] != "cuda",
        "comm_overlap": comm_overlap,
        "step_overhead_s": step_over,
        "_fit": {"compute": comp["residuals"], "intra": intra, "inter": inter},
    }
