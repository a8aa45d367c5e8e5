"""`run_search`: the entry point of `autoplace search` and the benchmarks.

Methods
- `exhaustive`: every legal uniform plan evaluated (exact optimum under the model; `optimal: true`).
- `ilp`: exhaustive (with bounds: the same top k), then CP-SAT re-splits the layers and recompute
  counts of the top plans that use a pipeline (non-uniform stages); a refined plan replaces its
  uniform parent when `evaluate` says it is faster.
- `bayes`: Optuna TPE over the same space, seeded with the optimum of the coarse sub-space (never
  with an exhaustive optimum: an exhaustive run that finished is already the answer). For spaces
  with measured trials or objectives the model cannot enumerate.
- `auto`: exhaustive with bounds (`autoplace.search.bounds`: exact, the same top k as evaluating
  every plan); with `families` (--diverse) `exhaustive` when the plans to evaluate are at
  most `AUTO_EXHAUSTIVE_MAX`, else `bayes`; then the ILP refinement when the winner has a
  1F1B/GPipe pipeline.
"""

from __future__ import annotations

import math
import time

import numpy as np

from autoplace.errors import InputError, NoFeasiblePlanError

AUTO_EXHAUSTIVE_MAX = 40_000_000       # evaluations (≈ 40 s single core at ~1 M/s)
MAX_GRID_CELLS = 200_000_000           # option cells the enumerator materializes (≈ 200 MB of masks)
MAX_CANDIDATES = 20_000_000_000        # candidate plans counted (upper bound) before the search refuses
DEFAULT_TOKENS_PER_STEP = 2**22        # "~4M tokens per step" (4,194,304 = 4 Mi tokens, Llama-style)
METHODS = ("auto", "exhaustive", "ilp", "bayes")
GIB = 2**30


def _divisors(n: int) -> list[int]:
    return [d for d in range(1, n + 1) if n % d == 0]


def default_global_batch(seq_len: int, world: int, tokens: int = DEFAULT_TOKENS_PER_STEP) -> tuple[int, str]:
    """Global batch (sequences) for ~`tokens` per step that admits legal plans.

    B0 = tokens / seq_len. D = the largest divisor of the GPU count not above B0 (the most
    data-parallel degree one sequence per GPU allows); B = the multiple of D nearest to B0 (at least
    D). Then dp = D and every divisor of D divide B, so micro-batching (rule D4) never rules out the
    data-parallel degrees — with power-of-two counts this is just B0 rounded.
    """
    b0 = max(1.0, tokens / seq_len)
    D = max(d for d in _divisors(world) if d <= b0) if world >= 1 else 1
    B = max(D, int(round(b0 / D)) * D)
    note = (f"global batch {B} sequences × {seq_len} = {B * seq_len:,} tokens per step: the multiple of "
            f"{D} (largest divisor of {world} GPUs ≤ {tokens:,}/{seq_len} = {b0:g}) nearest to {b0:g}")
    return B, note


def _divisors_of(n: int) -> list[int]:
    """Divisors of n by trial division up to √n (fast for any GPU count)."""
    small, large = [], []
    i = 1
    while i * i <= n:
        if n % i == 0:
            small.append(i)
            if i * i != n:
                large.append(n // i)
        i += 1
    return small + large[::-1]


def _choice_divs(choice, bound: int) -> list[int]:
    if choice.values:
        return [v for v in choice.values if isinstance(v, int) and bound % v == 0]
    hi = choice.hi if choice.hi is not None else bound
    return [d for d in _divisors_of(bound) if choice.lo <= d <= hi and (not choice.pow2 or d & (d - 1) == 0)]


def space_size(ctx, space) -> tuple[int, int]:
    """(candidate plans, option-grid cells) of `space` for ctx — an upper bound computed from the
    degree rows and per-knob option counts, without building anything. The enumerator's largest
    allocation is rows × the largest data-parallel degree (the HSDP replicate grid)."""
    W, m = ctx.world, ctx.model
    L = m.layers if not m.states_only else 1
    moe = (not m.states_only) and m.is_moe
    B = ctx.train.global_batch
    misc = len(space.rank_order) * len(space.dp_overlap)
    for _, v in space.extras:
        misc *= len(v)
    tpo = 1 + len(space.sp) * len(space.tp_overlap)
    z = sum(len(space.reshard_after_forward) if zz == 3 else 1 for zz in space.zero)
    o = sum(len(space.offload_fraction) if oo else 1 for oo in space.offload)
    cand = cells = rows = 0
    max_dp = 1
    for tp in _choice_divs(space.tp, W):
        for pp in _choice_divs(space.pp, W // tp):
            rc = len(space.recompute) + (L // pp if 3 in space.recompute else 0)
            sched = 1 + (len(space.vpp.values) if space.vpp.values else 4) * len(space.vpp_group) if pp > 1 else 1
            for cp in _choice_divs(space.cp, W // (tp * pp)):
                dp = W // (tp * pp * cp)
                n_ep = len(_choice_divs(space.ep, W // pp)) * len(space.etp) if moe else 1
                per_dp = B // dp if B % dp == 0 else 0
                mbs = len([v for v in _choice_divs(space.mbs, per_dp)]) if per_dp else 1
                nrep = len(_choice_divs(space.dp_replicate, dp))
                rows += n_ep
                max_dp = max(max_dp, dp)
                cand += n_ep * misc * tpo * rc * mbs * sched * z * nrep * o
    cells = rows * max_dp if not space.dp_replicate.values else rows * len(space.dp_replicate.values)
    return cand, cells


def check_size(ctx, space) -> None:
    """One-line InputError naming --gpus when the enumeration would be too large to build."""
    cand, cells = space_size(ctx, space)
    if cells > MAX_GRID_CELLS or cand > MAX_CANDIDATES:
        raise InputError(f"--gpus {ctx.world:,}: the search space would hold ~{cand:,.0f} candidate plans "
                         f"({cells:,.0f} option cells; limits {MAX_CANDIDATES:,} and {MAX_GRID_CELLS:,}): "
                         "give fewer --gpus, or a space with explicit degree lists (--space FILE.toml)")


def no_legal_message(ctx, stats: dict) -> str:
    pr = sorted(stats.get("pruned_by_rule", {}).items(), key=lambda kv: -kv[1])[:3]
    top = ", ".join(f"{k} {v:,}" for k, v in pr)
    m = ctx.model
    return (f"no legal plan: none of the {stats.get('candidates', 0):,} candidate plans for {m.name} on "
            f"{ctx.world:,} GPUs (global batch {ctx.train.global_batch}, seq {ctx.train.seq_len}) passes the rules"
            + (f" (pruned most by {top})" if top else "")
            + "; change --gpus, --global-batch or --seq-len, or see --explain")


def _result_plans(res) -> list:
    top = res["top"]
    return [top.plan(i) for i in range(len(top))]


def run_search(ctx, hw, space, method: str = "auto", top_k: int = 5, headroom: float = 0.0,
               progress=None, trials: int = 200, seed: int = 0, chunk: int | None = None,
               workers: int | None = None, families: bool = False, extra_rules=(), bounded: bool | None = None) -> dict:
    """Search `space` for ctx (model, training, world) on hw.

    Returns {plans: [Plan], steps: [s], stats: {...}, closest: Plan | None, closest_ratio,
    enumeration}; with `families` also `families` [(family, step, Plan)], the best plan of each
    plan family (autoplace.search.families), fastest first. Raises NoFeasiblePlanError when no legal
    plan fits (its `closest` attribute carries the plan that came closest) or none is legal.

    bounded: evaluate with bounds (`autoplace.search.bounds`: the same top k, far fewer plans
    evaluated, fit counts not kept); None → with `auto` and `ilp`, not with `exhaustive`, which
    evaluates (and counts) every plan.

    extra_rules: rules beyond the composition rules (a launcher's / runtime's, `autoplace.search.
    launchers`); a space cut to a runtime (`space.runtime`) adds that runtime's capability rules.
    """
    from autoplace.search.enumerate import DEFAULT_CHUNK, enumerate_space
    from autoplace.search.exhaustive import run_exhaustive
    if method not in METHODS:
        raise InputError(f"--method must be one of {', '.join(METHODS)}, got '{method}'")
    if top_k < 1:
        raise InputError(f"--top-k must be ≥ 1, got {top_k}")
    if not 0.0 <= headroom < 1.0:
        raise InputError(f"--memory-headroom must be in [0, 1), got {headroom}")
    t0 = time.perf_counter()
    chunk = chunk or DEFAULT_CHUNK
    space_note = ""
    if getattr(hw, "host_is_device", False) and any(o != 0 for o in space.offload):
        # offloading to the host frees nothing when the host memory is the device memory
        space = space.with_(offload=(0,))
        space_note = f"offload left out: on {hw.name} the host memory is the device memory"
    rules = list(extra_rules)
    if getattr(space, "runtime", ""):
        from autoplace.runtimes import load_runtime
        from autoplace.runtimes.check import capability_rules
        have = {r.id for r in rules}
        rules += [r for r in capability_rules(load_runtime(space.runtime)) if r.id not in have]
    rules = tuple(rules)
    check_size(ctx, space)
    en = enumerate_space(ctx, space, chunk=chunk, collapse_block=True, extra_rules=rules)
    chosen = method
    reason = ""
    if families and method == "bayes":
        raise InputError("--diverse needs the exhaustive search: use --method auto, exhaustive or ilp")
    # the ILP refines the top k: the bounded search's are exact
    bounded = (method == "ilp" if bounded is None else bool(bounded)) and not families
    if method == "auto":
        if not families and en.groups and en.groups[-1].name == "state":
            chosen, bounded = "exhaustive", True
            reason = (f"{en.evaluated:,} plans: exhaustive with bounds (exact; plans whose lower bound on step "
                      "time exceeds the best found are never evaluated)")
        elif en.evaluated <= AUTO_EXHAUSTIVE_MAX:
            chosen = "exhaustive"
            reason = (f"{en.evaluated:,} plans to evaluate ≤ {AUTO_EXHAUSTIVE_MAX:,}: exhaustive (exact)")
        else:
            chosen = "bayes"
            reason = (f"{en.evaluated:,} plans to evaluate > {AUTO_EXHAUSTIVE_MAX:,}: Optuna TPE "
                      f"({trials} trials) seeded with the coarse-space optimum")
    if chosen in ("exhaustive", "ilp"):
        res = run_exhaustive(ctx, hw, space, headroom, top_k=top_k, chunk=chunk, progress=progress,
                             enumeration=en, workers=workers, families=families, bounded=bounded)
        if bounded:
            n_skip = res["stats"].get("pruned_by_bound", 0)
            reason = (reason or "requested: exhaustive with bounds (exact)") + \
                f"; {res['stats']['evaluated']:,} evaluated, {n_skip:,} ruled out by the bound"
    elif families:
        raise InputError(f"--diverse needs the exhaustive search, and {en.evaluated:,} plans to evaluate are more "
                         f"than the {AUTO_EXHAUSTIVE_MAX:,} that --method auto searches exhaustively; "
                         "pass --method exhaustive or narrow the space")
    else:
        from autoplace.search.bayes import analytic_seed, run_bayes
        # never seeded by an exhaustive run: one that finished would already be the answer
        seeds = analytic_seed(ctx, hw, space, headroom, extra_rules=rules)
        seed_note = "coarse-space optimum"
        res = run_bayes(ctx, hw, space, headroom, n_trials=trials, seed=seed, seed_plans=seeds,
                        top_k=top_k, progress=progress, extra_rules=rules)
        res["stats"]["seed"] = seed_note
        if not reason:
            reason = f"Optuna TPE ({trials} trials) seeded with the {seed_note}"
    stats = res["stats"]
    plans = _result_plans(res)
    steps = [float(s) for s in res["steps"]]
    stats["method"] = chosen
    # non-uniform refinement
    if chosen == "ilp" or (plans and method == "auto" and plans[0].pp > 1 and plans[0].v == 1):
        plans, steps, info = refine_top(ctx, hw, plans, steps, headroom, top_k,
                                        only_first=(chosen != "ilp"), space=space if chosen == "ilp" else None,
                                        en=res["enumeration"] if chosen == "ilp" else None, rules=rules)
        stats["ilp"] = info
        if plans and plans[0].layer_split:
            stats["method"] = chosen + "+ilp" if chosen != "ilp" else "ilp"
            stats["optimal"] = False
            stats["optimal_note"] = ("exact over the uniform plans of the space; the non-uniform winner is the "
                                     "CP-SAT optimum of its parent's per-stage sub-problem, not proven over all "
                                     "non-uniform plans")
    stats["method_reason"] = reason or {"exhaustive": "requested: every legal plan evaluated (exact)",
                                        "ilp": "requested: exhaustive, then CP-SAT per-stage layer split and recompute",
                                        "bayes": "requested"}.get(chosen, "")
    if space_note:
        stats["space_note"] = space_note
    stats["seconds"] = time.perf_counter() - t0
    out = {"plans": plans, "steps": steps, "stats": stats, "closest": None, "closest_ratio": math.inf,
           "enumeration": en}
    if families:
        out["families"] = _family_best(res.get("families", {}), plans, steps)
    if not plans:
        cb = res.get("closest")
        closest = cb.plan(0) if cb is not None and len(cb) else None
        out["closest"], out["closest_ratio"] = closest, res.get("closest_ratio", math.inf)
        legal = stats.get("legal", 0)
        err = NoFeasiblePlanError(no_legal_message(ctx, stats) if not legal and closest is None
                                  else no_fit_message(ctx, hw, closest, headroom, stats))
        err.closest = closest
        err.result = out
        raise err
    return out


def _family_best(fam: dict, plans: list, steps: list) -> list:
    """[(family, step, Plan)] fastest first; a refined (non-uniform) winner replaces its family's
    uniform best when faster."""
    from autoplace.search.families import family_of
    best = {name: (float(s), b.plan(0)) for name, (s, b) in fam.items()}
    for p, s in zip(plans[:1], steps[:1]):
        f = family_of(p)
        if f not in best or s < best[f][0]:
            best[f] = (float(s), p)
    return sorted(((f, s, p) for f, (s, p) in best.items()), key=lambda t: t[1])


def _pp_variants(ctx, space, plan, limit: int = 6) -> list:
    """Pipelined 1F1B variants of a plan with other pp (same tp, cp, other knobs), including pp that
    do not divide the layer count — only a non-uniform split can run those."""
    W, L, B = ctx.world, ctx.model.layers, ctx.train.global_batch
    rest = W // (plan.tp * plan.cp)
    out = []
    for pp in sorted(v for v in space.pp.resolve(rest) if rest % v == 0 and 1 < v <= L):
        dp = rest // pp
        if pp == plan.pp or B % (plan.mbs * dp) or (plan.dp_replicate > 1 and dp % plan.dp_replicate):
            continue
        sched = plan.schedule if plan.schedule != "interleaved" else "1f1b"
        if sched not in ("1f1b", "gpipe"):
            continue
        out.append(plan.with_(pp=pp, dp=dp, schedule=sched, vpp=1, vpp_group=0,
                              recompute_layers=min(plan.recompute_layers, max(0, L // pp - 1))))
    # the closest pp first
    out.sort(key=lambda q: abs(q.pp - max(plan.pp, 2)))
    return out[:limit]


def _uneven_parents(ctx, en, templates, limit: int = 64, rules=()) -> list:
    """Pipelined plans on degree rows that only an uneven split can run (pp ∤ L, rule D3), with the
    other knobs of the best uniform plans; every other rule must hold."""
    from autoplace.placement.rules import check
    L, B = ctx.model.layers, ctx.train.global_batch
    out = []
    d = en.deg
    for i in range(d["tp"].shape[0]):
        tp, pp, cp, dp, ep, etp = (int(d[k][i]) for k in ("tp", "pp", "cp", "dp", "ep", "t_exp"))
        if pp < 2 or L % pp == 0 or pp > L or B % dp:
            continue
        # each template as it is and, when it shards parameters or gradients, with the distributed
        # optimizer instead (runtimes without ZeRO-2/3 under pipelining refuse the former: RT-zero-pp)
        tpls = list(templates) + [t.with_(zero=1, reshard_after_forward=True) for t in templates if t.zero >= 2]
        for tpl in tpls:
            mbs = tpl.mbs if B % (tpl.mbs * dp) == 0 else 1
            q = tpl.with_(tp=tp, pp=pp, cp=cp, dp=dp, ep=ep, etp=0 if etp == tp else etp, mbs=mbs,
                          dp_replicate=tpl.dp_replicate if dp % tpl.dp_replicate == 0 else 1,
                          schedule="1f1b" if tpl.schedule == "interleaved" else tpl.schedule, vpp=1, vpp_group=0,
                          recompute="none" if tpl.recompute == "block" else tpl.recompute, recompute_layers=0,
                          sp=tpl.sp and tp > 1, tp_overlap=tpl.tp_overlap and tpl.sp and tp > 1)
            if [v.rule for v in check(ctx, q, rules)] == ["D3"] and q not in out:
                out.append(q)
    return out[:limit]


def refine_top(ctx, hw, plans, steps, headroom, top_k, only_first=False, time_limit_s: float = 10.0,
               space=None, en=None, rules=()):
    """CP-SAT refinement of the pipelined plans among the top-k (and, with `space`, of pipelined
    variants of them with other pp, even those that do not divide L); returns (plans, steps, info)."""
    from autoplace.cost.step import evaluate
    from autoplace.placement.rules import check
    from autoplace.search.ilp import StageModelError, refine
    info = {"refined": 0, "improved": 0, "solver": None, "status": {}}
    new = list(zip(steps, range(len(plans)), plans))
    parents = []
    for j, p in enumerate(plans[:1] if only_first else plans):
        if p.pp >= 2 and p.v == 1:
            parents.append((j, p))
        if space is not None:
            parents += [(j, q) for q in _pp_variants(ctx, space, p)]
    if en is not None:
        parents += [(len(plans), q) for q in _uneven_parents(ctx, en, plans[:2], rules=rules)]
    seen = set()
    for j, p in parents:
        if p in seen:
            continue
        seen.add(p)
        try:
            r = refine(ctx, hw, p, headroom, time_limit_s)
        except StageModelError as e:
            info["status"][str(e)] = info["status"].get(str(e), 0) + 1
            continue
        if r is None:
            continue
        q, ilp_res, _ = r
        info["refined"] += 1
        info["solver"] = ilp_res.solver
        info["status"][ilp_res.status] = info["status"].get(ilp_res.status, 0) + 1
        if check(ctx, q, rules):          # composition rules and the launcher's/runtime's rules
            continue
        with np.errstate(all="ignore"):
            ev = evaluate(ctx, hw, q, headroom)
        s = float(np.asarray(ev["step_s"]))
        if bool(np.asarray(ev["fits"])) and (not steps or s < steps[-1] * (1 - 1e-9) or len(new) < top_k):
            if any(t[2] == q for t in new):
                continue
            info["improved"] += int(not steps or s < steps[0] * (1 - 1e-9))
            new.append((s, len(new) + 1000, q))
    new.sort(key=lambda t: (t[0], t[1]))
    new = new[:top_k]
    return [t[2] for t in new], [t[0] for t in new], info


def no_fit_message(ctx, hw, plan, headroom: float, stats: dict) -> str:
    """'no legal plan fits …; closest …: stage i needs X GiB of Y GiB (over by Z): terms …'."""
    from autoplace.cost import memory as M
    limit = float(M.memory_limit(hw, headroom))
    head = (f"no feasible plan: none of the {stats.get('legal') or 0:,} legal plans "
            f"({stats.get('candidates', 0):,} candidates) fits {limit / GIB:.2f} GiB per GPU on {hw.name}")
    if plan is None:
        return head + " (no legal plan at all: see pruned_by_rule with --explain)"
    stages = [M.stage_memory(ctx, hw, plan, i) for i in range(plan.pp)]
    tot = [float(np.asarray(s["total"])) for s in stages]
    i = int(np.argmax(tot))
    host, hlim = float(np.max(M.host_need(ctx, plan))), float(M.host_limit(hw, ctx.world))
    if tot[i] <= limit and hlim > 0 and host > hlim:
        return (f"{head} and its host memory; closest: {plan.short()} — fits the GPU ({tot[i] / GIB:.2f} GiB) "
                f"but offloads {host / GIB:.2f} GiB per GPU to host memory, over the {hlim / GIB:.2f} GiB share "
                f"of the node's {hw.host_memory_bytes / GIB:,.0f} GiB (× {M.HOST_USABLE} / {min(hw.gpus_per_node, ctx.world)} GPUs)")
    terms = {k: float(np.asarray(v)) for k, v in stages[i].items() if k != "total"}
    over = tot[i] - limit
    big = sorted(terms.items(), key=lambda kv: -kv[1])[:3]
    main, mv = big[0]
    fix = (f"{main} alone ({mv / GIB:.2f} GiB) exceeds the limit" if mv > limit else
           f"cutting {main} by {over / GIB:.2f} GiB would fit")
    return (f"{head}; closest: {plan.short()} — stage {i} needs {tot[i] / GIB:.2f} GiB, over by "
            f"{over / GIB:.2f} GiB; largest terms " + ", ".join(f"{k} {v / GIB:.2f} GiB" for k, v in big)
            + f" ({fix})")
