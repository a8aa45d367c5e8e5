"""How sure the model is: prediction intervals on step time and peak memory.

Split-conformal prediction on the log ratio r = log(measured / predicted) of the published runs the
model is validated on (`benchmarks/intervals.py` computes them and writes `intervals.json` next to
this module; nothing is computed at a CLI call). For a level 1 − α the interval on the prediction x is

    [x·e^{r_lo}, x·e^{r_hi}],   r_lo, r_hi = the weighted α/2 and 1 − α/2 quantiles of the class

(split conformal, Vovk et al. 2005, Lei et al. 2018 §2; weighted, Tibshirani et al. 2019): each
residual weighs 1 / (its source's record count) — runs of one source share its systematic error, so
the source, not the run, is the exchangeable unit — and the new run adds the mean weight beyond
the extremes. A class is runtime × dense/MoE × hardware generation; one with fewer than `MIN_CLASS`
residuals pools with its neighbours: (runtime, dense/MoE) → (runtime family, dense/MoE) →
(dense/MoE) → all. Where the pool is too small for the level the widest residual is used and the
interval is marked `exact: false`. A quantile q of step time (`search --confidence`) is x·e^{r_q}.
"""

from __future__ import annotations

import json
import math
from functools import lru_cache
from pathlib import Path

DATA = Path(__file__).with_name("intervals.json")
MIN_CLASS = 19
"""Smallest class used on its own: ⌈(n + 1)·0.95⌉ ≤ n needs n ≥ 19 (a 90 % two-sided interval)."""

FAMILIES = {"megatron-core": "megatron", "megatron-core-0.11": "megatron", "megatron-lm-2021": "megatron",
            "megatron-lm-2022": "megatron", "deepspeed": "deepspeed", "deepspeed-2021": "deepspeed",
            "torchtitan": "torch", "torchtitan-compile": "torch", "llm-foundry": "torch",
            "torch-native": "torch", "accelerate": "torch", "nemo-automodel": "torch"}
GENERATIONS = {"volta": "volta", "ampere": "ampere", "hopper": "hopper", "blackwell": "blackwell",
               "cdna3": "cdna", "cdna4": "cdna", "cpu": "cpu"}


def class_key(runtime: str, moe: bool, arch: str) -> str:
    return f"{runtime}|{'moe' if moe else 'dense'}|{GENERATIONS.get(arch, arch or '?')}"


def pooled(residuals: dict, key: str, exclude_source: str = "") -> tuple[list, str]:
    """([(source, r), …], the pool used) for a class key from `residuals` = {record class:
    [(source, r), …]}; `exclude_source` leaves one source out (leave-one-source-out scoring)."""
    runtime, kind, gen = key.split("|")
    fam = FAMILIES.get(runtime, runtime)
    tests = [
        (key, lambda r, k, g, f: (r, k, g) == (runtime, kind, gen)),
        (f"{runtime}|{kind}|*", lambda r, k, g, f: (r, k) == (runtime, kind)),
        (f"@{fam}|{kind}|*", lambda r, k, g, f: (f, k) == (fam, kind)),
        (f"*|{kind}|*", lambda r, k, g, f: k == kind),
        ("*|*|*", lambda r, k, g, f: True),
    ]
    out: list = []
    for name, match in tests:
        out = []
        for ck, items in residuals.items():
            r, k, g = ck.split("|")
            if match(r, k, g, FAMILIES.get(r, r)):
                out += [(s, x) for s, x in items if s != exclude_source]
        if len(out) >= MIN_CLASS:
            return out, name
    return out, "*|*|*"


def _weighted(items: list, q: float) -> tuple[float, bool]:
    """The weighted split-conformal quantile q (Tibshirani et al. 2019): each residual weighs
    1 / (its source's count), so every source counts once whatever its size, and the new run adds
    the mean residual weight at +∞; (value, exact) — exact False when the quantile falls on it."""
    if not items:
        return 0.0, False
    cnt: dict = {}
    for s, _ in items:
        cnt[s] = cnt.get(s, 0) + 1
    vals = sorted((r, 1.0 / cnt[s]) for s, r in items)
    W = sum(w for _, w in vals)
    target = q * (W + W / len(vals))
    c = 0.0
    for v, w in vals:
        c += w
        if c >= target:
            return v, True
    return vals[-1][0], False


def bounds(items: list, level: float) -> tuple[float, float, bool]:
    """(lo, hi, exact) log-ratio bounds of a two-sided interval at `level` over [(source, r), …]."""
    a = 1.0 - level
    hi, e1 = _weighted(items, 1.0 - a / 2.0)
    lo, e2 = _weighted([(s, -r) for s, r in items], 1.0 - a / 2.0)
    return -lo, hi, e1 and e2


def upper(items: list, q: float) -> tuple[float, bool]:
    """(log-ratio quantile q, exact): the one-sided bound the step-time ranking uses."""
    return _weighted(items, q)


@lru_cache(maxsize=1)
def table() -> dict:
    """The shipped residual table: {"step": {class: [[source, r], …]}, "memory": {…}, "meta": …};
    empty tables when the file is missing (intervals then read as not available)."""
    try:
        return json.loads(DATA.read_text())
    except (OSError, ValueError):
        return {"step": {}, "memory": {}, "meta": {}}


def interval(kind: str, runtime: str, moe: bool, arch: str, level: float = 0.8) -> dict | None:
    """{"lo", "hi" (factors on the prediction), "level", "class", "pool", "n", "exact"} for `kind`
    "step" or "memory"; None when no residuals are shipped."""
    res = table().get(kind) or {}
    if not res:
        return None
    key = class_key(runtime, moe, arch)
    r, pool = pooled(res, key)
    lo, hi, exact = bounds(r, level)
    return {"lo": math.exp(lo), "hi": math.exp(hi), "level": level, "class": key, "pool": pool,
            "n": len(r), "exact": exact}


def quantile_factor(kind: str, runtime: str, moe: bool, arch: str, q: float) -> float:
    """Factor on the prediction at quantile q of measured/predicted (1.0 without data)."""
    res = table().get(kind) or {}
    if not res:
        return 1.0
    r, _ = pooled(res, class_key(runtime, moe, arch))
    return math.exp(upper(r, q)[0])
