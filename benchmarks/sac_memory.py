"""Op-level SAC's saved activations, eager against torch.compile, measured on this CPU.

    python benchmarks/sac_memory.py

A clean-room Llama block as torchtitan wrote it until #2259 of January 2026 (nn.RMSNorm, complex fp32
RoPE, GQA through `repeat_interleave`, `F.scaled_dot_product_attention`, SwiGLU as silu(w1 x) · w3 x; h 1024, 8 heads,
2 KV heads, f 3584, bf16, 4 layers, 2 × 2048 tokens) under torchtitan's op-level SAC policy (save
mm / SDPA / max outputs, every second mm recomputed) and without recompute, run eager and with
each block compiled. Each
case runs in a fresh process with glibc's mmap threshold fixed (MALLOC_MMAP_THRESHOLD_, so freed
tensors leave the resident set), two warm-up steps, then the resident set held after one forward,
per token and layer, in units of h bytes. For the compiled block it also lists the activations its
backward saved (saved-tensor hooks see a compiled region's saves; eager SAC keeps its outputs in
its own cache, out of their reach). `runtimes/torchtitan-compile.toml` `sac_keeps_unread` and
`runtimes/torchtitan-compile-2025.toml` `attention_kv_expanded` cite it.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from pathlib import Path

CASE = r'''
import sys, torch, torch.nn as nn, torch.nn.functional as F
from collections import defaultdict
from functools import partial
from torch.utils.checkpoint import checkpoint, CheckpointPolicy, create_selective_checkpoint_contexts
torch.manual_seed(0); torch.set_num_threads(2)
mode, ac = sys.argv[1], sys.argv[2]
H, NH, KV, F_, L, B, S = 1024, 8, 2, 3584, 4, 2, 2048
D = H // NH
dt = torch.bfloat16
def precompute(S, D):
    freqs = 1.0 / (10000 ** (torch.arange(0, D, 2).float() / D))
    t = torch.arange(S).float()
    return torch.polar(torch.ones(S, D // 2), torch.outer(t, freqs))
FC = precompute(S, D)
def rope(xq, xk, fc):
    xq_ = torch.view_as_complex(xq.float().reshape(*xq.shape[:-1], -1, 2))
    xk_ = torch.view_as_complex(xk.float().reshape(*xk.shape[:-1], -1, 2))
    fc = fc.view(1, xq_.shape[1], 1, xq_.shape[-1])
    return torch.view_as_real(xq_ * fc).flatten(3).type_as(xq), torch.view_as_real(xk_ * fc).flatten(3).type_as(xk)
class Block(nn.Module):
    def __init__(s):
        super().__init__()
        s.an, s.fn = nn.RMSNorm(H), nn.RMSNorm(H)
        s.wq, s.wk, s.wv, s.wo = nn.Linear(H, H, bias=False), nn.Linear(H, KV * D, bias=False), nn.Linear(H, KV * D, bias=False), nn.Linear(H, H, bias=False)
        s.w1, s.w3, s.w2 = nn.Linear(H, F_, bias=False), nn.Linear(H, F_, bias=False), nn.Linear(F_, H, bias=False)
    def attn(s, x):
        b, sl, _ = x.shape
        q, k, v = s.wq(x).view(b, sl, NH, D), s.wk(x).view(b, sl, KV, D), s.wv(x).view(b, sl, KV, D)
        q, k = rope(q, k, FC[:sl])
        k = k.repeat_interleave(NH // KV, dim=2); v = v.repeat_interleave(NH // KV, dim=2)
        o = F.scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), is_causal=True)
        return s.wo(o.transpose(1, 2).reshape(b, sl, H))
    def forward(s, x):
        h = x + s.attn(s.an(x))
        n = s.fn(h)
        return h + s.w2(F.silu(s.w1(n)) * s.w3(n))
SAVE = {torch.ops.aten.mm.default, torch.ops.aten._scaled_dot_product_efficient_attention.default,
        torch.ops.aten._scaled_dot_product_flash_attention.default,
        torch.ops.aten._scaled_dot_product_flash_attention_for_cpu.default, torch.ops.aten.max.default}
def ctx_fn():
    count = defaultdict(int)
    def policy(ctx, func, *a, **k):
        mode_ = "recompute" if ctx.is_recompute else "forward"
        if func == torch.ops.aten.mm.default:
            count[mode_] += 1
        to_save = func in SAVE and not (func == torch.ops.aten.mm.default and count[mode_] % 2 == 0)
        return CheckpointPolicy.MUST_SAVE if to_save else CheckpointPolicy.PREFER_RECOMPUTE
    return create_selective_checkpoint_contexts(policy)
class Wrapped(nn.Module):
    def __init__(s, blk):
        super().__init__(); s.blk = blk
    def forward(s, x):
        if ac == "sac":
            return checkpoint(s.blk, x, use_reentrant=False, context_fn=ctx_fn)
        if ac == "full":
            return checkpoint(s.blk, x, use_reentrant=False)
        return s.blk(x)
blocks = nn.ModuleList([Wrapped(Block()) for _ in range(L)]).to(dt)
if mode == "compiled":
    for i, b in enumerate(blocks):
        blocks[i] = torch.compile(b)
x0 = torch.randn(B, S, H, dtype=dt)
def status(key):
    for l in open("/proc/self/status"):
        if l.startswith(key):
            return int(l.split()[1]) * 1024
def fwd():
    x = x0.detach().requires_grad_()
    for b in blocks:
        x = b(x)
    return x
def step():
    y = fwd(); y.float().sum().backward()
    for p in blocks.parameters(): p.grad = None
for _ in range(2): step()
base = status("VmRSS")
y = fwd()
held = status("VmRSS") - base
saved = []
if mode == "compiled" and ac == "sac":
    def pack(t):
        if t.dim() >= 2 and t.shape[0] == B:
            saved.append(f"{tuple(t.shape)} {str(t.dtype).replace('torch.', '')}")
        elif t.dim() >= 2 and t.shape[0] == B * S:
            saved.append(f"{tuple(t.shape)} {str(t.dtype).replace('torch.', '')}")
        return t
    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        blocks[0](x0.detach().requires_grad_())
print(held / (B * S * L * H), "|".join(saved))
'''


def run_case(mode: str, ac: str = "sac") -> tuple[float, list[str]]:
    d = tempfile.mkdtemp(prefix="autoplace_sac_")      # a folder of its own: nothing else on sys.path[0]
    path = Path(d) / "case.py"
    path.write_text(CASE)
    env = dict(os.environ, MALLOC_MMAP_THRESHOLD_="65536")
    out = subprocess.run([sys.executable, str(path), mode, ac], capture_output=True, text=True, check=True,
                         timeout=1200, env=env).stdout.strip().splitlines()[-1]
    held, _, saved = out.partition(" ")
    return float(held), [s for s in saved.split("|") if s]


def main() -> int:
    import torch
    print(f"torch {torch.__version__}: held after the forward, bytes per token and layer ÷ h\n")
    eager, _ = run_case("eager")
    comp, saved = run_case("compiled")
    eager_n, _ = run_case("eager", "none")
    comp_n, _ = run_case("compiled", "none")
    print("| block | op-SAC (× h) | no recompute (× h) |\n|---|---:|---:|")
    print(f"| eager | {eager:.2f} | {eager_n:.2f} |\n| compiled | {comp:.2f} | {comp_n:.2f} |")
    print(f"| eager − compiled | {eager - comp:.2f} | {eager_n - comp_n:.2f} |")
    print("\nactivations the compiled block saves for backward:", "; ".join(saved))
    return 0


if __name__ == "__main__":
    sys.exit(main())
