"""Rules applied to the enumeration: early pruning, per-rule charging, and which groups a rule reads.

The rule set
------------
The enumerator applies `rules.RULES` (read when the enumeration is built) followed by the
caller's `extra_rules`: `Rule` objects of `autoplace.placement.rules` (an id, a broadcastable
`violated(ctx, p)` predicate, a message; only `illegal=True` rules prune). This is the hook for
constraints that are not placement semantics, e.g. what one training stack can run: build them as
`Rule`s and pass them to `enumerate_space(..., extra_rules=...)` / `run_exhaustive(...,
extra_rules=...)` / `run_bayes(..., extra_rules=...)`. Their ids must differ from those in
`RULES`; what they prune is charged under their id in `pruned_by_rule`, like any rule's.

`legal_mask(ctx, batch, rules)` is `rules.legal_mask` over a given rule list (equal to it for
`RULES`: tested), with per-row weights and n-D blocks added. A rule is charged with the plans it
removes first, in list order.

Early pruning (exactness)
-------------------------
The rules run on the degree rows with every other knob at its most permissive value (`NEUTRAL`),
then on each group's options with the other groups at those values. An option that a rule
rejects there is rejected in every plan it appears in, so it is dropped with its whole product,
charged with the plans it stands for. This needs every rule to be monotone in that sense (true of
every rule in `RULES`): a rule must not reject a plan at the neutral values that it would accept
with some other value of a knob it reads. Extra rules need not be monotone (a runtime's "SP always
on" rejects the neutral sp = False): `early_stages` runs each only where no neutral value can
change its verdict. A rule that reads several
option groups (`rule_groups`) is still exact: then `rules_separable` is False and every block gets
a full `legal_mask` pass as well.
"""

from __future__ import annotations

import numpy as np

from autoplace.placement import rules as placement_rules
from autoplace.search.batch import GridBatch, PlanBatch

NEUTRAL = {"vpp": 1, "zero": 0, "rc": 0, "recompute_layers": 0, "rc_mods": 0, "off": 0, "mbs": 1, "sched": 0,
           "order": 0, "dp_replicate": 1, "offload_fraction": 1.0, "sp": False, "tp_overlap": False,
           "dp_overlap": True, "reshard_after_forward": True}
"""The most permissive value of every non-degree knob (no ZeRO, SP, recompute or offload; mbs 1, 1F1B)."""


def rule_list(extra_rules=()) -> tuple:
    """`RULES` followed by `extra_rules`; an extra rule reusing a rule id is a programming error."""
    base = tuple(placement_rules.RULES)
    extra = tuple(extra_rules or ())
    ids = [r.id for r in base + extra]
    dup = sorted({i for i in ids if ids.count(i) > 1})
    if dup:
        raise ValueError(f"extra rules reuse rule id(s) {', '.join(dup)}")
    return base + extra


def legal_mask(ctx, batch, rules, counts: dict | None = None, weights: np.ndarray | None = None) -> np.ndarray:
    """Flat (C order) mask of the plans of `batch` that no illegal rule of `rules` rejects.

    batch: a `PlanBatch` (1-D) or a `GridBatch` (an n-D block: the predicates broadcast over its
    shape). counts[rule id] += the plans that rule removed first, each row weighted by `weights`
    (flat batches; default 1)."""
    shape = batch.shape if isinstance(batch, GridBatch) else (len(batch),)
    ok = np.ones(shape, dtype=bool)
    for r in rules:
        if not r.illegal:
            continue
        v = np.broadcast_to(np.asarray(r.violated(ctx, batch), dtype=bool), shape)
        if counts is not None:
            hit = v & ok
            n = int(np.count_nonzero(hit)) if weights is None else int(weights[hit].sum())
            counts[r.id] = counts.get(r.id, 0) + n
        ok &= ~v
    return ok.reshape(-1)


def neutral_batch(deg: dict, owner=None, cols=None) -> PlanBatch:
    """Degree rows (gathered by `owner`) with `cols` set and every other knob at its NEUTRAL value."""
    d = {k: (v if owner is None else v[owner]) for k, v in deg.items()}
    n = d["tp"].shape[0]
    out = dict(d)
    for k, v in NEUTRAL.items():
        out[k] = np.full(n, v)
    out["G"] = d["pp"]
    for k, v in (cols or {}).items():
        out[k] = v
    return PlanBatch(**out)


def early_stages(ctx, deg: dict, groups: list, rules) -> dict:
    """Which rules run at which early stage. `RULES` (monotone, module docstring) run everywhere.
    An extra rule need not be monotone ("SP always on" rejects the neutral sp = False), so it runs
    early only where its verdict cannot depend on a neutral value: one that reads no option group
    on the degree rows (key None) and at every group stage, one that reads exactly one group g at
    g's stage only; one that reads two or more groups only in the block pass (`rules_separable` is
    then False). Returns stage (None or group name) → rule list, in `rules` order."""
    base_ids = {r.id for r in placement_rules.RULES}
    col_group = {c: g.name for g in groups for c in g.cols}
    probe = neutral_batch({k: v[:1] for k, v in deg.items()})
    reads = {}
    for r in rules:
        if r.id in base_ids or not r.illegal:
            continue
        t = _Tracer(probe)
        with np.errstate(all="ignore"):
            r.violated(ctx, t)
        names = set()
        for a in t.seen:
            names.update(DERIVED.get(a, (a,)))
        reads[r.id] = {col_group[a] for a in names if a in col_group}
    out = {None: [r for r in rules if r.id in base_ids or not reads.get(r.id)]}
    for g in groups:
        out[g.name] = [r for r in rules if r.id in base_ids or reads.get(r.id, {g.name}) <= {g.name}]
    return out


def reads_column(ctx, deg: dict, rules, column: str) -> bool:
    """True when one of the extra (non-`RULES`) `rules` reads plan attribute `column` (traced)."""
    base_ids = {r.id for r in placement_rules.RULES}
    probe = neutral_batch({k: v[:1] for k, v in deg.items()})
    for r in rules:
        if r.id in base_ids:
            continue
        t = _Tracer(probe)
        with np.errstate(all="ignore"):
            r.violated(ctx, t)
        if column in t.seen:
            return True
    return False


def prune_early(ctx, deg: dict, groups: list, rules) -> tuple[list, np.ndarray, np.ndarray, dict]:
    """Apply `rules` to the degree rows and to each group's options (module docstring;
    `early_stages` says which extra rules run where).

    Returns (groups with the rejected options dropped, totals: candidate plans per degree row,
    alive: rows with a legal option in every group, pruned: rule id → plans removed)."""
    n = deg["tp"].shape[0]
    totals = np.ones(n, dtype=np.int64)
    for g in groups:
        totals = totals * g.full
    counts: dict = {}
    stages = early_stages(ctx, deg, groups, rules)
    alive = legal_mask(ctx, neutral_batch(deg), stages[None], counts, weights=totals)
    alive &= totals > 0
    groups = list(groups)
    for gi, g in enumerate(groups):
        others = np.ones(n, dtype=np.int64)
        for h in groups:
            if h is not g:
                others = others * h.full
        sel = alive[g.owner]
        sub = g.keep(sel)
        if sub.owner.size == 0:
            continue
        batch = neutral_batch(deg, sub.owner, sub.cols)
        ok = legal_mask(ctx, batch, stages[g.name], counts, weights=sub.w * others[sub.owner])
        keep = np.ones(g.owner.size, dtype=bool)
        keep[np.nonzero(sel)[0][~ok]] = False
        groups[gi] = g.keep(keep)
        alive &= groups[gi].counts > 0
    # rows that lost every option of a group: their remaining plans are charged already (the
    # telescoping sum of the early stages covers candidates − kept exactly)
    return groups, totals, alive, {k: v for k, v in counts.items() if v}


# ---- which option groups a rule reads ------------------------------------------------------------
class _Tracer:
    """Records which plan attributes a rule reads (to know whether rules couple option groups)."""

    def __init__(self, batch):
        object.__setattr__(self, "_b", batch)
        object.__setattr__(self, "seen", set())

    def __getattr__(self, name):
        self.seen.add(name)
        return getattr(self._b, name)

    def __len__(self) -> int:
        return len(self._b)


DERIVED = {"p_mode": ("zero", "reshard_after_forward"), "g_mode": ("zero",), "o_mode": ("zero",),
           "hold": ("zero", "reshard_after_forward"), "etp": ("t_exp",), "dp_shard": ("dp", "dp_replicate"),
           "v": ("sched", "vpp"), "vpp_group": ("G",)}
"""Derived batch attributes → the stored columns they come from (`batch._derive`)."""


def rule_groups(ctx, en) -> dict:
    """rule id → the option groups its predicate reads (traced on a one-row batch of `en`)."""
    col_group = {c: g.name for g in en.groups for c in g.cols}
    probe = neutral_batch({k: v[:1] for k, v in en.deg.items()})
    out = {}
    for r in en.rules:
        if not r.illegal:
            continue
        t = _Tracer(probe)
        with np.errstate(all="ignore"):
            r.violated(ctx, t)     # a rule that fails on a plain batch is a bug: let it raise
        names = set()
        for a in t.seen:
            names.update(DERIVED.get(a, (a,)))
        out[r.id] = {col_group[a] for a in names if a in col_group}
    return out


def rules_separable(ctx, en) -> bool:
    """True when every rule reads at most one option group: then the early per-group checks are
    the whole legality check and blocks need no second pass."""
    return all(len(gs) <= 1 for gs in rule_groups(ctx, en).values())
