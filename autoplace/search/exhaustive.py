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
do not depend on chunking.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

import numpy as np

from autoplace.cost import memory as Mm
from autoplace.search.batch import PlanBatch
from autoplace.search.enumerate import DEFAULT_CHUNK, Block, Enumeration, enumerate_space

RESULT_KEYS = ("step_s", "fits", "peak_bytes", "limit_bytes")


def _evaluate():
    from autoplace.cost.step import evaluate
    return evaluate


def evaluate_block(ctx, hw, grid, headroom: float = 0.0, keys=RESULT_KEYS) -> dict:
    """evaluate() on a GridBatch → flat arrays (C order); falls back to the flattened batch if the
    step model does not broadcast over n-D blocks."""
    ev_fn = _evaluate()
    with np.errstate(all="ignore"):
        try:
            ev = ev_fn(ctx, hw, grid, headroom)
            return {k: grid.full(ev[k]) for k in keys}
        except (ValueError, IndexError, TypeError):
            flat = grid.flat()
            ev = ev_fn(ctx, hw, flat, headroom)
            n = len(flat)
            return {k: np.broadcast_to(np.asarray(ev[k]), (n,)).copy() for k in keys}


@dataclass
class TopK:
    """Running top-k of (step, key) over feasible plans, plus the closest infeasible plan."""
    k: int
    steps: np.ndarray = field(default_factory=lambda: np.zeros(0))
    keys: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    batch: PlanBatch = None
    close_ratio: float = np.inf
    close_key: int = -1
    close_batch: PlanBatch = None

    def offer(self, grid, step, keys, feasible, legal, ratio) -> None:
        idx = np.nonzero(feasible)[0]
        if idx.size:
            s = step[idx]
            if idx.size > self.k:
                # candidates: the k smallest steps (ties at the k-th value kept for the key order)
                kth = np.partition(s, self.k - 1)[self.k - 1]
                sel = s <= kth
                idx, s = idx[sel], s[sel]
            kk = keys[idx]
            cand = grid.take_flat(idx)
            steps = np.concatenate([self.steps, s])
            allk = np.concatenate([self.keys, kk])
            batch = cand if self.batch is None else PlanBatch.concat([self.batch, cand])
            order = np.lexsort((allk, steps))[: self.k]
            self.steps, self.keys, self.batch = steps[order], allk[order], batch.take(order)
        lidx = np.nonzero(legal)[0]
        if lidx.size:
            r = ratio[lidx]
            j = int(np.argmin(r))
            if r[j] < self.close_ratio or (r[j] == self.close_ratio and keys[lidx[j]] < self.close_key):
                self.close_ratio = float(r[j])
                self.close_key = int(keys[lidx[j]])
                self.close_batch = grid.take_flat([lidx[j]])


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
    from autoplace.search.batch import COLUMNS, GridBatch
    cols = {c: getattr(sub, c) for c in COLUMNS}
    cols["recompute_layers"] = rl01
    g2 = GridBatch(tuple(shape2), **cols)
    limit = Mm.memory_limit(hw, headroom)
    need = None
    with np.errstate(all="ignore"):
        for i in (0, g2.pp - 1):
            M = np.broadcast_to(Mm.stage_memory(ctx, hw, g2, i)["total"], g2.shape)
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


def run_exhaustive(ctx, hw, space, headroom: float = 0.0, top_k: int = 5, chunk: int = DEFAULT_CHUNK,
                   collapse_block: bool = True, progress=None, enumeration: Enumeration | None = None) -> dict:
    """Exact optimum under the model over `space` (uniform plans). Returns a result dict:
    top (PlanBatch, best first), steps, stats, closest (PlanBatch of one, or None), closest_ratio."""
    t0 = time.perf_counter()
    en = enumeration or enumerate_space(ctx, space, chunk=chunk, collapse_block=collapse_block)
    top = TopK(max(1, int(top_k)))
    legal_n = 0
    feasible_n = 0
    evaluated = 0
    total = en.evaluated
    done = 0
    for blk in en.blocks(chunk):
        g = blk.grid
        bs = blk.block_slot
        rl_slot = None
        if bs >= 0:
            rl_full, rl_slot, hi = _block_layers(ctx, hw, blk, space, headroom)
            g = g.with_col(recompute_layers=rl_full)
            blk.grid = g
        legal = en.legal_block(blk)
        ev = evaluate_block(ctx, hw, g, headroom)
        step, fits = ev["step_s"], ev["fits"].astype(bool)
        if bs >= 0:
            # evaluate()'s own verdict is the reference: bump the few plans the affine solve put
            # on the wrong side of a rounding boundary, then re-evaluate
            for _ in range(3):
                slot_fits = fits.reshape(g.shape)[blk.on_rc(slice(bs, bs + 1))]
                pred = rl_slot <= hi
                bad = pred & ~slot_fits & (rl_slot < hi)
                if not bad.any():
                    break
                rl_slot = np.where(bad, rl_slot + 1, rl_slot)
                g = g.with_col(recompute_layers=np.where(blk.rc_slot_mask(), rl_slot, g.recompute_layers))
                ev = evaluate_block(ctx, hw, g, headroom)
                step, fits = ev["step_s"], ev["fits"].astype(bool)
        feasible = legal & fits & np.isfinite(step)
        keys = blk.keys()
        # counts: the block slot stands for n_rl plans (legal) and hi − r* + 1 of them fit
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
        ratio = ev["peak_bytes"] / ev["limit_bytes"]
        top.offer(g, step, keys, feasible, legal & np.isfinite(ratio), ratio)
        done += blk.size
        if progress is not None:
            progress(done, total)
    secs = time.perf_counter() - t0
    stats = {
        "candidates": en.candidates,
        "legal": legal_n,
        "feasible": feasible_n,
        "pruned_by_rule": dict(sorted(en.pruned_by_rule.items())),
        "evaluated": evaluated,
        "method": "exhaustive",
        "optimal": True,
        "seconds": secs,
    }
    return {"top": top.batch if top.batch is not None else PlanBatch.empty(), "steps": top.steps,
            "stats": stats, "closest": top.close_batch, "closest_ratio": top.close_ratio,
            "enumeration": en}
