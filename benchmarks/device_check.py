#!/usr/bin/env python
"""The one prepared script for a GPU machine: exactness runs, calibration, ranking — in one go.

    python benchmarks/device_check.py                      # NCCL on every local GPU (1–4 ranks)
    python benchmarks/device_check.py --backend gloo --nproc 2 --quick    # the same flow on CPU

1. Exactness: the plan runner (torchrun) on the local devices for the plans that fit the rank count,
   with the single-process equivalence check (FSDP2 plans also with torchtitan's op-level SAC); per
   plan: state bytes exact, activation and collective gaps, max |Δθ|, step time, and peak memory:
   torch.cuda.max_memory_allocated against the predicted allocated bytes of the rank's stage,
   torch.cuda.max_memory_reserved against the predicted reserved bytes (allocated · (1 +
   reserve_frac)), and torch's FSDPMemTracker / MemTracker peak.
2. Calibration: `autoplace calibrate --backend B --nproc K` (quick with --quick).
3. Ranking: `benchmarks/calibration_ranking.py` with that profile, "before" = the shipped profile
   for the GPU (`--before`, default: the profile `load_hardware` resolves from the device name).

Everything is written to --out (default $OUT, else ./device_check/): `exactness.jsonl`,
`calibrated.toml`, `ranking.json`, `summary.json`, and the markdown tables on stdout.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

ONE_RANK = ["zero=0", "zero=0,recompute=full", "zero=0,recompute=selective", "zero=0,mbs=2",
            "zero=0,recompute=block,recompute_layers=2", "zero=0,mbs=4"]
MULTI = ["zero=0", "zero=1", "zero=2", "zero=3", "zero=3,reshard=0", "tp=2", "tp=2,sp=1",
         "tp=2,sp=1,recompute=selective", "pp=2", "pp=2,schedule=gpipe", "pp=2,vpp=2", "zero=0,recompute=full",
         "zero=3,recompute=full", "zero=3,reshard=0,recompute=full"]
OP_SAC = ["zero=3,recompute=selective", "zero=3,reshard=0,recompute=selective"]
"""Run with selective_policy="op-sac" (torchtitan's op-level SAC) on 2+ ranks."""


def _device_name(backend: str) -> str | None:
    if backend != "nccl":
        return None
    import torch
    return torch.cuda.get_device_name(0) if torch.cuda.is_available() else None


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--backend", default=None, help="nccl (default when CUDA is there) or gloo")
    ap.add_argument("--nproc", type=int, default=None, help="ranks (default: GPUs, at most 4; gloo: 2)")
    ap.add_argument("--model", default="llama-tiny",
                    help="a Llama-style preset the plan runner builds (it trains in fp32 with Adam: 16 B/param)")
    ap.add_argument("--before", default=None, help="profile for the 'before' prediction")
    ap.add_argument("--quick", action="store_true", help="quick calibration and fewer steps")
    ap.add_argument("--out", default=None)
    args = ap.parse_args(argv)

    import torch

    from autoplace.plan import parse_plan
    from autoplace.profile.launch import run_plans
    from autoplace.specs.hardware import load_hardware
    from autoplace.specs.presets import get_preset
    backend = args.backend or ("nccl" if torch.cuda.is_available() else "gloo")
    nproc = args.nproc or (min(torch.cuda.device_count(), 4) if backend == "nccl" else 2)
    out = Path(args.out or os.environ.get("OUT") or "device_check")
    out.mkdir(parents=True, exist_ok=True)
    dev = _device_name(backend)
    before = args.before or (dev and _profile_for(dev)) or "local-cpu"
    t0 = time.time()
    texts = ONE_RANK if nproc == 1 else MULTI
    plans = [parse_plan(t) for t in texts]
    model = get_preset(args.model)
    settings = dict(seq_len=128, global_batch=8, steps=2 if args.quick else 3, warmup=1)
    print(f"[1/3] exactness: {len(plans)} plans on {nproc} × {dev or backend}", file=sys.stderr, flush=True)
    recs = run_plans(model, plans, nproc, backend=backend, settings=settings,
                     out_jsonl=out / "exactness.jsonl", workdir=out / "runs", hardware=load_hardware(before))
    labels = list(texts)
    if nproc > 1:
        labels += [f"{t} (op-sac)" for t in OP_SAC]
        recs = recs + run_plans(model, [parse_plan(t) for t in OP_SAC], nproc, backend=backend,
                                settings=dict(settings, selective_policy="op-sac"),
                                out_jsonl=out / "exactness.jsonl", workdir=out / "runs-op-sac",
                                hardware=load_hardware(before))
    rows = []
    for text, r in zip(labels, recs):
        cg = r.get("collective_gap")
        cg = max(cg.values(), key=abs) if isinstance(cg, dict) and cg else cg
        rows.append({"plan": text, "status": r.get("status"), "error": str(r.get("error") or "")[:160],
                     "state_bytes_exact": r.get("state_bytes_exact"), "activation_gap": r.get("activation_gap"),
                     "collective_gap": cg,
                     "max_abs_diff": (r.get("equivalence") or {}).get("max_abs_diff"),
                     "equivalent": (r.get("equivalence") or {}).get("equivalent"),
                     **_peaks(r),
                     "step_s": r.get("step_s"), "predicted_step_s": r.get("predicted_step_s")})
    print("| plan | status | state bytes exact | activation gap | collective gap | max \\|Δθ\\| | "
          "allocated MiB meas / pred | reserved MiB meas / pred | tracker MiB |")
    print("|---|---|---|---:|---:|---:|---:|---:|---:|")
    for x in rows:
        print(f"| `{x['plan']}` | {x['status']} | {x['state_bytes_exact']} | {_pct(x['activation_gap'])} | "
              f"{_pct(x['collective_gap'])} | {_sci(x['max_abs_diff'])} | "
              f"{_pair(x['peak_allocated_bytes'], x['predicted_allocated_bytes'])} | "
              f"{_pair(x['peak_reserved_bytes'], x['predicted_reserved_bytes'])} | "
              f"{_mib(x['tracker_peak_bytes'])} |")

    print(f"\n[2/3] calibration ({backend}, {nproc} ranks)", file=sys.stderr, flush=True)
    from autoplace.profile.calibrate import calibrate
    cal = out / "calibrated.toml"
    calibrate(backend, nproc, str(cal), quick=args.quick, raw_out=out / "calib_raw.json")

    print("[3/3] ranking before/after calibration", file=sys.stderr, flush=True)
    sys.path.insert(0, str(ROOT / "benchmarks"))
    import calibration_ranking
    calibration_ranking.main(["--model", args.model, "--nproc", str(nproc), "--backend", backend,
                              "--before", before, "--calibrated", str(cal), "--repeats", "1",
                              "--steps", "3" if args.quick else "5", "--plans", *texts,
                              "--out", str(out / "ranking.jsonl"), "--json", str(out / "ranking.json")])
    summary = {"backend": backend, "nproc": nproc, "device": dev, "before_profile": before,
               "exactness": rows, "seconds": time.time() - t0,
               "ranking": json.loads((out / "ranking.json").read_text()).get("summary")}
    (out / "summary.json").write_text(json.dumps(summary, indent=1))
    print(f"\nwrote {out}/summary.json ({time.time() - t0:.0f} s)", file=sys.stderr)
    return 0


def _peaks(r: dict) -> dict:
    """Max over ranks of the measured peaks (CUDA max_memory_allocated / max_memory_reserved, the
    memory tracker's) and of the predicted allocated / reserved bytes of each rank's stage
    (reserved = allocated · (1 + reserve_frac), `report.CUDA_RESERVE_FRAC` on CUDA, 0 on CPU)."""
    ranks, preds = r.get("ranks") or [], r.get("predicted") or []

    def top(xs):
        xs = [x for x in xs if x]
        return max(xs) if xs else None
    return {"peak_allocated_bytes": top(m.get("peak_memory_bytes") for m in ranks),
            "peak_reserved_bytes": top(m.get("peak_reserved_bytes") for m in ranks),
            "tracker_peak_bytes": top((m.get("memory_tracker") or {}).get("peak_bytes") for m in ranks),
            "predicted_allocated_bytes": top((p.get("memory") or {}).get("allocated") for p in preds),
            "predicted_reserved_bytes": top((p.get("memory") or {}).get("reserved") for p in preds),
            "peak_memory_gap": r.get("peak_memory_gap")}


def _mib(x) -> str:
    return "–" if not x else f"{x / 2**20:.1f}"


def _pair(meas, pred) -> str:
    if not meas:
        return "–" if not pred else f"– / {_mib(pred)}"
    return f"{_mib(meas)} / {_mib(pred)} ({100 * (meas / pred - 1):+.1f} %)" if pred else f"{_mib(meas)} / –"


def _profile_for(device_name: str) -> str | None:
    from autoplace.specs.hardware import match_gpu_name
    stem, _ = match_gpu_name(device_name)
    return stem


def _pct(x) -> str:
    return "–" if x is None else f"{100 * x:+.2f} %"


def _sci(x) -> str:
    return "–" if x is None else f"{x:.1e}"


if __name__ == "__main__":
    sys.exit(main())
