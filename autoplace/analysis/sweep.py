"""`autoplace sweep`: the best plan at every point of a grid of GPU counts × hardware profiles ×
sequence lengths × global batches, with time to train, GPU-hours, cost and the Pareto front.

Each point is exactly one `autoplace.search.launchers.search` (the search `autoplace search` runs at
that point: by default the union of the training-stack searches, every plan priced by the stack that
runs it; `--runtime R` prices every point under R), so a sweep row equals a separate search.
Points run in parallel over worker processes (fork), largest GPU count first; each point's search
then runs single-process (the same result: the engine's ties break by canonical order).

Per point: time to train = tokens / (tokens per step / step time), GPU-hours = GPUs × time,
cost = GPU-hours × price (from `--price-per-gpu-hour`, else the profile's `price_per_gpu_hour`,
else none). The Pareto front (time vs cost; vs GPU-hours when no price is known) is the same for
any token count, so it is taken per token. A deadline picks the cheapest point that meets it.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass

from autoplace.errors import InputError, NoFeasiblePlanError


@dataclass(frozen=True)
class Point:
    gpus: int
    hw_index: int                  # index into the sweep's hardware variants
    seq_len: int | None
    global_batch: int | None


@dataclass(frozen=True)
class SweepConfig:
    global_batch_tokens: int | None = None
    precision: str = "bf16"
    regime: str | None = None
    """Optimizer-state regime; None: each stack's own (its runtime's default), as `search`."""
    runtime: str | None = None
    """The runtime every point is priced under (`--runtime`, e.g. `default-kernels` for the idealised
    what-if); None: each point is the union of the training-stack searches, every plan priced by the
    stack that runs it, exactly as `autoplace search` without --launcher/--runtime."""
    method: str = "auto"
    top_k: int = 5
    headroom: float = 0.0
    tokens: float | None = None          # tokens to train (time to train, GPU-hours, cost)


def grid(gpus, n_hw: int, seq_lens, global_batches) -> list[Point]:
    return [Point(g, h, s, b) for h in range(n_hw) for s in seq_lens for b in global_batches for g in gpus]


def price_for(label: str, hw, prices: dict) -> tuple[float | None, str | None]:
    """(price per GPU-hour, where it came from) for a hardware variant."""
    named = {str(k).lower(): v for k, v in prices.items() if k is not None}
    for key in (label, hw.name, os.path.splitext(os.path.basename(str(hw.source)))[0]):
        if key.lower() in named:
            return named[key.lower()], "--price-per-gpu-hour"
    if None in prices:
        return prices[None], "--price-per-gpu-hour"
    p = getattr(hw, "price_per_gpu_hour", None)
    if p is not None:
        return float(p), "profile (assumption)"
    return None, None


def solve_point(model, hw, label, point: Point, space, cfg: SweepConfig, price=(None, None),
                workers: int | None = None) -> dict:
    """One sweep row: the search at `point` and what it means for the run."""
    from autoplace.analysis.explain import memory_note, plan_text
    from autoplace.estimate import estimate
    from autoplace.search.launchers import search as stack_search
    world = point.gpus
    row = {"gpus": world, "hardware": label, "hardware_name": hw.name, "seq_len": point.seq_len,
           "global_batch": point.global_batch, "status": "ok", "message": "", "price_per_gpu_hour": price[0],
           "price_source": price[1]}
    t0 = time.perf_counter()
    try:
        out = stack_search(model, hw, world, runtime=cfg.runtime, seq_len=point.seq_len,
                           global_batch=point.global_batch, global_batch_tokens=cfg.global_batch_tokens,
                           precision=cfg.precision, regime=cfg.regime, space=space, method=cfg.method, top_k=1,
                           headroom=cfg.headroom, workers=workers, per_launcher=False)
    except NoFeasiblePlanError as e:
        row.update(status="no fit", message=str(e), seconds=time.perf_counter() - t0)
        closest = getattr(e, "closest", None) or (getattr(e, "result", None) or {}).get("closest")
        etrain = getattr(e, "train", None)
        if closest is not None and etrain is not None and hasattr(closest, "short"):
            d = estimate(model, hw, etrain, closest, world, cfg.headroom)
            row["closest_plan"] = closest.short()
            if "memory" in d:
                row["over"] = memory_note(d, "closest plan " + closest.short())
        return row
    except InputError as e:
        row.update(status="error", message=str(e), seconds=time.perf_counter() - t0)
        return row
    plan, step, tg = out.ranked[0]
    train = tg.train
    row.update(seq_len=train.seq_len, global_batch=train.global_batch, tokens_per_step=train.tokens_per_step,
               global_batch_note=out.train_note, stack=tg.launcher,
               runtime=tg.runtime.name if tg.runtime is not None else None)
    doc = estimate(model, hw, train, plan, world, cfg.headroom)
    tm = doc["time"]
    tps = train.tokens_per_step / step
    st = (tg.result or {}).get("stats", {})
    row.update(plan=doc["plan"], plan_short=plan.short() + (" +tp-ovl" if plan.tp_overlap else ""),
               plan_text=plan_text(plan), step_s=step, tokens_per_s=tps,
               tokens_per_s_per_gpu=tm["tokens_per_s_per_gpu"], mfu=tm["mfu"], tflops_per_gpu=tm["tflops_per_gpu"],
               peak_bytes=doc["memory"]["peak_bytes"], limit_bytes=doc["memory"]["limit_bytes"],
               search={k: st.get(k) for k in ("method", "evaluated", "legal", "feasible", "optimal")},
               seconds=time.perf_counter() - t0, estimate=doc)
    _run_cost(row, cfg.tokens)
    return row


def _run_cost(row: dict, tokens: float | None) -> None:
    row["tokens"] = tokens
    sec_per_token = row["step_s"] / row["tokens_per_step"]
    row["gpu_seconds_per_token"] = sec_per_token * row["gpus"]
    price = row["price_per_gpu_hour"]
    row["cost_per_token"] = row["gpu_seconds_per_token"] / 3600.0 * price if price is not None else None
    if tokens is None:
        row.update(time_to_train_s=None, gpu_hours=None, cost=None)
        return
    t = tokens / row["tokens_per_s"]
    row["time_to_train_s"] = t
    row["gpu_hours"] = row["gpus"] * t / 3600.0
    row["cost"] = row["gpu_hours"] * price if price is not None else None


_JOB = None


def _work(i):
    model, hws, points, space, cfg, prices = _JOB
    label, hw = hws[points[i].hw_index]
    return i, solve_point(model, hw, label, points[i], space, cfg, price_for(label, hw, prices), workers=1)


def _cpus() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # pragma: no cover
        return os.cpu_count() or 1


def run_sweep(model, hws: list, points: list[Point], space, cfg: SweepConfig, prices: dict | None = None,
              workers: int | None = None, progress=None, deadline_s: float | None = None) -> dict:
    """Solve every point; `hws` = [(label, HardwareSpec)]. Returns {rows, pareto, deadline, stats}."""
    global _JOB
    prices = prices or {}
    if deadline_s is not None and cfg.tokens is None:
        raise InputError("--deadline needs --tokens (how many tokens the run trains), e.g. --tokens 1T")
    t0 = time.perf_counter()
    n = len(points)
    w = min(n, max(1, _cpus() if workers is None else int(workers)))
    rows: list = [None] * n
    if w > 1:
        import multiprocessing as mp
        order = sorted(range(n), key=lambda i: -points[i].gpus)       # largest searches first
        _JOB = (model, hws, points, space, cfg, prices)
        try:
            from autoplace.safe import quiet_worker
            with mp.get_context("fork").Pool(w, initializer=quiet_worker) as pool:   # ended on any exit
                for k, (i, row) in enumerate(pool.imap_unordered(_work, order, chunksize=1)):
                    rows[i] = row
                    if progress is not None:
                        progress(k + 1, n)
        finally:
            _JOB = None
    else:
        for k, pt in enumerate(points):
            label, hw = hws[pt.hw_index]
            rows[k] = solve_point(model, hw, label, pt, space, cfg, price_for(label, hw, prices))
            if progress is not None:
                progress(k + 1, n)
    front = pareto_front(rows)
    for i, r in enumerate(rows):
        r["pareto"] = i in front
    out = {"rows": rows, "pareto": front, "cost_metric": _metric(rows),
           "stats": {"points": n, "workers": w, "seconds": time.perf_counter() - t0}}
    if deadline_s is not None:
        out["deadline"] = pick_deadline(rows, deadline_s)
    return out


def _ok(rows):
    return [i for i, r in enumerate(rows) if r["status"] == "ok"]


def _metric(rows) -> str:
    """'cost' when every feasible row has a price, else 'gpu_hours'."""
    ok = _ok(rows)
    return "cost" if ok and all(rows[i]["price_per_gpu_hour"] is not None for i in ok) else "gpu_hours"


def pareto_front(rows: list) -> list[int]:
    """Indices of the rows no other row beats on both time per token and cost per token (GPU-seconds
    per token when some row has no price), fastest first."""
    ok = _ok(rows)
    key = "cost_per_token" if _metric(rows) == "cost" else "gpu_seconds_per_token"
    pts = sorted(ok, key=lambda i: (rows[i]["step_s"] / rows[i]["tokens_per_step"], rows[i][key], rows[i]["gpus"]))
    front, best = [], float("inf")
    for i in pts:
        c = rows[i][key]
        if c < best * (1 - 1e-12):
            front.append(i)
            best = c
    return front


def pick_deadline(rows: list, deadline_s: float) -> dict:
    """The cheapest point whose time to train meets the deadline (fewest GPU-hours without prices)."""
    from autoplace.analysis.inputs import fmt_duration
    ok = _ok(rows)
    metric = _metric(rows)
    meet = [i for i in ok if rows[i]["time_to_train_s"] <= deadline_s]
    out = {"deadline_s": deadline_s, "metric": metric, "pick": None}
    if not meet:
        if ok:
            f = min(ok, key=lambda i: rows[i]["time_to_train_s"])
            r = rows[f]
            out["reason"] = (f"no point meets {fmt_duration(deadline_s)}: the fastest, {r['gpus']} × {r['hardware']}, "
                             f"takes {fmt_duration(r['time_to_train_s'])}; add GPUs or a faster profile")
        else:
            out["reason"] = "no point has a feasible plan"
        return out
    key = "cost" if metric == "cost" else "gpu_hours"
    i = min(meet, key=lambda j: (rows[j][key], rows[j]["time_to_train_s"], rows[j]["gpus"]))
    r = rows[i]
    out["pick"] = i
    if metric == "cost":
        out["reason"] = (f"cheapest point that trains in ≤ {fmt_duration(deadline_s)}: {r['gpus']} × {r['hardware']}, "
                         f"{fmt_duration(r['time_to_train_s'])}, {r['gpu_hours']:,.0f} GPU-h, cost {r['cost']:,.0f}")
    else:
        nop = sorted({rows[j]["hardware"] for j in ok if rows[j]["price_per_gpu_hour"] is None})
        out["reason"] = (f"no price for {', '.join(nop)} (give --price-per-gpu-hour): picked the fewest GPU-hours "
                         f"that trains in ≤ {fmt_duration(deadline_s)}: {r['gpus']} × {r['hardware']}, "
                         f"{fmt_duration(r['time_to_train_s'])}, {r['gpu_hours']:,.0f} GPU-h")
    return out
