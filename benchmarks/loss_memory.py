"""Peak memory of the cross-entropy loss per logit, measured on this CPU with the installed torch.

    python benchmarks/loss_memory.py [--tokens 2048] [--vocab 64000]

The loss the PyTorch stacks write, `F.cross_entropy(pred.flatten(0, 1).float(), labels)` on bf16
logits followed by `del pred; loss.backward()` (torchtitan's train step), run four ways: eager and
`torch.compile`d (Inductor), each on one process and vocabulary-parallel over two gloo ranks under
DTensor's `loss_parallel` (logits Shard(-1)). Each case runs in a fresh process: two warm-up steps,
then the peak resident set above the steady state over one step (`/proc/self/clear_refs` resets
VmHWM; large tensors are mmap'd, so freed memory leaves the set), divided by the rank's logits.
The runtimes' `[memory] loss_bytes_per_logit` and `loss_parallel_bytes_per_logit` cite these
numbers. The partitioner that decides what a compiled loss saves is the same code on CPU and GPU;
Inductor's GPU kernels may keep different temporaries.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
from pathlib import Path

CASE = r'''
import os, sys, torch, torch.nn.functional as F
torch.manual_seed(0)
torch.set_num_threads(1)
tokens, vocab, compiled, parallel = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3] == "1", sys.argv[4] == "1"
B, S = 2, tokens // 2
def ce(pred, labels):
    return F.cross_entropy(pred.flatten(0, 1).float(), labels.flatten(0, 1))
fn = torch.compile(ce) if compiled else ce
w = torch.randn(vocab, 256, dtype=torch.bfloat16) * 0.02
x = torch.randn(B, S, 256, dtype=torch.bfloat16)
labels = torch.randint(0, vocab, (B, S))
ctx, local = None, B * S * vocab
if parallel:
    import torch.distributed as dist
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor import Replicate, Shard, distribute_tensor
    from torch.distributed.tensor.parallel import loss_parallel
    dist.init_process_group("gloo")
    mesh = init_device_mesh("cpu", (dist.get_world_size(),))
    w = torch.nn.Parameter(distribute_tensor(w, mesh, [Shard(0)]))
    x, labels = distribute_tensor(x, mesh, [Replicate()]), distribute_tensor(labels, mesh, [Replicate()])
    ctx, local = loss_parallel, local // dist.get_world_size()
else:
    w = torch.nn.Parameter(w)
def status(key):
    for line in open("/proc/self/status"):
        if line.startswith(key):
            return int(line.split()[1]) * 1024
def step():
    import contextlib
    with (ctx() if ctx else contextlib.nullcontext()):
        pred = torch.matmul(x.detach().requires_grad_(), w.t())
        loss = fn(pred, labels)
        del pred
        loss.backward()
    w.grad = None
for _ in range(2):
    step()
base = status("VmRSS")
open("/proc/self/clear_refs", "w").write("5")
step()
if not parallel or torch.distributed.get_rank() == 0:
    print((status("VmHWM") - base) / local)
'''


def run_case(tokens: int, vocab: int, compiled: bool, parallel: bool) -> float:
    args = [str(tokens), str(vocab), str(int(compiled)), str(int(parallel))]
    d = tempfile.mkdtemp(prefix="autoplace_loss_")       # a folder of its own: nothing else on sys.path[0]
    path = str(Path(d) / "case.py")
    Path(path).write_text(CASE)
    if parallel:
        torchrun = Path(sys.executable).with_name("torchrun")
        cmd = [str(torchrun), "--nproc-per-node", "2", path, *args]
    else:
        cmd = [sys.executable, path, *args]
    out = subprocess.run(cmd, capture_output=True, text=True, check=True, timeout=900).stdout
    return float(out.strip().splitlines()[-1])


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tokens", type=int, default=2048)
    ap.add_argument("--vocab", type=int, default=64000)
    a = ap.parse_args(argv)
    import torch
    print(f"torch {torch.__version__}, {a.tokens} tokens × {a.vocab} vocabulary, bf16 logits\n")
    print("| loss | one process | loss_parallel over 2 ranks (per local logit) |")
    print("|---|---:|---:|")
    for compiled in (False, True):
        one = run_case(a.tokens, a.vocab, compiled, False)
        par = run_case(a.tokens, a.vocab, compiled, True)
        print(f"| {'torch.compile (Inductor)' if compiled else 'eager'} | {one:.2f} B | {par:.2f} B |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
