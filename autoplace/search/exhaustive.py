"""Exhaustive vectorized search: evaluate every legal plan, keep the exact optimum and the top-k.

Each `Block` of the enumeration (a Cartesian block of plans, one axis per option group) is
evaluated by `autoplace.cost.step.evaluate` through numpy broadcasting — the same function that
`estimate` calls on one plan — so a term that depends on few knobs is computed once per distinct
value of those knobs. Blocks hold at most `chunk` plans, which bounds memory at any GPU count.

Block recompute (`recompute = "block"`, layer counts a contiguous range): memory is affine and
decreasing in the number of recomputed layers r and step time is non-decreasing in r, so of the
plans that differ only in r the fastest that fits is the one with the smallest r that fits. That r
is solved per plan from two memory evaluations per stage (r = 0, r = 1) and checked against
`evaluate`'s own `fits`; the other r are counted (legal, feasible) but not evaluated.
`collapse_block=False` evaluates every r (the tests compare both).

Ties (equal step time) are broken by the canonical enumeration order (`Block.keys`), so results
do not depend on chunking or on the number of worker processes (large searches fork one worker per
CPU; each evaluates a share of the blocks and returns its top-k and counts, which are merged).
"""

from __future__ import annotations

import time

import numpy as np

from autoplace.cost import memory
from autoplace.search.batch import COLUMNS, GridBatch, PlanBatch
from autoplace.search.blocks import Block
from autoplace.search.enumerate import DEFAULT_CHUNK, Enumeration, enumerate_space
from autoplace.search.pruning import rules_separable
from autoplace.search.topk import RESULT_KEYS, TopK, evaluate_block, resolved_ctx  # noqa: F401 (re-exported)


def _block_layers(ctx, hw, blk: Block, space, headroom: float):
    """Smallest block-recompute layer count that fits, per plan of the block slot.

    Returns (rl_full, rl_slot, hi): rl_full to set as the grid's recompute_layers (full block
    shape), rl_slot the count chosen for each plan of the slot (shape of the slot sub-grid), hi the
    largest count per row."""
    g = blk.grid
    bs = blk.block_slot
    ra = blk.rc_axis
    nd = len(g.shape)
    lo = max(space.recompute_layers.lo, 1)
    hi = lo + blk.n_rl - 1
    sub = g.sub(ra, slice(bs, bs + 1))
    shape2 = list(sub.shape)
    shape2[ra] = 2
    sh = [1] * nd
    sh[ra] = 2
    rl01 = np.array([0, 1], dtype=np.int64).reshape(sh)
    cols = {c: getattr(sub, c) for c in COLUMNS}
    cols["recompute_layers"] = rl01
    g2 = GridBatch(tuple(shape2), **cols)
    limit = memory.memory_limit(hw, headroom)
    need = None
    with np.errstate(all="ignore"):
        for i in (0, g2.pp - 1):
            M = np.broadcast_to(memory.stage_memory(ctx, hw, g2, i)["total"], g2.shape)
            M0, M1 = M[blk.on_rc(slice(0, 1))], M[blk.on_rc(slice(1, 2))]
            slope = M0 - M1
            r = np.where(M0 <= limit, 0.0,
                         np.where(slope > 0, np.ceil((M0 - limit) / np.where(slope > 0, slope, 1.0)), np.inf))
            need = r if need is None else np.maximum(need, r)
    need = np.maximum(need, lo)
    ok = need <= hi
    rl_slot = np.where(ok, need, hi).astype(np.int64)          # infeasible: most recompute (closest)
    rl_full = np.where(blk.rc_slot_mask(), rl_slot, 0)
    return rl_full, rl_slot, hi


PARALLEL_MIN = 600_000       # evaluations above which blocks are spread over worker processes


def _process(ctx, hw, space, headroom, top_k, en, specs, separable, progress=None, total=0, done0=0,
             threshold=None, families=False) -> dict:
    """Evaluate the blocks `specs`; returns the partial result (mergeable)."""
    top = TopK(max(1, int(top_k)), families=families)
    legal_n = feasible_n = evaluated = below = 0
    before = dict(en.pruned_by_rule)
    done = done0
    for spec in specs:
        blk = en.make_block(spec)
        g = blk.grid
        bs = blk.block_slot
        rl_slot = None
        if bs >= 0:
            rl_full, rl_slot, hi = _block_layers(ctx, hw, blk, space, headroom)
            g = g.with_col(recompute_layers=rl_full)
            blk.grid = g
        # every rule reads one option group → the early checks were complete (no second pass)
        legal = np.ones(blk.size, dtype=bool) if separable else en.legal_block(blk)
        ev = evaluate_block(ctx, hw, g, headroom)
        step, fits = ev["step_s"], ev["fits"].astype(bool)
        if bs >= 0:
            # evaluate()'s own verdict is the reference: bump the few plans the affine solve put
            # on the wrong side of a rounding boundary, then re-evaluate
            for _ in range(3):
                slot_fits = fits.reshape(g.shape)[blk.on_rc(slice(bs, bs + 1))]
                bad = (rl_slot <= hi) & ~slot_fits & (rl_slot < hi)
                if not bad.any():
                    break
                rl_slot = np.where(bad, rl_slot + 1, rl_slot)
                g = g.with_col(recompute_layers=np.where(blk.rc_slot_mask(), rl_slot, g.recompute_layers))
                ev = evaluate_block(ctx, hw, g, headroom)
                step, fits = ev["step_s"], ev["fits"].astype(bool)
        feasible = legal & fits & np.isfinite(step)
        keys = blk.keys()
        # counts: the block slot stands for n_rl plans (legal), of which hi − r* + 1 fit
        if bs >= 0 and blk.n_rl > 1:
            slot = blk.on_rc(slice(bs, bs + 1))
            wl = np.ones(g.shape, dtype=np.int64)
            wl[slot] = blk.n_rl
            wf = np.ones(g.shape, dtype=np.int64)
            wf[slot] = np.broadcast_to(hi - rl_slot + 1, wf[slot].shape)
            legal_n += int(wl.reshape(-1)[legal].sum())
            feasible_n += int(wf.reshape(-1)[feasible].sum())
        else:
            legal_n += int(np.count_nonzero(legal))
            feasible_n += int(np.count_nonzero(feasible))
        evaluated += blk.size
        if threshold is not None:
            below += int(np.count_nonzero(feasible & (step < threshold)))
        with np.errstate(all="ignore"):
            ratio = ev["peak_bytes"] / ev["limit_bytes"]
        top.offer(g, step, keys, feasible, legal & np.isfinite(ratio), ratio)
        done += blk.size
        if progress is not None:
            progress(done, total)
    pruned = {k: v - before.get(k, 0) for k, v in en.pruned_by_rule.items() if v - before.get(k, 0)}
    return {"top": top, "legal": legal_n, "feasible": feasible_n, "evaluated": evaluated, "pruned": pruned,
            "below": below}


def _merge(parts: list, k: int) -> dict:
    top = TopK(max(1, int(k)))
    out = {"legal": 0, "feasible": 0, "evaluated": 0, "pruned": {}, "below": 0}
    steps, keys, batches = [], [], []
    for part in parts:
        t = part["top"]
        for f in ("legal", "feasible", "evaluated", "below"):
            out[f] += part[f]
        for rid, v in part["pruned"].items():
            out["pruned"][rid] = out["pruned"].get(rid, 0) + v
        if t.batch is not None and len(t.batch):
            steps.append(t.steps)
            keys.append(t.keys)
            batches.append(t.batch)
        if t.close_batch is not None and (t.close_ratio < top.close_ratio or
                                          (t.close_ratio == top.close_ratio and t.close_key < top.close_key)):
            top.close_ratio, top.close_key, top.close_batch = t.close_ratio, t.close_key, t.close_batch
        for f, (fs, fk, fb) in t.fam.items():
            top.keep_family(f, fs, fk, fb)
    if steps:
        st, ky = np.concatenate(steps), np.concatenate(keys)
        b = PlanBatch.concat(batches)
        order = np.lexsort((ky, st))[:top.k]
        top.steps, top.keys, top.batch = st[order], ky[order], b.take(order)
    out["top"] = top
    return out


_JOB = None


def _work(task):
    ctx, hw, space, headroom, top_k, en, specs, separable, threshold, families = _JOB
    return _process(ctx, hw, space, headroom, top_k, en, [specs[i] for i in task], separable, threshold=threshold,
                    families=families)


def default_workers(n_eval: int) -> int:
    import os
    if n_eval < PARALLEL_MIN:
        return 1
    try:
        n = len(os.sched_getaffinity(0))
    except AttributeError:  # pragma: no cover
        n = os.cpu_count() or 1
    return max(1, min(n, 16))


def run_exhaustive(ctx, hw, space, headroom: float = 0.0, top_k: int = 5, chunk: int = DEFAULT_CHUNK,
                   collapse_block: bool = True, progress=None, enumeration: Enumeration | None = None,
                   workers: int | None = None, threshold: float | None = None, extra_rules=(),
                   families: bool = False, bounded: bool = False) -> dict:
    """Exact optimum under the model over `space` (uniform plans). Returns a result dict:
    top (PlanBatch, best first), steps, stats, closest (PlanBatch of one, or None), closest_ratio.

    threshold: also count the evaluated feasible plans faster than this step time (stats
    `faster_than_threshold`; a collapsed block-recompute family counts once).

    workers: processes to spread blocks over (fork; default: all CPUs when the search has more
    than PARALLEL_MIN evaluations, else 1).

    extra_rules: `Rule`s applied after `rules.RULES` when the enumeration is built here
    (`autoplace.search.pruning`); a given `enumeration` carries its own.

    families: also return `families` {family name: (step, PlanBatch of one)}, the best plan of each
    family of `autoplace.search.families` (search --diverse).

    bounded: evaluate cells in order of a lower bound on their step time and stop when the bound
    passes the k-th best (`autoplace.search.bounds`): the same top k, exact, far fewer evaluations;
    `feasible` is then None (not every plan is evaluated), and `legal` too when rules couple option
    groups. Ignored with `families` or `threshold`."""
    global _JOB
    t0 = time.perf_counter()
    ctx = resolved_ctx(ctx)
    en = enumeration or enumerate_space(ctx, space, chunk=chunk, collapse_block=collapse_block,
                                        extra_rules=extra_rules)
    separable = rules_separable(ctx, en)
    if bounded and not families and threshold is None and en.groups and en.groups[-1].name == "state":
        from autoplace.search.bounds import run_bounded
        return run_bounded(ctx, hw, space, headroom, top_k, en, chunk, progress, separable=separable)
    specs = en.block_specs(chunk)
    total = en.evaluated
    n_workers = default_workers(total) if workers is None else max(1, int(workers))
    n_workers = min(n_workers, max(1, len(specs)))
    parts = []
    if n_workers > 1:
        import multiprocessing as mp
        try:
            mctx = mp.get_context("fork")
        except ValueError:  # pragma: no cover - no fork on this platform
            mctx = None
        if mctx is None:
            n_workers = 1
        else:
            # interleave blocks over tasks (blocks of one signature are similar in cost)
            n_tasks = min(len(specs), n_workers * 6)
            tasks = [list(range(i, len(specs), n_tasks)) for i in range(n_tasks)]
            _JOB = (ctx, hw, space, headroom, top_k, en, specs, separable, threshold, families)
            try:
                from autoplace.safe import quiet_worker
                with mctx.Pool(n_workers, initializer=quiet_worker) as pool:     # ended on any exit
                    done = 0
                    for part in pool.imap(_work, tasks):
                        parts.append(part)
                        done += part["evaluated"]
                        if progress is not None:
                            progress(done, total)
            finally:
                _JOB = None
    if n_workers <= 1:
        parts = [_process(ctx, hw, space, headroom, top_k, en, specs, separable, progress, total, threshold=threshold,
                          families=families)]
    else:
        for part in parts:      # block-level rule charges happened in the workers' copies
            for rid, v in part["pruned"].items():
                en.pruned_by_rule[rid] = en.pruned_by_rule.get(rid, 0) + v
    res = _merge(parts, top_k)
    top = res["top"]
    secs = time.perf_counter() - t0
    stats = {
        "candidates": en.candidates,
        "legal": res["legal"],
        "feasible": res["feasible"],
        "pruned_by_rule": dict(sorted(en.pruned_by_rule.items())),
        "evaluated": res["evaluated"],
        "workers": n_workers,
        **({"faster_than_threshold": res["below"]} if threshold is not None else {}),
        "method": "exhaustive",
        "optimal": True,
        "seconds": secs,
    }
    out = {"top": top.batch if top.batch is not None else PlanBatch.empty(), "steps": top.steps,
           "stats": stats, "closest": top.close_batch, "closest_ratio": top.close_ratio,
           "enumeration": en}
    if families:
        from autoplace.search.families import FAMILIES
        out["families"] = {FAMILIES[f]: (v[0], v[2]) for f, v in sorted(top.fam.items())}
    return out
