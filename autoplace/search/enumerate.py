"""Enumerate the legal uniform plans of a search space (placement_semantics.md §4.7).

How it is vectorized
--------------------
1. **Degree rows.** Every (tp, pp, cp, ep, etp) with dp = W/(tp·pp·cp) an integer (rule C2 by
   construction), from divisor lists: a few hundred rows at most.
2. **Option groups.** The other knobs fall into groups whose allowed values depend on the degree row
   but not on each other: (rank order, dp overlap, flags), (sp, tp_overlap), (recompute, block
   layers), (mbs, schedule, vpp, G), (zero, reshard, dp_replicate, offload, φ). For every group and
   degree row the options are built with numpy masks (mbs | B/dp, G ∈ {pp, m}, block layers
   1 … L/pp − 1, dp_replicate | dp, SP only for tp > 1, φ only with offload, …) and stored as flat
   columns with per-row offsets. A degree row has Π_g count_g plans: counted, not materialized.
3. **Rules, early.** `rules.legal_mask` runs on the degree rows with every other knob at its most
   permissive value, then on each group's options with the other groups at those values; an option
   (or row) that a rule rejects there is rejected for every plan it appears in, so it is dropped
   with its whole product and its plans are charged to that rule (`pruned_by_rule`, weighted by the
   plans it stands for). This keeps the legal set exact (tests compare with a plan-by-plan `check`
   loop) while nothing illegal is ever evaluated. It relies on the rules being monotone in that
   sense — true of every rule in `RULES` today: a rule that couples two option groups belongs in one
   group (offload and ZeRO share a group for K2).
4. **Blocks.** Degree rows with the same option counts are stacked into a `GridBatch` of shape
   (rows, count_1, …, count_G) whose columns vary along one axis each, so the cost model evaluates
   it by broadcasting; a block holds at most `chunk` plans (a large row is split along its largest
   axis), bounding memory at any GPU count. Each block still goes through `legal_mask` (the
   canonical check; it prunes nothing unless a rule couples groups). `chunks()` instead decodes
   plan j in mixed radix into flat `PlanBatch`es (every plan, for tests and brute force).

Canonical forms (a knob that means nothing in a setting is fixed, so no plan appears twice):
pp = 1 → 1F1B; vpp and G only with the interleaved schedule; block layers only with `block`;
dp_replicate = 1 without ZeRO; reshard only with ZeRO-3; SP only with tp > 1; TP overlap only with
SP; φ only with offload; ep = 1 and etp = tp on dense models; one rank order when ep = 1 (both
orders nest tp, cp, dp, pp identically and differ only in where experts are carved).
"""

from __future__ import annotations

import inspect
import itertools
from dataclasses import dataclass, field

import numpy as np

from autoplace.placement import rules as R
from autoplace.search.batch import GridBatch, PlanBatch
from autoplace.search.space import Space

DEFAULT_CHUNK = 1 << 17


def _resolve(choice, bound: int) -> list[int]:
    """Values of a degree Choice restricted to divisors of `bound`."""
    return [v for v in choice.resolve(bound) if isinstance(v, int) and bound % v == 0]


# ---- option groups --------------------------------------------------------------------------------
@dataclass
class _Group:
    name: str
    owner: np.ndarray           # degree row of each option (sorted)
    cols: dict                  # column name → flat array (one entry per option)
    w: np.ndarray               # plans each option stands for (1; the collapsed block slot: n_rl)
    n_rows: int

    def __post_init__(self):
        self.owner = np.asarray(self.owner, dtype=np.int64)
        self.w = np.asarray(self.w, dtype=np.int64)
        self.counts = np.bincount(self.owner, minlength=self.n_rows).astype(np.int64)
        self.full = np.bincount(self.owner, weights=self.w, minlength=self.n_rows).astype(np.int64)
        self.offsets = np.concatenate([[0], np.cumsum(self.counts)[:-1]]).astype(np.int64)

    def keep(self, mask: np.ndarray) -> "_Group":
        return _Group(self.name, self.owner[mask], {k: v[mask] for k, v in self.cols.items()},
                      self.w[mask], self.n_rows)


def _mk(name, owner, cols, n, w=None) -> _Group:
    owner = np.asarray(owner, dtype=np.int64)
    o = np.argsort(owner, kind="stable")
    w = np.ones(owner.size, np.int64) if w is None else np.asarray(w, np.int64)
    return _Group(name, owner[o], {k: np.asarray(v)[o] for k, v in cols.items()}, w[o], n)


def _grid(choice, max_bound: int) -> np.ndarray:
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


def _degree_rows(ctx, space: Space) -> dict:
    W = ctx.world
    m = ctx.model
    moe = (not m.states_only) and m.is_moe
    rows = []
    for tp in _resolve(space.tp, W):
        for pp in _resolve(space.pp, W // tp):
            for cp in _resolve(space.cp, W // (tp * pp)):
                dp = W // (tp * pp * cp)
                for ep in (_resolve(space.ep, W // pp) if moe else [1]):
                    for etp in (sorted({tp if e == "tp" else int(e) for e in space.etp}) if moe else [tp]):
                        rows.append((tp, pp, cp, dp, ep, etp))
    a = np.array(rows, dtype=np.int64).reshape(-1, 6)
    return {"tp": a[:, 0], "pp": a[:, 1], "cp": a[:, 2], "dp": a[:, 3], "ep": a[:, 4], "t_exp": a[:, 5]}


def _misc_group(ctx, space: Space, deg: dict) -> _Group:
    """(rank order, dp overlap, other Plan flags the space lists); one order when ep = 1."""
    n = deg["tp"].shape[0]
    names = ["order", "dp_overlap"] + [k for k, _ in space.extras]
    lists = [list(space.rank_order), list(space.dp_overlap)] + [list(v) for _, v in space.extras]
    opts = list(itertools.product(*lists))
    mask = np.ones((n, len(opts)), dtype=bool)
    single = deg["ep"] == 1
    for j, o in enumerate(opts):
        if o[0] != space.rank_order[0]:
            mask[single, j] = False
    r, k = np.nonzero(mask)
    return _mk("misc", r, {name: np.array([o[j] for o in opts])[k] for j, name in enumerate(names)}, n)


def _tp_group(ctx, space: Space, deg: dict) -> _Group:
    """(sp, tp_overlap): only (False, False) when tp = 1; overlap only with SP."""
    n = deg["tp"].shape[0]
    opts = [(sp, ov) for sp in space.sp for ov in (space.tp_overlap if sp else (False,))]
    if (False, False) not in opts:
        opts.append((False, False))
        listed = len(opts) - 1
    else:
        listed = len(opts)
    multi = deg["tp"] > 1
    mask = np.zeros((n, len(opts)), dtype=bool)
    mask[:, :listed] = multi[:, None]
    mask[~multi, opts.index((False, False))] = True
    r, k = np.nonzero(mask)
    S = np.array([o[0] for o in opts], dtype=bool)
    O = np.array([o[1] for o in opts], dtype=bool)
    return _mk("tp", r, {"sp": S[k], "tp_overlap": O[k]}, n)


def _rc_group(ctx, space: Space, deg: dict, collapse: bool = False) -> _Group:
    """(rc, recompute_layers). Block recompute: one option per layer count 1 … L/pp − 1 (or the
    space's list) — or, with `collapse`, one slot per row standing for all of them (w = their
    number); the search then solves for the smallest count that fits."""
    n = deg["tp"].shape[0]
    m = ctx.model
    L = m.layers
    owners, rc_c, rl_c, w_c = [], [], [], []
    for code in space.recompute:
        if code != 3:
            owners.append(np.arange(n)); rc_c.append(np.full(n, code)); rl_c.append(np.zeros(n, np.int64))
            w_c.append(np.ones(n, np.int64))
    if 3 in space.recompute and not m.states_only:
        per_stage = np.where(L % deg["pp"] == 0, L // deg["pp"], 0)
        grid = _grid(space.recompute_layers, int(per_stage.max(initial=1)))
        if space.recompute_layers.values:
            mask = np.ones((n, grid.size), dtype=bool)     # an explicit list: rule R1 prunes
        else:
            hi = per_stage - 1 if space.recompute_layers.hi is None else \
                np.minimum(per_stage - 1, space.recompute_layers.hi)
            mask = grid[None, :] <= hi[:, None]
        if collapse:
            n_rl = mask.sum(axis=1).astype(np.int64)
            r = np.nonzero(n_rl > 0)[0]
            owners.append(r); rc_c.append(np.full(r.size, 3)); rl_c.append(np.full(r.size, int(grid[0]) if grid.size else 1))
            w_c.append(n_rl[r])
        else:
            r, k = np.nonzero(mask)
            owners.append(r); rc_c.append(np.full(r.size, 3)); rl_c.append(grid[k]); w_c.append(np.ones(r.size, np.int64))
    return _mk("rc", np.concatenate(owners), {"rc": np.concatenate(rc_c), "recompute_layers": np.concatenate(rl_c)},
               n, np.concatenate(w_c))


def _batch_group(ctx, space: Space, deg: dict) -> _Group:
    """(mbs, sched, vpp, G): mbs | B/dp; pp = 1 → 1F1B only; interleaved → vpp × G options."""
    n = deg["tp"].shape[0]
    B = ctx.train.global_batch
    L = ctx.model.layers
    dp, pp = deg["dp"], deg["pp"]
    per_dp = np.where(B % dp == 0, B // dp, 0)
    grid = _grid(space.mbs, int(per_dp.max(initial=1)))
    mask = (per_dp[:, None] > 0) & (per_dp[:, None] % np.maximum(grid[None, :], 1) == 0)
    r1, k1 = np.nonzero(mask)                          # one entry per (degree row, mbs)
    mbs = grid[k1]
    ppr = pp[r1]
    m_mb = np.where(mbs > 0, per_dp[r1] // np.maximum(mbs, 1), 0)
    multi = ppr > 1
    ones = np.ones_like(ppr)
    S, V, Gs, OK = [], [], [], []
    for code in space.schedule:
        if code in (0, 2):
            S.append(code); V.append(ones); Gs.append(ppr); OK.append(multi if code == 2 else np.ones_like(multi))
        elif code == 1:
            per_stage = np.where(L % ppr == 0, L // ppr, 0) if not ctx.model.states_only else np.zeros_like(ppr)
            vgrid = _grid(space.vpp, int(per_stage.max(initial=2)))
            for v in vgrid[vgrid >= 2]:
                vok = multi.copy()
                if not space.vpp.values:        # range form: divisors of the layers per stage
                    vok &= (per_stage > 0) & (per_stage % v == 0)
                seen = []
                for gspec in space.vpp_group:
                    G = ppr if gspec == "pp" else (m_mb if gspec == "m" else (
                        m_mb // np.maximum(1, m_mb // ppr) if gspec == "rounds" else np.full_like(ppr, gspec)))
                    ok = vok.copy()
                    for prev in seen:           # "pp" and "m" may coincide
                        ok &= G != prev
                    seen.append(G)
                    S.append(1); V.append(np.full_like(ppr, v)); Gs.append(G); OK.append(ok)
    if 0 not in S:                               # pp = 1 always runs (as) 1F1B
        S.append(0); V.append(ones); Gs.append(ppr); OK.append(~multi)
    S = np.array(S)
    V, Gm, OKm = np.stack(V, 1), np.stack(Gs, 1), np.stack(OK, 1).astype(bool)
    first0 = int(np.nonzero(S == 0)[0][0])
    OKm[~multi, :] = False
    OKm[~multi, first0] = True
    r2, k2 = np.nonzero(OKm)
    return _mk("batch", r1[r2], {"mbs": mbs[r2], "sched": S[k2], "vpp": V[r2, k2], "G": Gm[r2, k2]}, n)


def _state_group(ctx, space: Space, deg: dict) -> _Group:
    """(zero, reshard, dp_replicate, offload, φ): dp_replicate | dp and > 1 only with ZeRO ≥ 1;
    reshard only with ZeRO-3; φ only with offload. (One group: rule K2 couples offload and ZeRO.)"""
    n = deg["tp"].shape[0]
    dp = deg["dp"]
    zopts = [(z, rs) for z in space.zero for rs in (space.reshard_after_forward if z == 3 else (True,))]
    oopts = list(dict.fromkeys((o, phi) for o in space.offload
                               for phi in (space.offload_fraction if o >= 1 else (1.0,))))
    rgrid = _grid(space.dp_replicate, int(dp.max(initial=1)))
    rmask = dp[:, None] % rgrid[None, :] == 0
    own, cz, crs, cr, co, cphi = [], [], [], [], [], []
    for z, rs in zopts:
        if z == 0:
            rr = np.arange(n)
            rv = np.ones(n, np.int64)
        else:
            rr, kk = np.nonzero(rmask)
            rv = rgrid[kk]
        for o, phi in oopts:
            own.append(rr); cz.append(np.full(rr.size, z)); crs.append(np.full(rr.size, rs)); cr.append(rv)
            co.append(np.full(rr.size, o)); cphi.append(np.full(rr.size, phi))
    return _mk("state", np.concatenate(own),
               {"zero": np.concatenate(cz), "reshard_after_forward": np.concatenate(crs),
                "dp_replicate": np.concatenate(cr), "off": np.concatenate(co),
                "offload_fraction": np.concatenate(cphi)}, n)


# ---- rules ---------------------------------------------------------------------------------------
NEUTRAL = {"vpp": 1, "zero": 0, "rc": 0, "recompute_layers": 0, "off": 0, "mbs": 1, "sched": 0,
           "order": 0, "dp_replicate": 1, "offload_fraction": 1.0, "sp": False, "tp_overlap": False,
           "dp_overlap": True, "reshard_after_forward": True}


def _neutral_batch(deg: dict, owner=None, cols=None) -> PlanBatch:
    """Degree rows (gathered by `owner`) with `cols` set and every other knob at its most
    permissive value (no ZeRO, no SP, no recompute, no offload, mbs 1, 1F1B)."""
    d = {k: (v if owner is None else v[owner]) for k, v in deg.items()}
    n = d["tp"].shape[0]
    out = dict(d)
    for k, v in NEUTRAL.items():
        out[k] = np.full(n, v)
    out["G"] = d["pp"]
    for k, v in (cols or {}).items():
        out[k] = v
    return PlanBatch(**out)


def _weighted_legal(ctx, batch: PlanBatch, weights: np.ndarray, counts: dict, extra_rules=()) -> np.ndarray:
    """rules.legal_mask, with each row charged `weights[row]` plans in `counts`."""
    try:
        if "weights" in inspect.signature(R.legal_mask).parameters:
            return R.legal_mask(ctx, batch, counts, weights=weights, extra_rules=extra_rules)
    except (TypeError, ValueError):  # pragma: no cover
        pass
    ok = R.legal_mask(ctx, batch, extra_rules=extra_rules)   # legality: the canonical function
    n = len(batch)
    alive = np.ones(n, dtype=bool)
    for r in (*R.RULES, *extra_rules):         # attribution: the same rule objects, in order
        if not r.illegal:
            continue
        v = np.broadcast_to(np.asarray(r.violated(ctx, batch), dtype=bool), (n,))
        hit = v & alive
        if hit.any():
            counts[r.id] = counts.get(r.id, 0) + int(weights[hit].sum())
        alive &= ~v
    if not np.array_equal(alive, ok):          # pragma: no cover - legal_mask changed semantics
        raise RuntimeError("rules.legal_mask disagrees with its rules; cannot attribute pruning")
    return ok


# ---- blocks ---------------------------------------------------------------------------------------
@dataclass
class Block:
    """One Cartesian block: degree rows with equal option counts stacked on axis 0, one axis per group.

    The plan at (r, k_1 … k_G) has the canonical key `keys0[r] + ravel(k + lo, sig)` (C order):
    its position in the enumeration, used to break ties so results do not depend on chunking.
    """
    grid: GridBatch
    rows: np.ndarray
    sig: tuple                  # full option counts per group axis
    lo: tuple                   # first option index of each group axis in this block
    keys0: np.ndarray
    n_rl: int = 0               # plans the block-recompute slot stands for (collapse mode)
    block_slot: int = -1        # index of that slot on the rc axis (−1: none in this block)
    rc_axis: int = 1

    @property
    def size(self) -> int:
        return self.grid.size

    def keys(self) -> np.ndarray:
        shape = self.grid.shape
        local = np.zeros(shape[1:], dtype=np.int64)
        stride = 1
        for ax in range(len(self.sig) - 1, -1, -1):
            sh = [1] * len(self.sig)
            sh[ax] = -1
            local = local + ((np.arange(shape[ax + 1]) + self.lo[ax]) * stride).reshape(sh)
            stride *= self.sig[ax]
        return (self.keys0.reshape((-1,) + (1,) * len(self.sig)) + local[None]).reshape(-1)

    def on_rc(self, sl) -> tuple:
        ix = [slice(None)] * len(self.grid.shape)
        ix[self.rc_axis] = sl
        return tuple(ix)

    def rc_slot_mask(self) -> np.ndarray:
        sh = [1] * len(self.grid.shape)
        sh[self.rc_axis] = -1
        return (np.arange(self.grid.shape[self.rc_axis]) == self.block_slot).reshape(sh)


@dataclass
class Enumeration:
    """The candidate product of a space for one (model, training, world)."""
    ctx: object
    space: Space
    deg: dict
    groups: list
    totals: np.ndarray           # candidate plans per degree row (full product, before any rule)
    alive: np.ndarray            # degree rows with at least one legal option in every group
    pruned_by_rule: dict = field(default_factory=dict)
    chunk: int = DEFAULT_CHUNK
    collapse_block: bool = False
    rc_axis: int = 1
    extra_rules: tuple = ()      # rules beyond placement.rules.RULES (runtime / launcher capability)

    @property
    def candidates(self) -> int:
        return int(self.totals.sum())

    def counts_eval(self, d) -> tuple:
        return tuple(int(g.counts[d]) for g in self.groups)

    def _row_product(self, attr: str) -> np.ndarray:
        t = np.ones(self.totals.shape[0], dtype=np.int64)
        for g in self.groups:
            t = t * getattr(g, attr)
        return np.where(self.alive, t, 0)

    @property
    def totals_eval(self) -> np.ndarray:
        """Plans per row that are evaluated (after early rules; the block slot counted once)."""
        return self._row_product("counts")

    @property
    def totals_kept(self) -> np.ndarray:
        """Plans per row left after early rules (the block slot counted as all its layer counts)."""
        return self._row_product("full")

    @property
    def evaluated(self) -> int:
        return int(self.totals_eval.sum())

    def _charge(self, counts: dict, mult: int = 1) -> None:
        for rid, v in counts.items():
            if v:
                self.pruned_by_rule[rid] = self.pruned_by_rule.get(rid, 0) + int(v) * mult

    def _rc_group(self):
        return self.groups[self.rc_axis - 1]

    def row_block_info(self, d) -> tuple[int, int]:
        """(n_rl, block slot index) of degree row d (collapse mode), else (0, −1)."""
        if not self.collapse_block:
            return 0, -1
        g = self._rc_group()
        a, c = g.offsets[d], g.counts[d]
        rcs = g.cols["rc"][a:a + c]
        j = np.nonzero(rcs == 3)[0]
        if j.size == 0:
            return 0, -1
        return int(g.w[a + j[0]]), int(j[0])

    # -- flat iteration (every plan; tests, brute force) --
    def chunks(self, chunk: int | None = None):
        """Yield (start, PlanBatch, legal_mask): every kept plan in canonical order, `chunk` at a
        time. Needs collapse_block=False."""
        if self.collapse_block:
            raise ValueError("chunks() enumerates every plan: build with collapse_block=False")
        chunk = int(chunk or self.chunk)
        tot_all = self.totals_eval
        rows = np.nonzero(tot_all > 0)[0]
        if rows.size == 0:
            return
        tot = tot_all[rows]
        ends = np.cumsum(tot)
        starts = ends - tot
        for a in range(0, int(ends[-1]), chunk):
            j = np.arange(a, min(int(ends[-1]), a + chunk), dtype=np.int64)
            di = np.searchsorted(ends, j, side="right")
            k = j - starts[di]
            d = rows[di]
            cols = {c: self.deg[c][d] for c in self.deg}
            for g in reversed(self.groups):           # C order: the last group varies fastest
                c = g.counts[d]
                pos = g.offsets[d] + k % c
                k = k // c
                for name, arr in g.cols.items():
                    cols[name] = arr[pos]
            batch = PlanBatch(**cols)
            counts: dict = {}
            ok = R.legal_mask(self.ctx, batch, counts, extra_rules=self.extra_rules)
            self._charge(counts)
            yield a, batch, ok

    def all_plans(self) -> tuple[PlanBatch, np.ndarray]:
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

    # -- broadcast blocks --
    def block_specs(self, max_size: int | None = None) -> list:
        """Cheap descriptions of the blocks (materialize with `make_block`): degree rows with
        equal option counts stacked; a row larger than max_size split along its largest axis."""
        max_size = int(max_size or self.chunk)
        tot_all = self.totals_eval
        rows = np.nonzero(tot_all > 0)[0]
        if rows.size == 0:
            return []
        ends = np.cumsum(tot_all[rows])
        start = dict(zip(rows.tolist(), (ends - tot_all[rows]).tolist()))
        sigs: dict = {}
        for d in rows.tolist():
            sigs.setdefault(self.counts_eval(d) + self.row_block_info(d), []).append(d)
        specs = []
        ng = len(self.groups)
        for key, members in sigs.items():
            sig = key[:ng]
            T = int(np.prod(sig))
            if T <= max_size:
                per = max(1, max_size // T)
                for i in range(0, len(members), per):
                    mr = members[i:i + per]
                    specs.append((key, tuple(mr), None, tuple(start[d] for d in mr)))
            else:
                ax = int(np.argmax(sig))
                step = max(1, max_size // (T // sig[ax]))
                for d in members:
                    for a in range(0, sig[ax], step):
                        specs.append((key, (d,), (ax, a, min(sig[ax], a + step)), (start[d],)))
        return specs

    def make_block(self, spec) -> Block:
        key, mrows, cut, keys0 = spec
        ng = len(self.groups)
        sig = key[:ng]
        n_rl, bslot = key[ng], key[ng + 1]
        mrows = np.asarray(mrows, dtype=np.int64)
        shape = [mrows.size] + list(sig)
        lo = [0] * ng
        cols = {c: arr[mrows].reshape((-1,) + (1,) * ng) for c, arr in self.deg.items()}
        for ax, g in enumerate(self.groups):
            a, b = (cut[1], cut[2]) if (cut is not None and cut[0] == ax) else (0, sig[ax])
            lo[ax] = a
            shape[ax + 1] = b - a
            idx = g.offsets[mrows][:, None] + np.arange(a, b)[None, :]
            sh = [mrows.size] + [1] * ng
            sh[ax + 1] = b - a
            for name, arr in g.cols.items():
                cols[name] = arr[idx].reshape(sh)
        ra = self.rc_axis
        if bslot >= 0:
            if lo[ra - 1] <= bslot < lo[ra - 1] + shape[ra]:
                bslot -= lo[ra - 1]
            else:
                bslot = -1
        return Block(GridBatch(tuple(shape), **cols), mrows, tuple(sig), tuple(lo),
                     np.asarray(keys0, dtype=np.int64), n_rl if bslot >= 0 else 0, bslot, ra)

    def blocks(self, max_size: int | None = None):
        for spec in self.block_specs(max_size):
            yield self.make_block(spec)

    def legal_block(self, blk: Block) -> np.ndarray:
        """Legal mask of a block (flat, C order) by rules.legal_mask; pruned plans charged with the
        number of plans they stand for (the block slot: n_rl layer counts)."""
        g = blk.grid
        if blk.block_slot < 0 or blk.n_rl <= 1:
            counts: dict = {}
            ok = _legal(self.ctx, g, counts, self.extra_rules)
            self._charge(counts)
            return ok
        bs, ra = blk.block_slot, blk.rc_axis
        parts = []
        for sl, mult in ((slice(0, bs), 1), (slice(bs, bs + 1), blk.n_rl), (slice(bs + 1, g.shape[ra]), 1)):
            if sl.stop - sl.start <= 0:
                continue
            sub = g.sub(ra, sl)
            counts = {}
            ok = _legal(self.ctx, sub, counts, self.extra_rules)
            self._charge(counts, mult)
            parts.append(ok.reshape(sub.shape))
        return np.concatenate(parts, axis=ra).reshape(-1)


class _Tracer:
    """Records which plan attributes a rule reads (to know whether rules couple option groups)."""

    def __init__(self, batch):
        object.__setattr__(self, "_b", batch)
        object.__setattr__(self, "seen", set())

    def __getattr__(self, name):
        self.seen.add(name)
        return getattr(self._b, name)


# derived batch attributes → the columns they come from
_DERIVED = {"p_mode": ("zero", "reshard_after_forward"), "g_mode": ("zero",), "o_mode": ("zero",),
            "hold": ("zero", "reshard_after_forward"), "etp": ("t_exp",), "dp_shard": ("dp", "dp_replicate"),
            "v": ("sched", "vpp"), "vpp_group": ("G",)}


def rule_groups(ctx, en: "Enumeration") -> dict:
    """rule id → the option groups its predicate reads (traced on a small batch)."""
    col_group = {}
    for g in en.groups:
        for c in g.cols:
            col_group[c] = g.name
    probe = _neutral_batch({k: v[:1] for k, v in en.deg.items()})
    out = {}
    for r in (*R.RULES, *en.extra_rules):
        if not r.illegal:
            continue
        t = _Tracer(probe)
        with np.errstate(all="ignore"):
            try:
                r.violated(ctx, t)
            except Exception:  # pragma: no cover - a rule that cannot be traced couples everything
                out[r.id] = {g.name for g in en.groups}
                continue
        names = set()
        for a in t.seen:
            names.update(_DERIVED.get(a, (a,)))
        out[r.id] = {col_group[a] for a in names if a in col_group}
    return out


def rules_separable(ctx, en: "Enumeration") -> bool:
    """True when every rule reads at most one option group: then the early per-group checks are
    the whole legality check and blocks need no second pass."""
    return all(len(gs) <= 1 for gs in rule_groups(ctx, en).values())


_GRID_LEGAL: bool | None = None


def _legal(ctx, grid: GridBatch, counts: dict, extra_rules=()) -> np.ndarray:
    """rules.legal_mask on a block: on the n-D block itself when legal_mask accepts it (shape-
    agnostic), else on the block flattened to a 1-D PlanBatch — same function, same rules."""
    global _GRID_LEGAL
    if _GRID_LEGAL is not False:
        try:
            c2: dict = {}
            ok = np.asarray(R.legal_mask(ctx, grid, c2, extra_rules=extra_rules))
            if ok.size == grid.size:
                _GRID_LEGAL = True
                for k, v in c2.items():
                    counts[k] = counts.get(k, 0) + v
                return ok.reshape(-1)
        except (ValueError, IndexError, TypeError):
            pass
        _GRID_LEGAL = False
    return R.legal_mask(ctx, grid.flat(), counts, extra_rules=extra_rules)


# ---- building -------------------------------------------------------------------------------------
def collapsible(space: Space) -> bool:
    """Block layer counts collapse to one slot when they form a contiguous range (no list, step or
    powers of two): the smallest count that fits then stands for the interval above it."""
    c = space.recompute_layers
    return 3 in space.recompute and not c.values and c.step == 1 and not c.pow2


def _reads_recompute_layers(ctx, deg: dict, rules) -> bool:
    """True when one of `rules` reads the block-recompute layer count (then the counts cannot be
    collapsed into one slot: the rule may allow only some of them)."""
    probe = _neutral_batch({k: v[:1] for k, v in deg.items()})
    for r in rules:
        t = _Tracer(probe)
        with np.errstate(all="ignore"):
            try:
                r.violated(ctx, t)
            except Exception:  # pragma: no cover - untraceable: assume it does
                return True
        if "recompute_layers" in t.seen:
            return True
    return False


def _early_extra(ctx, deg: dict, groups: list, extra_rules) -> dict:
    """Which extra rules run at which early stage: a rule that reads no option group runs on the
    degree rows (key None); one that reads exactly one group g runs on g's options (key g.name) —
    exact, because its verdict does not depend on the neutral values of the other groups; a rule
    that reads two or more groups runs only at the block level (`Enumeration.legal_block`)."""
    col_group = {c: g.name for g in groups for c in g.cols}
    probe = _neutral_batch({k: v[:1] for k, v in deg.items()})
    out: dict = {}
    for r in extra_rules:
        if not r.illegal:
            continue
        t = _Tracer(probe)
        with np.errstate(all="ignore"):
            try:
                r.violated(ctx, t)
                names = set()
                for a in t.seen:
                    names.update(_DERIVED.get(a, (a,)))
                gs = {col_group[a] for a in names if a in col_group}
            except Exception:  # pragma: no cover - untraceable: block level only
                gs = {"?", "??"}
        if len(gs) <= 1:
            out.setdefault(next(iter(gs)) if gs else None, []).append(r)
    return out


def enumerate_space(ctx, space: Space, chunk: int = DEFAULT_CHUNK, collapse_block: bool = False,
                    extra_rules=()) -> Enumeration:
    """The candidate product of `space` for ctx (model, training, world), with the early rules applied.

    collapse_block: one option stands for all block-recompute layer counts of a plan (the search
    solves for the smallest that fits); candidates, legal and pruned counts are those of the full
    product either way.
    extra_rules: rules applied after placement.rules.RULES wherever they are (early per-group
    pruning, block checks, flat chunks): a runtime's or launcher's capability rules.
    """
    extra_rules = tuple(extra_rules)
    collapse_block = bool(collapse_block and collapsible(space) and not ctx.model.states_only)
    deg = _degree_rows(ctx, space)
    n = deg["tp"].shape[0]
    if n == 0:
        return Enumeration(ctx, space, deg, [], np.zeros(0, np.int64), np.zeros(0, bool), {}, chunk, collapse_block,
                           extra_rules=extra_rules)
    if collapse_block and extra_rules and _reads_recompute_layers(ctx, deg, extra_rules):
        collapse_block = False
    # group (axis) order: small groups outside, large ones innermost (numpy broadcasts fastest over a
    # long last axis); the same order is the canonical plan order used to break ties
    groups = [_misc_group(ctx, space, deg), _tp_group(ctx, space, deg), _rc_group(ctx, space, deg, collapse_block),
              _batch_group(ctx, space, deg), _state_group(ctx, space, deg)]
    rc_axis = 3
    totals = np.ones(n, dtype=np.int64)
    for g in groups:
        totals = totals * g.full
    counts: dict = {}
    # degree rows at the most permissive setting of every other knob
    early = _early_extra(ctx, deg, groups, extra_rules)
    alive = _weighted_legal(ctx, _neutral_batch(deg), totals, counts, early.get(None, ()))
    alive &= totals > 0
    # each group's options with the other groups at their most permissive values
    for gi, g in enumerate(groups):
        others = np.ones(n, dtype=np.int64)
        for h in groups:
            if h is not g:
                others = others * h.full
        sel = alive[g.owner]
        sub = g.keep(sel)
        if sub.owner.size == 0:
            continue
        batch = _neutral_batch(deg, sub.owner, sub.cols)
        ok = _weighted_legal(ctx, batch, sub.w * others[sub.owner], counts, early.get(g.name, ()))
        keep = np.ones(g.owner.size, dtype=bool)
        keep[np.nonzero(sel)[0][~ok]] = False
        groups[gi] = g.keep(keep)
        alive &= groups[gi].counts > 0
    pruned = {k: v for k, v in counts.items() if v}
    en = Enumeration(ctx, space, deg, groups, totals, alive, pruned, chunk, collapse_block, rc_axis,
                     extra_rules=extra_rules)
    # rows that lost every option of a group: their remaining plans are charged already (the
    # telescoping sum of the early stages covers candidates − kept exactly)
    return en


def count_candidates(ctx, space: Space) -> int:
    return enumerate_space(ctx, space).candidates
