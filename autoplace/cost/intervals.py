"""How sure the model is: prediction intervals on step time and peak memory.

Normalized split-conformal prediction (Papadopoulos et al. 2008; Lei et al. 2018 §5.2) on the log
ratio r = log(measured / predicted) of the published runs the model is validated on
(`benchmarks/intervals.py` computes the residuals and writes `intervals.json` next to this module;
nothing is fitted at a CLI call). For a level 1 − α the interval on a prediction x of class c is

    [x·e^{−σ_c·q}, x·e^{σ_c·q}],   z = r / σ_class(r) over every residual of the kind,

q = the weighted 1 − α conformal quantile of the scores |z| (`_weighted`): the absolute-residual score
of normalized split conformal (Lei et al. 2018 §5.2). Both tails share one quantile, so a tail with
few residuals borrows the other's (fitted separately, the 90 % lower bound fell on the same residual
as the 80 % one: the widest negative score, `exact: false`).

- **Class** c = runtime × dense/MoE × hardware generation (`class_key`).
- **Spread** σ_c (`spread`): the mean absolute residual |r| (its bias included; the scale ρ̂ of
  Lei et al. 2018 §5.2 is a fitted mean absolute deviation, which one far-off run moves less than
  a root mean square) down a nested hierarchy all runs → the runtime family → (family, dense/MoE)
  → (family, dense/MoE, generation) → the class, each level a subset of the one above (a dense
  class never borrows from MoE runs on its GPU), each shrunk toward the one above by the number of
  sources S it holds: σ² = (S·a² + K·σ²_parent) / (S + K), a the level's mean |r|, K = `SHRINK`
  (empirical-Bayes pooling of a Mondrian partition: a class with one source borrows most of its
  spread from above, a class with many keeps its own). The stack comes first: how well a stack's
  behaviour is modelled decides the error more than the GPU does (a PyTorch stack on Ampere
  borrows from PyTorch stacks on other GPUs, not from Megatron on Ampere).
- **Weights**: runs of one source share its systematic error, so the source, not the run, is the
  exchangeable unit: each residual weighs 1 / (its source's run count) in σ and in the quantiles
  (Dunn, Wasserman & Ramdas 2022, pooled-CDF hierarchical conformal; weighted quantile, Tibshirani
  et al. 2019).
- **Finite sample**: the new run adds the mean weight at +∞, so with equal weights the quantile is
  the ⌈(n + 1)·q⌉-th smallest of n (Vovk et al. 2005); past the largest the widest residual is used
  and the interval is marked `exact: false`.

`build(residuals, exclude_source)` is the whole method: the shipped interval is `build(all)` and
the coverage `benchmarks/intervals.py` reports is `build(all but the scored run's source)` — the
same code. A quantile p of step time (`search --confidence`) is x·e^{±σ_c·q}, q the |z| quantile at
|2p − 1| (the upper end of the symmetric interval at level 2p − 1).
"""

from __future__ import annotations

import json
import math
from functools import lru_cache
from pathlib import Path

DATA = Path(__file__).with_name("intervals.json")
SHRINK = 2.0
"""Prior strength, in sources, of a level's parent spread (σ² = (S·ms + K·σ²_parent)/(S + K))."""

FAMILIES = {"megatron-core": "megatron", "megatron-core-0.11": "megatron", "megatron-lm-2021": "megatron",
            "megatron-lm-2022": "megatron", "deepspeed": "deepspeed", "deepspeed-2021": "deepspeed",
            "torchtitan": "torch", "torchtitan-compile": "torch", "llm-foundry": "torch",
            "torch-native": "torch", "accelerate": "torch", "nemo-automodel": "torch"}
# an earlier release that a runtime file `extends` shares the stack's class: same kernels and host
# costs, one spread
RELEASES = {"nemo-automodel-2025": "nemo-automodel", "megatron-core-26.06.01": "megatron-core",
            "torchtitan-2025": "torchtitan", "torchtitan-compile-2025": "torchtitan-compile"}
GENERATIONS = {"volta": "volta", "ampere": "ampere", "hopper": "hopper", "blackwell": "blackwell",
               "cdna3": "cdna", "cdna4": "cdna", "cpu": "cpu"}


def class_key(runtime: str, moe: bool, arch: str) -> str:
    runtime = RELEASES.get(runtime, runtime)
    return f"{runtime}|{'moe' if moe else 'dense'}|{GENERATIONS.get(arch, arch or '?')}"


def levels(key: str) -> list[tuple[str, object]]:
    """The hierarchy above a class, widest first: [(name, match(class key) → bool), …]."""
    runtime, kind, gen = key.split("|")
    fam = FAMILIES.get(runtime, runtime)

    def parts(k):
        r, kd, g = k.split("|")
        return r, kd, g, FAMILIES.get(r, r)
    return [("*", lambda k: True),
            (f"@{fam}|*|*", lambda k: parts(k)[3] == fam),
            (f"@{fam}|{kind}|*", lambda k: parts(k)[3] == fam and parts(k)[1] == kind),
            (f"@{fam}|{kind}|{gen}",
             lambda k: parts(k)[3] == fam and parts(k)[1] == kind and parts(k)[2] == gen),
            (key, lambda k: k == key)]


def _source_weights(items: list) -> dict:
    cnt: dict = {}
    for s, _ in items:
        cnt[s] = cnt.get(s, 0) + 1
    return cnt


def _scale_sq(items: list) -> tuple[float, int]:
    """(square of the source-weighted mean of |r|, number of sources) of [(source, r), …]."""
    cnt = _source_weights(items)
    return (sum(abs(r) / cnt[s] for s, r in items) / len(cnt)) ** 2, len(cnt)


def spread(residuals: dict, key: str, exclude: frozenset = frozenset()) -> tuple[float, str]:
    """(σ of class `key`, the deepest level that holds residuals) from `residuals` = {class:
    [(source, r), …]}, leaving out the sources in `exclude`."""
    v, deepest = None, "none"
    for name, match in levels(key):
        items = [(s, r) for ck, it in residuals.items() if match(ck) for s, r in it if s not in exclude]
        if not items:
            continue
        ms, n_src = _scale_sq(items)
        v = ms if v is None else (n_src * ms + SHRINK * v) / (n_src + SHRINK)
        deepest = name
    return (math.sqrt(v) if v else 0.0), deepest


def _weighted(items: list, q: float) -> tuple[float, bool]:
    """The weighted split-conformal quantile q (Tibshirani et al. 2019): each residual weighs
    1 / (its source's count), so every source counts once whatever its size, and the new run adds
    the mean residual weight at +∞ (equal weights: the ⌈(n + 1)q⌉-th smallest of n); (value,
    exact) — exact False when the quantile falls on +∞ and the largest residual is used."""
    if not items:
        return 0.0, False
    cnt = _source_weights(items)
    vals = sorted((r, 1.0 / cnt[s]) for s, r in items)
    W = sum(w for _, w in vals)
    target = q * (W + W / len(vals)) * (1.0 - 1e-12)
    c = 0.0
    for v, w in vals:
        c += w
        if c >= target:
            return v, True
    return vals[-1][0], False


def bounds(items: list, level: float) -> tuple[float, float, bool]:
    """(lo, hi, exact) bounds of a two-sided interval at `level` over [(source, score), …]."""
    q, exact = _weighted([(s, abs(r)) for s, r in items], level)
    return -q, q, exact


def build(residuals: dict, exclude_source: str = "") -> dict:
    """The fitted method on `residuals` less one source: {"sigma": {class: σ}, "scores": [(source,
    z), …]} — what `interval` ships (exclude nothing) and what leave-one-source-out scores with."""
    ex = frozenset({exclude_source}) if exclude_source else frozenset()
    sig = {c: spread(residuals, c, ex)[0] for c in residuals}
    scores = [(s, r / sig[c]) for c, it in residuals.items() for s, r in it
              if s not in ex and sig[c] > 0]
    return {"sigma": sig, "scores": scores, "exclude": ex}


def predict(residuals: dict, fitted: dict, key: str, level: float) -> dict:
    """{"lo", "hi" (log-ratio bounds), "sigma", "pool" (the deepest level with runs), "n" (its runs),
    "n_scores" (the pooled scores), "exact"} of class `key` at `level`."""
    sigma, pool = spread(residuals, key, fitted["exclude"])
    zlo, zhi, exact = bounds(fitted["scores"], level)
    match = dict(levels(key)).get(pool)
    n = sum(1 for ck, it in residuals.items() if match and match(ck) for s, _ in it if s not in fitted["exclude"])
    return {"lo": sigma * zlo, "hi": sigma * zhi, "sigma": sigma, "pool": pool, "n": n,
            "n_scores": len(fitted["scores"]), "exact": exact}


def borrowed(iv: dict) -> str:
    """'' when an interval rests on runs of its own class; else the words saying where its spread was
    borrowed from (a class with no run of its own is read by analogy: the user is told so)."""
    pool, cls = iv.get("pool", ""), iv.get("class", "")
    if not pool or pool == cls:
        return ""
    runtime = cls.split("|")[0]
    if pool == "*":
        where = "all validation runs"
    elif pool.startswith("@"):
        fam, kind, gen = pool[1:].split("|")
        where = f"the {fam}-family {'' if kind == '*' else kind + ' '}runs{'' if gen == '*' else ' on ' + gen}"
    else:
        where = f"the runs on {pool.split('|')[-1]}"
    return f"no {runtime} run of this kind in the validation sets: spread borrowed from {where}, n = {iv.get('n', 0)}"


@lru_cache(maxsize=1)
def table() -> dict:
    """The shipped residual table: {"step": {class: [[source, r], …]}, "memory": {…}, "meta": …};
    empty tables when the file is missing (intervals then read as not available)."""
    try:
        return json.loads(DATA.read_text())
    except (OSError, ValueError):
        return {"step": {}, "memory": {}, "meta": {}}


@lru_cache(maxsize=4)
def _shipped(kind: str) -> tuple[dict, dict] | None:
    res = {c: [tuple(x) for x in it] for c, it in (table().get(kind) or {}).items()}
    return (res, build(res)) if res else None


def interval(kind: str, runtime: str, moe: bool, arch: str, level: float = 0.8) -> dict | None:
    """{"lo", "hi" (factors on the prediction), "level", "class", "pool", "n", "n_scores", "sigma", "exact"} for
    `kind` "step" or "memory"; None when no residuals are shipped."""
    sh = _shipped(kind)
    if sh is None:
        return None
    key = class_key(runtime, moe, arch)
    p = predict(sh[0], sh[1], key, level)
    return {"lo": math.exp(p["lo"]), "hi": math.exp(p["hi"]), "level": level, "class": key,
            "pool": p["pool"], "n": p["n"], "n_scores": p["n_scores"], "sigma": p["sigma"], "exact": p["exact"]}


def quantile_factor(kind: str, runtime: str, moe: bool, arch: str, q: float) -> float:
    """Factor on the prediction at quantile q of measured/predicted (1.0 without data): an end of the
    symmetric interval at level |2q − 1|, the upper one for q > ½."""
    sh = _shipped(kind)
    if sh is None:
        return 1.0
    sigma, _ = spread(sh[0], class_key(runtime, moe, arch))
    z = bounds(sh[1]["scores"], abs(2.0 * q - 1.0))[1]
    return math.exp(sigma * z if q >= 0.5 else -sigma * z)
