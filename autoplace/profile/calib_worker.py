"""torchrun entry point for calibration micro-benchmarks.

    torchrun --standalone --nproc-per-node K -m autoplace.profile.calib_worker --raw RAW.json [--quick]
    (multi-node: torchrun --nnodes N --rdzv-backend c10d --rdzv-endpoint HOST:PORT ...)

Every rank runs the compute benchmarks at the same time (so a CPU rank sees its share of the memory
bandwidth, as in training); rank 0's timings are recorded (with the max over ranks next to them).
Then the communication benchmarks: all-reduce, all-gather, reduce-scatter, all-to-all over message
sizes and group sizes (groups of consecutive ranks inside a node; across nodes too when there are
several), point-to-point ping-pong, and host↔device copies on CUDA. Each timing is the median over
repeats of the max over the group's ranks. Rank 0 writes RAW.json; `autoplace.profile.calibrate`
fits the hardware profile from it.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import time


def _timeit(fn, sync, repeats: int, warmup: int = 2, min_time: float = 0.0):
    for _ in range(warmup):
        fn()
    sync()
    ts = []
    t_start = time.perf_counter()
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        sync()
        ts.append(time.perf_counter() - t0)
        if min_time and time.perf_counter() - t_start > min_time and len(ts) >= 3:
            break
    return statistics.median(ts)


def compute_benchmarks(device, quick: bool, sync) -> dict:
    import torch
    import torch.nn.functional as F
    out = {"gemm": [], "membound": [], "attention": [], "adam": [], "host_copy": [], "launch": []}
    reps = 5 if quick else 15
    dtypes = ["fp32", "bf16", "fp16"]
    tdt = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}
    if quick:
        shapes = [(128, 128, 128), (512, 512, 512), (64, 256, 256), (64, 688, 256), (64, 2048, 256),
                  (512, 256, 688), (1024, 1024, 1024)]
    else:
        shapes = [(n, n, n) for n in (64, 128, 256, 512, 1024, 2048)]
        for T in (64, 256, 512, 2048):
            for N, K in ((256, 256), (320, 256), (688, 256), (1376, 256), (256, 688), (2048, 256),
                         (256, 2048), (1024, 1024)):
                shapes.append((T, N, K))
        if device.type == "cuda":
            shapes += [(4096, 4096, 4096), (8192, 8192, 8192), (16384, 4096, 4096)]
    for dt in dtypes:
        # 16-bit GEMMs on a CPU without native support run at ~1 GFLOP/s: two small shapes only
        dshapes = shapes if (dt == "fp32" or device.type == "cuda") else [(128, 128, 128), (64, 256, 256)]
        for (M, N, K) in dshapes:
            a = torch.randn(M, K, device=device, dtype=tdt[dt])
            b = torch.randn(K, N, device=device, dtype=tdt[dt])
            s = _timeit(lambda: torch.mm(a, b), sync, reps, min_time=2.0)
            out["gemm"].append({"dtype": dt, "m": M, "n": N, "k": K, "s": s,
                                "tflops": 2.0 * M * N * K / s / 1e12})
    sizes = [2**10, 2**13, 2**16, 2**18, 2**20, 2**22] if quick else \
        [2**8, 2**10, 2**12, 2**14, 2**16, 2**18, 2**20, 2**22, 2**24]
    if device.type == "cuda":
        sizes += [2**26, 2**28]
    for n in sizes:
        x = torch.randn(n, device=device)
        y = torch.randn(n, device=device)
        z = torch.empty(n, device=device)
        s = _timeit(lambda: torch.add(x, y, out=z), sync, reps * 2, min_time=1.0)
        out["membound"].append({"kernel": "add", "elements": n, "bytes": 12 * n, "s": s})
        s = _timeit(lambda: z.copy_(x), sync, reps * 2, min_time=1.0)
        out["membound"].append({"kernel": "copy", "elements": n, "bytes": 8 * n, "s": s})
        s = _timeit(lambda: torch.mul(x, 1.5, out=z), sync, reps * 2, min_time=1.0)
        out["membound"].append({"kernel": "scale", "elements": n, "bytes": 8 * n, "s": s})
    # attention core (causal SDPA, GQA), forward + backward
    att = [(1, 8, 2, 64, 32), (2, 8, 2, 128, 32), (1, 8, 2, 256, 32)] if quick else \
        [(1, 8, 2, 64, 32), (4, 8, 2, 64, 32), (2, 8, 2, 128, 32), (1, 8, 2, 256, 32),
         (1, 8, 2, 512, 32), (1, 16, 4, 512, 64)]
    if device.type == "cuda":
        att += [(4, 32, 8, 2048, 128), (1, 64, 8, 4096, 128)]
    for (b, H, kv, s_, d) in att:
        dt = torch.float32 if device.type == "cpu" else torch.bfloat16
        q = torch.randn(b, H, s_, d, device=device, dtype=dt, requires_grad=True)
        k = torch.randn(b, kv, s_, d, device=device, dtype=dt, requires_grad=True)
        v = torch.randn(b, kv, s_, d, device=device, dtype=dt, requires_grad=True)

        def fb():
            o = F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=kv != H)
            o.sum().backward()
        s = _timeit(fb, sync, reps, min_time=2.0)
        out["attention"].append({"batch": b, "heads": H, "kv_heads": kv, "seq": s_, "d_head": d,
                                 "dtype": "fp32" if dt == torch.float32 else "bf16", "s": s,
                                 "flops_fwd_causal": 4.0 * b * s_ * s_ * H * d * 0.5})
    # Adam step on the host (CPU Adam throughput per rank); on CUDA also on the device
    n_p = 2**18 if quick else 2**21
    for dev in ([torch.device("cpu")] + ([device] if device.type == "cuda" else [])):
        p = torch.nn.Parameter(torch.randn(n_p, device=dev))
        p.grad = torch.randn(n_p, device=dev)
        opt = torch.optim.Adam([p], lr=1e-3)
        s = _timeit(opt.step, sync if dev.type == "cuda" else (lambda: None), reps, min_time=1.0)
        out["adam"].append({"device": dev.type, "params": n_p, "s": s, "params_per_s": n_p / s})
    # host copies: CUDA H2D / D2H (pinned); CPU: a large memcpy (the "host link" is RAM itself)
    nb = 2**24 if quick else 2**26
    if device.type == "cuda":
        h = torch.empty(nb // 4, pin_memory=True)
        g = torch.empty(nb // 4, device=device)
        s = _timeit(lambda: g.copy_(h, non_blocking=True), sync, reps)
        out["host_copy"].append({"direction": "h2d", "bytes": nb, "s": s})
        s = _timeit(lambda: h.copy_(g, non_blocking=True), sync, reps)
        out["host_copy"].append({"direction": "d2h", "bytes": nb, "s": s})
    else:
        h = torch.empty(nb // 4)
        g = torch.empty(nb // 4)
        s = _timeit(lambda: g.copy_(h), sync, reps)
        out["host_copy"].append({"direction": "memcpy", "bytes": nb, "s": s})
    # a near-empty training step (launch + Python overhead of forward, backward, optimizer)
    lin = torch.nn.Linear(4, 4).to(device)
    o2 = torch.optim.Adam(lin.parameters(), lr=1e-3)
    xin = torch.randn(2, 4, device=device)

    def tiny_step():
        lin(xin).sum().backward()
        o2.step()
        o2.zero_grad(set_to_none=True)
    s = _timeit(tiny_step, sync, reps * 4, min_time=1.0)
    out["launch"].append({"what": "tiny_train_step", "s": s})
    t1 = torch.randn(8, device=device)
    s = _timeit(lambda: t1.add_(1.0), sync, reps * 10, min_time=0.5)
    out["launch"].append({"what": "tiny_op", "s": s})
    return out


def comm_benchmarks(device, quick: bool, sync, local_world: int) -> dict:
    import torch
    import torch.distributed as dist
    rank, world = dist.get_rank(), dist.get_world_size()
    out = {"collectives": [], "p2p": []}
    reps = 5 if quick else 12
    nnodes = max(1, world // max(local_world, 1))
    # groups of consecutive ranks (intra-node) of every divisor size ≥ 2, and strided (inter-node)
    groups = []
    for n in range(2, local_world + 1):
        if local_world % n == 0:
            groups.append(("intra", n, list(range(0, n))))
    if nnodes > 1:
        for g in range(2, nnodes + 1):
            if nnodes % g == 0:
                groups.append(("inter", g, [i * local_world for i in range(g)]))
        if world not in [len(r) for _, _, r in groups]:
            groups.append(("inter", world, list(range(world))))
    sizes = [4, 2**10, 2**14, 2**17, 2**20, 2**22] if quick else \
        [4, 2**8, 2**10, 2**12, 2**14, 2**16, 2**18, 2**20, 2**22, 2**24]
    if device.type == "cuda" and not quick:
        sizes += [2**26, 2**28]
    for scope, n, ranks in groups:
        pg = dist.new_group(ranks)            # every rank calls new_group
        member = rank in ranks
        for op in ("all_reduce", "all_gather", "reduce_scatter", "all_to_all"):
            for S in sizes:
                if S < 4 * n:
                    continue
                el = S // 4
                el -= el % n
                nbytes = el * 4
                if member:
                    x = torch.randn(el, device=device)
                    shard = torch.empty(el // n, device=device)
                    full = torch.empty(el, device=device)
                    calls = {"all_reduce": lambda: dist.all_reduce(x, group=pg),
                             "all_gather": lambda: dist.all_gather_into_tensor(full, shard, group=pg),
                             "reduce_scatter": lambda: dist.reduce_scatter_tensor(shard, x, group=pg),
                             "all_to_all": lambda: dist.all_to_all_single(full, x, group=pg)}
                    fn = calls[op]
                    try:
                        s = _timeit(fn, sync, reps, warmup=2, min_time=2.0 if not quick else 0.5)
                        err = None
                    except Exception as e:  # noqa: BLE001 - recorded, like a crashed run
                        # the benchmark worker must report an op the backend cannot run (gloo has
                        # no all_to_all on some builds) and go on: the fit skips points with errors
                        s, err = float("nan"), f"{type(e).__name__}: {e}"
                    t = torch.tensor([s], dtype=torch.float64, device=device)
                    dist.all_reduce(t, op=dist.ReduceOp.MAX, group=pg)
                    if rank == ranks[0]:
                        out["collectives"].append({"op": op, "scope": scope, "group": n, "bytes": nbytes,
                                                   "s": float(t[0]), "error": err})
        dist.barrier()
    # point-to-point ping-pong between rank 0 and rank 1 (intra) / rank local_world (inter)
    peers = [("intra", 1)] if local_world > 1 else []
    if nnodes > 1:
        peers.append(("inter", local_world))
    for scope, peer in peers:
        for S in sizes:
            el = max(S // 4, 1)
            x = torch.randn(el, device=device)
            if rank in (0, peer):
                other = peer if rank == 0 else 0

                def pingpong():
                    if rank == 0:
                        dist.send(x, other)
                        dist.recv(x, other)
                    else:
                        dist.recv(x, other)
                        dist.send(x, other)
                s = _timeit(pingpong, sync, reps, min_time=0.5)
                if rank == 0:
                    out["p2p"].append({"scope": scope, "bytes": el * 4, "s": s / 2.0})
        dist.barrier()
    return out


def overlap_benchmark(device, quick: bool, sync) -> dict:
    """How much of a collective hides under compute on this machine: in each round, time an
    all-reduce over all ranks (t_a), a GEMM loop of about the same length (t_c), and the two
    together (the all-reduce issued async_op=True, the GEMMs run, then wait: t_b), each the max over
    ranks; overlap = (t_c + t_a − t_b) / min(t_c, t_a), clipped to [0, 1], median over rounds.
    ≈ 1 where communication has its own engine (NCCL on GPUs), ≈ 0 where the backend's threads need
    the cores the compute uses (gloo with one core per rank)."""
    import torch
    import torch.distributed as dist
    rounds = 5 if quick else 9
    n = 256 if device.type == "cpu" else 4096
    a = torch.randn(n, n, device=device)
    el = (2**24 if device.type == "cpu" else 2**27) // 4
    x = torch.randn(el, device=device)

    def gemms(k):
        for _ in range(k):
            torch.mm(a, a)

    def ar():
        dist.all_reduce(x)

    t_a0 = _timeit(ar, sync, 3)
    t_one = _timeit(lambda: gemms(1), sync, 5)
    k = max(1, int(round(t_a0 / max(t_one, 1e-9))))

    def both():
        w = dist.all_reduce(x, async_op=True)
        gemms(k)
        w.wait()
    both()
    sync()
    ovs, rows = [], []
    for _ in range(rounds):
        ts = [_timeit(fn, sync, 1, warmup=0) for fn in (ar, lambda: gemms(k), both)]
        v = torch.tensor(ts, dtype=torch.float64, device=device)
        dist.all_reduce(v, op=dist.ReduceOp.MAX)
        t_a, t_c, t_b = (float(t) for t in v)
        rows.append([t_a, t_c, t_b])
        ovs.append(min(max((t_c + t_a - t_b) / max(min(t_c, t_a), 1e-12), 0.0), 1.0))
    med = [statistics.median(r[i] for r in rows) for i in range(3)]
    return {"allreduce_s": med[0], "compute_s": med[1], "both_s": med[2], "gemms": k, "bytes": el * 4,
            "rounds": rows, "overlap": float(statistics.median(ovs))}


def software_versions(backend: str) -> dict:
    import torch
    sw = {"python": platform.python_version(), "torch": torch.__version__, "backend": backend,
          "platform": platform.platform(), "machine": platform.machine(),
          "processor": platform.processor() or "unknown"}
    try:
        import numpy
        sw["numpy"] = numpy.__version__
    except ImportError:
        pass
    if torch.cuda.is_available():
        sw["cuda"] = torch.version.cuda or ""
        sw["device_name"] = torch.cuda.get_device_name(0)
        try:
            sw["nccl"] = ".".join(map(str, torch.cuda.nccl.version()))
        except (AttributeError, RuntimeError):  # a build without NCCL
            pass
        sw["cudnn"] = str(torch.backends.cudnn.version())
    sw["threads_per_rank"] = torch.get_num_threads()
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    sw["cpu_model"] = line.split(":", 1)[1].strip()
                    break
    except OSError:  # no /proc (not Linux)
        pass
    return sw


def device_info(device) -> dict:
    import torch
    if device.type == "cuda":
        p = torch.cuda.get_device_properties(device)
        return {"type": "cuda", "name": p.name, "memory_bytes": int(p.total_memory),
                "sm_count": int(p.multi_processor_count)}
    try:
        mem = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (AttributeError, OSError, ValueError):  # no sysconf, or not these names (not Linux)
        mem = 0
    return {"type": "cpu", "name": platform.processor() or "cpu", "memory_bytes": int(mem),
            "cpu_count": os.cpu_count()}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="autoplace.profile.calib_worker")
    ap.add_argument("--raw", required=True)
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--backend", default=None)
    args = ap.parse_args(argv)
    import torch
    import torch.distributed as dist

    from autoplace.profile.dist import Runtime
    rt = Runtime(args.backend)
    rt.init()
    local_world = int(os.environ.get("LOCAL_WORLD_SIZE", rt.world))
    t0 = time.time()
    dist.barrier()
    comp = compute_benchmarks(rt.device, args.quick, rt.sync)
    # the slowest rank's GEMM/membound rates next to rank 0's (contention check)
    tot = torch.tensor([sum(r["s"] for r in comp["gemm"]), sum(r["s"] for r in comp["membound"])],
                       dtype=torch.float64, device=rt.device)
    mx = tot.clone()
    dist.all_reduce(mx, op=dist.ReduceOp.MAX)
    dist.barrier()
    comm = comm_benchmarks(rt.device, args.quick, rt.sync, local_world)
    comm["overlap"] = overlap_benchmark(rt.device, args.quick, rt.sync) if rt.world > 1 else None
    if rt.rank == 0:
        raw = {"compute": comp, "comm": comm,
               "contention": {"rank0_gemm_s": float(tot[0]), "max_gemm_s": float(mx[0]),
                              "rank0_membound_s": float(tot[1]), "max_membound_s": float(mx[1])},
               "world": rt.world, "local_world": local_world, "nnodes": max(1, rt.world // local_world),
               "device": device_info(rt.device), "software": software_versions(rt.backend),
               "quick": bool(args.quick), "wall_s": time.time() - t0,
               "date": time.strftime("%Y-%m-%dT%H:%M:%S%z")}
        from autoplace.io import atomic_write
        atomic_write(args.raw, json.dumps(raw, indent=1))
    dist.barrier()
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())
