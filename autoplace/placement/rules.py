"""Composition rules as data (placement_semantics.md §4.2–4.5).

Each `Rule` has an id (C1…C6, D1…D6, K1…K6, GI, SC), a numpy-broadcastable predicate
`violated(ctx, p)` over plan fields (a `Plan` of scalars or a `PlanBatch` of arrays), and a
one-line message for a single plan. The same objects are used by `estimate` (explain a rejection),
the enumerator (prune millions of plans at once, counting what each rule removed) and the
exporters. Rules with `illegal=False` are cost/advisory notes (K1, K3, K4, K6): the plan stays legal.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable

import numpy as np

from autoplace.plan import micro_batches, module_flags, module_on, modules_of


@dataclass(frozen=True)
class Ctx:
    model: object      # ModelSpec
    train: object      # TrainingSpec
    world: int         # W
    hw: object = None  # HardwareSpec, when a rule needs it (launcher node size, FP8 architecture)

    @property
    def shaped(self) -> bool:
        return not self.model.states_only


@dataclass(frozen=True)
class Rule:
    id: str
    kind: str                                   # structural | divisibility | semantic | GI | SC
    title: str
    violated: Callable                          # (ctx, p) -> bool | bool array
    message: Callable                           # (ctx, plan) -> str
    illegal: bool = True


@dataclass(frozen=True)
class Violation:
    rule: str
    message: str

    def to_dict(self) -> dict:
        return {"rule": self.rule, "message": self.message}


def _a(x):
    return np.asarray(x)


def _false(p):
    return np.zeros(np.shape(p.tp), dtype=bool)


# ---- obligations (K5, §4.2, §4.3) ------------------------------------------------------------
def obligations(ctx: Ctx, plan) -> dict[str, tuple[str, str]]:
    """Reductions/refreshes a composed plan must perform: name → (condition id, why)."""
    m, t = ctx.model, ctx.train
    ob: dict[str, tuple[str, str]] = {}
    if plan.dp * plan.cp > 1:
        ob["dp_grad_reduce"] = ("GI", f"dense gradients must be summed over dp×cp = {plan.dp * plan.cp}")
    if plan.cp > 1:
        ob["cp_grad_reduce"] = ("GI", f"gradients must also be reduced over the cp axis (c = {plan.cp})")
    if plan.sp and plan.tp > 1:
        ob["sp_norm_reduce"] = ("GI", "SP LayerNorm/RMSNorm gradients are partial per sequence shard: "
                                      f"all-reduce over tp = {plan.tp}")
    if ctx.shaped and m.tied_embeddings and plan.pp > 1:
        ob["tied_embedding_reduce"] = ("GI", "tied embedding copies on the first and last stage need the "
                                             "embedding-group all-reduce")
    if ctx.shaped and m.is_moe:
        ob["expert_grad_reduce"] = ("GI", "expert gradients must be reduced over the expert-data-parallel group")
    if plan.o_mode == 1 and plan.p_mode == 0:
        ob["param_allgather"] = ("SC", "ZeRO-1/2 must all-gather the updated parameter shards after the step")
    if plan.p_mode >= 1:
        ob["param_gather_fresh"] = ("SC", "ZeRO-3/FSDP gathers must read the current shards")
    if plan.recompute != "none" and t.dropout:
        ob["rng_replay"] = ("SC", "recomputation must replay the forward's dropout RNG")
    return ob


def _omitted(ctx, plan, kind):
    omit = getattr(plan, "omit", ())
    if not omit or np.ndim(plan.tp):
        return []
    ob = obligations(ctx, plan)
    return [(n, ob[n][1]) for n in omit if n in ob and ob[n][0] == kind]


def _lcm(a, b):
    return a * b // np.gcd(a, b)


def _layers_ok(ctx, p):
    L = ctx.model.layers
    split = getattr(p, "layer_split", ())
    e, lo = int(bool(getattr(p, "account_embedding", False))), int(bool(getattr(p, "account_loss", False)))
    if split:
        # a first / last stage may hold the embedding / loss alone when they count as a layer
        ends = (split[0] >= 1 - e) and (split[-1] >= 1 - lo) and min(split[1:-1] or (1,)) >= 1
        return len(split) == int(p.pp) and sum(split) == L and (min(split) >= 1 or ends)
    if e or lo:
        # Megatron-Core asserts L + e + l divisible by pp·v (the units of every virtual stage)
        return _a((L + e + lo) % (_a(p.pp) * np.where(_a(p.sched) == 1, _a(p.vpp), 1)) == 0)
    return _a(L % _a(p.pp) == 0)


def _chunks_bad(ctx, p):
    """Interleaving needs whole layers in every virtual chunk: L/pp divisible by vpp for an even
    split; with an explicit layer_split (chunks then need not be equal, Megatron's
    --pipeline-model-parallel-layout) every stage holds at least vpp layers."""
    split = getattr(p, "layer_split", ())
    e, lo = int(bool(getattr(p, "account_embedding", False))), int(bool(getattr(p, "account_loss", False)))
    if split:
        inner = list(split)
        inner[0] += e                      # the embedding / loss fill a virtual chunk as a layer would
        inner[-1] += lo
        return _a(min(inner) < _a(p.vpp))
    if e or lo:
        return _false(p)                   # L + e + l over pp·v is rule D3's divisibility
    return _a((ctx.model.layers // _a(p.pp)) % _a(p.vpp) != 0)


def _stage_recompute_bad(ctx, p) -> bool:
    srec = getattr(p, "stage_recompute", ())
    if not srec or np.ndim(p.tp):
        return False
    if len(srec) != int(p.pp) or min(srec) < 0:
        return True
    if not ctx.shaped:
        return False
    split = getattr(p, "layer_split", ()) or (ctx.model.layers // max(int(p.pp), 1),) * int(p.pp)
    return any(r > l for r, l in zip(srec, split))


def _module_misfits(ctx):
    """(module, why it does not apply to this model) for the listed modules that need a feature."""
    m = ctx.model
    if not ctx.shaped:
        return ()
    out = []
    if not m.mla:
        out.append(("mla_up_proj", f"mla_up_proj recomputes MLA's up-projections and {m.name} has standard "
                                   "attention; use core_attn"))
    if not m.is_moe:
        out.append(("moe_act", f"moe_act recomputes the expert activation and {m.name} has no MoE layers; use mlp"))
    if m.is_moe and m.n_moe_layers >= m.layers:
        out.append(("mlp", f"mlp recomputes the dense layers' MLP and every layer of {m.name} is MoE; use moe_act"))
    return tuple(out)


def _modules_bad(ctx, p):
    named, _, _ = module_flags(p)
    misfit = False
    for name, _ in _module_misfits(ctx):
        misfit = misfit | module_on(p, name)
    return named & ((_a(p.rc) != 1) | misfit)


def _modules_message(ctx, p) -> str:
    mods = "+".join(modules_of(int(np.asarray(p.rc_mods))))
    if np.any(np.asarray(p.rc) != 1):
        return f"recompute_modules={mods} needs recompute=selective (got recompute={p.recompute})"
    why = [w for name, w in _module_misfits(ctx) if np.any(module_on(p, name))]
    return f"recompute_modules={mods}: " + "; ".join(why)


def _m(ctx, p):
    return micro_batches(p, ctx.train.global_batch)


def _moe(ctx):
    return ctx.shaped and ctx.model.is_moe


RULES: list[Rule] = [
    # ---- structural ---------------------------------------------------------------------------
    Rule("C1", "structural", "one mode per (state, axis)",
         lambda c, p: _a(False) if np.ndim(p.tp) else _a(len(set(p.zero_axes.split(","))) != len(p.zero_axes.split(","))),
         lambda c, p: f"zero_axes '{p.zero_axes}' names an axis twice: one mode per (state, axis)"),
    Rule("C2", "structural", "degree product equals the world size",
         lambda c, p: (_a(p.dp) * p.cp * p.tp * p.pp != c.world) | (_a(p.dp) < 1) | (_a(p.dp) % _a(p.dp_replicate) != 0),
         lambda c, p: (f"dp·cp·tp·pp = {p.dp}·{p.cp}·{p.tp}·{p.pp} = {p.dp * p.cp * p.tp * p.pp} ≠ {c.world} GPUs"
                       if p.dp * p.cp * p.tp * p.pp != c.world or p.dp < 1 else
                       f"dp = {p.dp} is not divisible by dp_replicate = {p.dp_replicate}")
         if p.dp >= 1 else f"tp·pp·cp = {p.tp * p.pp * p.cp} does not divide {c.world} GPUs"),
    Rule("C3", "structural", "ZeRO/FSDP shards only over data axes of true replicas",
         lambda c, p: (_a(False) if np.ndim(p.tp) else _a(p.zero_over_model_axis and (p.o_mode or p.g_mode or p.p_mode))),
         lambda c, p: f"zero_axes '{p.zero_axes}': sharding dense states over a model-splitting axis (tp/pp) "
                      "is ill-formed; shard over dp (and cp)"),
    Rule("C4", "structural", "monotone sharding lattice on the data axis",
         lambda c, p: ((_a(p.p_mode) > 0) & ((_a(p.g_mode) == 0) | (_a(p.o_mode) == 0)))
         | ((_a(p.g_mode) >= 1) & (_a(p.o_mode) == 0)),
         lambda c, p: f"(P,G,O) = {_modes_str(p)} on the data axis is outside the lattice "
                      "(R,R,R) (R,R,S) (R,S,S) (SG-hold,S,S) (SG,S,S)"),
    Rule("C5", "structural", "M only on activations; SG only on parameters",
         lambda c, p: _a(p.g_mode) == 2,
         lambda c, p: "gradients cannot be sharded-with-gather (SG applies to parameters and CP K/V)"),
    Rule("C6", "structural", "sequence parallelism needs tp > 1",
         lambda c, p: _a(p.sp) & (_a(p.tp) == 1),
         lambda c, p: "sp=1 with tp=1: sequence parallelism uses the TP axis (Megatron silently disables it)"),
    # ---- divisibility -------------------------------------------------------------------------
    Rule("D1", "divisibility", "heads divisible by tp (GQA: kv heads a multiple or divisor of tp)",
         lambda c, p: (_a(c.model.heads % _a(p.tp) != 0)
                       | ((c.model.a_kv % _a(p.tp) != 0) & (_a(p.tp) % c.model.a_kv != 0))) if c.shaped else _false(p),
         lambda c, p: (f"heads={c.model.heads} is not divisible by tp={p.tp}" if c.model.heads % p.tp else
                       f"kv_heads={c.model.a_kv} is neither a multiple nor a divisor of tp={p.tp}")),
    Rule("D2", "divisibility", "FFN width divisible by tp",
         lambda c, p: (_a(c.model.ffn_hidden % _a(p.tp) != 0)
                       | (_a(c.model.f_expert % _a(p.t_exp) != 0) if c.model.is_moe else _false(p)))
         if c.shaped else _false(p),
         lambda c, p: f"ffn_hidden={c.model.ffn_hidden} (expert {c.model.f_expert}) is not divisible by "
                      f"tp={p.tp} / etp={p.t_exp}"),
    Rule("D3", "divisibility", "layers split evenly over stages; interleaving constraints",
         lambda c, p: (~_a(_layers_ok(c, p)) if c.shaped else _false(p))
         | (_a(p.vpp) > 1) & (_a(p.sched) != 1)
         | ((_a(p.sched) == 1) & ((_a(p.pp) == 1) | (_a(p.vpp) < 2)
                                  | (_chunks_bad(c, p) if c.shaped else _false(p))
                                  | (_m(c, p) < _a(p.pp))
                                  | (_a(p.G) < _a(p.pp)) | (_a(p.G) > _m(c, p))
                                  | ((_m(c, p) % _a(p.G) != 0) & (_m(c, p) % _a(p.G) < _a(p.pp))))),
         lambda c, p: _d3_message(c, p)),
    Rule("D4", "divisibility", "global batch divisible by mbs·dp (and by pp_flushes schedules)",
         lambda c, p: (_a(c.train.global_batch) % (_a(p.mbs) * np.maximum(_a(p.dp), 1)) != 0)
         | ((_a(p.pp) > 1) & (_m(c, p) % _a(getattr(p, "pp_flushes", 1)) != 0)),
         lambda c, p: (f"global batch {c.train.global_batch} is not divisible by mbs·dp = {p.mbs}·{p.dp} "
                       f"= {p.mbs * max(p.dp, 1)}") if c.train.global_batch % (p.mbs * max(p.dp, 1)) else
                      (f"{c.train.global_batch // (p.mbs * max(p.dp, 1))} micro-batches do not split into "
                       f"pp_flushes={getattr(p, 'pp_flushes', 1)} equal pipeline schedules")),
    Rule("D5", "divisibility", "sequence divisible for SP / CP",
         lambda c, p: ((_a(p.sp) & (_a(p.cp) == 1)) & (c.train.seq_len % _a(p.tp) != 0))
         | ((_a(p.cp) > 1) & (c.train.seq_len % (2 * _a(p.cp)) != 0))
         | ((_a(p.cp) > 1) & _a(p.sp) & (c.train.seq_len % _lcm(2 * _a(p.cp), _a(p.cp) * _a(p.tp)) != 0)),
         lambda c, p: _d5_message(c, p)),
    Rule("D6", "divisibility", "experts divisible by ep; W divisible by etp·ep·pp",
         lambda c, p: ((_a(p.ep) > 1) & (not _moe(c)))
         | (((c.model.num_experts % _a(p.ep) != 0)
             | (c.world % (_a(p.t_exp) * _a(p.ep) * _a(p.pp)) != 0)
             | ((_a(p.ep) > 1) & ((_a(p.dp) * _a(p.cp) * _a(p.tp)) % (_a(p.ep) * _a(p.t_exp)) != 0)))
            if _moe(c) else _false(p)),
         lambda c, p: (f"ep={p.ep} on a dense model (no experts)" if not _moe(c) else
                       f"num_experts={c.model.num_experts} % ep={p.ep} ≠ 0 or {c.world} GPUs not divisible by "
                       f"etp·ep·pp = {p.t_exp}·{p.ep}·{p.pp}")),
    # ---- semantic ------------------------------------------------------------------------------
    Rule("K1", "semantic", "PP × ZeRO-2/3: in-step P and G unsharded (torch pipelining + FSDP2)",
         lambda c, p: (_a(p.pp) > 1) & (_a(p.zero) >= 2),
         lambda c, p: ("pp > 1 with ZeRO-2/3: modelled as torch pipelining + FSDP2 — P and G held unsharded "
                       "within the step, one AG(P) + one RS(G) per step; DeepSpeed's PipelineEngine rejects it")
         if c.train.rt.comm.pp_defer_grad_sync else
         (f"pp > 1 with ZeRO-2/3 on {c.train.rt.name}: its pipeline stage module is not itself sharded, so "
          "every micro-batch's backward reduce-scatters and reshards (comm.pp_defer_grad_sync = false)"),
         illegal=False),
    Rule("K2", "semantic", "offload requires the matching sharding",
         lambda c, p: ((_a(p.off) >= 1) & (_a(p.o_mode) == 0))
         | ((_a(p.off) >= 2) & (_a(p.g_mode) == 0))
         | ((_a(p.off) == 3) & (_a(p.p_mode) != 1))
         | ~((_a(p.offload_fraction) > 0) & (_a(p.offload_fraction) <= 1)),
         lambda c, p: (f"offload={p.offload} needs "
                       + {1: "ZeRO ≥ 1 (sharded optimizer state)", 2: "ZeRO ≥ 2 (sharded gradients)",
                          3: "ZeRO-3 with resharding (parameter offload is ZeRO-3 only in DeepSpeed)"}.get(p.off, "")
                       if p.off else "") + (f"; offload_fraction must be in (0, 1], got {p.offload_fraction}"
                                            if not 0 < p.offload_fraction <= 1 else "")),
    Rule("K3", "semantic", "full recompute with TP repeats TP collectives",
         lambda c, p: (_a(p.rc) >= 2) & (_a(p.tp) > 1),
         lambda c, p: "full recompute with tp > 1 repeats the forward TP collectives (+50% TP traffic)",
         illegal=False),
    Rule("K4", "semantic", "keep tp inside one NVLink domain",
         lambda c, p: _false(p),  # needs hardware; evaluated by the cost model (hierarchical links)
         lambda c, p: "tp spans more than one NVLink domain", illegal=False),
    Rule("K6", "semantic", "schedule fixes activation multiplicity per stage",
         lambda c, p: _a(p.pp) > 1,
         lambda c, p: "activation memory per stage follows the schedule's in-flight micro-batches (max over stages)",
         illegal=False),
    Rule("R1", "semantic", "recompute layers within the stage",
         lambda c, p: ((_a(p.rc) == 3) & ((_a(p.recompute_layers) < 0)
                                          | ((_a(p.recompute_layers) * _a(p.pp) > c.model.layers) if c.shaped else _false(p))))
         | _a(_stage_recompute_bad(c, p)),
         lambda c, p: (f"stage_recompute {list(p.stage_recompute)} needs pp={p.pp} entries, each between 0 "
                       "and the stage's layer count" if _stage_recompute_bad(c, p) else
                       f"recompute=block with recompute_layers={p.recompute_layers} exceeds the "
                       f"{c.model.layers // max(p.pp, 1)} layers of a stage")),
    Rule("R2", "semantic", "recompute modules: selective recompute, and the modules the model has",
         lambda c, p: _modules_bad(c, p),
         lambda c, p: _modules_message(c, p)),
    # ---- correctness conditions ----------------------------------------------------------------
    Rule("GI", "GI", "gradient integrity",
         lambda c, p: _a(bool(_omitted(c, p, "GI"))),
         lambda c, p: "; ".join(f"omits {n}: {why}" for n, why in _omitted(c, p, "GI"))),
    Rule("SC", "SC", "state consistency",
         lambda c, p: _a(bool(_omitted(c, p, "SC"))),
         lambda c, p: "; ".join(f"omits {n}: {why}" for n, why in _omitted(c, p, "SC"))),
]
RULES_BY_ID = {r.id: r for r in RULES}


def _modes_str(p) -> str:
    from autoplace.placement.compose import dp_modes
    return "(" + ",".join(m.value for m in dp_modes(p)) + ")"


def _d3_message(c, p) -> str:
    L = c.model.layers
    if c.shaped and not _layers_ok(c, p):
        if p.layer_split:
            return f"layer_split {list(p.layer_split)} must have pp={p.pp} entries summing to {L}"
        if p.account_embedding or p.account_loss:
            units = L + int(p.account_embedding) + int(p.account_loss)
            return (f"layers + embedding + loss = {units} is not divisible by pp·vpp = {p.pp * p.v} "
                    "(Megatron-Core's pipeline accounting splits them evenly)")
        from autoplace.plan import lighter_ends_split
        hint = ":".join(str(x) for x in lighter_ends_split(L, int(p.pp))) if int(p.pp) <= L else None
        return (f"layers={L} % pp={p.pp} ≠ 0: an even stage split needs L divisible by pp "
                + (f"(give layer_split, e.g. layer_split={hint}, or search --method ilp)" if hint
                   else "(pp is larger than the layer count)"))
    if p.vpp > 1 and p.sched != 1:
        return f"vpp={p.vpp} requires schedule=interleaved"
    m = micro_batches(p, c.train.global_batch)
    if p.sched == 1:
        if p.pp == 1 or p.vpp < 2:
            return "interleaved schedule needs pp > 1 and vpp ≥ 2"
        if c.shaped and p.layer_split and bool(_chunks_bad(c, p)):
            return (f"layer_split {list(p.layer_split)}: every stage needs at least vpp={p.vpp} layers "
                    "(one per virtual chunk)")
        if c.shaped and not p.layer_split and not (p.account_embedding or p.account_loss) and (L // p.pp) % p.vpp:
            return f"layers per stage {L // p.pp} % vpp={p.vpp} ≠ 0"
        if m < p.pp:
            return f"interleaved needs micro-batches m={m:g} ≥ pp={p.pp}"
        return (f"interleaved group size G={p.G} with m={m:g}: need pp ≤ G ≤ m and (m mod G = 0 or "
                f"m mod G ≥ pp) (m mod G = {m % p.G:g}); try vpp_group={int(m)}")
    return "D3"


def _d5_message(c, p) -> str:
    s = c.train.seq_len
    if p.cp > 1 and s % (2 * p.cp):
        return f"seq_len={s} % (2·cp) = {s % (2 * p.cp)} ≠ 0 (load-balanced causal chunks)"
    if p.cp > 1 and p.sp:
        l = math.lcm(2 * p.cp, p.cp * p.tp)
        return f"CP+SP: seq_len={s} % lcm(2c, c·t) = {s} % {l} ≠ 0 ((s/c) % t = {(s // p.cp) % p.tp})"
    return f"seq_len={s} % tp={p.tp} ≠ 0 (sequence parallelism splits the sequence over tp)"


def check(ctx: Ctx, plan, extra_rules=()) -> list[Violation]:
    """Every violated legality rule of one plan, with its one-line reason. `extra_rules` (e.g. a
    runtime's or launcher's capability rules, `autoplace.runtimes.check`) are checked after RULES."""
    out = []
    for r in (*RULES, *extra_rules):
        if r.illegal and bool(r.violated(ctx, plan)):
            out.append(Violation(r.id, r.message(ctx, plan)))
    return out


def notes(ctx: Ctx, plan) -> list[Violation]:
    """Advisory/cost rules that apply to a legal plan (K1, K3, K6)."""
    return [Violation(r.id, r.message(ctx, plan)) for r in RULES
            if not r.illegal and bool(r.violated(ctx, plan))]


def legal_mask(ctx: Ctx, batch, counts: dict | None = None, extra_rules=()):
    """Vectorized: boolean mask of legal plans; `counts[rule]` = plans that rule removed first.
    `extra_rules` are applied after RULES (same semantics, counted under their own ids)."""
    n = np.shape(batch.tp)[0]
    ok = np.ones(n, dtype=bool)
    for r in (*RULES, *extra_rules):
        if not r.illegal:
            continue
        v = np.broadcast_to(np.asarray(r.violated(ctx, batch), dtype=bool), (n,))
        if counts is not None:
            counts[r.id] = counts.get(r.id, 0) + int(np.count_nonzero(v & ok))
        ok &= ~v
    return ok
