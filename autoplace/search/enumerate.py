"""Enumerate the legal uniform plans of a search space (placement_semantics.md §4.7).

How it is vectorized
--------------------
1. **Degree rows.** Every (tp, pp, cp, ep, etp) whose product with dp = W/(tp·pp·cp) is the GPU count
   (rule C2 by construction): a few hundred rows at most, built from divisor lists.
2. **Option groups.** The other knobs fall into groups that depend on the degree row but not on each
   other: (recompute, block layers), (mbs, schedule, vpp, G), (zero, reshard, dp_replicate),
   (sp, tp_overlap), (offload, φ), (rank order, dp overlap). For each group and each degree row the
   allowed options are built with numpy masks (e.g. mbs must divide B/dp, G ∈ {pp, m}, block layers
   1 … L/pp − 1, dp_replicate | dp, SP only for tp > 1, φ only with offload) and stored as flat
   columns with per-row offsets. A degree row has Π_g count_g plans — counted, never materialized.
3. **Chunks.** Plan j of the product is decoded in mixed radix (digit g ∈ [0, count_g)) from its row's
   offset, all with array arithmetic; `chunks()` yields `PlanBatch`es of at most `chunk` plans, so
   memory stays bounded whatever the GPU count.
4. **Rules.** Degree rows that a rule rejects at the most permissive setting of the other knobs
   (e.g. heads % tp ≠ 0, L % pp ≠ 0, W % (etp·ep·pp) ≠ 0) are dropped with their whole product
   (every child violates the same rule); the rest of each chunk goes through
   `autoplace.placement.rules.legal_mask` — the same rule objects `estimate` uses — whose counts give
   `pruned_by_rule`. A plan is charged to the first rule (in `RULES` order) it violates at the
   earliest of the two stages.

Canonical forms (knobs the model ignores in a setting are fixed, so no plan appears twice):
pp = 1 → 1F1B; vpp and G only with the interleaved schedule; block layers only with `block`;
dp_replicate = 1 without ZeRO; reshard only with ZeRO-3; SP only with tp > 1; TP overlap only with
SP; φ only with offload; ep = 1 and etp = tp on dense models.
"""

from __future__ import annotations

import inspect
import math
from dataclasses import dataclass, field

import numpy as np

from autoplace.placement import rules as R
from autoplace.search.batch import BOOL_COLS, COLUMNS, FLOAT_COLS, PlanBatch
from autoplace.search.space import Space

DEFAULT_CHUNK = 1 << 17


def _divisors(n: int) -> list[int]:
    small, large = [], []
    i = 1
    while i * i <= n:
        if n % i == 0:
            small.append(i)
            if i * i != n:
                large.append(n // i)
        i += 1
    return small + large[::-1]


def _resolve(choice, bound: int) -> list[int]:
    """Values of a degree Choice restricted to divisors of `bound`."""
    return [v for v in choice.resolve(bound) if isinstance(v, int) and bound % v == 0]


@dataclass
class _Group:
    names: tuple
    counts: np.ndarray          # (R,) options per degree row
    offsets: np.ndarray         # (R,) start of the row's options in the flat columns
    cols: dict                  # name → flat array


def _group(names, owner: np.ndarray, cols: dict, n_rows: int) -> _Group:
    counts = np.bincount(owner, minlength=n_rows).astype(np.int64)
    offsets = np.concatenate([[0], np.cumsum(counts)[:-1]]).astype(np.int64)
    return _Group(tuple(names), counts, offsets, {k: np.asarray(v) for k, v in cols.items()})


def _nz(mask: np.ndarray):
    r, k = np.nonzero(mask)
    return r, k


@dataclass
class Block:
    """One Cartesian block of plans: degree rows with the same option counts, stacked on axis 0.

    Axis 0 = degree rows, axes 1.. = the option groups (rc, tp, zero, off, batch, misc). The plan at
    (r, k_1 … k_G) has the canonical key `row_start[rows[r]] + ravel((k + lo), sig)` — its position
    in the enumeration order, used to break ties deterministically whatever the chunking.
    """
    grid: PlanBatch             # GridBatch
    rows: np.ndarray            # degree-row indices, one per axis-0 entry
    sig: tuple                  # per-row option counts (full group sizes)
    lo: tuple                   # first option index of each group axis in this block (slicing)
    keys0: np.ndarray           # key of option (0,…,0) for each stacked row
    n_rl: int                   # block-recompute plans represented by the block slot (collapse mode)
    block_slot: int             # index of the block-recompute option on the rc axis (−1: none)
    rc_axis: int = 1            # grid axis of the (rc, recompute_layers) group

    def on_rc(self, sl) -> tuple:
        """Index tuple selecting `sl` on the rc axis of an array with the grid's dimensions."""
        ix = [slice(None)] * len(self.grid.shape)
        ix[self.rc_axis] = sl
        return tuple(ix)

    def rc_slot_mask(self) -> np.ndarray:
        """Boolean array (broadcastable to the grid) true on the block-recompute slot."""
        sh = [1] * len(self.grid.shape)
        sh[self.rc_axis] = -1
        return (np.arange(self.grid.shape[self.rc_axis]) == self.block_slot).reshape(sh)

    @property
    def size(self) -> int:
        return self.grid.size

    def keys(self) -> np.ndarray:
        """Canonical key of every plan of the block, flat in C order."""
        shape = self.grid.shape
        local = np.zeros(shape[1:], dtype=np.int64)
        stride = 1
        for ax in range(len(self.sig) - 1, -1, -1):
            ix = (np.arange(shape[ax + 1]) + self.lo[ax]) * stride
            sh = [1] * len(self.sig)
            sh[ax] = -1
            local = local + ix.reshape(sh)
            stride *= self.sig[ax]
        return (self.keys0.reshape((-1,) + (1,) * len(self.sig)) + local[None]).reshape(-1)


@dataclass
class Enumeration:
    """The candidate product of a space for one (model, training, world); iterate with `chunks()`
    (flat `PlanBatch`es, every plan) or `blocks()` (broadcast `GridBatch`es for evaluation)."""
    ctx: object
    space: Space
    deg: dict                    # degree columns (all rows, incl. pruned)
    groups: list
    totals: np.ndarray           # plans per degree row (the full product: the candidates)
    alive: np.ndarray            # degree rows not rejected as a whole
    pruned_by_rule: dict = field(default_factory=dict)
    chunk: int = DEFAULT_CHUNK
    collapse_block: bool = False  # block recompute: one slot per row standing for every layer count
    n_rl: np.ndarray = None       # per row: layer counts the block slot stands for (0: no block)
    n_nonblock: int = 0           # rc options before the block slot
    rc_axis: int = 1              # axis of the (rc, recompute_layers) group in a Block's grid

    @property
    def candidates(self) -> int:
        return int(self.totals.sum())

    @property
    def to_check(self) -> int:
        """Plans that reach the chunk-level rule check."""
        return int(self.totals[self.alive].sum())

    def _charge(self, counts: dict, mult: int = 1) -> None:
        for rid, v in counts.items():
            if v:
                self.pruned_by_rule[rid] = self.pruned_by_rule.get(rid, 0) + int(v) * mult

    def chunks(self, chunk: int | None = None):
        """Yield (start, PlanBatch, legal_mask), every plan of the product in canonical order
        (`chunk` plans at a time). Needs an enumeration built with collapse_block=False."""
        if self.collapse_block:
            raise ValueError("chunks() enumerates every plan: build with collapse_block=False")
        chunk = int(chunk or self.chunk)
        rows = np.nonzero(self.alive & (self.totals > 0))[0]
        if rows.size == 0:
            return
        tot = self.totals[rows]
        ends = np.cumsum(tot)
        starts = ends - tot
        n = int(ends[-1])
        for a in range(0, n, chunk):
            b = min(n, a + chunk)
            j = np.arange(a, b, dtype=np.int64)
            di = np.searchsorted(ends, j, side="right")
            k = j - starts[di]
            d = rows[di]
            cols = {c: self.deg[c][d] for c in self.deg}
            # C order: the last group varies fastest (same order as Block.keys)
            for g in reversed(self.groups):
                c = g.counts[d]
                digit = k % c
                k = k // c
                pos = g.offsets[d] + digit
                for name, arr in g.cols.items():
                    if not name.startswith("_"):
                        cols[name] = arr[pos]
            batch = PlanBatch(**cols)
            counts: dict = {}
            ok = R.legal_mask(self.ctx, batch, counts)
            self._charge(counts)
            yield a, batch, ok

    def all_plans(self) -> tuple[PlanBatch, np.ndarray]:
        """Every surviving candidate as one batch with its legal mask (small cases, tests)."""
        parts, masks = [], []
        for _, b, ok in self.chunks():
            parts.append(b)
            masks.append(ok)
        if not parts:
            return PlanBatch.empty(), np.zeros(0, dtype=bool)
        return PlanBatch.concat(parts), np.concatenate(masks)

    def legal_plans(self) -> PlanBatch:
        b, ok = self.all_plans()
        return b.take(np.nonzero(ok)[0])

    # ---- broadcast blocks ---------------------------------------------------------------------
    def _counts(self, d) -> tuple:
        return tuple(int(g.counts[d]) for g in self.groups)

    def blocks(self, max_size: int | None = None):
        """Yield `Block`s of at most ~max_size plans: degree rows with equal option counts stacked,
        a row larger than max_size split along its largest option axis."""
        from autoplace.search.batch import GridBatch
        max_size = int(max_size or self.chunk)
        rows = np.nonzero(self.alive & (self.totals > 0))[0]
        if rows.size == 0:
            return
        # canonical key offsets (collapsed products, canonical row order)
        ends = np.cumsum(self.totals_eval[rows])
        start = dict(zip(rows.tolist(), (ends - self.totals_eval[rows]).tolist()))
        sigs: dict = {}
        for d in rows.tolist():
            key = self._counts(d) + ((int(self.n_rl[d]),) if self.collapse_block else ())
            sigs.setdefault(key, []).append(d)
        ng = len(self.groups)
        for key, members in sigs.items():
            sig = key[:ng]
            T = int(np.prod(sig))
            n_rl = key[ng] if self.collapse_block else 0
            block_slot = self.n_nonblock if (self.collapse_block and n_rl > 0) else -1
            members = np.asarray(members, dtype=np.int64)
            if T <= max_size:
                per = max(1, max_size // T)
                pieces = [(members[i:i + per], None) for i in range(0, members.size, per)]
            else:
                ax = int(np.argmax(sig))
                rest = T // sig[ax]
                step = max(1, max_size // rest)
                pieces = [(members[i:i + 1], (ax, a, min(sig[ax], a + step)))
                          for i in range(members.size) for a in range(0, sig[ax], step)]
            for mrows, cut in pieces:
                lo = [0] * ng
                shape = [mrows.size] + list(sig)
                cols = {}
                for c, arr in self.deg.items():
                    cols[c] = arr[mrows].reshape((-1,) + (1,) * ng)
                for ax, g in enumerate(self.groups):
                    a, b = 0, sig[ax]
                    if cut is not None and cut[0] == ax:
                        a, b = cut[1], cut[2]
                    lo[ax] = a
                    shape[ax + 1] = b - a
                    idx = g.offsets[mrows][:, None] + np.arange(a, b)[None, :]
                    sh = [mrows.size] + [1] * ng
                    sh[ax + 1] = b - a
                    for name, arr in g.cols.items():
                        if not name.startswith("_"):
                            cols[name] = arr[idx].reshape(sh)
                grid = GridBatch(tuple(shape), **cols)
                keys0 = np.array([start[d] for d in mrows.tolist()], dtype=np.int64)
                bs = block_slot
                ra = self.rc_axis
                if bs >= 0 and not (lo[ra - 1] <= bs < lo[ra - 1] + shape[ra]):
                    bs = -1
                elif bs >= 0:
                    bs -= lo[ra - 1]
                yield Block(grid, mrows, tuple(sig), tuple(lo), keys0, n_rl, bs, ra)

    @property
    def totals_eval(self) -> np.ndarray:
        """Plans per row that are actually evaluated (block slot counted once)."""
        t = np.ones(self.totals.shape[0], dtype=np.int64)
        for g in self.groups:
            t *= g.counts
        return t

    @property
    def evaluated(self) -> int:
        return int(self.totals_eval[self.alive].sum())

    def legal_block(self, blk: Block) -> np.ndarray:
        """Legal mask of a block (flat, C order) via rules.legal_mask; pruned_by_rule charged with
        the number of plans each row stands for (the block slot: n_rl layer counts)."""
        g = blk.grid
        if blk.block_slot < 0 or blk.n_rl <= 1:
            counts: dict = {}
            ok = _legal(self.ctx, g, counts)
            self._charge(counts)
            return ok
        bs = blk.block_slot
        ra = blk.rc_axis
        parts = []
        n1 = g.shape[ra]
        for sl, mult in ((slice(0, bs), 1), (slice(bs, bs + 1), blk.n_rl), (slice(bs + 1, n1), 1)):
            if sl.stop - sl.start <= 0:
                continue
            sub = g.sub(ra, sl)
            counts = {}
            ok = _legal(self.ctx, sub, counts)
            self._charge(counts, mult)
            parts.append(ok.reshape(sub.shape))
        return np.concatenate(parts, axis=ra).reshape(-1)


_GRID_LEGAL: bool | None = None


def _legal(ctx, grid, counts: dict) -> np.ndarray:
    """rules.legal_mask on a broadcast block: directly if legal_mask accepts n-D batches, else on
    the block flattened to a 1-D PlanBatch (same function, same rules either way)."""
    global _GRID_LEGAL
    if _GRID_LEGAL is None or _GRID_LEGAL:
        try:
            c2: dict = {}
            ok = np.asarray(R.legal_mask(ctx, grid, c2))
            if ok.size == grid.size:
                _GRID_LEGAL = True
                for k, v in c2.items():
                    counts[k] = counts.get(k, 0) + v
                return ok.reshape(-1)
        except (ValueError, IndexError, TypeError):
            pass
        _GRID_LEGAL = False
    return R.legal_mask(ctx, grid.flat(), counts)


# ---- building -----------------------------------------------------------------------------------
def _degree_rows(ctx, space: Space) -> dict:
    W = ctx.world
    m = ctx.model
    moe = (not m.states_only) and m.is_moe
    rows = []
    for tp in _resolve(space.tp, W):
        for pp in _resolve(space.pp, W // tp):
            for cp in _resolve(space.cp, W // (tp * pp)):
                dp = W // (tp * pp * cp)
                eps = _resolve(space.ep, W // pp) if moe else [1]
                for ep in eps:
                    etps = sorted({tp if e == "tp" else int(e) for e in space.etp}) if moe else [tp]
                    for etp in etps:
                        rows.append((tp, pp, cp, dp, ep, etp))
    a = np.array(rows, dtype=np.int64).reshape(-1, 6)
    return {"tp": a[:, 0], "pp": a[:, 1], "cp": a[:, 2], "dp": a[:, 3], "ep": a[:, 4], "t_exp": a[:, 5]}


def _grid(choice, max_bound: int, divisors_of=None) -> np.ndarray:
    """Candidate integer grid for a Choice (explicit values, or lo..min(hi, max_bound))."""
    if choice.values:
        return np.array([v for v in choice.values if isinstance(v, int)], dtype=np.int64)
    hi = max_bound if choice.hi is None else min(choice.hi, max_bound)
    v = np.arange(max(choice.lo, 1), max(hi, 0) + 1, dtype=np.int64)
    if choice.pow2:
        v = v[(v & (v - 1)) == 0]
    if not choice.divisors and choice.step > 1:
        v = v[(v - choice.lo) % choice.step == 0]
    return v


def _rc_group(ctx, space: Space, deg: dict, collapse: bool = False):
    """(rc, recompute_layers). Block recompute: one option per layer count 1 … L/pp − 1 (or the
    space's list) — or, with `collapse`, a single slot per row standing for all of them (the search
    then picks the smallest count that fits; returns n_rl, the counts each slot stands for)."""
    n = deg["tp"].shape[0]
    m = ctx.model
    L = m.layers
    owners, rc_cols, rl_cols = [], [], []
    for code in space.recompute:
        if code != 3:
            owners.append(np.arange(n))
            rc_cols.append(np.full(n, code))
            rl_cols.append(np.zeros(n, dtype=np.int64))
    n_rl = np.zeros(n, dtype=np.int64)
    if 3 in space.recompute and not m.states_only:
        per_stage = np.where(L % deg["pp"] == 0, L // deg["pp"], 0)
        grid = _grid(space.recompute_layers, int(per_stage.max(initial=1)))
        if space.recompute_layers.values:
            mask = np.ones((n, grid.size), dtype=bool)     # explicit list: rule R1 prunes
        else:
            hi = per_stage - 1 if space.recompute_layers.hi is None else np.minimum(per_stage - 1, space.recompute_layers.hi)
            mask = grid[None, :] <= hi[:, None]
        if collapse:
            n_rl = mask.sum(axis=1).astype(np.int64)
            r = np.nonzero(n_rl > 0)[0]
            owners.append(r)
            rc_cols.append(np.full(r.size, 3))
            rl_cols.append(np.full(r.size, int(grid[0]) if grid.size else 1))
        else:
            r, k = _nz(mask)
            owners.append(r)
            rc_cols.append(np.full(r.size, 3))
            rl_cols.append(grid[k])
    owner = np.concatenate(owners)
    order = np.argsort(owner, kind="stable")
    g = _group(("rc", "recompute_layers"), owner[order],
               {"rc": np.concatenate(rc_cols)[order], "recompute_layers": np.concatenate(rl_cols)[order]}, n)
    return g, n_rl


def _batch_group(ctx, space: Space, deg: dict) -> _Group:
    """(mbs, sched, vpp, G): mbs | B/dp; pp = 1 → 1F1B; interleaved → vpp × G options."""
    n = deg["tp"].shape[0]
    B = ctx.train.global_batch
    L = ctx.model.layers
    dp, pp = deg["dp"], deg["pp"]
    per_dp = np.where(B % dp == 0, B // dp, 0)
    grid = _grid(space.mbs, int(per_dp.max(initial=1)))
    mask = (per_dp[:, None] > 0) & (per_dp[:, None] % grid[None, :] == 0)
    if not space.mbs.values and space.mbs.hi is not None:
        mask &= grid[None, :] <= space.mbs.hi
    r1, k1 = _nz(mask)                                # one row per (degree row, mbs)
    mbs = grid[k1]
    ppr = pp[r1]
    m_mb = per_dp[r1] // mbs                          # micro-batches per step
    # schedule options per (row, mbs): list of (sched, vpp, G) candidate columns + masks
    opts_s, opts_v, opts_g, opts_ok = [], [], [], []
    multi = ppr > 1
    for code in space.schedule:
        if code == 0:
            opts_s.append(0); opts_v.append(np.ones_like(ppr)); opts_g.append(ppr); opts_ok.append(np.ones_like(multi))
        elif code == 2:
            opts_s.append(2); opts_v.append(np.ones_like(ppr)); opts_g.append(ppr); opts_ok.append(multi)
        elif code == 1:
            per_stage = np.where(L % ppr == 0, L // ppr, 0) if not ctx.model.states_only else np.zeros_like(ppr)
            vgrid = _grid(space.vpp, int(per_stage.max(initial=2)))
            vgrid = vgrid[vgrid >= 2]
            for v in vgrid:
                vok = multi.copy()
                if not space.vpp.values:       # range form: divisors of the layers per stage
                    vok &= (per_stage > 0) & (per_stage % v == 0)
                    if space.vpp.hi is not None:
                        vok &= v <= space.vpp.hi
                seen = []
                for gspec in space.vpp_group:
                    G = ppr if gspec == "pp" else (m_mb if gspec == "m" else np.full_like(ppr, gspec))
                    ok = vok.copy()
                    for prev in seen:          # de-duplicate G values that coincide ("pp" == "m")
                        ok &= G != prev
                    seen.append(G)
                    opts_s.append(1); opts_v.append(np.full_like(ppr, v)); opts_g.append(G); opts_ok.append(ok)
    if not opts_s:
        opts_s, opts_v, opts_g, opts_ok = [0], [np.ones_like(ppr)], [ppr], [np.ones_like(multi)]
    # pp = 1 rows always get exactly one 1F1B option, even when the space lists no 1f1b
    has_single = any(s == 0 for s in opts_s)
    S = np.array(opts_s)
    V = np.stack(opts_v, axis=1)
    Gm = np.stack(opts_g, axis=1)
    OK = np.stack(opts_ok, axis=1).astype(bool)
    single = ~multi
    if has_single:
        first0 = opts_s.index(0)
        OK[single, :] = False
        OK[single, first0] = True
    r2, k2 = _nz(OK)
    owner = r1[r2]
    cols = {"mbs": mbs[r2], "sched": S[k2], "vpp": V[r2, k2], "G": Gm[r2, k2]}
    if not has_single:                # add 1F1B for pp = 1 rows
        sr = np.nonzero(single)[0]
        owner = np.concatenate([owner, r1[sr]])
        cols = {"mbs": np.concatenate([cols["mbs"], mbs[sr]]), "sched": np.concatenate([cols["sched"], np.zeros(sr.size, np.int64)]),
                "vpp": np.concatenate([cols["vpp"], np.ones(sr.size, np.int64)]), "G": np.concatenate([cols["G"], ppr[sr]])}
        o = np.argsort(owner, kind="stable")
        owner = owner[o]
        cols = {k: v[o] for k, v in cols.items()}
    return _group(("mbs", "sched", "vpp", "G"), owner, cols, n)


def _zero_group(ctx, space: Space, deg: dict) -> _Group:
    """(zero, reshard_after_forward, dp_replicate); dp_replicate | dp, only with ZeRO ≥ 1."""
    n = deg["tp"].shape[0]
    dp = deg["dp"]
    zopts = []
    for z in space.zero:
        for rs in (space.reshard_after_forward if z == 3 else (True,)):
            zopts.append((z, rs))
    grid = _grid(space.dp_replicate, int(dp.max(initial=1)))
    owners, zc, rc, dr = [], [], [], []
    for z, rs in zopts:
        if z == 0:
            owners.append(np.arange(n)); zc.append(np.zeros(n, np.int64)); rc.append(np.ones(n, bool)); dr.append(np.ones(n, np.int64))
            continue
        mask = dp[:, None] % grid[None, :] == 0
        if not space.dp_replicate.values and space.dp_replicate.hi is not None:
            mask &= grid[None, :] <= space.dp_replicate.hi
        r, k = _nz(mask)
        owners.append(r); zc.append(np.full(r.size, z)); rc.append(np.full(r.size, rs)); dr.append(grid[k])
    owner = np.concatenate(owners)
    o = np.argsort(owner, kind="stable")
    return _group(("zero", "reshard_after_forward", "dp_replicate"), owner[o],
                  {"zero": np.concatenate(zc)[o], "reshard_after_forward": np.concatenate(rc)[o],
                   "dp_replicate": np.concatenate(dr)[o]}, n)


def _tp_group(ctx, space: Space, deg: dict) -> _Group:
    n = deg["tp"].shape[0]
    multi = deg["tp"] > 1
    opts = []
    for sp in space.sp:
        for ov in (space.tp_overlap if sp else (False,)):
            opts.append((sp, ov))
    if (False, False) not in opts:
        opts_single = [(False, False)]
    else:
        opts_single = []
    S = np.array([o[0] for o in opts + opts_single], dtype=bool)
    O = np.array([o[1] for o in opts + opts_single], dtype=bool)
    mask = np.zeros((n, S.size), dtype=bool)
    mask[:, :len(opts)] = multi[:, None]
    # tp = 1: SP and TP overlap are meaningless → the single option (False, False)
    idx_ff = (opts + opts_single).index((False, False))
    mask[~multi, :] = False
    mask[~multi, idx_ff] = True
    r, k = _nz(mask)
    return _group(("sp", "tp_overlap"), r, {"sp": S[k], "tp_overlap": O[k]}, n)


def _off_group(ctx, space: Space, deg: dict) -> _Group:
    n = deg["tp"].shape[0]
    opts = []
    for off in space.offload:
        for phi in (space.offload_fraction if off >= 1 else (1.0,)):
            opts.append((off, phi))
    opts = list(dict.fromkeys(opts))
    r = np.repeat(np.arange(n), len(opts))
    return _group(("off", "offload_fraction"), r,
                  {"off": np.tile(np.array([o[0] for o in opts], np.int64), n),
                   "offload_fraction": np.tile(np.array([o[1] for o in opts], float), n)}, n)


def _misc_group(ctx, space: Space, deg: dict) -> _Group:
    """(rank order, dp overlap, any other Plan flags the space lists).

    Rank order: Megatron tp-cp-ep-dp-pp and torchtitan pp-dp-cp-tp both nest tp innermost, then cp,
    dp, pp; they differ only in where the expert axis is carved, so with ep = 1 they are the same
    rank-to-mesh map and only the first listed order is generated."""
    import itertools
    n = deg["tp"].shape[0]
    names = ["order", "dp_overlap"] + [k for k, _ in space.extras]
    lists = [list(space.rank_order), list(space.dp_overlap)] + [list(v) for _, v in space.extras]
    opts = list(itertools.product(*lists))
    first = space.rank_order[0]
    mask = np.ones((n, len(opts)), dtype=bool)
    single = deg["ep"] == 1
    for j, o in enumerate(opts):
        if o[0] != first:
            mask[single, j] = False
    r, k = _nz(mask)
    cols = {}
    for j, name in enumerate(names):
        cols[name] = np.array([o[j] for o in opts])[k]
    return _group(tuple(names), r, cols, n)


def _neutral_batch(deg: dict) -> PlanBatch:
    n = deg["tp"].shape[0]
    cols = dict(deg)
    cols.update(vpp=np.ones(n), zero=np.zeros(n), rc=np.zeros(n), recompute_layers=np.zeros(n),
                off=np.zeros(n), mbs=np.ones(n), sched=np.zeros(n), G=deg["pp"], order=np.zeros(n),
                dp_replicate=np.ones(n), offload_fraction=np.ones(n))
    for c in BOOL_COLS:
        cols[c] = np.ones(n, bool) if c in ("dp_overlap", "reshard_after_forward") else np.zeros(n, bool)
    return PlanBatch(**cols)


def _weighted_first_rule(ctx, batch: PlanBatch, weights: np.ndarray, counts: dict) -> np.ndarray:
    """legal_mask over degree rows, each row counting `weights[row]` plans."""
    try:
        if "weights" in inspect.signature(R.legal_mask).parameters:
            return R.legal_mask(ctx, batch, counts, weights=weights)
    except (TypeError, ValueError):  # pragma: no cover
        pass
    ok = R.legal_mask(ctx, batch)            # legality from the canonical function
    n = len(batch)
    alive = np.ones(n, dtype=bool)
    for r in R.RULES:                         # attribution: same rule objects, same order
        if not r.illegal:
            continue
        v = np.broadcast_to(np.asarray(r.violated(ctx, batch), dtype=bool), (n,))
        hit = v & alive
        if hit.any():
            counts[r.id] = counts.get(r.id, 0) + int(weights[hit].sum())
        alive &= ~v
    assert np.array_equal(alive, ok)
    return ok


def collapsible(space: Space) -> bool:
    """Block layer counts can be collapsed when they form a contiguous range (not a list, no step,
    not powers of two): the smallest count that fits is then an interval end."""
    c = space.recompute_layers
    return 3 in space.recompute and not c.values and c.step == 1 and not c.pow2


def enumerate_space(ctx, space: Space, chunk: int = DEFAULT_CHUNK, collapse_block: bool = False) -> Enumeration:
    """Build the candidate product of `space` for ctx (model, training, world).

    collapse_block: represent all block-recompute layer counts of a plan by one slot (the search
    resolves the smallest count that fits); counts (candidates, legal, pruned) stay those of the
    full product.
    """
    collapse_block = bool(collapse_block and collapsible(space) and not ctx.model.states_only)
    deg = _degree_rows(ctx, space)
    n = deg["tp"].shape[0]
    if n == 0:
        return Enumeration(ctx, space, deg, [], np.zeros(0, np.int64), np.zeros(0, bool), {}, chunk,
                           collapse_block, np.zeros(0, np.int64), 0)
    rc, n_rl = _rc_group(ctx, space, deg, collapse_block)
    # group (axis) order: small groups outside, large ones innermost (numpy broadcasts fastest when
    # the last axis is long); this order is also the canonical plan order used to break ties
    groups = [_misc_group(ctx, space, deg), _tp_group(ctx, space, deg), rc, _off_group(ctx, space, deg),
              _batch_group(ctx, space, deg), _zero_group(ctx, space, deg)]
    n_nonblock = sum(1 for c in space.recompute if c != 3)
    totals = np.ones(n, dtype=np.int64)
    for g in groups:
        c = g.counts
        if g is rc and collapse_block:
            c = c - (n_rl > 0) + n_rl
        totals *= c
    counts: dict = {}
    alive = _weighted_first_rule(ctx, _neutral_batch(deg), totals, counts)
    pruned = {k: v for k, v in counts.items() if v}
    return Enumeration(ctx, space, deg, groups, totals, alive, pruned, chunk, collapse_block, n_rl, n_nonblock,
                       groups.index(rc) + 1)


def count_candidates(ctx, space: Space) -> int:
    return enumerate_space(ctx, space).candidates
