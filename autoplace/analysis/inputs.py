"""Parsers for the planning options: GPU-count ranges, token counts, durations, lists, prices.

Each raises `InputError` naming the option and the fix (one line at the CLI)."""

from __future__ import annotations

import math
import re

from autoplace.errors import InputError
from autoplace.safe import MAX_BATCH, MAX_SEQ_LEN

_NUM = r"\d+(?:\.\d*)?(?:[eE][+-]?\d+)?"
_TOKEN_MULT = {"": 1.0, "k": 1e3, "m": 1e6, "b": 1e9, "g": 1e9, "t": 1e12, "p": 1e15}
_TIME_MULT = {"s": 1.0, "sec": 1.0, "m": 60.0, "min": 60.0, "h": 3600.0, "hr": 3600.0, "d": 86400.0,
              "day": 86400.0, "days": 86400.0, "w": 7 * 86400.0, "wk": 7 * 86400.0, "weeks": 7 * 86400.0}
MAX_TOKENS = 1e18
"""Most tokens a sweep prices (--tokens)."""
MAX_DURATION_S = 100 * 365 * 86400.0
"""Longest --deadline."""
GPU_FIX = "write a range 64..4096 (powers of two), a step 64..4096:x2 or 96..768:+96, or a list 64,128,512"


def _int(text: str, field: str) -> int:
    try:
        v = float(text)
    except ValueError:
        raise InputError(f"{field}: cannot read '{text}'; {GPU_FIX}") from None
    from autoplace.safe import MAX_GPUS
    if not math.isfinite(v) or v != int(v) or v < 1:
        raise InputError(f"{field}: GPU counts are positive integers, got '{text}'; {GPU_FIX}")
    if v > MAX_GPUS:
        raise InputError(f"{field}: {text} GPUs is more than {MAX_GPUS:,}; {GPU_FIX}")
    return int(v)


def parse_gpus(text: str, field: str = "--gpus") -> list[int]:
    """'64..4096' → powers of two from 64 to 4096; 'a..b:xK' → a, a·K, … ≤ b; 'a..b:+S' → a, a+S, …;
    '64,128,512' → the list (items may themselves be ranges). Sorted, duplicates dropped."""
    text = str(text).strip()
    if not text:
        raise InputError(f"{field}: empty; {GPU_FIX}")
    out: list[int] = []
    for item in (t.strip() for t in text.split(",")):
        if not item:
            raise InputError(f"{field}: empty item in '{text}'; {GPU_FIX}")
        if ".." not in item:
            out.append(_int(item, field))
            continue
        rng, _, step = item.partition(":")
        lo_s, _, hi_s = rng.partition("..")
        lo, hi = _int(lo_s.strip(), field), _int(hi_s.strip(), field)
        if hi < lo:
            raise InputError(f"{field}: range '{item}' runs backwards; {GPU_FIX}")
        step = step.strip().lower()
        if not step:
            n = 1
            while n < lo:
                n *= 2
            vals = []
            while n <= hi:
                vals.append(n)
                n *= 2
            if not vals:
                raise InputError(f"{field}: no power of two in '{item}'; {GPU_FIX}")
        elif step.startswith("x") or step.startswith("*"):
            k = _int(step[1:], field)
            if k < 2:
                raise InputError(f"{field}: step '{step}' must multiply by ≥ 2; {GPU_FIX}")
            vals, n = [], lo
            while n <= hi:
                vals.append(n)
                n *= k
        elif step.startswith("+"):
            k = _int(step[1:], field)
            if (hi - lo) // k >= 256:
                raise InputError(f"{field}: '{item}' gives more than 256 GPU counts; {GPU_FIX}")
            vals = list(range(lo, hi + 1, k))
        else:
            raise InputError(f"{field}: cannot read step '{step}' in '{item}'; {GPU_FIX}")
        out += vals
    vals = sorted(set(out))
    if len(vals) > 256:
        raise InputError(f"{field}: {len(vals)} GPU counts is too many for one sweep (at most 256); {GPU_FIX}")
    return vals


def parse_tokens(text: str, field: str = "--tokens") -> float:
    """'1T' → 1e12, '300B' → 3e11, '2e12' → 2e12, '500M' → 5e8 (a trailing 'tokens' is allowed)."""
    t = str(text).strip().lower().replace("_", "").replace(",", "")
    t = re.sub(r"\s*tokens?$", "", t)
    m = re.fullmatch(rf"({_NUM})\s*([kmbgtp]?)", t)
    if not m:
        raise InputError(f"{field}: cannot read '{text}'; write e.g. 1T, 300B, 2e12 or 500M")
    v = float(m.group(1)) * _TOKEN_MULT[m.group(2)]
    if not v > 0:
        raise InputError(f"{field}: must be positive, got '{text}'")
    if not v <= MAX_TOKENS:
        raise InputError(f"{field}: at most {MAX_TOKENS:.0e} tokens, got '{text}'")
    return v


def parse_duration(text: str, field: str = "--deadline") -> float:
    """'30d' → seconds, '72h', '90min', '2w', '1.5d'; a bare number is read as days."""
    t = str(text).strip().lower().replace(" ", "")
    m = re.fullmatch(rf"({_NUM})([a-z]*)", t)
    if not m or (m.group(2) and m.group(2) not in _TIME_MULT):
        raise InputError(f"{field}: cannot read '{text}'; write e.g. 30d, 72h, 90min or 2w")
    v = float(m.group(1)) * _TIME_MULT[m.group(2) or "d"]
    if not v > 0:
        raise InputError(f"{field}: must be positive, got '{text}'")
    if not v <= MAX_DURATION_S:
        raise InputError(f"{field}: at most 100 years, got '{text}'")
    return v


def parse_int_list(text: str | None, field: str) -> list[int | None]:
    """'4096,8192' → [4096, 8192]; None → [None] (the command's default)."""
    if text is None:
        return [None]
    out = []
    for item in str(text).split(","):
        item = item.strip()
        try:
            v = int(item)
        except ValueError:
            raise InputError(f"{field}: cannot read '{item}' in '{text}'; write one integer or a list like 4096,8192") from None
        if v < 1:
            raise InputError(f"{field}: values must be ≥ 1, got {v}")
        hi = MAX_SEQ_LEN if field == "--seq-len" else MAX_BATCH
        if v > hi:
            raise InputError(f"{field}: values must be ≤ {hi:,}, got {v:,}")
        out.append(v)
    return list(dict.fromkeys(out))


def parse_names(values) -> list[str | None]:
    """Repeatable / comma-separated names ('h100-sxm-80gb,b200') → list; none → [None]."""
    if not values:
        return [None]
    if isinstance(values, str):
        values = [values]
    out = [v.strip() for item in values for v in str(item).split(",") if v.strip()]
    return list(dict.fromkeys(out)) or [None]


def parse_price(text: str | None, field: str = "--price-per-gpu-hour") -> dict:
    """'2.5' → {None: 2.5} (every profile); 'b200=5.5,h100-sxm-80gb=3' → per profile name."""
    if text is None:
        return {}
    out: dict = {}
    for item in str(text).split(","):
        item = item.strip()
        name, eq, val = item.rpartition("=")
        try:
            v = float(val)
        except ValueError:
            raise InputError(f"{field}: cannot read '{item}'; write a price like 2.5 or per profile "
                             "b200=5.5,h100-sxm-80gb=3") from None
        if not 0 <= v <= 1e6:
            raise InputError(f"{field}: prices must be in 0..1,000,000, got {v}")
        out[name.strip() if eq else None] = v
    return out


def fmt_duration(s: float | None) -> str:
    """Seconds → '12.3 d' / '5.2 h' / '40 min' / '—'."""
    if s is None:
        return "—"
    if s >= 2 * 86400:
        return f"{s / 86400:,.1f} d"
    if s >= 2 * 3600:
        return f"{s / 3600:,.1f} h"
    if s >= 120:
        return f"{s / 60:,.0f} min"
    return f"{s:,.1f} s"


def fmt_tokens(n: float) -> str:
    for unit, mult in (("T", 1e12), ("B", 1e9), ("M", 1e6), ("k", 1e3)):
        if n >= mult:
            return f"{n / mult:g}{unit}"
    return f"{n:g}"
