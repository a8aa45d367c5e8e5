"""What torch.distributed.pipelining keeps of a schedule's tensors, measured on this CPU.

    python benchmarks/pp_outputs.py [--microbatches 4] [--vocab 64000]

Two gloo ranks run `Schedule1F1B` over an embedding stage and an output stage whose output is
bf16 logits (the torchtitan layout), with and without `step(return_outputs=False)` (torch #165822;
torchtitan passes it since #1922, 2025-10-22). The output stage reports what `output_chunks`
still holds after the step and its peak resident set over one step above the steady state
(`/proc/self/clear_refs` resets VmHWM; large tensors are mmap'd, so freed memory leaves the set),
both in units of one micro-batch's logits. The runtimes' `[memory] pp_keeps_step_outputs` cites
these numbers: a schedule that returns its outputs holds m of them, detached, until the step
ends, and concatenates them into the return value.

Then three gloo ranks run the same schedule with a middle stage, and each stage lists the receive
buffers it holds after two steps (`args_recv_info`, `grad_recv_info`: distinct storages, each one
micro-batch's boundary activation), which `[memory] pp_recv_buffers` cites: m activation buffers on
every stage but the first, m gradient buffers on every stage but the last.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
from pathlib import Path

CASE = r'''
import sys, torch, torch.nn as nn, torch.distributed as dist
from torch.distributed.pipelining import PipelineStage, Schedule1F1B
M, V, keep = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3] == "1"
dist.init_process_group("gloo")
torch.manual_seed(0)
torch.set_num_threads(1)
r, H, S, B = dist.get_rank(), 64, 512, 2
if r == 0:
    mod = nn.Sequential(nn.Embedding(V, H), nn.Linear(H, H)).to(torch.bfloat16)
else:
    mod = nn.Sequential(nn.Linear(H, H), nn.Linear(H, V, bias=False)).to(torch.bfloat16)
stage = PipelineStage(mod, r, 2, torch.device("cpu"))
sched = Schedule1F1B(stage, n_microbatches=M,
                     loss_fn=lambda o, t: nn.functional.cross_entropy(o.flatten(0, 1).float(), t.flatten()))
x, y = torch.randint(0, V, (B * M, S)), torch.randint(0, V, (B * M, S))
kw = {} if keep else {"return_outputs": False}
def status(key):
    for line in open("/proc/self/status"):
        if line.startswith(key):
            return int(line.split()[1]) * 1024
def step():
    out = sched.step(x, **kw) if r == 0 else sched.step(target=y, losses=[], **kw)
    del out
    mod.zero_grad(set_to_none=True)
for _ in range(2):
    step()
stage.output_chunks.clear()
base = status("VmRSS")
open("/proc/self/clear_refs", "w").write("5")
step()
if r == 1:
    one = B * S * V * 2
    kept = sum(t.numel() * t.element_size() for t in stage.output_chunks)
    print(len(stage.output_chunks), kept / one, (status("VmHWM") - base) / one)
dist.destroy_process_group()
'''


BUFFERS = r'''
import sys, torch, torch.nn as nn, torch.distributed as dist
from torch.distributed.pipelining import PipelineStage, Schedule1F1B
M = int(sys.argv[1])
dist.init_process_group("gloo")
r, W, V, H, S, B = dist.get_rank(), dist.get_world_size(), 1000, 64, 32, 2
if r == 0:
    mod = nn.Sequential(nn.Embedding(V, H), nn.Linear(H, H))
elif r < W - 1:
    mod = nn.Sequential(nn.Linear(H, H))
else:
    mod = nn.Sequential(nn.Linear(H, H), nn.Linear(H, V, bias=False))
stage = PipelineStage(mod, r, W, torch.device("cpu"))
sched = Schedule1F1B(stage, n_microbatches=M, loss_fn=lambda o, t: nn.functional.cross_entropy(o.flatten(0, 1), t.flatten()))
x, y = torch.randint(0, V, (B * M, S)), torch.randint(0, V, (B * M, S))
for _ in range(2):
    sched.step(x) if r == 0 else (sched.step(target=y, losses=[]) if r == W - 1 else sched.step())
one = B * S * H * 4
def held(d):
    ts = [i.buffer for infos in d.values() for i in infos if isinstance(getattr(i, "buffer", None), torch.Tensor)]
    return len({t.untyped_storage().data_ptr() for t in ts}), sum(t.numel() * t.element_size() for t in ts) / one
for k in range(W):
    if k == r:
        print(r, *held(stage.args_recv_info), *held(stage.grad_recv_info), flush=True)
    dist.barrier()
dist.destroy_process_group()
'''


def run_buffers(m: int) -> list[list[str]]:
    d = tempfile.mkdtemp(prefix="autoplace_pp_")
    path = Path(d) / "buffers.py"
    path.write_text(BUFFERS)
    torchrun = Path(sys.executable).with_name("torchrun")
    out = subprocess.run([str(torchrun), "--nproc-per-node", "3", str(path), str(m)],
                         capture_output=True, text=True, check=True, timeout=900).stdout
    return sorted((ln.split() for ln in out.strip().splitlines() if ln[:1].isdigit()), key=lambda x: int(x[0]))


def run_case(m: int, vocab: int, keep: bool) -> tuple[int, float, float]:
    d = tempfile.mkdtemp(prefix="autoplace_pp_")        # a folder of its own: nothing else on sys.path[0]
    path = Path(d) / "case.py"
    path.write_text(CASE)
    torchrun = Path(sys.executable).with_name("torchrun")
    out = subprocess.run([str(torchrun), "--nproc-per-node", "2", str(path), str(m), str(vocab), str(int(keep))],
                         capture_output=True, text=True, check=True, timeout=900).stdout
    n, kept, peak = out.strip().splitlines()[-1].split()
    return int(n), float(kept), float(peak)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--microbatches", type=int, default=4)
    ap.add_argument("--vocab", type=int, default=64000)
    a = ap.parse_args(argv)
    import torch
    print(f"torch {torch.__version__}, Schedule1F1B over 2 gloo ranks, {a.microbatches} micro-batches of "
          f"2 × 512 tokens × {a.vocab} vocabulary, bf16 logits\n")
    print("| step(...) | outputs kept after the step | their bytes ÷ one micro-batch's logits | "
          "last stage's peak over one step ÷ one micro-batch's logits |")
    print("|---|---:|---:|---:|")
    for keep in (True, False):
        n, kept, peak = run_case(a.microbatches, a.vocab, keep)
        print(f"| {'return_outputs=True (default)' if keep else 'return_outputs=False'} | {n} | {kept:.2f} | {peak:.2f} |")
    print(f"\nReceive buffers after two steps, 3 gloo ranks, {a.microbatches} micro-batches (bytes in units of one "
          "micro-batch's boundary activation)\n")
    print("| stage | activation buffers | their bytes | gradient buffers | their bytes |")
    print("|---|---:|---:|---:|---:|")
    for r, na, ba, ng, bg in run_buffers(a.microbatches):
        print(f"| {r} | {na} | {float(ba):.2f} | {ng} | {float(bg):.2f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
