#!/usr/bin/env python
"""Does calibration make the step-time model rank real plans correctly?

Runs ≥ 6 plans of a small model for real (torchrun, gloo on CPU or NCCL on GPUs), predicts their
step times with the placeholder profile (`local-cpu.toml`, "before") and with the profile fitted by
`autoplace calibrate` on this machine ("after"), and reports per plan the measured and predicted
step time plus, before and after, the Spearman rank correlation and the mean absolute % error.
The table is printed as plain text and as markdown (for the README).

    python benchmarks/calibration_ranking.py                       # calibrates first (≈ 40 s)
    python benchmarks/calibration_ranking.py --calibrated prof.toml --nproc 2 --steps 3
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

PLANS = [
    "zero=0",
    "zero=1",
    "zero=2",
    "zero=3",
    "zero=0,recompute=full",
    "zero=0,mbs=2",
    "tp=2",
    "tp=2,sp=1",
    "pp=2",
    "pp=2,schedule=gpipe",
    "pp=2,vpp=2",
    "pp=2,mbs=2",
]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default="llama-tiny")
    ap.add_argument("--nproc", type=int, default=2)
    ap.add_argument("--backend", default="gloo")
    ap.add_argument("--before", default="local-cpu", help="profile for the 'before' prediction")
    ap.add_argument("--calibrated", default=None, help="fitted profile TOML (default: calibrate now)")
    ap.add_argument("--quick-calibration", action="store_true")
    ap.add_argument("--steps", type=int, default=5)
    ap.add_argument("--repeats", type=int, default=2,
                    help="launch the plan list this many times; a plan's time is the min of its medians "
                         "(filters interference from other processes on a shared machine)")
    ap.add_argument("--seq-len", type=int, default=128)
    ap.add_argument("--global-batch", type=int, default=8)
    ap.add_argument("--plans", nargs="*", default=None)
    ap.add_argument("--out", default=None, help="JSONL of the measured records (default: a temp dir)")
    ap.add_argument("--json", default=None, help="write the summary here")
    args = ap.parse_args(argv)

    from autoplace.plan import parse_plan
    from autoplace.profile.candidates import spearman
    from autoplace.profile.launch import run_plans
    from autoplace.profile.report import predict_step_time
    from autoplace.profile.settings import DEFAULTS
    from autoplace.specs.hardware import load_hardware
    from autoplace.specs.presets import get_preset

    work = Path(tempfile.mkdtemp(prefix="autoplace-bench-"))
    model = get_preset(args.model)
    texts = args.plans or PLANS
    plans = [parse_plan(t) for t in texts]
    t0 = time.time()
    cal = args.calibrated
    if cal is None:
        from autoplace.profile.calibrate import calibrate
        cal = str(work / "calibrated.toml")
        print(f"calibrating ({args.backend}, {args.nproc} ranks) …", file=sys.stderr)
        calibrate(args.backend, args.nproc, cal, quick=args.quick_calibration, raw_out=work / "raw.json")
    hw_before, hw_after = load_hardware(args.before), load_hardware(cal)
    settings = dict(seq_len=args.seq_len, global_batch=args.global_batch, steps=args.steps, warmup=1)
    import os
    load0 = os.getloadavg()[0]
    runs = []
    for rep in range(args.repeats):
        print(f"running {len(plans)} plans (repeat {rep + 1}/{args.repeats}) …", file=sys.stderr)
        runs.append(run_plans(model, plans, args.nproc, backend=args.backend, settings=settings,
                              out_jsonl=args.out or work / "measured.jsonl", workdir=work / f"runs{rep}",
                              equivalence=False))
    load1 = os.getloadavg()[0]
    recs = []
    for i in range(len(plans)):
        ok = [r[i] for r in runs if r[i]["status"] == "ok"]
        recs.append(min(ok, key=lambda r: r["step_s"]) if ok else runs[0][i])
    full = dict(DEFAULTS, **settings)
    micro = _micro_profile(cal)
    rows = []
    for text, p, rec in zip(texts, plans, recs):
        if rec["status"] != "ok":
            print(f"  {text}: {rec['status']} {str(rec['error'])[:200]}", file=sys.stderr)
            continue
        pr = p.resolved(args.nproc)
        rows.append({"plan": text, "short": rec["plan_short"], "measured": rec["step_s"],
                     "before": predict_step_time(model, full, pr, args.nproc, hw_before),
                     "after": predict_step_time(model, full, pr, args.nproc, hw_after),
                     "micro": predict_step_time(model, full, pr, args.nproc, micro) if micro else None})
    meas = [r["measured"] for r in rows]
    summary = {}
    keys = ("before", "micro", "after") if micro else ("before", "after")
    for k in keys:
        pred = [r[k] for r in rows]
        summary[k] = {"spearman": spearman(pred, meas),
                      "mae_pct": 100.0 * sum(abs(a - b) / b for a, b in zip(pred, meas)) / len(rows)}
    hw = load_hardware(cal)
    header = (f"{model.name}, {args.nproc} ranks, {args.backend}, seq {args.seq_len}, global batch "
              f"{args.global_batch}, median of {args.steps} timed steps; before = `{args.before}.toml`, "
              f"after = `autoplace calibrate --backend {args.backend} --nproc {args.nproc}`")
    print(header)
    w = max(len(r["plan"]) for r in rows)
    print(f"{'plan'.ljust(w)}  {'measured s':>10}  {'before s':>9}  {'err':>6}  {'after s':>9}  {'err':>6}")
    for r in rows:
        print(f"{r['plan'].ljust(w)}  {r['measured']:10.4f}  {r['before']:9.4f}  "
              f"{100 * (r['before'] / r['measured'] - 1):+5.0f}%  {r['after']:9.4f}  "
              f"{100 * (r['after'] / r['measured'] - 1):+5.0f}%")
    for k in keys:
        print(f"{k}: Spearman {summary[k]['spearman']:.3f}, mean |error| {summary[k]['mae_pct']:.1f}%")
    print()
    print("| plan | measured step (s) | predicted before (s) | error | predicted after (s) | error |")
    print("|---|---:|---:|---:|---:|---:|")
    for r in rows:
        print(f"| `{r['plan']}` | {r['measured']:.4f} | {r['before']:.4f} | "
              f"{100 * (r['before'] / r['measured'] - 1):+.0f}% | {r['after']:.4f} | "
              f"{100 * (r['after'] / r['measured'] - 1):+.0f}% |")
    print(f"| **Spearman ρ** | | {summary['before']['spearman']:.2f} | | {summary['after']['spearman']:.2f} | |")
    print(f"| **mean abs. error** | | | {summary['before']['mae_pct']:.0f}% | | {summary['after']['mae_pct']:.0f}% |")
    if micro:
        print(f"\n(after, micro-benchmarks only — no probe refinement: Spearman "
              f"{summary['micro']['spearman']:.2f}, mean abs. error {summary['micro']['mae_pct']:.0f}%)")
    print()
    print(f"_{header}. Fitted: fp32 {hw.peak('fp32') / 1e9:.0f} GFLOP/s × η {hw.gemm_efficiency:.2f}, "
          f"memory {hw.hbm_bw / 1e9:.0f} GB/s, kernel {hw.kernel_overhead_s * 1e6:.1f} µs, "
          f"gloo {hw.intra_bw / 1e9:.2f} GB/s + {hw.intra_latency * 1e6:.0f} µs/step. "
          f"Load average {load0:.1f} → {load1:.1f} on {os.cpu_count()} cores. Total {time.time() - t0:.0f} s._")
    if args.json:
        Path(args.json).write_text(json.dumps({"rows": rows, "summary": summary, "header": header,
                                               "calibrated": cal, "loadavg": [load0, load1]}, indent=1))
    return 0


def _micro_profile(path):
    """The calibrated profile with the probe-refined fields put back to their micro-benchmark values."""
    import tomllib

    from autoplace.specs.hardware import load_hardware
    doc = tomllib.loads(Path(path).read_text())
    pr = doc.get("calibration", {}).get("fit", {}).get("probes", {})
    if not pr.get("used"):
        return None
    hw = load_hardware(str(path))
    kw = dict(pr["micro"])
    if "intra_latency" in kw and hw.inter_latency == hw.intra_latency:
        kw["inter_latency"] = kw["intra_latency"]
    return hw.with_(**kw)


if __name__ == "__main__":
    sys.exit(main())
