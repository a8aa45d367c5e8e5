"""Rendering for humans (rich tables). No cost logic here: everything comes from the documents."""

from __future__ import annotations

from rich.console import Console
from rich.table import Table

GIB = 2**30


def gib(x: float) -> str:
    return f"{x / GIB:,.2f}"


def render_estimate(doc: dict, console: Console | None = None) -> None:
    con = console or Console()
    p = doc["plan"]
    con.print(f"[bold]{doc['model']['name']}[/] on {doc['hardware']['gpus']} × {doc['hardware']['name']}  "
              f"plan dp={p['dp']} (replicate {p['dp_replicate']} × shard {p['dp_shard']}) tp={p['tp']} pp={p['pp']} "
              f"vpp={p['vpp']} cp={p['cp']} ep={p['ep']} zero={p['zero']} sp={int(p['sp'])} "
              f"recompute={p['recompute']}"
              + (f"({'+'.join(p['recompute_modules'])})" if p.get("recompute_modules") else "")
              + f" offload={p['offload']} mbs={p['mbs']} schedule={p['schedule']}")
    tr = doc.get("training") or {}
    if tr.get("runtime"):
        con.print(f"runtime {tr['runtime']}" + (f" ({', '.join(tr['runtime_set'])})" if tr.get("runtime_set") else ""))
    if tr.get("matmul_dtype") == "tf32":
        con.print("precision fp32: matmuls run as TF32 on this GPU (NVIDIA containers set "
                  "TORCH_ALLOW_TF32_CUBLAS_OVERRIDE=1; --runtime-set precision.fp32_matmul_tf32=false for true FP32)")
    if not doc["legal"]:
        t = Table(title="illegal plan: violated rules", title_style="bold red")
        t.add_column("rule")
        t.add_column("reason")
        for v in doc["violations"]:
            t.add_row(v["rule"], v["message"])
        con.print(t)
        return
    from autoplace.cost import intervals as IV
    mem = doc["memory"]
    miv = (mem.get("interval") or {}).get("90")
    t = Table(title=f"memory per rank (GiB), limit {gib(mem['limit_bytes'])} — "
                    f"{'fits' if mem['fits'] else 'DOES NOT FIT'}"
                    + (f" · peak 90 % interval {gib(miv['lo'])}–{gib(miv['hi'])}"
                       + ("" if miv["exact"] else " (too few sources to calibrate: a floor)")
                       + (f" ({IV.borrowed(miv)})" if IV.borrowed(miv) else "") if miv else "")
                    + (" · NEAR THE LIMIT (upper bound does not fit)" if mem.get("near_limit") else "")
                    + (f" · host {gib(mem['host_bytes'])} offloaded per GPU of {gib(mem['host_limit_bytes'])}"
                       + ("" if not mem.get("host_limit_bytes") or mem["host_bytes"] <= mem["host_limit_bytes"]
                          else " (OVER the node's host memory)") if mem.get("host_bytes") else ""))
    cols = ("params", "grads", "optimizer", "activations", "transient", "reserve", "overhead", "total")
    t.add_column("stage", justify="right")
    for c in cols:
        t.add_column(c, justify="right")
    rows = mem["per_stage"]
    show = rows if len(rows) <= 6 else rows[:2] + rows[-2:]
    for s in show:
        t.add_row(str(s["stage"]), *[gib(s[c]) for c in cols],
                  style="bold" if s["stage"] == mem["binding_stage"] else None)
    con.print(t)
    out = mem.get("outside_allocator") or {}
    if "device_bytes" in mem:
        con.print(f"memory as the tools read it (GiB, largest over stages): allocated {gib(mem['allocated_bytes'])} "
                  f"(torch max_memory_allocated) · reserved {gib(mem['reserved_bytes'])} (max_memory_reserved) · "
                  f"device {gib(mem['device_bytes'])} (nvidia-smi: + CUDA context "
                  f"{gib(out.get('cuda_context_bytes', 0))}, NCCL buffers {gib(out.get('nccl_buffers_bytes', 0))}, "
                  f"other communicator state {gib(out.get('comm_other_bytes', 0))})")
    c = doc["communication"]["bytes_per_step"]
    ct = Table(title="communication per rank per step (GB)")
    for k in c:
        ct.add_column(k, justify="right")
    ct.add_row(*[f"{v / 1e9:,.3f}" for v in c.values()])
    con.print(ct)
    if "time" in doc:
        tm = doc["time"]
        con.print(f"[bold]step {tm['step_s']:.3f} s[/] · {tm['tokens_per_s_per_gpu']:,.0f} tok/s/GPU · "
                  f"MFU {tm['mfu']:.1%} · HFU {tm['hfu']:.1%} · {tm['tflops_per_gpu']:.0f} TFLOP/s/GPU")
        for lv, iv in (tm.get("interval") or {}).items():
            con.print(f"[dim]step {lv} % interval {iv['lo']:.3f}–{iv['hi']:.3f} s (spread of the published runs "
                      f"of {iv['pool']}, n = {iv['n']}{'' if iv['exact'] else '; widest residual'})[/]")
        tt = Table(title="step-time breakdown (after overlap)")
        tt.add_column("term")
        tt.add_column("seconds", justify="right")
        tt.add_column("share", justify="right")
        for k, v in tm["breakdown_s"].items():
            if v > 0:
                tt.add_row(k, f"{v:.4f}", f"{v / tm['step_s']:.1%}")
        con.print(tt)
        hidden = {k: v for k, v in (tm.get("overlapped_s") or {}).items() if v and v > 0}
        if hidden:
            con.print("[dim]hidden under compute (not in the step): "
                      + ", ".join(f"{k} {v:.4f} s" for k, v in hidden.items()) + "[/]")
    for n in doc.get("notes", []):
        con.print(f"[dim]{n['rule']}: {n['message']}[/]")
