"""The fitted profile as TOML text: the fields `load_hardware` reads, each with how it was measured,
then [calibration] (fit residuals), [software] and [raw] (the measurements themselves).
"""

from __future__ import annotations

import json
import math
import time
from pathlib import Path

from autoplace.io import atomic_write, to_jsonable
from autoplace.profile.calibrate.fit import fit_profile


def _num(x, digits=6) -> str:
    if isinstance(x, bool):
        return "true" if x else "false"
    if isinstance(x, int):
        return str(x)
    x = float(x)
    if math.isinf(x):
        return "1e30"
    return f"{x:.{digits}g}"


def _tq(s: str) -> str:
    return json.dumps(str(s), ensure_ascii=False)


def profile_toml(prof: dict, raw: dict) -> str:
    """The profile as TOML text: `load_hardware` reads it; [raw]/[software]/[calibration] are kept."""
    import tomli_w
    sw = raw.get("software", {})
    date = raw.get("date", time.strftime("%Y-%m-%dT%H:%M:%S"))
    fit = prof["_fit"]
    nodes = raw.get("nnodes", 1)
    pr = fit.get("probes") or {}
    micro = pr.get("micro") if pr.get("used") else None

    def how(key, text):
        if micro is None or key not in micro:
            return text
        return (f"micro-benchmark {_num(micro[key])} → refined on {len(pr['plans'])} probe training "
                f"runs ({pr['model']})")
    lines = [
        f"# {prof['name']} — fitted by `autoplace calibrate` on {date}",
        f"# {raw.get('world')} ranks ({raw.get('local_world')} per node × {nodes} node(s)), backend "
        f"{sw.get('backend')}, torch {sw.get('torch')}; device: {raw['device'].get('name')}",
        "# Every number below is fitted from the micro-benchmarks in [raw] (see autoplace.profile.calibrate)"
        + ("; four are then refined on short probe training runs ([calibration.fit.probes])." if micro else "."),
        "",
        f"name = {_tq(prof['name'])}",
        f"notes = {_tq('calibrated profile: ' + str(sw.get('cpu_model') or sw.get('device_name') or ''))}",
        "",
        "[memory]",
        f"memory_gib = {_num(prof['memory_bytes'] / 2**30)}    # device memory"
        + (" (CUDA total_memory)" if raw["device"]["type"] == "cuda" else " (RAM ÷ ranks per node)"),
        f"hbm_bw_gbps = {_num(prof['hbm_bw'] / 1e9)}    # streaming rate of the largest add/copy/scale "
        "arrays, per rank, all ranks running",
        "",
        "[peak_tflops]",
    ]
    for dt, v in prof["peak_flops"].items():
        lines.append(f"{dt} = {_num(v / 1e12)}    # best measured {dt} GEMM throughput (torch.mm)")
    lines += [
        "",
        "[compute]",
        f"gemm_efficiency = {_num(prof['gemm_efficiency'])}    # "
        + "median GEMM rate ÷ best rate (shapes in [raw])",
        f"gemm_tile = {prof['gemm_tile']}    # " + ("GPU tile edge" if prof["gemm_tile"] > 1 else
                                                   "CPU: no tile/wave quantization"),
        f"sm_count = {prof['sm_count']}",
        f"kernel_overhead_us = {_num(prof['kernel_overhead_s'] * 1e6)}    # "
        + how("kernel_overhead_s", "median time of the smallest memory-bound kernels"),
        f"attention_efficiency = {_num(prof['attention_efficiency'])}    # causal SDPA fwd+bwd, median "
        "over shapes",
        f"hbm_efficiency = {_num(prof['hbm_efficiency'])}    # hbm_bw above is the achieved rate",
        "",
        "[network]",
        f"gpus_per_node = {prof['gpus_per_node']}",
        f"scaleup_domain = {prof['scaleup_domain']}",
        f"intra_bw_gbps = {_num(prof['intra_bw'] / 1e9)}    # NNLS fit of AR/AG ring bus bandwidth "
        f"({fit['intra'].get('points')} points)",
        f"intra_latency_us = {_num(prof['intra_latency'] * 1e6)}    # per ring step; "
        + how("intra_latency", "NNLS intercept"),
        f"inter_bw_gbps = {_num(prof['inter_bw'] / 1e9)}    # "
        + ("groups spanning nodes" if nodes > 1 else "one node: same as intra"),
        f"inter_latency_us = {_num(prof['inter_latency'] * 1e6)}",
        f"rs_cost_factor = {_num(prof.get('rs_cost_factor', 1.0))}    # reduce-scatter ÷ ring model, median "
        "of messages ≥ 1 MiB (gloo: RS is an all-reduce + copy)",
        f"comm_overlap = {_num(prof.get('comm_overlap', 1.0))}    # async all-reduce under a GEMM loop: "
        "share of the shorter that hid",
        f"host_bw_gbps = {_num(prof['host_bw'] / 1e9)}    # "
        + ("pinned H2D/D2H" if raw["device"]["type"] == "cuda" else "memcpy (host memory is the device)"),
        f"host_is_device = {'true' if prof.get('host_is_device') else 'false'}",
        "",
        "[overheads]",
        f"cpu_adam_gparams_per_s = {_num(prof['cpu_adam_params_per_s'] / 1e9)}    # torch.optim.Adam on "
        "host tensors, per rank",
        f"step_overhead_ms = {_num(prof['step_overhead_s'] * 1e3)}    # "
        + how("step_overhead_s", "near-empty train step"),
        "",
    ]
    extra = {
        "calibration": {"method": "autoplace calibrate (NNLS, relative error)", "date": date,
                        "world": int(raw.get("world", 1)), "nnodes": int(nodes),
                        "quick": bool(raw.get("quick", False)),
                        "fit": to_jsonable(fit, toml=True)},
        "software": to_jsonable(sw, toml=True),
        "raw": to_jsonable({"device": raw["device"], "contention": raw.get("contention", {}),
                       "gemm": raw["compute"]["gemm"], "membound": raw["compute"]["membound"],
                       "attention": raw["compute"]["attention"], "adam": raw["compute"]["adam"],
                       "host_copy": raw["compute"]["host_copy"], "launch": raw["compute"]["launch"],
                       "collectives": raw["comm"]["collectives"], "p2p": raw["comm"]["p2p"]}, toml=True),
    }
    return "\n".join(lines) + "\n" + tomli_w.dumps(extra)


def write_profile(raw: dict, out: str | Path, name: str | None = None) -> dict:
    prof = fit_profile(raw, name)
    atomic_write(out, profile_toml(prof, raw))
    return prof
