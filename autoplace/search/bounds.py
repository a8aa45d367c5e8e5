"""Bounded exact search: a lower bound on step time per cell prunes whole state axes unevaluated.

A *cell* is one degree row with one option of every group but the last (misc, tp, rc, batch); the
last group (state: ZeRO, reshard, dp_replicate, offload, φ) holds up to a few hundred options, so a
cell stands for that many plans. For every cell the search computes a lower bound on
`evaluate(...)["step_s"]` over all its plans, evaluates the cells in increasing bound order, and
stops when the next bound exceeds the k-th best step found: every plan left is slower than the
top k, so the result is the exact top k of the full enumeration (same plans, same order, same tie
break by canonical key).

The bound (cost.step, by its definitions)
----------------------------------------
  step = S + bubble + pp_comm + dp_exposed + optimizer + offload + overhead,
  S = compute + recompute + tp + cp + ep (binding stage, m micro-batches),
  bubble = max(T_pipe − m·t_max, 0) + max(m·t_max − S, 0) ≥ T_pipe − S,
so, with dp_exposed ≥ 0,

  step ≥ T_pipe + pp_comm + overhead + optimizer + offload.                          (1)

T_pipe and pp_comm come from `stage_times` and `pipeline_time`, optimizer and offload from
`optimizer_time` and `offload_time`:
the very functions `evaluate` calls, here on smaller grids:
- P = T_pipe + pp_comm + overhead on (cell × state class): two state options are in one class
  when they agree on every state column P reads. The columns read are recorded while P is
  computed (a proxy over the plan columns); the classes start as one per row and are refined until
  P reads no state column beyond those that define them, so P is exact for every member of a class.
- Q = optimizer + offload on (row × the cell axes Q reads × state option), read columns recorded
  the same way (offload reads the micro-batch size: the batch axis is kept, the others are one).
- LB(cell) = min over classes d of [P(cell, d) + min_{s ∈ d} Q(cell, s)] ≤ step of every plan.
The block-recompute slot (the search solves its layer count from memory) is bounded at the fewest
layers: each recomputed layer adds its forward (≥ 0) to the backward, so T_pipe grows with it.

Not used where the search must see every plan: `--diverse` (best plan of each family) and a
`threshold` count; there the exhaustive search evaluates everything. Rules that couple option
groups (a runtime's capability rules) are checked on the evaluated plans only: the bound holds for
every plan, legal or not, so the top k is still exact, but the legal count is then unknown (None).
"""

from __future__ import annotations

import time

import numpy as np

from autoplace.cost import memory
from autoplace.cost import network as N
from autoplace.cost.step import offload_time, optimizer_time, overhead_time, pipeline_time, stage_times
from autoplace.search.batch import COLUMNS, EXTRA, GridBatch, PlanBatch
from autoplace.search.pruning import legal_mask

PAIR_COST = 4            # a plan evaluated on its own costs ~ this many plans of a broadcast grid
REL_MARGIN = 1e-9        # a cell is pruned only when LB·(1 − margin) > k-th best (float rounding)
# attributes a plan batch derives from its columns (batch._Base._derive) → the columns they read
DERIVED = {"hold": ("zero", "reshard_after_forward"), "p_mode": ("zero", "reshard_after_forward"),
           "g_mode": ("zero",), "o_mode": ("zero",), "etp": ("t_exp",), "dp_shard": ("dp", "dp_replicate"),
           "v": ("sched", "vpp"), "vpp_group": ("G",)}


class _Reads:
    """A plan batch that records which columns a cost function reads."""

    def __init__(self, p):
        object.__setattr__(self, "_p", p)
        object.__setattr__(self, "seen", set())

    def __getattr__(self, k):
        v = getattr(self._p, k)
        if k in ("columns", "flat", "take_flat", "sub", "with_col", "full") or (
                k not in DERIVED and k not in COLUMNS and k not in EXTRA and isinstance(v, np.ndarray)):
            self.seen.update(COLUMNS)           # whole-batch access, or an array we cannot trace: everything
        self.seen.update(DERIVED.get(k, (k,)))
        return v


def pipeline_bound(ctx, hw, p):
    """T_pipe + pp_comm + overhead (the schedule part of bound (1)), broadcast over p."""
    hwv = N.hardware_view(ctx, hw)
    sts, _, _ = stage_times(ctx, hwv, p)
    pl = pipeline_time(ctx, hwv, p, sts)
    return pl["T_pipe"] + pl["pp_comm"] + overhead_time(ctx, hwv, p)


def state_bound(ctx, hw, p):
    """optimizer + offload (the state part of bound (1)), broadcast over p."""
    hwv = N.hardware_view(ctx, hw)
    return optimizer_time(ctx, hwv, p) + offload_time(ctx, hwv, p)


def plan_lower_bound(ctx, hw, p):
    """Bound (1) per plan: T_pipe + pp_comm + overhead + optimizer + offload ≤ evaluate(p)["step_s"]."""
    return pipeline_bound(ctx, hw, p) + state_bound(ctx, hw, p)


class _Spec:
    """Degree rows stacked on axis 0, every group axis padded to the widest row (a padded position
    repeats the row's option 0; `valid` marks the real cells)."""

    def __init__(self, rows, cnt, n_rl, bslot, starts):
        self.rows = np.asarray(rows, dtype=np.int64)
        self.cnt = np.asarray(cnt, dtype=np.int64).reshape(self.rows.size, -1)    # rows × groups option counts
        self.sig = tuple(int(c) for c in self.cnt.max(axis=0))
        self.n_rl = np.asarray(n_rl, dtype=np.int64)        # plans the block slot stands for, per row
        self.bslot = np.asarray(bslot, dtype=np.int64)      # its option index on the rc axis (−1: none)
        self.starts = np.asarray(starts, dtype=np.int64)    # canonical key of each row's first plan
        self.S = self.sig[-1]
        self.s_row = self.cnt[:, -1]
        self.cells_per_row = int(np.prod(self.sig[:-1])) if len(self.sig) > 1 else 1

    def padded(self, ax: int, n: int | None = None) -> np.ndarray:
        """rows × n option indices on group axis `ax`: the row's options, then option 0 repeated."""
        a = np.arange(self.sig[ax] if n is None else n)[None, :]
        return np.where(a < self.cnt[:, ax:ax + 1], a, 0)

    def all_states(self) -> np.ndarray:
        return self.padded(len(self.sig) - 1)

    def valid(self) -> np.ndarray:
        """Real (unpadded) cells, shape rows × cell axes."""
        ng = len(self.sig)
        ok = np.ones((self.rows.size,) + self.sig[:-1], bool)
        for ax in range(ng - 1):
            sh = [self.rows.size] + [1] * (ng - 1)
            sh[ax + 1] = self.sig[ax]
            ok &= (np.arange(self.sig[ax])[None, :] < self.cnt[:, ax:ax + 1]).reshape(sh)
        return ok

    def reduced(self, keep: set) -> "_Spec":
        """The same rows with every cell axis not in `keep` cut to its first option (no block slot)."""
        cnt = self.cnt.copy()
        for ax in range(cnt.shape[1] - 1):
            if ax not in keep:
                cnt[:, ax] = 1
        return _Spec(self.rows, cnt, np.zeros_like(self.n_rl), np.full_like(self.bslot, -1), self.starts)


def _specs(en, max_cells: int) -> list[_Spec]:
    """Rows with plans, sorted by their option counts (little padding), stacked while the padded
    cell grid stays within max_cells."""
    from autoplace.search.blocks import row_block_info
    tot = en.totals_eval
    rows = np.nonzero(tot > 0)[0]
    if rows.size == 0:
        return []
    ends = np.cumsum(tot[rows])
    start = dict(zip(rows.tolist(), (ends - tot[rows]).tolist()))
    info = {d: (en.counts_eval(d), row_block_info(en, d)) for d in rows.tolist()}
    order = sorted(rows.tolist(), key=lambda d: (info[d][0][:-1], info[d][1]))
    out, cur, mx = [], [], None

    def flush():
        if cur:
            out.append(_Spec(cur, [info[d][0] for d in cur], [info[d][1][0] for d in cur],
                             [info[d][1][1] for d in cur], [start[d] for d in cur]))

    for d in order:
        c = np.array(info[d][0][:-1], dtype=np.int64)
        m2 = c if mx is None else np.maximum(mx, c)
        if cur and (len(cur) + 1) * int(np.prod(m2)) > max_cells:
            flush()
            cur, m2 = [], c
        cur.append(d)
        mx = m2
    flush()
    return out


def _cell_grid(en, spec: _Spec, state_idx: np.ndarray, space) -> GridBatch:
    """Grid (rows, misc, tp, rc, batch, D): every cell of the spec × the state options `state_idx`
    (rows × D option indices); the block-recompute slot at its fewest layers."""
    ng = len(en.groups)
    mrows = spec.rows
    nr = mrows.size
    D = state_idx.shape[1]
    shape = [nr] + list(spec.sig[:-1]) + [D]
    cols = {c: arr[mrows].reshape((-1,) + (1,) * ng) for c, arr in en.deg.items()}
    for ax, g in enumerate(en.groups[:-1]):
        idx = g.offsets[mrows][:, None] + spec.padded(ax)
        sh = [nr] + [1] * ng
        sh[ax + 1] = spec.sig[ax]
        for name, arr in g.cols.items():
            cols[name] = arr[idx].reshape(sh)
    g = en.groups[-1]
    idx = g.offsets[mrows][:, None] + state_idx
    sh = [nr] + [1] * (ng - 1) + [D]
    for name, arr in g.cols.items():
        cols[name] = arr[idx].reshape(sh)
    if np.any((spec.bslot >= 0) & (spec.n_rl > 0)):
        ra = en.rc_axis
        sh = [nr] + [1] * ng
        sh[ra] = spec.sig[ra - 1]
        slot = ((np.arange(spec.sig[ra - 1])[None, :] == spec.bslot[:, None]) & (spec.n_rl[:, None] > 0)).reshape(sh)
        lo = max(space.recompute_layers.lo, 1)
        cols["recompute_layers"] = np.where(slot, lo, cols["recompute_layers"])
    return GridBatch(tuple(shape), **cols)


def _classes(en, spec: _Spec, read: set) -> tuple[np.ndarray, np.ndarray]:
    """State classes per row: (rep, inv) — rep (rows × Dmax) the first option of each class (padded
    with class 0), inv (rows × S) the class of every option. Options agree on the columns `read`."""
    g = en.groups[-1]
    nr, S = spec.rows.size, spec.S
    idx = g.offsets[spec.rows][:, None] + spec.all_states()
    code = np.zeros((nr, S), dtype=np.int64)
    for name in sorted(read):
        _, c = np.unique(g.cols[name][idx], return_inverse=True)
        c = c.reshape(nr, S)
        code = code * (int(c.max()) + 1) + c
    order = np.argsort(code, axis=1, kind="stable")
    sc = np.take_along_axis(code, order, axis=1)
    new = np.concatenate([np.ones((nr, 1), bool), sc[:, 1:] != sc[:, :-1]], axis=1)
    rank = np.cumsum(new, axis=1) - 1
    inv = np.empty((nr, S), dtype=np.int64)
    np.put_along_axis(inv, order, rank, axis=1)
    Dmax = int(rank.max()) + 1
    rep = np.zeros((nr, Dmax), dtype=np.int64)
    # first option (lowest index) of each class: the stable sort puts it first among its equals
    r_i, j_i = np.nonzero(new)
    rep[r_i, rank[r_i, j_i]] = order[r_i, j_i]
    filled = np.zeros((nr, Dmax), bool)
    filled[r_i, rank[r_i, j_i]] = True
    rep = np.where(filled, rep, rep[:, :1])
    return rep, inv, filled


def cell_bounds(ctx, hw, en, spec: _Spec, space, read: set | None = None, keep: set | None = None):
    """(LB, valid) per cell of `spec` (shape rows × misc × tp × rc × batch; valid: not padding) —
    see the module docstring.
    `read`: state columns P is known to read, `keep`: cell axes Q is known to read (from earlier
    specs; both updated in place — a larger set only refines, so the bound stays exact)."""
    state_cols = set(en.groups[-1].cols)
    nr = spec.rows.size
    read = set() if read is None else read
    for _ in range(len(state_cols) + 1):
        rep, inv, filled = _classes(en, spec, read)
        grid = _cell_grid(en, spec, rep, space)
        proxy = _Reads(grid)
        with np.errstate(all="ignore"):
            P = np.broadcast_to(pipeline_bound(ctx, hw, proxy), grid.shape)
        more = (proxy.seen & state_cols) - read
        if not more:
            break
        read |= more
    # Q per (row, state option): optimizer + offload, on the cell axes it reads (min over them)
    ng = len(en.groups)
    keep = set() if keep is None else keep
    allopt = spec.all_states()
    for _ in range(ng):
        q_grid = _cell_grid(en, spec.reduced(keep), allopt, space)
        proxy = _Reads(q_grid)
        with np.errstate(all="ignore"):
            Q = np.broadcast_to(state_bound(ctx, hw, proxy), q_grid.shape)
        more = {a for a, g in enumerate(en.groups[:-1]) if proxy.seen & set(g.cols)} - keep
        if not more:
            break
        keep |= more
    if "recompute_layers" in proxy.seen:
        Q = np.zeros_like(Q)        # the slot's layer count is solved later: no bound from Q
    Dmax = rep.shape[1]
    Qd = np.full(Q.shape[:-1] + (Dmax,), np.inf)
    cls = inv.reshape((nr,) + (1,) * (ng - 1) + (spec.S,))
    for d in range(Dmax):
        Qd[..., d] = np.where(cls == d, Q, np.inf).min(axis=-1)
    Qd = np.where(filled.reshape((nr,) + (1,) * (ng - 1) + (Dmax,)), Qd, np.inf)
    lb = P + Qd
    # kept for the per-plan bound at evaluation time: P per class, the class of each option, Q
    spec.P, spec.inv, spec.Q, spec.q_axes = np.ascontiguousarray(P), inv, np.ascontiguousarray(Q), set(keep)
    with np.errstate(invalid="ignore"):
        return np.nan_to_num(lb, nan=-np.inf).min(axis=-1), spec.valid()


def _plan_bounds(spec: _Spec, ix: tuple, S: int) -> np.ndarray:
    """Bound (1) per plan of the gathered cells `ix` (spec cell indices) × their S state options:
    P of the option's class + Q of the option (cells × S)."""
    r = ix[0]
    Pc = spec.P[ix]                                              # cells × Dmax
    P = np.take_along_axis(Pc, spec.inv[r, :S], axis=1)
    qix = (r,) + tuple(ix[a + 1] if a in spec.q_axes else np.zeros_like(r) for a in range(len(ix) - 1))
    return P + spec.Q[qix][:, :S]


def _gather(en, spec: _Spec, flat: np.ndarray, S: int):
    """(grid, keys, slot, r): the cells `flat` (indices into the spec's padded cell array, all real,
    all of rows with S state options) × their state options as a (cells × S) grid; keys (flat, C
    order); slot marks block-recompute-slot cells; r their row in the spec."""
    cshape = (spec.rows.size,) + spec.sig[:-1]
    ix = np.unravel_index(flat, cshape)
    r = ix[0]
    mrows = spec.rows[r]
    cols = {c: arr[mrows][:, None] for c, arr in en.deg.items()}
    local = np.zeros(flat.size, np.int64)
    for ax, g in enumerate(en.groups[:-1]):
        pos = g.offsets[mrows] + ix[ax + 1]
        for name, arr in g.cols.items():
            cols[name] = arr[pos][:, None]
        local = local * spec.cnt[r, ax] + ix[ax + 1]       # mixed radix over the row's own counts
    g = en.groups[-1]
    idx = g.offsets[mrows][:, None] + np.arange(S)[None, :]
    for name, arr in g.cols.items():
        cols[name] = arr[idx]
    grid = GridBatch((flat.size, S), **cols)
    keys = (spec.starts[r] + local * S)[:, None] + np.arange(S)[None, :]
    slot = ((ix[en.rc_axis] == spec.bslot[r]) & (spec.n_rl[r] > 0))[:, None]
    return grid, keys.reshape(-1), slot, r


def _take_rows(g: GridBatch, sel: np.ndarray) -> GridBatch:
    """Rows `sel` (axis 0) of a 2-D grid."""
    cols = {c: (a[sel] if a.ndim == 2 and a.shape[0] > 1 else a) for c, a in g.columns().items()}
    return GridBatch((sel.size, g.shape[1]), **cols)


def _pairs(g: GridBatch, ci: np.ndarray, si: np.ndarray) -> GridBatch:
    """The plans (ci, si) of a (cells × S) grid as a (plans × 1) grid."""
    cols = {c: np.broadcast_to(a, g.shape)[ci, si][:, None] if np.ndim(a) == 2 else a
            for c, a in g.columns().items()}
    return GridBatch((ci.size, 1), **cols)


def _evaluate_cells(ctx, hw, space, headroom, en, spec, flat, S, rules=None, kth=np.inf):
    """evaluate() on the gathered cells; the block-recompute slot gets the fewest layers that fit
    (as `exhaustive._block_layers`, checked against evaluate's own `fits`). rules: check them first
    and leave out cells without a legal plan. kth: the k-th best step so far — options whose own
    bound exceeds it are left out too. Returns (grid, keys, ev, legal, wl, wf, plans left out as
    illegal, plans left out by the per-plan bound)."""
    g, keys, slot, r = _gather(en, spec, flat, S)
    legal = np.ones(g.size, bool)
    skipped = 0
    if rules is not None:
        legal = legal_mask(ctx, g, rules).reshape(g.shape)
        live = legal.any(axis=1)
        if not live.all():
            idx = np.nonzero(live)[0]
            skipped = int((~live).sum()) * S
            g = _take_rows(g, idx)
            keys = keys.reshape(-1, S)[idx].reshape(-1)
            slot, r, legal = slot[idx], r[idx], legal[idx]
        legal = legal.reshape(-1)
    if np.isfinite(kth) and g.size:
        # per-plan bound: of a cell that may hold a top plan, evaluate only the options that may
        ix = np.unravel_index(flat, (spec.rows.size,) + spec.sig[:-1])
        if rules is not None and skipped:
            ix = tuple(a[idx] for a in ix)
        with np.errstate(invalid="ignore"):
            lbp = _plan_bounds(spec, ix, g.shape[1])
        want = ~(lbp * (1.0 - REL_MARGIN) > kth)
        if not want.all():
            rows, opts = np.nonzero(want.any(axis=1))[0], np.nonzero(want.any(axis=0))[0]
            n_pairs = int(want.sum())
            if n_pairs * PAIR_COST < rows.size * opts.size:
                # scattered: the wanted plans one by one (one evaluation with the other groups')
                ci, si = np.nonzero(want)
                g = _pairs(g, ci, si)
                keys = keys.reshape(-1, S)[ci, si]
                slot, r = slot[ci], r[ci]
                legal = legal.reshape(-1, S)[ci, si]
                return (g, keys, slot, spec.n_rl[r], legal), skipped, int(want.size - n_pairs)
            # dense: the wanted cells × the wanted options, still broadcast
            cols = {c: (a[rows][:, opts] if a.shape[1] > 1 else a[rows]) if np.ndim(a) == 2 else a
                    for c, a in g.columns().items()}
            g = GridBatch((rows.size, opts.size), **cols)
            keys = keys.reshape(-1, S)[rows][:, opts].reshape(-1)
            slot, r = slot[rows], r[rows]
            legal = legal.reshape(-1, S)[rows][:, opts].reshape(-1)
            return (g, keys, slot, spec.n_rl[r], legal), skipped, int(want.size - g.size)
    return (g, keys, slot, spec.n_rl[r], legal), skipped, 0


def _concat(parts: list) -> tuple:
    """Selections (grid of plans × 1, keys, slot, n_rl, legal) of several cell groups as one."""
    cols = {c: np.concatenate([np.broadcast_to(p[0].columns()[c], p[0].shape).reshape(-1, 1) for p in parts])
            for c in parts[0][0].columns()}
    n = sum(p[0].size for p in parts)
    return (GridBatch((n, 1), **cols), np.concatenate([p[1] for p in parts]),
            np.concatenate([np.broadcast_to(p[2], p[0].shape).reshape(-1, 1) for p in parts]),
            np.concatenate([np.broadcast_to(np.asarray(p[3])[:, None], p[0].shape).reshape(-1) for p in parts]),
            np.concatenate([p[4] for p in parts]))


def _evaluate_flat(ctx, hw, space, headroom, g, keys, slot, n_rl, legal):
    """evaluate() on a (rows × S) grid with the block-slot layer count solved from memory (n_rl:
    the plans the slot stands for, per grid row). Returns (grid, ev, wl, wf): the plans each evaluated
    plan stands for, legal and fitting, with the grid (its block-slot layer counts solved)."""
    from autoplace.search.topk import evaluate_block
    if g.size == 0:
        return g, None, None, None
    hi = None
    if slot.any():
        lo = max(space.recompute_layers.lo, 1)
        hi = (lo + n_rl - 1)[:, None]                    # per row (only slot rows read it)
        sel = np.nonzero(slot[:, 0])[0]
        gs = _take_rows(g, sel)
        limit = memory.memory_limit(hw, headroom)
        need = None
        with np.errstate(all="ignore"):
            for i in (0, gs.pp - 1):
                M0, M1 = (np.broadcast_to(memory.stage_memory(ctx, hw, gs.with_col(
                    recompute_layers=np.full((1, 1), n, np.int64)), i)["total"], gs.shape) for n in (0, 1))
                slope = M0 - M1
                ri = np.where(M0 <= limit, 0.0,
                              np.where(slope > 0, np.ceil((M0 - limit) / np.where(slope > 0, slope, 1.0)), np.inf))
                need = ri if need is None else np.maximum(need, ri)
        need = np.maximum(need, lo)
        rl_col = np.array(np.broadcast_to(g.recompute_layers, g.shape))
        rl_col[sel] = np.where(need <= hi[sel], need, hi[sel]).astype(np.int64)
        g = g.with_col(recompute_layers=rl_col)
    ev = evaluate_block(ctx, hw, g, headroom)
    if hi is not None:
        for _ in range(3):
            fits = ev["fits"].astype(bool).reshape(g.shape)
            rl_col = np.broadcast_to(g.recompute_layers, g.shape)
            bad = slot & ~fits & (rl_col < hi)
            if not bad.any():
                break
            g = g.with_col(recompute_layers=np.where(bad, rl_col + 1, rl_col))
            ev = evaluate_block(ctx, hw, g, headroom)
    # plans each evaluated plan stands for: the block slot all its layer counts (legal), of which
    # hi − r* + 1 fit
    wl = np.broadcast_to(np.where(slot, n_rl[:, None], 1), g.shape).reshape(-1)
    wf = wl if hi is None else np.broadcast_to(np.where(slot, hi - np.broadcast_to(g.recompute_layers, g.shape) + 1, 1),
                                               g.shape).reshape(-1)
    return g, ev, wl, wf


def run_bounded(ctx, hw, space, headroom: float, top_k: int, en, chunk: int, progress=None,
                separable: bool = True) -> dict:
    """Exact top-k of `en` by bound-ordered evaluation; the result dict of
    `exhaustive.run_exhaustive` with stats `evaluated` (plans the cost model evaluated) and
    `pruned_by_bound` (plans never evaluated: their cell's bound exceeds the k-th best step).
    separable=False (rules that read two option groups): evaluated plans get the second legality
    pass; `legal` is then None (plans the bound rules out are not checked)."""
    from autoplace.search.topk import TopK, resolved_ctx
    t0 = time.perf_counter()
    ctx = resolved_ctx(ctx)
    k = max(1, int(top_k))
    specs = _specs(en, max(1, chunk // 2))
    lbs, sid, cid = [], [], []
    read: set = set()
    keep: set = set()
    ws = []
    for i, sp in enumerate(specs):
        lb, ok = cell_bounds(ctx, hw, en, sp, space, read, keep)
        ok = ok.reshape(-1)
        c = np.nonzero(ok)[0]
        lbs.append(lb.reshape(-1)[c])
        sid.append(np.full(c.size, i, np.int64))
        cid.append(c)
        ws.append(np.repeat(sp.s_row, sp.cells_per_row)[c])
    t_bound = time.perf_counter() - t0
    top = TopK(k)
    total = en.evaluated
    evaluated = legal_n = feasible_n = skipped = plan_bounded = 0
    if lbs:
        lb, sid, cid = np.concatenate(lbs), np.concatenate(sid), np.concatenate(cid)
        weight = np.concatenate(ws)
        order = np.argsort(lb, kind="stable")
        lb, sid, cid, weight = lb[order], sid[order], cid[order], weight[order]
        csum = np.cumsum(weight)
        pos, n = 0, lb.size
        small = max(1, chunk // 16)
        while pos < n:
            kth = top.steps[k - 1] if top.steps.size >= k else np.inf
            if lb[pos] * (1.0 - REL_MARGIN) > kth:
                break
            # the next ~chunk plans, cut where the bound passes the k-th best
            # a small first pass sets the incumbent; while nothing fits yet (no incumbent, nothing to
            # prune) the passes double back to the full chunk, not thousands of small ones
            size = chunk if np.isfinite(kth) else small
            small = min(chunk, 2 * small)
            end = int(np.searchsorted(csum, (csum[pos - 1] if pos else 0) + size, side="right"))
            end = max(end, pos + 1)
            if np.isfinite(kth):
                end = min(end, int(np.searchsorted(lb, kth / (1.0 - REL_MARGIN), side="right")))
                end = max(end, pos + 1)
            s_b, c_b, w_b = sid[pos:end], cid[pos:end], weight[pos:end]
            kth = top.steps[k - 1] if top.steps.size >= k else np.inf
            sels = []
            for s, S in sorted(set(zip(s_b.tolist(), w_b.tolist()))):
                sel = (s_b == s) & (w_b == S)
                # rules that read two option groups: the second legality pass, on these plans only
                one, sk, bo = _evaluate_cells(ctx, hw, space, headroom, en, specs[s], np.sort(c_b[sel]), S,
                                              None if separable else en.rules, kth)
                skipped += sk
                plan_bounded += bo
                if one[0].size:
                    sels.append(one)
            flat_sels = [x for x in sels if x[0].shape[1] == 1]
            if len(flat_sels) > 1:           # the scattered plans of every group: one evaluation
                sels = [x for x in sels if x[0].shape[1] > 1] + [_concat(flat_sels)]
            for g, keys, slot, n_rl, legal in sels:
                g, ev, wl, wf = _evaluate_flat(ctx, hw, space, headroom, g, keys, slot, n_rl, legal)
                step, fits = ev["step_s"], ev["fits"].astype(bool)
                feasible = legal & fits & np.isfinite(step)
                with np.errstate(all="ignore"):
                    ratio = ev["peak_bytes"] / ev["limit_bytes"]
                top.offer(g, step, keys, feasible, legal & np.isfinite(ratio), ratio)
                evaluated += g.size
                legal_n += int(wl[legal].sum())
                feasible_n += int(wf[feasible].sum())
            pos = end
            if progress is not None:
                progress(min(total, evaluated + skipped + (total - evaluated - skipped) * pos // n), total)
    if progress is not None:
        progress(total, total)
    stats = {
        "candidates": en.candidates,
        # every plan evaluated (nothing fits, or top_k above the plans that fit): exact counts
        "legal": legal_n if evaluated + skipped == total else (int(en.totals_kept.sum()) if separable else None),
        "feasible": feasible_n if evaluated + skipped == total else None,
        "pruned_by_rule": dict(sorted(en.pruned_by_rule.items())),
        "evaluated": evaluated,
        "pruned_by_bound": total - evaluated - skipped,
        **({"illegal_not_evaluated": skipped} if skipped else {}),
        "bound_seconds": t_bound,
        "workers": 1,
        "method": "exhaustive",
        "optimal": True,
        "seconds": time.perf_counter() - t0,
    }
    return {"top": top.batch if top.batch is not None else PlanBatch.empty(), "steps": top.steps,
            "stats": stats, "closest": top.close_batch, "closest_ratio": top.close_ratio, "enumeration": en}
