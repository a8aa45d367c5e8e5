"""torchtitan async TP: the model's speedup over vanilla TP against torchtitan's own benchmark.

    python benchmarks/async_tp_speedups.py [--share H]

torchtitan's `benchmarks/asyncTP_llama3_h100_2025-06_torchtitan.md` (June 2025, Grand Teton H100,
torch.compile) measured async TP against vanilla TP for Llama 3.1 70B (FSDP 32 × TP 8, full AC,
local batch 16) and 8B (FSDP 8 × TP 8, per-op SAC, local batch 12), bf16 and float8 tensorwise.
This maps each configuration with and without `enable_async_tensor_parallel` and prints the
predicted speedup next to the measured one. `comm.tp_overlap_share` of the torchtitan-compile
runtime was fitted once on these four ratios (float8 rowwise left out: its vanilla baseline is a
known regression, torchtitan issue #1207); `--share` evaluates another value.
"""

from __future__ import annotations

import argparse
import math
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from autoplace.validate import run  # noqa: E402

L8 = dict(name="Llama 3.1 8B", layers=32, hidden=4096, heads=32, kv_heads=8, ffn_hidden=14336, vocab=128256,
          params_billion=8.0, arch_notes="dense, GQA, SwiGLU", seq_len=8192)
L70 = dict(name="Llama 3.1 70B", layers=80, hidden=8192, heads=64, kv_heads=8, ffn_hidden=28672, vocab=128256,
           params_billion=70.6, arch_notes="dense, GQA, SwiGLU", seq_len=8192)
F8 = "bf16 + Float8 tensorwise (torchao)"
# (name, model, GPUs, FSDP degree, local batch, recompute, precision, measured speedup)
CASES = (("70B bf16", L70, 256, 32, 16, "full", "bf16", 652.4 / 597.3),
         ("70B float8 tensorwise", L70, 256, 32, 16, "full", F8, 942.4 / 809.8),
         ("8B bf16", L8, 64, 8, 12, "selective (op-level SAC)", "bf16", 4809.4 / 4378),
         ("8B float8 tensorwise", L8, 64, 8, 12, "selective (op-level SAC)", F8, 5570.1 / 5078.1))


def record(name, model, gpus, dp, lbs, rc, prec, async_tp: bool) -> dict:
    knobs = {"enable_async_tensor_parallel": True} if async_tp else {}
    notes = f"workload-config knobs: {knobs}".replace("True", "true").replace("'", '"') if knobs else ""
    return {"id": f"asynctp-{name}-{async_tp}", "record_type": "measured_throughput",
           "source": {"citation": "pytorch/torchtitan benchmarks/asyncTP_llama3_h100_2025-06_torchtitan.md (June 2025), "
                                  "torchtitan, torch.compile", "table_or_figure": name},
           "model": model, "hardware": {"gpu": "H100 96GB (Grand Teton)", "gpus_total": gpus, "gpus_per_node": 8},
           "plan": {"dp": dp, "tp": 8, "pp": 1, "cp": 1, "ep": 1, "sequence_parallel": True, "zero_stage": 3,
                    "fsdp": True, "recompute": rc, "micro_batch": lbs, "global_batch": lbs * dp, "precision": prec},
           "measured": {"tokens_per_sec_per_gpu": 1.0}, "notes": notes}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--share", type=float, default=None, help="comm.tp_overlap_share to evaluate (default: shipped)")
    a = ap.parse_args(argv)
    if a.share is not None:
        import autoplace.validate.mapping as MP
        from autoplace.runtimes.switches import apply_settings
        base = MP.load_runtime          # the mapping's loader, for this process only
        MP.load_runtime = lambda n: apply_settings(base(n), [("comm.tp_overlap_share", a.share)]) \
            if n == "torchtitan-compile" else base(n)
    print("| case | measured async/vanilla | predicted |")
    print("|---|---:|---:|")
    logs = []
    for name, m, g, dp, lbs, rc, prec, meas in CASES:
        res, _ = run([record(name, m, g, dp, lbs, rc, prec, False),
                      record(name, m, g, dp, lbs, rc, prec, True)])
        pred = res[0].mapping["step_s"] / res[1].mapping["step_s"]
        logs.append((math.log(meas), math.log(pred)))
        print(f"| {name} | {meas:.3f} | {pred:.3f} |")
    gm = [math.exp(sum(x[i] for x in logs) / len(logs)) for i in (0, 1)]
    print(f"| geometric mean | {gm[0]:.3f} | {gm[1]:.3f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
