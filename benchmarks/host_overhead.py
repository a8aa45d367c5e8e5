"""Pin the host-time constants of the runtime files ([host]) on one GPU: per-op host cost and the
dropless MoE synchronisation, on one MoE layer in plain PyTorch (no Transformer Engine needed).

    python benchmarks/host_overhead.py [--out results.json] [--experts 16] [--tokens 4096]

Measures, each as a median over repeats after warm-up:
  1. per-op host cost: CPU wall time to *issue* N tiny element-wise ops (the GPU finishes each long
     before the next arrives, so the loop is host-bound): forward op µs (`fwd_op_us`), and the
     autograd engine's per-kernel backward cost of the same chain (`bwd_op_us`);
  2. one MoE layer (router GEMM, top-k, permute, one GEMM per local expert for FC1 and FC2, SwiGLU,
     un-permute; hidden 2048, f_expert 768, top-8) forward + backward, three ways:
       dropless with the host sync (per-expert counts .tolist() to split the tokens, as Megatron's
       dropless dispatcher and torchtitan's EP splits do), capacity-factor (fixed splits, no sync),
       and the same layer's GPU time alone (CUDA events over a CUDA-graph replay of the no-sync
       version, the device time without host launches);
     from which the sync's cost (`sync_us`) and the host ops of the layer follow;
  3. the op count of the layer (torch profiler's kernel launches) to check `moe_ops` and the kernel
     counts of autoplace.cost.compute.

Runs in well under 10 minutes on one H100; writes JSON (default: $OUT/host_overhead.json or
benchmarks/results/host_overhead.json). CPU-only machines: exits with a message.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path


def _median(fn, reps=20):
    out = []
    for _ in range(reps):
        out.append(fn())
    return statistics.median(out)


def per_op_host_us(torch, n=2000):
    x = torch.zeros(16, device="cuda", requires_grad=True)

    def fwd():
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        y = x
        for _ in range(n):
            y = y + 1.0
        t1 = time.perf_counter()
        torch.cuda.synchronize()
        return (t1 - t0) / n * 1e6, y

    def fb():
        y = x
        for _ in range(n):
            y = y * 1.0001
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        y.sum().backward()
        torch.cuda.synchronize()
        return (time.perf_counter() - t0) / n * 1e6

    for _ in range(3):
        fwd(), fb()
    f = _median(lambda: fwd()[0])
    b = _median(fb)
    return f, b


class MoELayer:
    def __init__(self, torch, h, fe, experts, top_k):
        self.t, self.E, self.k = torch, experts, top_k
        dev, dt = "cuda", torch.bfloat16
        self.router = torch.randn(h, experts, device=dev, dtype=dt, requires_grad=True)
        self.w1 = [torch.randn(h, 2 * fe, device=dev, dtype=dt, requires_grad=True) * 0.02 for _ in range(experts)]
        self.w2 = [torch.randn(fe, h, device=dev, dtype=dt, requires_grad=True) * 0.02 for _ in range(experts)]

    def __call__(self, x, sync: bool):
        torch = self.t
        logits = x @ self.router
        probs, idx = torch.topk(torch.softmax(logits.float(), -1), self.k, dim=-1)
        flat = idx.flatten()
        order = torch.argsort(flat)
        tok = x.repeat_interleave(self.k, 0)[order]
        if sync:
            counts = torch.bincount(flat, minlength=self.E).tolist()     # device → host: the dropless sync
        else:
            counts = [tok.shape[0] // self.E] * self.E                    # capacity factor: fixed splits
        outs = []
        for e, part in enumerate(torch.split(tok, counts)):
            a = part @ self.w1[e]
            g, u = a.chunk(2, -1)
            outs.append((torch.nn.functional.silu(g) * u) @ self.w2[e])
        y = torch.cat(outs)
        back = torch.empty_like(y)
        back[order] = y
        return (back.view(x.shape[0], self.k, -1) * probs.unsqueeze(-1).to(y.dtype)).sum(1)


def moe_times(torch, tokens, experts, h=2048, fe=768, top_k=8):
    layer = MoELayer(torch, h, fe, experts, top_k)
    x = torch.randn(tokens, h, device="cuda", dtype=torch.bfloat16, requires_grad=True)

    def run(sync):
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        layer(x, sync).float().sum().backward()
        torch.cuda.synchronize()
        return (time.perf_counter() - t0) * 1e3

    for _ in range(3):
        run(True), run(False)
    with_sync, no_sync = _median(lambda: run(True)), _median(lambda: run(False))
    # device time: replay the sync-free forward+backward from a CUDA graph (no host launches)
    dev = None
    try:
        g = torch.cuda.CUDAGraph()
        s = torch.cuda.Stream()
        s.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(s):
            for _ in range(2):
                layer(x, False).float().sum().backward()
        torch.cuda.current_stream().wait_stream(s)
        with torch.cuda.graph(g):
            layer(x, False).float().sum().backward()
        ev0, ev1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)

        def replay():
            ev0.record()
            g.replay()
            ev1.record()
            torch.cuda.synchronize()
            return ev0.elapsed_time(ev1)
        replay()
        dev = _median(replay)
    except Exception as exc:                                  # noqa: BLE001 — report, keep the other numbers
        print(f"CUDA-graph replay failed ({exc}); device time not measured", file=sys.stderr)
    from torch.profiler import ProfilerActivity, profile
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        layer(x, False).float().sum().backward()
        torch.cuda.synchronize()
    kernels = sum(1 for e in prof.events() if e.device_type.name == "CUDA")
    return {"with_sync_ms": with_sync, "no_sync_ms": no_sync, "device_ms": dev, "kernels_fwd_bwd": kernels,
            "sync_cost_us": (with_sync - no_sync) * 1e3}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default="")
    ap.add_argument("--experts", type=int, default=16)
    ap.add_argument("--tokens", type=int, default=4096)
    a = ap.parse_args(argv)
    import torch
    if not torch.cuda.is_available():
        print("host_overhead.py needs a CUDA GPU", file=sys.stderr)
        return 2
    f_us, b_us = per_op_host_us(torch)
    res = {"device": torch.cuda.get_device_name(), "torch": torch.__version__,
           "fwd_op_us": f_us, "bwd_op_us": b_us,
           "moe": {"experts": a.experts, "tokens": a.tokens, **moe_times(torch, a.tokens, a.experts)}}
    out = Path(a.out or (Path(os.environ["OUT"]) / "host_overhead.json" if os.environ.get("OUT")
                         else Path(__file__).parent / "results" / "host_overhead.json"))
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(res, indent=1))
    print(json.dumps(res, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
