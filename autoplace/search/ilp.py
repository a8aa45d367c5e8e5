"""Non-uniform pipeline plans: CP-SAT (OR-tools) assigns layers and recompute counts per stage.

Given a uniform plan with pp = p > 1 and v = 1 (1F1B or GPipe), choose for every stage i the number
of layers n_i (Σ n_i = L, n_i ≥ 1) and of fully recomputed layers r_i (0 ≤ r_i ≤ n_i) so that every
stage fits its own memory and the pipeline is as fast as possible. The embedding lives on stage 0
and the logits + cross-entropy on stage p−1 (heavier in time and memory), and 1F1B keeps p − i
micro-batches in flight on stage i (stage 0 holds the most activations), so the best split is rarely
even — and an even split does not exist at all when p does not divide L.

The coefficients come from the cost model itself, not from a second formula: per-stage memory from
`autoplace.cost.memory.stage_memory` and per-stage time (forward + backward of one micro-batch,
recompute included) from `autoplace.cost.step.stage_times`, each evaluated at a few (n, r) probe
points of the plan with `layer_split` / `stage_recompute` set. The model *is* linear in (n_i, r_i)
per stage (layers × per-layer terms, plus per-stage constants); the fit is checked on a fourth probe
and the solve refused if the residual is not negligible.

Integer program (times in µs, memory in MiB; memory coefficients rounded up so an accepted split
always fits, times to the nearest µs):

  minimize   (m − 1)·t_max + Σ_i t_i               (the step model's T_pipe for v = 1, scaled by v)
  subject to t_i = a_k(i) + b_k(i)·n_i + c_k(i)·r_i ≤ t_max,  k(i) ∈ {first, middle, last}
             α_i + β_i·n_i + γ_i·r_i ≤ limit            (every stage's own peak)
             Σ n_i = L,  1 ≤ n_i,  0 ≤ r_i ≤ n_i
             optionally (n_i, r_i) = (n_1, r_1) for the interior stages 1 … p−2 (`equal_middle`;
             off by default: `step.evaluate` times every stage of an explicit split)

Solved with CP-SAT (`ortools.sat.python.cp_model`, snake_case API), or `scipy.optimize.milp`
(HiGHS) when OR-tools is not installed. The refined plan is then re-evaluated by `evaluate` and only
kept if the full step time (DP exposure, optimizer, … included) is better.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from autoplace.errors import AutoplaceError

MIB = 2**20
US = 1e-6


@dataclass(frozen=True)
class StageModel:
    """Integer coefficients of the per-stage sub-problem."""
    L: int
    p: int
    m: int                      # micro-batches per step
    a: tuple                    # per stage: time constant (µs)
    b: tuple                    # per stage: time per layer (µs)
    c: tuple                    # per stage: time per recomputed layer (µs)
    alpha: tuple                # per stage: memory constant (MiB)
    beta: tuple                 # per stage: memory per layer (MiB)
    gamma: tuple                # per stage: memory per recomputed layer (MiB, ≤ 0)
    limit: int                  # MiB
    recompute: bool             # r_i free (else fixed 0)
    equal_middle: bool = False  # interior stages 1 … p−2 share (n, r)

    def stage_time(self, i, n, r) -> int:
        return self.a[i] + self.b[i] * n + self.c[i] * r

    def stage_mem(self, i, n, r) -> int:
        return self.alpha[i] + self.beta[i] * n + self.gamma[i] * r

    def objective(self, ns, rs) -> int:
        t = [self.stage_time(i, ns[i], rs[i]) for i in range(self.p)]
        return (self.m - 1) * max(t) + sum(t)

    def feasible(self, ns, rs) -> bool:
        return (sum(ns) == self.L and all(x >= 1 for x in ns) and all(0 <= r <= n for n, r in zip(ns, rs))
                and all(self.stage_mem(i, ns[i], rs[i]) <= self.limit for i in range(self.p))
                and (self.recompute or not any(rs))
                and (not self.equal_middle or (len(set(ns[1:-1])) <= 1 and len(set(rs[1:-1])) <= 1)))


@dataclass(frozen=True)
class ILPResult:
    layer_split: tuple
    stage_recompute: tuple
    objective: int              # µs (scaled pipeline time)
    status: str                 # OPTIMAL | FEASIBLE | INFEASIBLE | ...
    solver: str                 # cp-sat | highs | brute-force
    optimal: bool


class StageModelError(ValueError):
    """The plan lies outside what the per-stage linear model covers (pp < 2, interleaving, or a
    per-stage cost that is not linear in the layer counts): the ILP does not apply to it. Raised
    by `stage_model` on purpose; any other exception there is a cost-model bug and propagates."""


# ---- coefficients from the cost model ---------------------------------------------------------
def _probe_plan(plan, p, n, r, recompute):
    kw = {"layer_split": tuple([int(n)] * p)}
    if recompute:
        kw.update(stage_recompute=tuple([int(r)] * p), recompute="block", recompute_layers=0)
    return plan.with_(**kw)


def stage_model(ctx, hw, plan, headroom: float = 0.0, recompute: bool | None = None,
                check_linear: bool = True, equal_middle: bool = False) -> StageModel:
    """Fit the per-stage linear coefficients of `plan` (pp > 1, v = 1) from the cost functions."""
    from autoplace.cost import memory
    from autoplace.cost.step import stage_times
    from autoplace.plan import micro_batches
    p = int(plan.pp)
    L = int(ctx.model.layers)
    if p < 2:
        raise StageModelError("stage_model needs pp > 1")
    if plan.v != 1:
        raise StageModelError("non-uniform splits are modelled for 1F1B/GPipe (v = 1) only")
    if recompute is None:
        recompute = plan.recompute in ("none", "block")
    idx = np.arange(p)
    n0 = max(2, L // p)

    def mem(n, r):
        q = _probe_plan(plan, p, n, r, recompute)
        return np.broadcast_to(np.asarray(memory.stage_memory(ctx, hw, q, idx)["total"], dtype=float), (p,))

    def tim(n, r):
        q = _probe_plan(plan, p, n, r, recompute)
        st, _, _ = stage_times(ctx, hw, q)
        f = {k: float(np.asarray(st[k]["f"] + st[k]["b"])) for k in st}
        return np.array([f["first"] if i == 0 else (f["last"] if i == p - 1 else f["middle"]) for i in range(p)])

    with np.errstate(all="ignore"):
        m00, m10, m01 = mem(n0, 0), mem(n0 + 1, 0), mem(n0, 1)
        t00, t10, t01 = tim(n0, 0), tim(n0 + 1, 0), tim(n0, 1)
    beta, gamma = m10 - m00, (m01 - m00) if recompute else np.zeros(p)
    alpha = m00 - beta * n0
    b_, c_ = t10 - t00, (t01 - t00) if recompute else np.zeros(p)
    a_ = t00 - b_ * n0
    if check_linear:
        n3, r3 = n0 + 3, (2 if recompute else 0)
        with np.errstate(all="ignore"):
            m3, t3 = mem(n3, r3), tim(n3, r3)
        for name, got, want in (("memory", m3, alpha + beta * n3 + gamma * r3), ("time", t3, a_ + b_ * n3 + c_ * r3)):
            err = np.max(np.abs(got - want) / np.maximum(np.abs(got), 1e-12))
            if not np.isfinite(err) or err > 1e-6:
                raise StageModelError(f"per-stage {name} is not linear in (layers, recomputed layers) "
                                 f"(relative residual {err:.2e}); the ILP would be inexact")
    limit = memory.memory_limit(hw, headroom)
    up = lambda x: int(math.ceil(x / MIB - 1e-9))  # noqa: E731
    us = lambda x: int(round(x / US))  # noqa: E731
    m = int(round(float(micro_batches(plan, ctx.train.global_batch))))
    return StageModel(L=L, p=p, m=m,
                      a=tuple(us(x) for x in a_), b=tuple(us(x) for x in b_), c=tuple(us(x) for x in c_),
                      alpha=tuple(up(x) for x in alpha), beta=tuple(up(x) for x in beta),
                      gamma=tuple(up(x) for x in gamma), limit=int(math.floor(limit / MIB)),
                      recompute=bool(recompute), equal_middle=bool(equal_middle))


# ---- solvers ------------------------------------------------------------------------------------
def _bounds(sm: StageModel):
    nmax = []
    for i in range(sm.p):
        hi = sm.L - (sm.p - 1)
        # memory with maximal recompute (r = n) bounds n from above
        per = sm.beta[i] + (sm.gamma[i] if sm.recompute else 0)
        if per > 0:
            hi = min(hi, max(0, (sm.limit - sm.alpha[i]) // per))
        nmax.append(max(0, hi))
    return nmax


def solve_cpsat(sm: StageModel, time_limit_s: float = 10.0, workers: int = 1, seed: int = 0) -> ILPResult:
    from ortools.sat.python import cp_model
    nmax = _bounds(sm)
    if any(h < 1 for h in nmax) or sum(nmax) < sm.L:
        return ILPResult((), (), -1, "INFEASIBLE", "cp-sat", True)
    mdl = cp_model.CpModel()
    n = [mdl.new_int_var(1, nmax[i], f"n{i}") for i in range(sm.p)]
    r = [mdl.new_int_var(0, nmax[i] if sm.recompute else 0, f"r{i}") for i in range(sm.p)]
    mdl.add(sum(n) == sm.L)
    t_hi = [sm.a[i] + max(sm.b[i], 0) * nmax[i] + max(sm.c[i], 0) * nmax[i] for i in range(sm.p)]
    t_lo = [sm.a[i] + min(sm.b[i], 0) * nmax[i] + min(sm.c[i], 0) * nmax[i] for i in range(sm.p)]
    tmax = mdl.new_int_var(min(0, min(t_lo)), max(t_hi), "tmax")
    ts = []
    even = sm.L // sm.p
    for i in range(sm.p):
        mdl.add(r[i] <= n[i])
        mdl.add(sm.alpha[i] + sm.beta[i] * n[i] + sm.gamma[i] * r[i] <= sm.limit)
        ti = sm.a[i] + sm.b[i] * n[i] + sm.c[i] * r[i]
        mdl.add(tmax >= ti)
        ts.append(ti)
        mdl.add_hint(n[i], min(max(1, even), nmax[i]))
        mdl.add_hint(r[i], 0)
    if sm.equal_middle:
        for i in range(2, sm.p - 1):
            mdl.add(n[i] == n[1])
            mdl.add(r[i] == r[1])
    mdl.minimize((sm.m - 1) * tmax + sum(ts))
    solver = cp_model.CpSolver()
    solver.parameters.num_workers = workers
    solver.parameters.max_time_in_seconds = time_limit_s
    solver.parameters.random_seed = seed
    st = solver.solve(mdl)
    name = solver.status_name(st)
    if st not in (cp_model.OPTIMAL, cp_model.FEASIBLE):
        return ILPResult((), (), -1, name, "cp-sat", st == cp_model.INFEASIBLE)
    ns = tuple(int(solver.value(x)) for x in n)
    rs = tuple(int(solver.value(x)) for x in r)
    return ILPResult(ns, rs, sm.objective(ns, rs), name, "cp-sat", st == cp_model.OPTIMAL)


def solve_milp(sm: StageModel, time_limit_s: float = 10.0) -> ILPResult:
    """scipy.optimize.milp (HiGHS). Variables x = [n_0..n_{p-1}, r_0..r_{p-1}, t_max]."""
    from scipy.optimize import Bounds, LinearConstraint, milp
    p = sm.p
    nmax = _bounds(sm)
    if any(h < 1 for h in nmax) or sum(nmax) < sm.L:
        return ILPResult((), (), -1, "INFEASIBLE", "highs", True)
    nv = 2 * p + 1
    c = np.zeros(nv)
    c[:p] = sm.b
    c[p:2 * p] = sm.c
    c[-1] = sm.m - 1
    A, lb, ub = [], [], []

    def constrain(coef: dict, low: float, high: float) -> None:
        """low ≤ Σ coef[j]·x[j] ≤ high (j: variable index, −1 = t_max)."""
        row = np.zeros(nv)
        for j, v in coef.items():
            row[j] = v
        A.append(row)
        lb.append(low)
        ub.append(high)

    constrain({i: 1 for i in range(p)}, sm.L, sm.L)                               # Σ n_i = L
    for i in range(p):
        constrain({p + i: 1, i: -1}, -np.inf, 0)                                  # r_i ≤ n_i
        constrain({i: sm.beta[i], p + i: sm.gamma[i]}, -np.inf, sm.limit - sm.alpha[i])  # memory
        constrain({i: sm.b[i], p + i: sm.c[i], -1: -1}, -np.inf, -sm.a[i])        # t_i ≤ t_max
    if sm.equal_middle:
        for i in range(2, p - 1):
            for off in (0, p):
                constrain({off + i: 1, off + 1: -1}, 0, 0)
    lo = np.r_[np.ones(p), np.zeros(p), -np.inf]
    hi = np.r_[nmax, (nmax if sm.recompute else np.zeros(p)), np.inf]
    res = milp(c, integrality=np.r_[np.ones(2 * p), 0], bounds=Bounds(lo, hi),
               constraints=LinearConstraint(np.array(A), lb, ub),
               options={"time_limit": time_limit_s, "presolve": True})
    if res.x is None:
        return ILPResult((), (), -1, {2: "INFEASIBLE"}.get(res.status, f"status {res.status}"), "highs", res.status == 2)
    x = np.round(res.x).astype(int)
    ns, rs = tuple(int(v) for v in x[:p]), tuple(int(v) for v in x[p:2 * p])
    if not sm.feasible(ns, rs):           # rounding of a relaxed value: fall back to enumeration nearby
        return ILPResult((), (), -1, "ROUNDING", "highs", False)
    return ILPResult(ns, rs, sm.objective(ns, rs), "OPTIMAL" if res.status == 0 else "FEASIBLE", "highs",
                     res.status == 0)


def solve_brute(sm: StageModel) -> ILPResult:
    """Every composition of L into p parts and every r (small instances; tests)."""
    import itertools
    best = None
    nmax = _bounds(sm)

    def comps(total, parts, i=0):
        if parts == 1:
            if 1 <= total <= nmax[i]:
                yield (total,)
            return
        for x in range(1, min(nmax[i], total - (parts - 1)) + 1):
            for rest in comps(total - x, parts - 1, i + 1):
                yield (x,) + rest

    for ns in comps(sm.L, sm.p):
        ranges = [range(0, (n if sm.recompute else 0) + 1) for n in ns]
        for rs in itertools.product(*ranges):
            if not sm.feasible(ns, rs):
                continue
            obj = sm.objective(ns, rs)
            key = (obj, ns, rs)
            if best is None or key < best:
                best = key
    if best is None:
        return ILPResult((), (), -1, "INFEASIBLE", "brute-force", True)
    return ILPResult(best[1], best[2], best[0], "OPTIMAL", "brute-force", True)


def solve(sm: StageModel, time_limit_s: float = 10.0, solver: str = "auto") -> ILPResult:
    if solver in ("auto", "cp-sat"):
        try:
            import ortools.sat.python.cp_model  # noqa: F401
        except ImportError:
            if solver == "cp-sat":
                raise AutoplaceError("--method ilp: OR-tools is not installed (pip install ortools)") from None
        else:
            return solve_cpsat(sm, time_limit_s)
    return solve_milp(sm, time_limit_s)


def refine(ctx, hw, plan, headroom: float = 0.0, time_limit_s: float = 10.0, solver: str = "auto"):
    """Best non-uniform variant of a uniform plan (pp > 1, v = 1), or None if none applies.

    Tries layer split + per-stage recompute (base recompute none/block) and, for selective/full
    recompute plans, the layer split alone. Returns (Plan, ILPResult, StageModel) of the variant
    with the best ILP objective; the caller compares `evaluate` step times with the uniform plan.
    """
    if plan.pp < 2 or plan.v != 1 or ctx.model.states_only:
        return None
    variants = [True] if plan.recompute in ("none", "block") else [False, True]
    best = None
    for rec in variants:
        base = plan if (not rec or plan.recompute in ("none", "block")) else plan.with_(recompute="none")
        try:
            sm = stage_model(ctx, hw, base, headroom, recompute=rec)
        except StageModelError:
            continue
        res = solve(sm, time_limit_s, solver)
        if not res.layer_split:
            continue
        kw = {"layer_split": res.layer_split}
        if rec:
            kw.update(recompute="block", recompute_layers=0, stage_recompute=res.stage_recompute)
        cand = base.with_(**kw)
        if best is None or res.objective < best[1].objective:
            best = (cand, res, sm)
    return best
