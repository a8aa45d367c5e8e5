"""Optuna search over the same space (`--method bayes`): TPE with memory as a constraint.

For spaces too large to enumerate, and later for measured objectives (a trial = a profiled run).

Parametrization — legal by construction, static for multivariate TPE: every knob is one
categorical over the values it takes in the enumeration's own tables (`autoplace.search.enumerate`,
i.e. after the composition rules), and a trial is decoded hierarchically: the legal degree rows
with the requested tp (else the nearest legal tp), then pp among those, …, then inside each option
group the requested ZeRO variant, replicate degree, mbs … (else the nearest legal one). Every trial
is therefore a legal plan (`check` confirms it), and the space never changes between trials
(define-by-run conditionals would make multivariate TPE fall back to independent sampling).

Memory is a constraint: `trial.set_constraint("memory", peak/limit − 1)` (Optuna ≥ 5; feasible
≤ 0), falling back to `constraints_func` on older Optuna. The study is seeded with
`study.enqueue_trial` at the analytic optimum (see `analytic_seed`).
"""

from __future__ import annotations

import math
import time

import numpy as np

from autoplace.search.batch import PlanBatch

DEG_KNOBS = ("tp", "pp", "cp", "ep", "t_exp")


class Decoder:
    """Knob values ↔ plan over the legal tables of an `Enumeration` (built with collapse_block=False).

    Every knob is one static categorical — the values it takes anywhere in the legal tables — so
    TPE learns which value of each knob is good (tp = 2, zero = 3, mbs = 4 …) regardless of the
    others. A trial's values are decoded hierarchically: among the legal degree rows left, the one
    with the requested tp (else the nearest tp on a log scale), then pp among those, …; then inside
    each option group of that row the same for its knobs. Every decoded plan is therefore legal, and
    a value that is unavailable in context maps to its nearest legal neighbour, not to an arbitrary
    index."""

    def __init__(self, en):
        self.en = en
        rows = np.nonzero(en.totals_eval > 0)[0]
        self.rows = rows
        self.choices: dict = {}
        self.deg_knobs = []
        for k in DEG_KNOBS:
            vals = _uniq(en.deg[k][rows]) if rows.size else []
            if len(vals) > 1:
                self.deg_knobs.append(k)
                self.choices[k] = vals
        self.group_knobs = []
        for g in en.groups:
            ks = []
            if rows.size:
                sel = np.isin(g.owner, rows)
                for k in g.cols:
                    vals = _uniq(g.cols[k][sel])
                    if len(vals) > 1:
                        ks.append(k)
                        self.choices[k] = vals
            self.group_knobs.append(ks)
        self.names = list(self.deg_knobs) + [k for ks in self.group_knobs for k in ks]

    @staticmethod
    def _nearest(values: np.ndarray, want):
        if want in values:
            return want
        v = np.asarray(values, dtype=float)
        w = float(want)
        if (v > 0).all() and w > 0:
            d = np.abs(np.log(v) - np.log(w))
        else:
            d = np.abs(v - w)
        return values[int(np.argmin(d))]

    def decode(self, want: dict) -> PlanBatch:
        en = self.en
        cand = self.rows
        for k in self.deg_knobs:
            v = self._nearest(en.deg[k][cand], want[k])
            cand = cand[en.deg[k][cand] == v]
        d = int(cand[0])
        cols = {c: en.deg[c][[d]] for c in en.deg}
        for g, ks in zip(en.groups, self.group_knobs):
            a, c = g.offsets[d], g.counts[d]
            opt = np.arange(a, a + c)
            for k in ks:
                v = self._nearest(g.cols[k][opt], want[k])
                opt = opt[g.cols[k][opt] == v]
            for name, arr in g.cols.items():
                cols[name] = arr[opt[:1]]
        return PlanBatch(**cols)

    def encode(self, plan) -> dict | None:
        """Knob values that decode to `plan` (None when the plan is not in the tables)."""
        en = self.en
        b = PlanBatch.from_plans([plan]) if not isinstance(plan, PlanBatch) else plan
        want = {}
        cand = self.rows
        for k in self.deg_knobs:
            v = _first(b, k)
            if v not in en.deg[k][cand]:
                return None
            want[k] = v
            cand = cand[en.deg[k][cand] == v]
        rest = [k for k in DEG_KNOBS if k not in self.deg_knobs]
        cand = cand[np.all([en.deg[k][cand] == getattr(b, k)[0] for k in rest], axis=0)] if rest else cand
        if cand.size == 0:
            return None
        d = int(cand[0])
        for g, ks in zip(en.groups, self.group_knobs):
            a, c = g.offsets[d], g.counts[d]
            opt = np.arange(a, a + c)
            for k in ks:
                v = _first(b, k)
                if v not in g.cols[k][opt]:
                    return None
                want[k] = _py(v, self.choices[k])
                opt = opt[g.cols[k][opt] == v]
        return {k: _py(v, self.choices[k]) for k, v in want.items()}


def _first(b, k):
    """Row 0's value of knob k: a column, or the scalar a batch keeps for an extra `Plan` field
    that its plans do not vary (e.g. a seed plan at the field's default)."""
    return np.asarray(getattr(b, k)).reshape(-1)[0].item()


def _uniq(values: np.ndarray) -> list:
    """Sorted distinct values as Python scalars (Optuna categorical choices)."""
    return [v.item() if hasattr(v, "item") else v for v in np.unique(values)]


def _py(v, choices: list):
    """v as the equal member of `choices` (so Optuna matches an enqueued value to its category)."""
    for c in choices:
        if c == v:
            return c
    return v


def _coarse(space):
    """A small sub-space for the analytic seed: every degree, ZeRO level, HSDP split, SP choice,
    non-block recompute mode and mbs ≤ 8 — but no offload, no block recompute, no TP overlap,
    1F1B or vpp 2 with G = pp, one rank order. Cheap at any GPU count."""
    from autoplace.search.space import Choice
    mbs = space.mbs
    mbs = Choice(tuple(v for v in (1, 2, 4, 8) if not mbs.values or v in mbs.values) or mbs.values[:1])
    vpp = Choice((2,)) if (not space.vpp.values or 2 in space.vpp.values) else Choice(space.vpp.values[:1])
    rc = tuple(c for c in space.recompute if c != 3) or space.recompute[:1]
    return space.with_(tp_overlap=space.tp_overlap[:1], recompute=rc,
                       offload=(0,) if 0 in space.offload else space.offload[:1],
                       offload_fraction=space.offload_fraction[-1:], mbs=mbs,
                       schedule=tuple(c for c in space.schedule if c in (0, 1)) or space.schedule[:1],
                       vpp=vpp, vpp_group=space.vpp_group[:1], rank_order=space.rank_order[:1],
                       dp_overlap=space.dp_overlap[:1])


def analytic_seed(ctx, hw, space, headroom: float = 0.0, k: int = 3, extra_rules=()) -> list:
    """The best plans of the coarse sub-space (exhaustive, vectorized): the analytic optimum of the
    common recipes, cheap at any size. Returns up to k Plans, best first."""
    from autoplace.search.exhaustive import run_exhaustive
    r = run_exhaustive(ctx, hw, _coarse(space), headroom, top_k=k, collapse_block=True, extra_rules=extra_rules)
    return [r["top"].plan(i) for i in range(len(r["top"]))]


def run_bayes(ctx, hw, space, headroom: float = 0.0, n_trials: int = 200, seed: int = 0,
              seed_plans=(), timeout_s: float | None = None, top_k: int = 5, progress=None,
              extra_rules=()) -> dict:
    """TPE search; returns the same result dict as run_exhaustive (optimal = False).

    extra_rules: `Rule`s applied after `rules.RULES`, in the enumeration and in each trial's
    legality count (`autoplace.search.pruning`)."""
    from autoplace._imports import require
    optuna = require("optuna", "--method bayes (also what --method auto picks for the largest spaces; "
                               "--method exhaustive needs nothing more)")

    from autoplace.cost.memory import memory_limit
    from autoplace.cost.step import evaluate
    from autoplace.search.enumerate import enumerate_space

    t0 = time.perf_counter()
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    en = enumerate_space(ctx, space, collapse_block=False, extra_rules=extra_rules)
    dec = Decoder(en)
    if en.evaluated == 0:
        return {"top": PlanBatch.empty(), "steps": np.zeros(0), "closest": None, "closest_ratio": math.inf,
                "stats": {"candidates": en.candidates, "legal": 0, "feasible": 0,
                          "pruned_by_rule": dict(sorted(en.pruned_by_rule.items())), "evaluated": 0,
                          "method": "bayes", "optimal": False, "seconds": time.perf_counter() - t0},
                "enumeration": en}
    limit = float(memory_limit(hw, headroom))
    use_set_constraint = hasattr(optuna.trial.Trial, "set_constraint")
    kw = {"seed": seed, "n_startup_trials": 10}
    if not use_set_constraint:
        kw["constraints_func"] = lambda ft: (ft.user_attrs.get("memory_violation", 1.0),)
    sampler = optuna.samplers.TPESampler(**kw)
    study = optuna.create_study(direction="minimize", sampler=sampler)
    seen: dict = {}

    for sp in seed_plans:
        u = dec.encode(sp) if sp is not None else None
        if u is not None:
            study.enqueue_trial(u, skip_if_exists=True)

    def objective(trial):
        want = {k: trial.suggest_categorical(k, dec.choices[k]) for k in dec.names}
        b = dec.decode(want)
        plan = b.plan(0)
        key = plan
        if key in seen:
            step, viol, illegal = seen[key][:3]
        else:
            illegal = sum(1 for r in en.rules if r.illegal and bool(r.violated(ctx, plan)))
            with np.errstate(all="ignore"):
                ev = evaluate(ctx, hw, b, headroom)
            step = float(np.asarray(ev["step_s"]).reshape(-1)[0])
            peak = float(np.asarray(ev["peak_bytes"]).reshape(-1)[0])
            viol = peak / limit - 1.0
            if not math.isfinite(step):
                step = 1e9
            seen[key] = (step, viol, illegal, b)
        trial.set_user_attr("memory_violation", float(viol))
        if use_set_constraint:
            trial.set_constraint("memory", float(viol))
            trial.set_constraint("rules", float(illegal))
        if progress is not None:
            progress(trial.number + 1, n_trials)
        return step

    state = {"expanded": None}

    def local_search(study, trial):
        """When the incumbent improves and nothing is queued, queue its one-knob neighbours (each
        knob moved to each other value, decoded to the nearest legal plan, unseen plans only):
        a coordinate-descent step that TPE's density model alone takes many trials to make."""
        from optuna.trial import TrialState
        feas = [t for t in study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,))
                if t.user_attrs.get("memory_violation", 1.0) <= 0 and t.value is not None and t.value < 1e9]
        if not feas or study.get_trials(deepcopy=False, states=(TrialState.WAITING,)):
            return
        best = min(feas, key=lambda t: t.value)
        if state["expanded"] == best.number:
            return
        state["expanded"] = best.number
        budget = max(0, n_trials - len(study.trials))
        queued = set()
        for k in dec.names:
            for v in dec.choices[k]:
                if len(queued) >= budget // 2:
                    return
                if v == best.params.get(k):
                    continue
                want = dict(best.params, **{k: v})
                plan = dec.decode(want).plan(0)
                if plan in seen or plan in queued:
                    continue
                queued.add(plan)
                study.enqueue_trial(want, skip_if_exists=True)

    study.optimize(objective, n_trials=n_trials, timeout=timeout_s, gc_after_trial=False,
                   callbacks=[local_search])
    vals = list(seen.values())
    feas = sorted((v for v in vals if v[1] <= 0 and v[2] == 0), key=lambda v: v[0])
    best = feas[:top_k]
    top = PlanBatch.concat([v[3] for v in best]) if best else PlanBatch.empty()
    closest, ratio = None, math.inf
    if not best and vals:
        v = min(vals, key=lambda v: v[1] if v[2] == 0 else math.inf)
        closest, ratio = v[3], v[1] + 1.0
    stats = {"candidates": en.candidates, "legal": int(en.totals_kept.sum()), "feasible": None,
             "pruned_by_rule": dict(sorted(en.pruned_by_rule.items())), "evaluated": len(seen),
             "trials": len(study.trials), "method": "bayes", "optimal": False,
             "seconds": time.perf_counter() - t0}
    return {"top": top, "steps": np.array([v[0] for v in best]), "stats": stats, "closest": closest,
            "closest_ratio": ratio, "enumeration": en, "study": study}
