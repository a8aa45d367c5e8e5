#!/usr/bin/env python
"""Proxies of the top plans of `search --model 13b --gpus 64` on the GPUs at hand: analytic vs anchored vs measured.

    python benchmarks/device_check_tune.py                 # every local GPU (NCCL), 3 candidates, ≤ ~8 min
    python benchmarks/device_check_tune.py --dry           # CPU: search, candidates, proxies; no run
    python benchmarks/device_check_tune.py --backend gloo --model llama-tiny --gpus 4 --hardware local-cpu \
        --global-batch 8 --seq-len 64 --proxy-layers 1     # the whole flow on CPU, in a minute or two

It runs `autoplace tune` (local executor, SQLite study under --out): the search in the runner's
precision (fp32), the 3 fastest candidates that differ from each other and whose proxy fits the local
GPUs (TP·CP ≤ the GPU count: one GPU runs only tp = cp = 1 candidates), each candidate's proxies at 1
and 2 layers of one pipeline stage with DP shrunk to the GPUs, then prints per candidate the analytic
full-size step, the anchored one, and each proxy's measured vs analytic step. A candidate that does
not end within --timeout is recorded failed; the script stops launching new work at --budget seconds.
Everything goes to --out (default $OUT, else ./device_check_tune/): results.json, calibration.json,
tune.db, and the markdown table on stdout.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def _gpus() -> int:
    try:
        import torch
        return torch.cuda.device_count() if torch.cuda.is_available() else 0
    except ImportError:
        return 0


def _hardware(default: str | None) -> str:
    if default:
        return default
    try:
        import torch
        if torch.cuda.is_available():
            from autoplace.specs.hardware import match_gpu_name
            stem, _why = match_gpu_name(torch.cuda.get_device_name(0))
            if stem:
                return stem
    except ImportError:
        pass
    return "h100-sxm-80gb"


def dry(args, hw: str) -> int:
    """Search and candidate picking only: what a device run would launch."""
    from autoplace.cli.common import resolve_hardware, resolve_model
    from autoplace.estimate import estimate
    from autoplace.profile import tune as T
    from autoplace.profile.proxy import proxy_of
    from autoplace.profile.report import executed_plan, train_spec
    from autoplace.profile.settings import DEFAULTS
    from autoplace.search import launchers as LS
    m = resolve_model(args.model, None, allow_params=False)
    h = resolve_hardware(hw, None, None)
    out = LS.search(m, h, args.gpus, seq_len=args.seq_len, global_batch=args.global_batch, precision="fp32",
                    top_k=256)
    train = out.ranked[0][2].train
    ranked = [(p.resolved(args.gpus), s) for p, s, _ in out.ranked]
    layers = [int(x) for x in args.proxy_layers.split(",")]

    settings = dict(DEFAULTS, seq_len=train.seq_len, global_batch=train.global_batch)

    def fits(p):
        return T.proxy_runnable(m, p, args.gpus, args.proxy_ranks, layers, train.global_batch, args.backend, settings)
    picked = T.pick_candidates(ranked, args.measure, fits)
    print(f"{m.name} on {args.gpus} × {h.name}: seq {train.seq_len}, batch {train.global_batch}; proxies on "
          f"{args.proxy_ranks} rank(s), layers {layers}")
    print("| plan | analytic s (fp32) | proxies |\n|---|---:|---|")
    for i in picked:
        p, _s = ranked[i]
        d = estimate(m, h, train_spec(settings, args.backend, m), executed_plan(p), args.gpus)
        prs = [proxy_of(m, p, args.gpus, args.proxy_ranks, layers=L, global_batch=train.global_batch) for L in layers]
        print(f"| {p.short()} | {d['time']['step_s']:.4g} | " + "; ".join(pr.describe() for pr in prs) + " |")
    if not picked:
        print(f"no candidate has a proxy on {args.proxy_ranks} rank(s)")
    return 0


def fmt(xs) -> str:
    if isinstance(xs, list):
        return ", ".join(f"{x:.4g}" for x in xs)
    return f"{xs:.4g}" if xs is not None else "-"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default="13b")
    ap.add_argument("--gpus", type=int, default=64)
    ap.add_argument("--hardware", default=None, help="default: the profile of the local GPU, else h100-sxm-80gb")
    ap.add_argument("--backend", default=None)
    ap.add_argument("--measure", type=int, default=3)
    ap.add_argument("--proxy-ranks", type=int, default=None, help="default: the local GPUs (at most 8)")
    ap.add_argument("--proxy-layers", default="1,2")
    ap.add_argument("--seq-len", type=int, default=None)
    ap.add_argument("--global-batch", type=int, default=None)
    ap.add_argument("--steps", type=int, default=2)
    ap.add_argument("--timeout", type=float, default=240.0, help="seconds per candidate")
    ap.add_argument("--out", default=None)
    ap.add_argument("--dry", action="store_true", help="search and pick only; launch nothing")
    args = ap.parse_args(argv)
    n = _gpus()
    args.backend = args.backend or ("nccl" if n else "gloo")
    args.proxy_ranks = args.proxy_ranks or (min(n, 8) if n else 2)
    hw = _hardware(args.hardware)
    if args.dry:
        return dry(args, hw)
    out = Path(args.out or os.environ.get("OUT") or "device_check_tune")
    out.mkdir(parents=True, exist_ok=True)
    cmd = [sys.executable, "-m", "autoplace", "tune", "--model", args.model, "--gpus", str(args.gpus),
           "--hardware", hw, "--measure", str(args.measure), "--proxy-ranks", str(args.proxy_ranks),
           "--proxy-layers", args.proxy_layers, "--backend", args.backend, "--steps", str(args.steps),
           "--timeout", str(args.timeout), "--out", str(out), "--json", "--heartbeat", "5"]
    if args.seq_len:
        cmd += ["--seq-len", str(args.seq_len)]
    if args.global_batch:
        cmd += ["--global-batch", str(args.global_batch)]
    env = dict(os.environ, PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    t0 = time.time()
    print(" ".join(cmd), file=sys.stderr, flush=True)
    r = subprocess.run(cmd, capture_output=True, text=True, env=env)
    (out / "tune.stderr.txt").write_text(r.stderr)
    if r.returncode != 0:
        print(r.stderr[-3000:], file=sys.stderr)
        return r.returncode
    doc = json.loads(r.stdout)
    print(f"{args.model} on {args.gpus} × {doc['hardware']} (fp32 proxies on {args.proxy_ranks} × {args.backend}), "
          f"{time.time() - t0:.0f} s")
    print("| plan | analytic s | anchored s | proxy measured s (1, 2 layers) | proxy analytic s | k | status |")
    print("|---|---:|---:|---|---|---:|---|")
    for c in doc["candidates"]:
        print(f"| {c['plan']} | {c['analytic_s']:.4g} | {fmt(c.get('anchored_s'))} | {fmt(c.get('proxy_measured_s'))} "
              f"| {fmt(c.get('proxy_analytic_s'))} | {fmt(c.get('k'))} | {c['status']} |")
    for line in doc.get("calibration_lines", []):
        print(line)
    return 0


if __name__ == "__main__":
    sys.exit(main())
