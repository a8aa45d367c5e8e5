#!/usr/bin/env python
"""Kernel rates on one GPU, for the cost model's attention and GEMM terms (plain torch, no autoplace).

    python benchmarks/gpu_kernels.py [--out DIR] [--no-flex]

Measures, with CUDA events (3 warm-ups, the median of 10 timed runs):
1. causal attention fwd and fwd+bwd through SDPA's flash (FA2) and cuDNN backends at head dim 64
   and 128 with the same query width (4096 = 64·64 = 32·128), B = 4, s = 4096: the head-dim factor
   `autoplace.cost.compute.head_dim_factor` predicts (softmax exp on the SFUs);
2. FlexAttention (compiled) with a 128-token sliding window against full causal at head dim 64: the
   share of the causal time a window costs (`keys_per_query(..., tile)` predicts (w + 64)/(s/2));
3. BF16 matmul and FP8 `torch._scaled_mm` (e4m3, per-tensor scales; split and fast accumulation) on 8192³ and the expert GEMM
   shapes of gpt-oss-120b (8192 rows, 2880/5760) and Qwen3-30B-A3B (2048/768/1536), single and as a
   batch of 8 (a grouped GEMM's work);
4. host launch cost of a tiny eager op (µs per op, the GPU idle).

Writes `kernels.json` to --out (default $OUT, else ./gpu_kernels/) and prints a table; compare with
`benchmarks/gpu_kernels_compare.py`, which evaluates the cost model on the same shapes.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path


def bench(fn, warm=3, iters=10):
    import torch
    for _ in range(warm):
        fn()
    torch.cuda.synchronize()
    ts = []
    for _ in range(iters):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        fn()
        b.record()
        b.synchronize()
        ts.append(a.elapsed_time(b) / 1e3)
    return statistics.median(ts)


def attention(out: dict) -> None:
    import torch
    import torch.nn.functional as F
    from torch.nn.attention import SDPBackend, sdpa_kernel
    B, s, width = 4, 4096, 4096
    res = out.setdefault("attention", [])
    for name, be in (("flash2", SDPBackend.FLASH_ATTENTION), ("cudnn", SDPBackend.CUDNN_ATTENTION)):
        for d in (64, 128):
            H = width // d
            q, k, v = (torch.randn(B, H, s, d, device="cuda", dtype=torch.bfloat16, requires_grad=True)
                       for _ in range(3))
            g = torch.randn(B, H, s, d, device="cuda", dtype=torch.bfloat16)
            flops_f = 4.0 * B * H * d * s * s / 2          # QKᵀ and P·V over the causal half
            try:
                with sdpa_kernel([be]):
                    tf = bench(lambda: F.scaled_dot_product_attention(q, k, v, is_causal=True))

                    def fb():
                        o = F.scaled_dot_product_attention(q, k, v, is_causal=True)
                        o.backward(g)
                    tfb = bench(fb)
                res.append({"kernel": name, "d": d, "heads": H, "B": B, "s": s, "fwd_s": tf, "fwd_bwd_s": tfb,
                            "fwd_tflops": flops_f / tf / 1e12, "fwd_bwd_tflops": 3.5 * flops_f / tfb / 1e12})
            except Exception as e:  # a backend this build lacks
                res.append({"kernel": name, "d": d, "error": f"{type(e).__name__}: {e}"[:300]})
            torch.cuda.empty_cache()


def flex(out: dict) -> None:
    import torch
    from torch.nn.attention.flex_attention import create_block_mask, flex_attention
    B, s, d, H, w = 4, 4096, 64, 64, 128
    fa = torch.compile(flex_attention)
    q, k, v = (torch.randn(B, H, s, d, device="cuda", dtype=torch.bfloat16, requires_grad=True) for _ in range(3))
    g = torch.randn(B, H, s, d, device="cuda", dtype=torch.bfloat16)
    res = out.setdefault("flex", [])

    def causal(b, h, qi, ki):
        return qi >= ki

    def window(b, h, qi, ki):
        return (qi >= ki) & (qi - ki < w)

    for name, mm in (("causal", causal), ("window128", window)):
        t0 = time.time()
        try:
            bm = create_block_mask(mm, B=None, H=None, Q_LEN=s, KV_LEN=s)

            def fb():
                o = fa(q, k, v, block_mask=bm)
                o.backward(g)
            tf = bench(lambda: fa(q, k, v, block_mask=bm))
            tfb = bench(fb)
            res.append({"mask": name, "d": d, "heads": H, "B": B, "s": s, "window": w if name != "causal" else 0,
                        "fwd_s": tf, "fwd_bwd_s": tfb, "compile_and_bench_s": time.time() - t0})
        except Exception as e:
            res.append({"mask": name, "error": f"{type(e).__name__}: {e}"[:300]})


GEMMS = [("square", 8192, 8192, 8192), ("gptoss_fc1", 8192, 5760, 2880), ("gptoss_fc2", 8192, 2880, 2880),
         ("qwen3_fc1", 8192, 1536, 2048), ("qwen3_fc2", 8192, 2048, 768)]


def gemms(out: dict) -> None:
    import torch
    res = out.setdefault("gemm", [])
    fp8 = hasattr(torch, "_scaled_mm") and hasattr(torch, "float8_e4m3fn")
    one = torch.ones((), device="cuda", dtype=torch.float32)
    for name, M, N, K in GEMMS:
        for batch in (1, 8):
            if name == "square" and batch > 1:
                continue
            a = torch.randn(batch, M, K, device="cuda", dtype=torch.bfloat16)
            w = torch.randn(batch, N, K, device="cuda", dtype=torch.bfloat16)
            fl = 2.0 * batch * M * N * K
            t16 = bench(lambda: torch.matmul(a, w.transpose(-1, -2)))
            row = {"name": name, "M": M, "N": N, "K": K, "batch": batch, "bf16_s": t16, "bf16_tflops": fl / t16 / 1e12}
            if fp8:
                a8 = a.to(torch.float8_e4m3fn)
                w8 = w.to(torch.float8_e4m3fn)
                # split accumulation (torch's default; TE's and torchao's dgrad/wgrad) and fast accumulation
                # (TE's and torchao's forward)
                for key, fast in (("fp8", False), ("fp8_fast", True)):
                    try:
                        def run8():
                            for i in range(batch):
                                torch._scaled_mm(a8[i], w8[i].t(), scale_a=one, scale_b=one, out_dtype=torch.bfloat16,
                                                 use_fast_accum=fast)
                        t8 = bench(run8)
                        row.update({f"{key}_s": t8, f"{key}_tflops": fl / t8 / 1e12})
                    except Exception as e:
                        row[f"{key}_error"] = f"{type(e).__name__}: {e}"[:300]
            res.append(row)
            torch.cuda.empty_cache()


def host(out: dict) -> None:
    import torch
    x = torch.zeros(1, device="cuda")
    torch.cuda.synchronize()
    n = 2000
    for _ in range(200):
        x.add_(1.0)
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(n):
        x.add_(1.0)
    t_launch = (time.perf_counter() - t0) / n
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(200):
        x.add_(1.0)
        torch.cuda.synchronize()
    t_sync = (time.perf_counter() - t0) / 200
    out["host"] = {"eager_op_launch_us": t_launch * 1e6, "op_plus_sync_us": t_sync * 1e6}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default=None)
    ap.add_argument("--no-flex", action="store_true", help="skip the compiled FlexAttention runs")
    ap.add_argument("--only", default=None, help="comma-separated subset of host,gemm,attention,flex")
    args = ap.parse_args(argv)
    import torch
    if not torch.cuda.is_available():
        print("gpu_kernels: no CUDA device (this script measures GPU kernels)", file=sys.stderr)
        return 2
    out_dir = Path(args.out or os.environ.get("OUT") or "gpu_kernels")
    out_dir.mkdir(parents=True, exist_ok=True)
    out: dict = {"device": torch.cuda.get_device_name(0), "torch": torch.__version__,
                 "cudnn": torch.backends.cudnn.version()}
    steps = [("host", host), ("gemm", gemms), ("attention", attention)] + ([] if args.no_flex else [("flex", flex)])
    if args.only:
        steps = [st for st in steps if st[0] in args.only.split(",")]
    for name, fn in steps:
        t0 = time.time()
        try:
            fn(out)
        except Exception as e:
            out[f"{name}_error"] = f"{type(e).__name__}: {e}"[:500]
        print(f"[{name}] {time.time() - t0:.1f} s", file=sys.stderr, flush=True)
        tmp = out_dir / "kernels.json.tmp"
        tmp.write_text(json.dumps(out, indent=1))
        tmp.replace(out_dir / "kernels.json")
    print(json.dumps(out, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
