"""The running top-k of an exhaustive or bounded search and the block evaluation both share
(`evaluate_block`: the cost model on a GridBatch; `TopK`: best plans, closest infeasible plan,
per-family bests; `resolved_ctx`: the runtime loaded once per search)."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from autoplace.cost.step import SEARCH_KEYS, evaluate
from autoplace.search.batch import GridBatch, PlanBatch

RESULT_KEYS = SEARCH_KEYS


_HEAP_KEPT = False


def keep_heap_for_blocks() -> None:
    """Let glibc malloc serve a block's whole-block temporaries (up to a few MiB each) from the heap
    and keep freed memory for the next one (M_MMAP_THRESHOLD 32 MiB, M_TRIM_THRESHOLD 256 MiB), once
    per process. By default each such array is a fresh mmap whose pages fault in on first touch and
    are unmapped when it is freed; on a VM those faults cost more than the arithmetic (a chain of
    three whole-block adds: 5.5 ms → 0.22 ms, 130 k plans). Does nothing off glibc."""
    global _HEAP_KEPT
    if _HEAP_KEPT:
        return
    _HEAP_KEPT = True
    import ctypes
    import sys
    if not sys.platform.startswith("linux"):
        return
    try:
        libc = ctypes.CDLL("libc.so.6")
        libc.mallopt(-3, 32 << 20)          # M_MMAP_THRESHOLD
        libc.mallopt(-1, 256 << 20)         # M_TRIM_THRESHOLD
    except (OSError, AttributeError):       # musl or another libc: keep its defaults
        pass


def evaluate_block(ctx, hw, grid: GridBatch, headroom: float = 0.0, keys=RESULT_KEYS) -> dict:
    """evaluate() on a GridBatch → flat arrays (C order).

    The cost model broadcasts over any block: every column of a GridBatch is broadcastable to its
    shape (checked when the block is built), so there is no flattened fallback; an exception here
    is a cost-model bug and propagates."""
    keep_heap_for_blocks()
    with np.errstate(all="ignore"):
        ev = evaluate(ctx, hw, grid, headroom, report=any(k not in SEARCH_KEYS for k in keys))
    return {k: grid.full(ev[k]) for k in keys}


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
    families: bool = False       # also keep the best plan of each family (search --diverse)
    fam: dict = field(default_factory=dict)      # family code → (step, key, PlanBatch of one)

    def offer(self, grid, step, keys, feasible, legal, ratio) -> None:
        idx = np.nonzero(feasible)[0]
        if self.families and idx.size:
            self.offer_families(grid, step, keys, idx)
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


    def offer_families(self, grid, step, keys, idx) -> None:
        """Per-family best (smallest step, then canonical key) over the feasible plans `idx`."""
        from autoplace.search.families import family_codes
        fam = grid.full(family_codes(grid))[idx]
        s, kk = step[idx], keys[idx]
        for f in np.nonzero(np.bincount(fam, minlength=1))[0]:
            sel = np.nonzero(fam == f)[0]
            sf = s[sel]
            mn = sf.min()
            cand = sel[sf == mn]
            j = cand[np.argmin(kk[cand])]
            self.keep_family(int(f), float(mn), int(kk[j]), lambda: grid.take_flat([idx[j]]))

    def keep_family(self, f: int, step: float, key: int, batch) -> None:
        cur = self.fam.get(f)
        if cur is None or (step, key) < (cur[0], cur[1]):
            self.fam[f] = (step, key, batch() if callable(batch) else batch)


def resolved_ctx(ctx):
    """ctx with its training spec's runtime loaded once (a name or None → the RuntimeSpec), so the
    cost functions' `train.rt` does not resolve a path on every call; same values."""
    import dataclasses
    if not dataclasses.is_dataclass(ctx) or not dataclasses.is_dataclass(ctx.train):
        return ctx
    from autoplace.runtimes import load_runtime
    rt = load_runtime(ctx.train.runtime)
    if ctx.train.runtime is rt:
        return ctx
    return dataclasses.replace(ctx, train=dataclasses.replace(ctx.train, runtime=rt))
