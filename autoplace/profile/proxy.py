"""Proxy runs of a candidate plan and the anchored prediction (torch-free: plans and cost math only).

A candidate P trains an L-layer model on W ranks. Its proxy runs on w ≤ W ranks and keeps every
per-rank shape that decides kernel speed: the TP, CP and EP degrees (within a node), micro-batch,
sequence, hidden, heads, kv heads, experts per rank, precision and recompute; it trains a few layers
of one pipeline stage (pp = 1, `layers` of the stage's) and shrinks DP to what is left of w
(`proxy_of`).

The anchored prediction keeps the cost model's structure and replaces its per-layer terms by the
measured ones. With proxies at two layer counts (`anchored_device`, what `autoplace tune` and
benchmarks/anchored_proxies.py use): the measured per-layer slope fixes the device speed k (GEMM,
attention, memory-bound kernels and host time per op scaled together) at which the model's slope
matches, the measured intercept gives δ (embedding, head, optimizer, fixed overhead), and

    T_anchored(P) = T_model(P on the k-scaled device) + δ

so the full plan's DP traffic and how much of it compute hides, P2P, the pipeline bubble and the
optimizer on the full plan's shards are extrapolated analytically at the measured speed. With one
proxy (`anchored`): the measured step minus the modelled terms that do not scale with the layers,
over the modelled layer terms, is a ratio k applied to the full plan's layer terms and bubble:

    T_anchored(P) = k · (layer terms + bubble)(P) + rest(P)
"""

from __future__ import annotations

from dataclasses import dataclass

LAYER_TERMS = ("compute", "recompute", "tp_comm", "cp_comm", "ep_comm")
"""Breakdown terms (autoplace.cost.step.BREAKDOWN) the proxy measures: per layer and micro-batch."""
SCALED_TERMS = LAYER_TERMS + ("pp_bubble",)
REST_TERMS = ("dp_comm_exposed", "pp_comm", "optimizer", "offload", "overhead")


@dataclass(frozen=True)
class Proxy:
    """One proxy: the model it trains, its plan, its rank count and its global batch."""
    model: object
    plan: object
    world: int
    global_batch: int
    layers: int

    def describe(self) -> str:
        return f"{self.plan.short()} on {self.world} rank(s), {self.layers} layer(s), batch {self.global_batch}"


def proxy_of(model, plan, world: int, w: int, *, layers: int = 1, micro_batches: int | None = None,
             global_batch: int | None = None) -> Proxy:
    """The proxy of `plan` (resolved on `world` ranks) on at most `w` ranks.

    TP·CP (and EP inside them) are kept; pp → 1 with `layers` layers (at most one stage's); DP →
    min(the plan's dp, w // (tp·cp)) (at least 1; a plan whose TP·CP exceed w has no proxy: ValueError); micro-batches:
    `micro_batches` (default: the plan's, so each rank runs the same micro-batches)."""
    p = plan.resolved(world)
    inner = p.tp * p.cp
    if inner > w:
        raise ValueError(f"plan {p.short()} needs tp·cp = {inner} ranks for one replica; the proxy has {w}")
    dp = max(1, min(p.dp, w // inner))          # DP shrinks, never grows (pp → 1 frees ranks)
    if p.ep > 1 and (dp * p.cp) % p.ep:
        dp = max(1, (dp // p.ep) * p.ep) if dp >= p.ep else dp
    stage_layers = max(1, model.layers // max(p.pp * max(p.vpp, 1), 1))
    L = max(1, min(layers, stage_layers, model.layers))
    m_full = max(1, (global_batch or 0) // max(p.mbs * p.dp, 1)) if global_batch else 1
    m = micro_batches or m_full
    kw = dict(pp=1, vpp=1, dp=dp, dp_replicate=1)
    if p.schedule == "interleaved":
        kw["schedule"] = "1f1b"
    if p.zero == 3 and dp == 1:
        kw["zero"] = 0
    if p.ep > 1 and p.ep > dp * p.cp:
        kw["ep"] = dp * p.cp
    prox = p.with_(**kw)
    pm = model.with_(layers=L, name=f"{model.name} (proxy: {L} layer{'s' if L > 1 else ''})")
    return Proxy(pm, prox, dp * inner, p.mbs * dp * m, L)


def robust_step_s(rec: dict, pick=min) -> float | None:
    """A run's step time: per rank `pick` of its timed steps (min: the fastest — other processes only
    ever add time; `statistics.median`), then the slowest rank (the step ends when every rank has
    finished)."""
    ts = [pick(r["step_times_s"]) for r in rec.get("ranks") or [] if r.get("step_times_s")]
    return max(ts) if ts else rec.get("step_s")


def _terms(doc) -> tuple[float, float, float, float]:
    b = doc["time"]["breakdown_s"]
    layer = sum(b.get(k, 0.0) for k in LAYER_TERMS)
    bubble = b.get("pp_bubble", 0.0)
    rest = sum(b.get(k, 0.0) for k in REST_TERMS)
    return layer, bubble, rest, doc["time"]["step_s"]


def anchored(full_doc: dict, proxy_doc: dict, measured_proxy_s: float) -> dict:
    """{analytic_s, anchored_s, k, ...} from the estimate documents of the plan and of its proxy."""
    fl, fb, fr, fs = _terms(full_doc)
    pl, pb, pr, ps = _terms(proxy_doc)
    # the modelled step may differ from the sum of its terms (overlaps): keep the difference as is
    f_other = fs - (fl + fb + fr)
    p_other = ps - (pl + pb + pr)
    k = max(measured_proxy_s - pr - p_other, 0.05 * measured_proxy_s) / max(pl + pb, 1e-12)
    return {"analytic_s": fs, "anchored_s": k * (fl + fb) + fr + f_other, "k": k,
            "proxy_analytic_s": ps, "proxy_measured_s": measured_proxy_s,
            "layer_share": (fl + fb) / fs if fs else None}


def device_scaled(hw, k: float):
    """The profile of a device k× slower at everything it computes: GEMM and attention rates, memory-
    bound kernels (hbm_bw) and host time per op; links unchanged."""
    from autoplace.profile.corrections import apply_terms
    out = apply_terms(hw, {"gemm": k, "attention": k, "host": k})
    return out.with_(hbm_bw=hw.hbm_bw / k)


def anchored_device(doc_of, proxies: tuple, measured: tuple, layers: tuple, *, iters: int = 40) -> dict:
    """Anchored prediction that keeps the cost model's overlap logic: find the device speed k at which
    the modelled per-layer slope of the proxies, (T(L2) − T(L1))/(L2 − L1), equals the measured one
    (bisection on ln k), take δ = the measured − modelled intercept at that speed (the work outside
    the layers), and predict the full plan on the k-scaled device:

        T_anchored = T_model(P; device × k) + δ

    doc_of(which, k): the estimate document of `which` ("full", 0 or 1 for the proxies) on the
    device scaled by k. The DP/PP traffic, the pipeline bubble and how much of the DP traffic the
    (now measured-speed) compute hides stay the cost model's."""
    import math
    (l1, l2), (t1, t2) = layers, measured
    slope_me = (t2 - t1) / (l2 - l1)

    def slope(k):
        a, b = doc_of(0, k)["time"]["step_s"], doc_of(1, k)["time"]["step_s"]
        return (b - a) / (l2 - l1), a

    lo, hi = math.log(1e-3), math.log(1e3)
    if slope_me <= 0:
        lnk = lo
    else:
        for _ in range(iters):
            mid = 0.5 * (lo + hi)
            if slope(math.exp(mid))[0] < slope_me:
                lo = mid
            else:
                hi = mid
        lnk = 0.5 * (lo + hi)
    k = math.exp(lnk)
    s_k, a_k = slope(k)
    delta = (t1 - l1 * slope_me) - (a_k - l1 * s_k)
    full0 = doc_of("full", 1.0)["time"]["step_s"]
    full_k = doc_of("full", k)["time"]["step_s"]
    return {"analytic_s": full0, "anchored_s": max(full_k + delta, 1e-9), "k": k, "delta_s": delta,
            "proxy_analytic_s": [doc_of(0, 1.0)["time"]["step_s"], doc_of(1, 1.0)["time"]["step_s"]],
            "proxy_measured_s": [t1, t2]}
