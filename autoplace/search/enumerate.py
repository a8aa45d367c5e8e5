"""Enumerate the legal uniform plans of a search space (placement_semantics.md §4.7).

How it is vectorized
--------------------
1. **Degree rows** (`options.degree_rows`). Every (tp, pp, cp, ep, etp) with dp = W/(tp·pp·cp) an
   integer (rule C2 by construction), from divisor lists: a few hundred rows at most.
2. **Option groups** (`autoplace.search.options`). The other knobs fall into groups whose allowed
   values depend on the degree row but not on each other: (rank order, dp overlap, flags), (sp,
   tp_overlap), (recompute, block layers), (mbs, schedule, vpp, G), (zero, reshard, dp_replicate,
   offload, φ). For every group and degree row the options are built with numpy masks (mbs | B/dp,
   G ∈ {pp, m}, block layers 1 … L/pp − 1, dp_replicate | dp, SP only for tp > 1, φ only with
   offload, …) and stored as flat columns with per-row offsets. A degree row has Π_g count_g
   plans: counted, not materialized.
3. **Rules, early** (`autoplace.search.pruning`). The rules (`rules.RULES` plus the caller's
   `extra_rules`) run on the degree rows with every other knob at its most permissive value, then
   on each group's options with the other groups at those values; an option (or row) that a rule
   rejects there is rejected for every plan it appears in, so it is dropped with its whole product
   and its plans are charged to that rule (`pruned_by_rule`, weighted by the plans it stands for).
   This keeps the legal set exact (tests compare with a plan-by-plan `check` loop) while nothing
   illegal is ever evaluated. It relies on the rules being monotone in that sense — true of every
   rule in `RULES` today: a rule that couples two option groups belongs in one group (offload and
   ZeRO share a group for K2), or costs every block a second legality pass (`legal_block`).
4. **Blocks** (`autoplace.search.blocks`). Degree rows with the same option counts are stacked
   into a `GridBatch` of shape (rows, count_1, …, count_G) whose columns vary along one axis each,
   so the cost model evaluates it by broadcasting; a block holds at most `chunk` plans (a large row
   is split along its largest axis), bounding memory at any GPU count. `chunks()` instead decodes
   plan j in mixed radix into flat `PlanBatch`es (every plan, for tests and brute force).

Canonical forms (a knob that means nothing in a setting is fixed, so no plan appears twice):
pp = 1 → 1F1B; vpp and G only with the interleaved schedule; block layers only with `block`;
dp_replicate = 1 without ZeRO; reshard only with ZeRO-3; SP only with tp > 1; TP overlap only with
SP; φ only with offload; ep = 1 and etp = tp on dense models; one rank order when ep = 1 (both
orders nest tp, cp, dp, pp identically and differ only in where experts are carved).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from autoplace.search import blocks as blocks_mod
from autoplace.search.batch import PlanBatch
from autoplace.search.blocks import Block, BlockSpec
from autoplace.search.options import collapsible, degree_rows, option_groups
from autoplace.search.pruning import legal_mask, prune_early, reads_column, rule_groups, rule_list, rules_separable
from autoplace.search.space import Space

DEFAULT_CHUNK = 1 << 17

__all__ = ["DEFAULT_CHUNK", "Block", "BlockSpec", "Enumeration", "collapsible", "enumerate_space", "rule_groups",
           "rules_separable"]


@dataclass
class Enumeration:
    """The candidate product of a space for one (model, training, world), early rules applied."""
    ctx: object
    space: Space
    deg: dict
    """Degree-row columns (tp, pp, cp, dp, ep, t_exp)."""
    groups: list
    """`OptionGroup`s in axis order, rejected options dropped."""
    totals: np.ndarray
    """Candidate plans per degree row (full product, before any rule)."""
    alive: np.ndarray
    """Degree rows with at least one legal option in every group."""
    pruned_by_rule: dict = field(default_factory=dict)
    chunk: int = DEFAULT_CHUNK
    collapse_block: bool = False
    rc_axis: int = 1
    rules: tuple | None = None
    """The rules applied: `RULES` then the extra rules (`pruning.rule_list`); None → `RULES`."""

    def __post_init__(self):
        if self.rules is None:
            self.rules = rule_list()

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
        ends = np.cumsum(tot_all[rows])
        for a in range(0, int(ends[-1]), chunk):
            j = np.arange(a, min(int(ends[-1]), a + chunk), dtype=np.int64)
            batch = blocks_mod.decode_flat(self, rows, ends, j)
            counts: dict = {}
            ok = legal_mask(self.ctx, batch, self.rules, counts)
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
        """Every legal plan of the enumeration as one batch (tests and brute force)."""
        b, ok = self.all_plans()
        return b.take(np.nonzero(ok)[0])

    @property
    def extra_rules(self) -> tuple:
        """The rules applied beyond `RULES` (a runtime's / launcher's)."""
        from autoplace.placement.rules import RULES
        base = {r.id for r in RULES}
        return tuple(r for r in self.rules if r.id not in base)

    # -- broadcast blocks --
    def block_specs(self, max_size: int | None = None) -> list[BlockSpec]:
        """Cheap descriptions of the blocks (materialize with `make_block`)."""
        return blocks_mod.block_specs(self, int(max_size or self.chunk))

    def make_block(self, spec: BlockSpec) -> Block:
        return blocks_mod.make_block(self, spec)

    def blocks(self, max_size: int | None = None):
        for spec in self.block_specs(max_size):
            yield self.make_block(spec)

    def legal_block(self, blk: Block) -> np.ndarray:
        """Legal mask of a block (flat, C order) under `self.rules`; pruned plans charged with the
        number of plans they stand for (the block slot: n_rl layer counts)."""
        g = blk.grid
        if blk.block_slot < 0 or blk.n_rl <= 1:
            counts: dict = {}
            ok = legal_mask(self.ctx, g, self.rules, counts)
            self._charge(counts)
            return ok
        bs, ra = blk.block_slot, blk.rc_axis
        parts = []
        for sl, mult in ((slice(0, bs), 1), (slice(bs, bs + 1), blk.n_rl), (slice(bs + 1, g.shape[ra]), 1)):
            if sl.stop - sl.start <= 0:
                continue
            sub = g.sub(ra, sl)
            counts = {}
            ok = legal_mask(self.ctx, sub, self.rules, counts)
            self._charge(counts, mult)
            parts.append(ok.reshape(sub.shape))
        return np.concatenate(parts, axis=ra).reshape(-1)


def enumerate_space(ctx, space: Space, chunk: int = DEFAULT_CHUNK, collapse_block: bool = False,
                    extra_rules=()) -> Enumeration:
    """The candidate product of `space` for ctx (model, training, world), with the early rules applied.

    collapse_block: one option stands for all block-recompute layer counts of a plan (the search
    solves for the smallest that fits); candidates, legal and pruned counts are those of the full
    product either way.
    extra_rules: `Rule`s applied after `rules.RULES` (see `autoplace.search.pruning`), e.g. what
    one training stack can run; charged under their own ids.
    """
    rules = rule_list(extra_rules)
    collapse_block = bool(collapse_block and collapsible(space) and not ctx.model.states_only)
    deg = degree_rows(ctx, space)
    n = deg["tp"].shape[0]
    if n == 0:
        return Enumeration(ctx, space, deg, [], np.zeros(0, np.int64), np.zeros(0, bool), {}, chunk,
                           collapse_block, rules=rules)
    if collapse_block and reads_column(ctx, deg, rules, "recompute_layers"):
        collapse_block = False   # an extra rule may allow only some layer counts: enumerate each
    groups, rc_axis = option_groups(ctx, space, deg, collapse_block)
    groups, totals, alive, pruned = prune_early(ctx, deg, groups, rules)
    return Enumeration(ctx, space, deg, groups, totals, alive, pruned, chunk, collapse_block, rc_axis, rules)
