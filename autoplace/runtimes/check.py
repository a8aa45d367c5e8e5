"""What a runtime can express, as rules: one rule set for the search, the exporters and the mapping.

`capability_rules(rt)` returns `autoplace.placement.rules.Rule` objects whose predicates are
numpy-broadcastable over plan fields (a `Plan` of scalars or a `PlanBatch` of arrays), exactly like
the composition rules: the enumerator prunes with them (`search --runtime/--launcher`), an exporter
lists their messages as its capability refusals, and the record mapping checks a mapped plan.
Exporters keep only file-format facts of their own. `validate_runtime` checks a loaded spec's values.
"""

from __future__ import annotations

from functools import lru_cache

import numpy as np

from autoplace.errors import InputError
from autoplace.plan import OFFLOAD, RANK_ORDERS, RECOMPUTE, SCHEDULES, modules_code, modules_of

ATTENTION_KERNELS = ("cudnn", "flash3", "flash2", "triton", "sdpa", "flex", "eager", "flash")
ELEMENTWISE = ("fused", "compiled", "eager")
DISPATCH = ("alltoall", "deepep", "hybridep", "allgather")
SP_MODES = ("optional", "always", "never")
ETP_MODES = ("any", "tp-or-1", "1")
GROUP_MODES = ("any", "pp", "rounds")
SELECTIVE = ("attention", "op-sac")


def validate_runtime(rt) -> None:
    """Enumerated fields hold known values; a bad value is a one-line InputError naming it."""
    from autoplace.runtimes.recipes import RECIPES
    from autoplace.specs.regimes import REGIMES

    def bad(where, val, allowed):
        raise InputError(f"runtime {rt.name}: {where} = {val!r} is not one of {', '.join(map(str, allowed))}")
    k, s, d, pr, mem = rt.kernels, rt.supports, rt.defaults, rt.precision, rt.memory
    for where, val, allowed in (("[kernels] attention", k.attention, ATTENTION_KERNELS),
                                ("[kernels] elementwise", k.elementwise, ELEMENTWISE),
                                ("[kernels] moe_dispatch", k.moe_dispatch, DISPATCH),
                                ("[kernels] loss", k.loss, ("fused", "compiled", "eager")),
                                ("[kernels] mla_qkv", k.mla_qkv, ("fused", "eager")),
                                ("[kernels] grad_accum", k.grad_accum, ("fused", "hook", "autograd")),
                                ("[supports] sp", s.sp, SP_MODES), ("[supports] etp", s.etp, ETP_MODES),
                                ("[supports] vpp_group", s.vpp_group, GROUP_MODES),
                                ("[supports] stage_recompute", s.stage_recompute, ("uniform", "any")),
                                ("[defaults] regime", d.regime, tuple(REGIMES)),
                                ("[memory] selective", mem.selective, SELECTIVE),
                                ("[defaults] recompute", d.recompute, ("",) + RECOMPUTE),
                                ("[defaults] ep_policy", d.ep_policy, ("node", "data")),
                                ("[defaults] rank_order", d.rank_order, RANK_ORDERS)):
        if val not in allowed:
            bad(where, val, allowed)
    for where, vals, allowed in (("[supports] schedules", s.schedules, SCHEDULES),
                                 ("[supports] offload", s.offload, OFFLOAD),
                                 ("[supports] recompute", s.recompute, RECOMPUTE),
                                 ("[supports] rank_orders", s.rank_orders, RANK_ORDERS),
                                 ("[supports] zero", s.zero, (0, 1, 2, 3)),
                                 ("[precision] dtypes", pr.dtypes, ("bf16", "fp16", "fp8", "fp4", "fp32")),
                                 ("[precision] fp8_recipes", pr.fp8_recipes, tuple(RECIPES))):
        for v in vals:
            if v not in allowed:
                bad(where, v, allowed)
    known = set(WHY_KEYS)
    for k, _ in s.why:
        if k not in known:
            raise InputError(f"runtime {rt.name}: [supports] why has unknown key '{k}'; valid: {', '.join(WHY_KEYS)}")
    if rt.kernels.moe_fused_mlp and not s.fused_moe_mlp:
        raise InputError(f"runtime {rt.name}: moe_fused_mlp = true needs TE's fused grouped MLP, which this "
                         "stack does not have (Megatron-Core ≥ 0.18 --use-transformer-engine-op-fuser); "
                         "drop the setting or use --runtime megatron-core")
    if d.zero not in s.zero:
        raise InputError(f"runtime {rt.name}: [defaults] zero = {d.zero} is not in [supports] zero {list(s.zero)}")
    for name in pr.fp8_recipes:
        if RECIPES[name].gemm_dtype not in pr.dtypes:
            raise InputError(f"runtime {rt.name}: [precision] recipe '{name}' runs {RECIPES[name].gemm_dtype} "
                             "GEMMs, which dtypes does not list")


WHY_KEYS = ("zero", "zero-pp", "hold", "ddp-mp", "hsdp", "pp", "tp", "sp", "tp-overlap", "ep-overlap", "cp", "ep", "etp",
            "moe-model", "ep-overlap-mtp",
            "schedule", "vpp-group", "uneven", "offload", "offload-partial", "offload-zero", "recompute", "order",
            "stage-recompute", "recompute-modules", "precision", "fetch-sync")


def _a(x):
    return np.asarray(x)


def _codes(names, table):
    return [table.index(n) for n in names]


def _not_in(x, allowed):
    x = _a(x)
    return ~np.isin(x, np.asarray(list(allowed) or [-1]))


def moe_spec(caps, model) -> tuple[str, str] | None:
    """(name, flavor) of the registered MoE definition in `caps.moe_specs` with the model's layers,
    hidden size, expert count and top-k; None when none matches ("*": any model, None)."""
    key = (model.layers, model.hidden, model.num_experts, model.top_k)
    for e in caps.moe_specs:
        parts = e.split(":")
        if len(parts) == 6 and tuple(int(x) for x in parts[2:]) == key:
            return parts[0], parts[1]
    return None


def _hold(p):
    return (_a(p.zero) == 3) & ~_a(p.reshard_after_forward).astype(bool)


@lru_cache(maxsize=64)
def capability_rules(rt) -> tuple:
    """The plans `rt` cannot express, as vectorized rules (ids `RT-…`), in a stable order."""
    from autoplace.placement.rules import Rule
    s = rt.supports
    who = rt.name
    out = []

    why = dict(s.why)

    def add(rid, title, pred, msg):
        if rid in why:
            base, extra = msg, why[rid]
            msg = lambda c, p, base=base, extra=extra: f"{base(c, p)} ({extra})"  # noqa: E731
        out.append(Rule(f"RT-{rid}", "runtime", f"{who}: {title}", pred, msg))

    if set(s.zero) != {0, 1, 2, 3}:
        add("zero", "ZeRO stages", lambda c, p: _not_in(p.zero, s.zero),
            lambda c, p: f"zero={p.zero}: {who} runs ZeRO stages {', '.join(map(str, s.zero))} only")
    if s.max_zero_with_pp < 3:
        add("zero-pp", "ZeRO stage with pipeline parallelism",
            lambda c, p: (_a(p.pp) > 1) & (_a(p.zero) > s.max_zero_with_pp),
            lambda c, p: f"zero={p.zero} with pp={p.pp}: {who} allows ZeRO ≤ {s.max_zero_with_pp} with pipeline parallelism")
    if not s.zero_hold:
        add("hold", "ZeRO-3 without resharding after forward", lambda c, p: _hold(p),
            lambda c, p: f"zero=3 with reshard_after_forward=False: {who} always reshards parameters after forward")
    if not s.ddp_with_model_parallel:
        add("ddp-mp", "DDP only for pure data parallelism",
            lambda c, p: (_a(p.zero) == 0) & ((_a(p.tp) > 1) | (_a(p.pp) > 1) | (_a(p.cp) > 1)),
            lambda c, p: f"zero=0 with tp/pp/cp > 1: {who} applies DDP to pure data parallelism only; use zero=3")
    if not s.hsdp:
        add("hsdp", "replicate × shard meshes", lambda c, p: (_a(p.dp_replicate) > 1) & (_a(p.zero) >= 1),
            lambda c, p: f"dp_replicate={p.dp_replicate} (HSDP): {who} has no replicate × shard data mesh")
    if not s.pp:
        add("pp", "pipeline parallelism", lambda c, p: _a(p.pp) > 1,
            lambda c, p: f"pp={p.pp}: {who} has no pipeline parallelism")
    if not s.tp:
        add("tp", "tensor parallelism", lambda c, p: _a(p.tp) > 1,
            lambda c, p: f"tp={p.tp}: {who} has no tensor parallelism")
    if s.sp == "never":
        add("sp", "sequence parallelism", lambda c, p: _a(p.sp).astype(bool),
            lambda c, p: f"sp=1: {who} has no Megatron-style sequence parallelism")
    elif s.sp == "always":
        add("sp", "sequence parallelism with every TP", lambda c, p: (_a(p.tp) > 1) & ~_a(p.sp).astype(bool),
            lambda c, p: f"tp={p.tp} without sp: {who} always applies sequence parallelism with TP (set sp=1)")
    if not s.tp_overlap:
        add("tp-overlap", "TP communication overlap", lambda c, p: _a(p.tp_overlap).astype(bool),
            lambda c, p: f"tp_overlap=1: {who} has no TP communication overlap")
    if not s.ep_overlap:
        add("ep-overlap", "EP all-to-all overlap", lambda c, p: _a(getattr(p, "ep_overlap", False)).astype(bool),
            lambda c, p: f"ep_overlap=1: {who} does not overlap the EP all-to-all with compute")
    else:
        # Megatron-Core's asserts for overlap_moe_expert_parallel_comm (transformer_config.py): EP,
        # no full or block recompute, an interleaved schedule when pipelined
        add("ep-overlap", "EP all-to-all overlap: ep > 1, no full/block recompute, interleaved with pp > 1",
            lambda c, p: _a(getattr(p, "ep_overlap", False)).astype(bool)
            & ((_a(p.ep) <= 1) | ((_a(p.rc) >= 2) & ~((_a(p.rc) == 3) & (_a(p.recompute_layers) <= 0)))
               | ((_a(p.pp) > 1) & (_a(p.sched) != 1))),
            lambda c, p: f"ep_overlap with ep={p.ep}, recompute={p.recompute}, pp={p.pp}, schedule={p.schedule}: "
                         f"{who} overlaps the EP all-to-all only with ep > 1, no full or block recompute and, "
                         "with pp > 1, the interleaved schedule")
        # the same __post_init__ (megatron-core 0.16.1 … 0.19): at most one MTP layer, and with one,
        # pp > 1; the alltoall or flex dispatcher; CUDA graphs only through transformer_engine
        k = rt.kernels
        bad_stack = (k.moe_dispatch == "allgather") or bool(k.cuda_graphs and k.cuda_graph_experts)
        add("ep-overlap-mtp", "EP all-to-all overlap: ≤ 1 MTP layer, pp > 1 with one; alltoall/flex dispatch; "
            "no full-iteration CUDA graph",
            lambda c, p: _a(getattr(p, "ep_overlap", False)).astype(bool)
            & ((c.model.mtp_layers > 1) | ((c.model.mtp_layers == 1) & (_a(p.pp) <= 1)) | bad_stack),
            lambda c, p: (f"ep_overlap with {c.model.mtp_layers} MTP layer(s) at pp={p.pp}, dispatcher "
                          f"{k.moe_dispatch}{', full-iteration CUDA graphs' if k.cuda_graphs and k.cuda_graph_experts else ''}: "
                          f"{who} (megatron-core 0.16.1 TransformerConfig) overlaps the EP all-to-all only with "
                          "≤ 1 MTP layer and then pp > 1, the alltoall/flex dispatcher and per-layer "
                          "(transformer_engine) CUDA graphs"))
    if not s.cp:
        add("cp", "context parallelism", lambda c, p: _a(p.cp) > 1,
            lambda c, p: f"cp={p.cp}: {who} has no ring context parallelism")
    if "*" not in s.moe_specs:
        add("moe-model", "registered MoE model definitions",
            lambda c, p: (_a(p.tp) >= 1) & bool(c.model.is_moe and not c.model.states_only
                                                and moe_spec(s, c.model) is None),
            lambda c, p: (f"{c.model.name}: {who} builds MoE models only through its registered definitions ("
                          + ", ".join(e.split(":")[0] + " " + e.split(":")[1] for e in s.moe_specs)
                          + "), and this model matches none (layers, hidden, experts, top-k)"))
    if not s.ep:
        add("ep", "expert parallelism", lambda c, p: _a(p.ep) > 1,
            lambda c, p: f"ep={p.ep}: {who} has no expert parallelism")
    if s.etp != "any":
        allow_tp = s.etp == "tp-or-1"
        add("etp", "expert tensor parallelism",
            lambda c, p: (_a(p.ep) > 1) & (_a(p.t_exp) != 1) & ~((_a(p.t_exp) == _a(p.tp)) if allow_tp else False),
            lambda c, p: f"etp={p.t_exp}: {who} supports expert TP " + ("1 or = tp" if allow_tp else "1") + " only")
    sched = _codes(s.schedules, SCHEDULES)
    if set(sched) != {0, 1, 2}:
        add("schedule", "pipeline schedules", lambda c, p: (_a(p.pp) > 1) & _not_in(p.sched, sched),
            lambda c, p: f"schedule={p.schedule}: {who} runs {', '.join(s.schedules)} only")
    if s.vpp_group == "pp":
        add("vpp-group", "interleaved group size", lambda c, p: (_a(p.sched) == 1) & (_a(p.G) != _a(p.pp)),
            lambda c, p: f"vpp_group={p.G}: {who} runs interleaved groups of G = pp = {p.pp}")
    elif s.vpp_group == "rounds":
        # torch.distributed.pipelining ScheduleInterleaved1F1B: rounds = max(1, m // pp) and
        # microbatches_per_round = m / rounds, which must be an integer
        add("vpp-group", "interleaved group size = torch Interleaved1F1B rounds",
            lambda c, p: _rounds_bad(c, p),
            lambda c, p: _rounds_message(c, p, who))
    if not s.uneven_stages:
        add("uneven", "uneven pipeline stages",
            lambda c, p: _a(len(set(getattr(p, "layer_split", ()) or ())) > 1),
            lambda c, p: f"layer_split {list(p.layer_split)}: {who} splits layers evenly over stages")
    off = _codes(s.offload, OFFLOAD)
    if set(off) != {0, 1, 2, 3}:
        add("offload", "offload modes", lambda c, p: _not_in(p.off, off),
            lambda c, p: f"offload={p.offload}: {who} offloads " + (", ".join(x for x in s.offload if x != "none") or "nothing"))
    if not s.offload_partial:
        add("offload-partial", "partial optimizer offload",
            lambda c, p: (_a(p.off) >= 1) & (_a(p.offload_fraction) < 1),
            lambda c, p: f"offload_fraction={p.offload_fraction:g}: {who} offloads all or nothing")
    if s.offload_min_zero > 1:
        add("offload-zero", "offload needs a higher ZeRO stage",
            lambda c, p: (_a(p.off) == 1) & (_a(p.zero) < s.offload_min_zero),
            lambda c, p: f"offload=optimizer with zero={p.zero}: {who} offloads the optimizer with zero ≥ {s.offload_min_zero}")
    rc = _codes(s.recompute, RECOMPUTE)
    if set(rc) != {0, 1, 2, 3}:
        add("recompute", "recompute kinds",
            lambda c, p: _not_in(p.rc, rc) | (len(getattr(p, "stage_recompute", ()) or ()) > 0) & (3 not in rc),
            lambda c, p: f"recompute={p.recompute}: {who} offers {', '.join(s.recompute)}")
    add("recompute-modules", "named selective-recompute modules",
        lambda c, p: _a((np.asarray(getattr(p, "rc_mods", 0), dtype=np.int64) & ~modules_code(s.recompute_modules)) != 0),
        lambda c, p: (f"recompute_modules={'+'.join(modules_of(int(np.asarray(p.rc_mods))))}: {who} "
                      + (f"names {', '.join(s.recompute_modules)} only" if s.recompute_modules else
                         f"has no module list for selective recompute (its selective is {rt.memory.selective}); "
                         "drop recompute_modules")))
    orders = _codes(s.rank_orders, RANK_ORDERS)
    if set(orders) != {0, 1}:
        add("order", "rank order", lambda c, p: (_a(p.ep) > 1) & _not_in(p.order, orders),
            lambda c, p: f"rank_order={p.rank_order}: {who} builds the {s.rank_orders[0]} mesh")
    if s.stage_recompute == "uniform":
        add("stage-recompute", "one recompute count for every stage",
            lambda c, p: _a(len(set(int(v) for v in (getattr(p, "stage_recompute", ()) or ()))) > 1),
            lambda c, p: f"stage_recompute {list(p.stage_recompute)} recomputes a different number of layers on "
                         f"each stage; {who} takes one count for all stages")
    add("precision", "training precision and FP8 recipe",
        lambda c, p: _a(bool(c.train is not None and precision_refusals(rt, getattr(c, "hw", None), c.train))),
        lambda c, p: "; ".join(precision_refusals(rt, getattr(c, "hw", None), c.train)))
    if not s.fetch_sync:
        add("fetch-sync", "synchronous ZeRO-3 fetch",
            lambda c, p: _a(getattr(p, "fetch_sync", False)).astype(bool) & (_a(p.zero) == 3),
            lambda c, p: f"fetch_sync=1 is DeepSpeed ZeRO-3 as released in 2021; {who} does not run it")
    return tuple(out)


def _rounds(c, p):
    m = np.asarray(c.train.global_batch) // np.maximum(_a(p.mbs) * np.maximum(_a(p.dp), 1), 1)
    rounds = np.maximum(1, m // np.maximum(_a(p.pp), 1))
    return m, rounds


def _rounds_bad(c, p):
    if c.train is None:
        return _a(False)
    m, rounds = _rounds(c, p)
    return (_a(p.sched) == 1) & ((m % rounds != 0) | (_a(p.G) != m // rounds))


def _rounds_message(c, p, who):
    m, rounds = (int(x) for x in _rounds(c, p))
    if m % rounds:
        return (f"m={m} micro-batches is not a multiple of torch Interleaved1F1B's {rounds} rounds "
                f"({who} runs torch.distributed.pipelining)")
    return (f"vpp_group G={p.G}: torch's Interleaved1F1B runs rounds of G = {m // rounds} micro-batches for "
            f"m={m}, pp={p.pp} (set vpp_group={m // rounds})")


def refusals(rt, ctx, plan) -> list[str]:
    """Messages of the capability rules one plan violates (empty: `rt` can express it)."""
    return [r.message(ctx, plan) for r in capability_rules(rt) if bool(np.all(r.violated(ctx, plan)))]


def precision_refusals(rt, hw, train) -> list[str]:
    """Why `rt` cannot train in `train`'s precision / recipe on `hw` (empty: it can)."""
    from autoplace.runtimes.recipes import RECIPES
    out = []
    if train.precision not in rt.precision.dtypes:
        out.append(f"precision={train.precision}: {rt.name} trains in {', '.join(rt.precision.dtypes)}")
    recipe = getattr(train, "fp8_recipe", "")
    if train.precision in ("fp8", "fp4") and recipe:
        if recipe not in rt.precision.fp8_recipes:
            out.append(f"fp8 recipe '{recipe}': {rt.name} implements "
                       f"{', '.join(rt.precision.fp8_recipes) or 'no FP8 recipe'}")
        r = RECIPES.get(recipe)
        if r is not None and hw is not None and r.min_arch and getattr(hw, "arch", "") and \
                _arch_rank(hw.arch) < _arch_rank(r.min_arch):
            out.append(f"fp8 recipe '{recipe}' needs {r.min_arch} or newer; {hw.name} is {hw.arch}")
    return out


ARCHES = ("volta", "ampere", "hopper", "blackwell", "cdna3", "cdna4", "cpu")


def _arch_rank(a: str) -> int:
    return {"volta": 0, "ampere": 1, "cdna3": 1, "hopper": 2, "cdna4": 2, "blackwell": 3}.get(a, -1)
