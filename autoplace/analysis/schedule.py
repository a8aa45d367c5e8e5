"""The pipeline schedule of a plan as a timeline: every forward and backward of every micro-batch on
every stage, in the order the launchers run them, timed with the cost model's own stage times.

Orders (per pipeline rank i of p, m micro-batches, v model chunks):
- GPipe: all m forwards, then all m backwards.
- 1F1B (PipeDream-flush, Megatron `forward_backward_pipelining_without_interleaving`): min(p−i−1, m)
  warm-up forwards, then one forward + one backward at a time, then the remaining backwards.
- interleaved 1F1B (Megatron `forward_backward_pipelining_with_interleaving`, `get_schedule_table`):
  the virtual micro-batches k = 0 … m·v−1 visit (micro-batch, chunk) group by group — G micro-batches
  (vpp_group, default p) through chunk 0, the same G through chunk 1, …; backwards walk the same
  table with the chunks reversed. Rank i runs min(2(p−i−1) + (v−1)·G, m·v) warm-up forwards, then
  1F1B (megatron-core with `microbatch_group_size_per_vp_stage`; releases before it ran all m·v
  forwards first when m = p).

Each rank executes its list in order; an operation starts when its rank is free and its input is
ready (forward of virtual stage s after the forward of s−1; backward of s after the backward of
s+1, the last virtual stage's backward after its own forward). Chunk times are the stage times ÷ v.
Point-to-point transfers take no time here: the step model adds them as `pp_comm`, apart from the
pipeline time `pipeline_s` = (m·v − 1)·max_i t_i / v + Σ_i t_i / v that `cost.step.evaluate`
reports and that the makespan reproduces exactly for equal stages.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class Op:
    stage: int          # pipeline rank
    kind: str           # "F" | "B"
    micro: int          # micro-batch
    chunk: int          # model chunk (0 … v−1)
    start: float
    end: float


def stage_fb(ctx, hw, plan) -> tuple[list[float], list[float]]:
    """Per-stage forward and backward (recompute included) seconds per micro-batch, from
    `cost.step.stage_times`: stage 0 is its "first", stage p−1 its "last", the stages between its
    "middle" (with an explicit layer split, each interior stage is timed with its own layers)."""
    from autoplace.cost.step import stage_times
    p = plan.pp
    sts, _, _ = stage_times(ctx, hw, plan)
    f = lambda d: float(np.asarray(d["f"]))  # noqa: E731
    b = lambda d: float(np.asarray(d["b"]))  # noqa: E731
    if p == 1:
        return [f(sts["first"])], [b(sts["first"])]
    F, B = [f(sts["first"])], [b(sts["first"])]
    split, srec = tuple(plan.layer_split or ()), tuple(plan.stage_recompute or ())
    for i in range(1, p - 1):
        if split or srec:
            q = plan.with_(layer_split=(split[i],) * p if split else (),
                           stage_recompute=(srec[i],) * p if srec else ())
            d = stage_times(ctx, hw, q)[0]["middle"]
        else:
            d = sts["middle"]
        F.append(f(d))
        B.append(b(d))
    F.append(f(sts["last"]))
    B.append(b(sts["last"]))
    return F, B


def schedule_order(schedule: str, p: int, m: int, v: int = 1, group: int = 0) -> list[list[tuple]]:
    """Per rank, the ordered operations (kind, micro-batch, chunk)."""
    if schedule == "gpipe":
        return [[("F", j, 0) for j in range(m)] + [("B", j, 0) for j in range(m)] for _ in range(p)]
    if schedule != "interleaved" or v <= 1:
        out = []
        for i in range(p):
            w = min(p - i - 1, m)
            ops = [("F", j, 0) for j in range(w)]
            for k in range(m - w):
                ops += [("F", w + k, 0), ("B", k, 0)]
            ops += [("B", k, 0) for k in range(m - w, m)]
            out.append(ops)
        return out
    G = group or p
    table = []
    for lo in range(0, m, G):
        hi = m if lo + G >= m else lo + G
        table += [(j, c) for c in range(v) for j in range(lo, hi)]
    total = m * v
    out = []
    for i in range(p):
        w = min(2 * (p - i - 1) + (v - 1) * G, total)
        fwd = [("F", j, c) for j, c in table]
        bwd = [("B", j, v - 1 - c) for j, c in table]
        ops = fwd[:w]
        for k in range(total - w):
            ops += [fwd[w + k], bwd[k]]
        ops += bwd[total - w:]
        out.append(ops)
    return out


def simulate(order: list[list[tuple]], fwd: list[float], bwd: list[float], v: int = 1) -> list[Op]:
    """Run the per-rank orders with per-stage forward/backward times (chunk time = stage time / v)."""
    p = len(order)
    last = p * v - 1
    done: dict = {}                     # (kind, micro, virtual stage) → end time
    free = [0.0] * p
    pos = [0] * p
    ops: list[Op] = []
    remaining = sum(len(o) for o in order)
    while remaining:
        progressed = False
        for i in range(p):
            while pos[i] < len(order[i]):
                kind, j, c = order[i][pos[i]]
                s = c * p + i
                if kind == "F":
                    dep = ("F", j, s - 1) if s > 0 else None
                else:
                    dep = ("B", j, s + 1) if s < last else ("F", j, s)
                if dep is not None and dep not in done:
                    break
                t0 = max(free[i], done[dep] if dep is not None else 0.0)
                t1 = t0 + (fwd[i] if kind == "F" else bwd[i]) / v
                done[(kind, j, s)] = t1
                free[i] = t1
                ops.append(Op(i, kind, j, c, t0, t1))
                pos[i] += 1
                remaining -= 1
                progressed = True
        if not progressed:
            raise ValueError("pipeline schedule deadlocks: the per-rank orders are inconsistent")
    return ops


def timeline(ctx, hw, plan) -> dict:
    """The plan's schedule: {ops, makespan_s, pipeline_s (the model's), stage_f, stage_b, m, v,
    schedule}. `plan` must be resolved (dp set) and legal."""
    from autoplace.cost.step import evaluate
    from autoplace.plan import micro_batches
    plan = plan.resolved(ctx.world)
    m = int(round(float(micro_batches(plan, ctx.train.global_batch))))
    v = plan.vpp if (plan.schedule == "interleaved" and plan.pp > 1) else 1
    sched = plan.schedule if plan.pp > 1 else "1f1b"
    fwd, bwd = stage_fb(ctx, hw, plan)
    order = schedule_order(sched, plan.pp, m, v, plan.vpp_group)
    ops = simulate(order, fwd, bwd, v)
    ev = evaluate(ctx, hw, plan)
    return {"ops": ops, "makespan_s": max(o.end for o in ops), "pipeline_s": float(np.asarray(ev["pipeline_s"])),
            "stage_f": fwd, "stage_b": bwd, "m": m, "v": v, "pp": plan.pp, "schedule": sched,
            "pp_comm_s": float(np.asarray(ev["pp_comm"]))}
