"""Option groups: the values each plan knob may take, per degree row, as flat numpy columns.

The enumerator (`autoplace.search.enumerate`) first lists the degree rows (tp, pp, cp, dp, ep,
etp) with dp = W/(tp·pp·cp) an integer (rule C2 by construction). Every other knob belongs to one
of five groups whose allowed values depend on the degree row but not on each other:

| group   | columns                                              | per-row restrictions                     |
|---------|------------------------------------------------------|------------------------------------------|
| misc    | order, dp_overlap, the space's extra Plan flags      | one rank order, no ep_overlap when ep = 1 |
| tp      | sp, tp_overlap                                       | SP only for tp > 1; overlap only with SP |
| rc      | rc, recompute_layers, rc_mods                        | block layers 1 … L/pp − 1; modules with  |
|         |                                                      | selective only, mla_up_proj on MLA only  |
| batch   | mbs, sched, vpp, G                                   | mbs ∣ B/dp; pp = 1 → 1F1B; vpp ∣ L/pp    |
| state   | zero, reshard_after_forward, dp_replicate, off, φ    | dp_replicate ∣ dp, > 1 with ZeRO only    |

A group stores one entry per (degree row, option): `owner` (the row, sorted), the columns, and the
number of plans each entry stands for (`w`: 1, except the collapsed block-recompute slot). A
degree row then has Π_g count_g plans — counted, never materialized here.

Rule K2 couples offload and ZeRO, so both live in the state group: a rule that reads two groups
is still exact (blocks get a second legality pass), but early pruning is strongest within one.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass

import numpy as np

from autoplace.search.space import Choice, Space


def resolve_degrees(choice: Choice, bound: int) -> list[int]:
    """Values of a degree Choice restricted to divisors of `bound`."""
    return [v for v in choice.resolve(bound) if isinstance(v, int) and bound % v == 0]


def value_grid(choice: Choice, max_bound: int) -> np.ndarray:
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


@dataclass
class OptionGroup:
    """The options of one group for every degree row (flat, sorted by row)."""
    name: str
    owner: np.ndarray
    """Degree row of each option (sorted ascending)."""
    cols: dict
    """Column name → flat array, one entry per option."""
    w: np.ndarray
    """Plans each option stands for: 1, or n_rl for the collapsed block-recompute slot."""
    n_rows: int

    def __post_init__(self):
        self.owner = np.asarray(self.owner, dtype=np.int64)
        self.w = np.asarray(self.w, dtype=np.int64)
        self.counts = np.bincount(self.owner, minlength=self.n_rows).astype(np.int64)
        self.full = np.bincount(self.owner, weights=self.w, minlength=self.n_rows).astype(np.int64)
        self.offsets = np.concatenate([[0], np.cumsum(self.counts)[:-1]]).astype(np.int64)

    def keep(self, mask: np.ndarray) -> "OptionGroup":
        return OptionGroup(self.name, self.owner[mask], {k: v[mask] for k, v in self.cols.items()},
                           self.w[mask], self.n_rows)


def make_group(name: str, owner, cols: dict, n_rows: int, w=None) -> OptionGroup:
    """An OptionGroup from unsorted entries (stable sort by owner keeps the option order per row)."""
    owner = np.asarray(owner, dtype=np.int64)
    o = np.argsort(owner, kind="stable")
    w = np.ones(owner.size, np.int64) if w is None else np.asarray(w, np.int64)
    return OptionGroup(name, owner[o], {k: np.asarray(v)[o] for k, v in cols.items()}, w[o], n_rows)


def degree_rows(ctx, space: Space) -> dict:
    """Every (tp, pp, cp, dp, ep, etp) of the space with tp·pp·cp·dp = W, as columns."""
    W = ctx.world
    m = ctx.model
    moe = (not m.states_only) and m.is_moe
    rows = []
    for tp in resolve_degrees(space.tp, W):
        for pp in resolve_degrees(space.pp, W // tp):
            for cp in resolve_degrees(space.cp, W // (tp * pp)):
                dp = W // (tp * pp * cp)
                for ep in (resolve_degrees(space.ep, W // pp) if moe else [1]):
                    for etp in (sorted({tp if e == "tp" else int(e) for e in space.etp}) if moe else [tp]):
                        rows.append((tp, pp, cp, dp, ep, etp))
    a = np.array(rows, dtype=np.int64).reshape(-1, 6)
    return {"tp": a[:, 0], "pp": a[:, 1], "cp": a[:, 2], "dp": a[:, 3], "ep": a[:, 4], "t_exp": a[:, 5]}


def misc_group(ctx, space: Space, deg: dict) -> OptionGroup:
    """(rank order, dp overlap, other Plan flags the space lists); one order when ep = 1."""
    n = deg["tp"].shape[0]
    names = ["order", "dp_overlap"] + [k for k, _ in space.extras]
    lists = [list(space.rank_order), list(space.dp_overlap)] + [list(v) for _, v in space.extras]
    opts = list(itertools.product(*lists))
    mask = np.ones((n, len(opts)), dtype=bool)
    single = deg["ep"] == 1
    iov = names.index("ep_overlap") if "ep_overlap" in names else None
    for j, o in enumerate(opts):
        if o[0] != space.rank_order[0]:
            mask[single, j] = False
        if iov is not None and o[iov]:
            mask[single, j] = False          # EP all-to-all overlap needs an EP all-to-all
    r, k = np.nonzero(mask)
    return make_group("misc", r, {name: np.array([o[j] for o in opts])[k] for j, name in enumerate(names)}, n)


def tp_group(ctx, space: Space, deg: dict) -> OptionGroup:
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
    sp_col = np.array([o[0] for o in opts], dtype=bool)
    overlap_col = np.array([o[1] for o in opts], dtype=bool)
    return make_group("tp", r, {"sp": sp_col[k], "tp_overlap": overlap_col[k]}, n)


def module_codes(ctx, space: Space) -> tuple:
    """The space's recompute_modules codes that mean distinct plans for this model: a set naming a
    module the model lacks (rule R2's `_module_misfits`: mla_up_proj without MLA, moe_act without
    MoE layers, mlp without dense layers) is dropped; `core_attn` alone is Megatron's default
    selective (code 0) when 0 is listed."""
    from autoplace.placement.rules import _module_misfits
    from autoplace.plan import modules_code
    lacks = modules_code(("mla_up_proj", "moe_act", "mlp") if ctx.model.states_only
                         else (name for name, _ in _module_misfits(ctx)))
    codes = [c for c in space.recompute_modules if not c & lacks]
    if 0 in codes and 1 in codes:
        codes.remove(1)
    return tuple(codes) or (0,)


def rc_group(ctx, space: Space, deg: dict, collapse: bool = False) -> OptionGroup:
    """(rc, recompute_layers, rc_mods). Block recompute: one option per layer count 1 … L/pp − 1
    (or the space's list) — or, with `collapse`, one slot per row standing for all of them (w = their
    number); the search then solves for the smallest count that fits. Selective recompute: one
    option per recompute_modules set of the space (`module_codes`)."""
    n = deg["tp"].shape[0]
    m = ctx.model
    L = m.layers
    owners, rc_c, rl_c, w_c, md_c = [], [], [], [], []
    for code in space.recompute:
        if code != 3:
            for mc in (module_codes(ctx, space) if code == 1 else (0,)):
                owners.append(np.arange(n))
                rc_c.append(np.full(n, code))
                rl_c.append(np.zeros(n, np.int64))
                w_c.append(np.ones(n, np.int64))
                md_c.append(np.full(n, mc, np.int64))
    if 3 in space.recompute and not m.states_only:
        per_stage = np.where(L % deg["pp"] == 0, L // deg["pp"], 0)
        grid = value_grid(space.recompute_layers, int(per_stage.max(initial=1)))
        if space.recompute_layers.values:
            mask = np.ones((n, grid.size), dtype=bool)     # an explicit list: rule R1 prunes
        else:
            hi = per_stage - 1 if space.recompute_layers.hi is None else \
                np.minimum(per_stage - 1, space.recompute_layers.hi)
            mask = grid[None, :] <= hi[:, None]
        if collapse:
            n_rl = mask.sum(axis=1).astype(np.int64)
            r = np.nonzero(n_rl > 0)[0]
            owners.append(r)
            rc_c.append(np.full(r.size, 3))
            rl_c.append(np.full(r.size, int(grid[0]) if grid.size else 1))
            w_c.append(n_rl[r])
            md_c.append(np.zeros(r.size, np.int64))
        else:
            r, k = np.nonzero(mask)
            owners.append(r)
            rc_c.append(np.full(r.size, 3))
            rl_c.append(grid[k])
            w_c.append(np.ones(r.size, np.int64))
            md_c.append(np.zeros(r.size, np.int64))
    return make_group("rc", np.concatenate(owners),
                      {"rc": np.concatenate(rc_c), "recompute_layers": np.concatenate(rl_c),
                       "rc_mods": np.concatenate(md_c)},
                      n, np.concatenate(w_c))


def batch_group(ctx, space: Space, deg: dict) -> OptionGroup:
    """(mbs, sched, vpp, G): mbs | B/dp; pp = 1 → 1F1B only; interleaved → vpp × G options."""
    n = deg["tp"].shape[0]
    B = ctx.train.global_batch
    L = ctx.model.layers
    dp, pp = deg["dp"], deg["pp"]
    per_dp = np.where(B % dp == 0, B // dp, 0)
    grid = value_grid(space.mbs, int(per_dp.max(initial=1)))
    mask = (per_dp[:, None] > 0) & (per_dp[:, None] % np.maximum(grid[None, :], 1) == 0)
    r1, k1 = np.nonzero(mask)                          # one entry per (degree row, mbs)
    mbs = grid[k1]
    ppr = pp[r1]
    m_mb = np.where(mbs > 0, per_dp[r1] // np.maximum(mbs, 1), 0)
    multi = ppr > 1
    ones = np.ones_like(ppr)
    scheds, vpps, groups, oks = [], [], [], []
    for code in space.schedule:
        if code in (0, 2):
            scheds.append(code)
            vpps.append(ones)
            groups.append(ppr)
            oks.append(multi if code == 2 else np.ones_like(multi))
        elif code == 1:
            per_stage = np.where(L % ppr == 0, L // ppr, 0) if not ctx.model.states_only else np.zeros_like(ppr)
            vgrid = value_grid(space.vpp, int(per_stage.max(initial=2)))
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
                    scheds.append(1)
                    vpps.append(np.full_like(ppr, v))
                    groups.append(G)
                    oks.append(ok)
    if 0 not in scheds:                          # pp = 1 always runs (as) 1F1B
        scheds.append(0)
        vpps.append(ones)
        groups.append(ppr)
        oks.append(~multi)
    sched = np.array(scheds)
    vpp_m, group_m, ok_m = np.stack(vpps, 1), np.stack(groups, 1), np.stack(oks, 1).astype(bool)
    first0 = int(np.nonzero(sched == 0)[0][0])
    ok_m[~multi, :] = False
    ok_m[~multi, first0] = True
    r2, k2 = np.nonzero(ok_m)
    return make_group("batch", r1[r2], {"mbs": mbs[r2], "sched": sched[k2], "vpp": vpp_m[r2, k2],
                                        "G": group_m[r2, k2]}, n)


def state_group(ctx, space: Space, deg: dict) -> OptionGroup:
    """(zero, reshard, dp_replicate, offload, φ): dp_replicate | dp and > 1 only with ZeRO ≥ 1;
    reshard only with ZeRO-3; φ only with offload. (One group: rule K2 couples offload and ZeRO.)"""
    n = deg["tp"].shape[0]
    dp = deg["dp"]
    zopts = [(z, rs) for z in space.zero for rs in (space.reshard_after_forward if z == 3 else (True,))]
    oopts = list(dict.fromkeys((o, phi) for o in space.offload
                               for phi in (space.offload_fraction if o >= 1 else (1.0,))))
    rgrid = value_grid(space.dp_replicate, int(dp.max(initial=1)))
    # dp_replicate | dp | W: only divisors of the GPU count can pass the mask below (same options,
    # without a rows × max-dp table at large W)
    rgrid = rgrid[(rgrid > 0) & (ctx.world % np.maximum(rgrid, 1) == 0)]
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
            own.append(rr)
            cz.append(np.full(rr.size, z))
            crs.append(np.full(rr.size, rs))
            cr.append(rv)
            co.append(np.full(rr.size, o))
            cphi.append(np.full(rr.size, phi))
    return make_group("state", np.concatenate(own),
                      {"zero": np.concatenate(cz), "reshard_after_forward": np.concatenate(crs),
                       "dp_replicate": np.concatenate(cr), "off": np.concatenate(co),
                       "offload_fraction": np.concatenate(cphi)}, n)


def option_groups(ctx, space: Space, deg: dict, collapse_block: bool = False) -> tuple[list, int]:
    """The five groups in axis order, and the block axis of the rc group (1-based: axis 0 of a
    block holds the degree rows).

    Small groups sit outside, large ones innermost (numpy broadcasts fastest over a long last
    axis); the same order is the canonical plan order used to break ties."""
    groups = [misc_group(ctx, space, deg), tp_group(ctx, space, deg), rc_group(ctx, space, deg, collapse_block),
              batch_group(ctx, space, deg), state_group(ctx, space, deg)]
    rc_axis = 1 + [g.name for g in groups].index("rc")
    return groups, rc_axis


def collapsible(space: Space) -> bool:
    """Block layer counts collapse to one slot when they form a contiguous range (no list, step or
    powers of two): the smallest count that fits then stands for the interval above it."""
    c = space.recompute_layers
    return 3 in space.recompute and not c.values and c.step == 1 and not c.pow2
