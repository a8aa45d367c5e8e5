"""Runtimes: the training stacks that run a plan, one TOML each (`autoplace/runtimes/*.toml`).

`load_runtime(name_or_path)` reads one into a frozen `RuntimeSpec` with an exact-key check (an
unknown key is a one-line InputError naming it and the valid keys, as Calculon's `from_json`);
`RUNTIMES` lists the shipped names; `DEFAULT_RUNTIME` is Megatron-Core + Transformer Engine.
"""

from __future__ import annotations

import sys
from dataclasses import MISSING, fields
from functools import lru_cache
from pathlib import Path

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

from autoplace.data import package_dir
from autoplace.errors import InputError
from autoplace.runtimes.spec import SECTIONS, TOP_KEYS, RuntimeSpec

RUNTIME_DIR = package_dir("runtimes")
DEFAULT_RUNTIME = "megatron-core"

__all__ = ["DEFAULT_RUNTIME", "RUNTIMES", "RuntimeSpec", "available_runtimes", "load_runtime",
           "runtime_from_dict"]


def available_runtimes() -> list[str]:
    return sorted(p.stem for p in RUNTIME_DIR.glob("*.toml"))


RUNTIMES = tuple(available_runtimes())


_NUMBER_DOMAINS = {   # field → (low, high, low exclusive); the rest: 0 ≤ x ≤ 1e15 (floats), 0..2**40 (ints)
    "a2a_efficiency": (0.0, 10.0, True),
    "tp_overlap_share": (0.0, 1.0, False),
    "gemm_rate": (0.0, 2.0, True),
    "moe_dglu_dbias_factor": (1.0, 100.0, False),
    "reserve_frac": (0.0, 10.0, False),
    "micro_batch": (1, 1 << 30, False),
    "zero": (0, 3, False),
    "max_zero_with_pp": (0, 3, False),
    "offload_min_zero": (0, 3, False),
}


# tables whose keys and values reach generated files: (key pattern, value pattern, what they must be)
_TABLE_PATTERNS = {
    "flags_since": (r"--[a-z0-9][a-z0-9-]*", r"core_v\d+(\.\d+){1,3}",
                    'a launcher flag and a Megatron-LM release tag, e.g. "--use-transformer-engine-op-fuser" = '
                    '"core_v0.18.0"'),
}


def _coerce(src: str, section: str, f, val):
    """A TOML value for dataclass field `f` (lists → tuples; ints accepted for floats)."""
    default = f.default if f.default is not MISSING else None
    where = f"{src}: [{section}] {f.name}" if section else f"{src}: {f.name}"
    if isinstance(default, bool) or (default is None and str(f.type).startswith("bool")):
        if not isinstance(val, bool):
            raise InputError(f"{where} must be true or false, got {val!r}")
        return val
    if isinstance(default, tuple) and isinstance(val, dict):     # a table → ((key, text), ...)
        if not all(isinstance(v, str) for v in val.values()):
            raise InputError(f"{where} must be a table of strings, got {val!r}")
        pat = _TABLE_PATTERNS.get(f.name)
        if pat is not None:
            import re
            for k, v in val.items():
                if not (re.fullmatch(pat[0], str(k)) and re.fullmatch(pat[1], v)):
                    from autoplace import safe
                    raise InputError(f"{where}: {safe.one_line(repr(k), 60)} = {safe.one_line(repr(v), 60)} "
                                     f"is not {pat[2]}")
        return tuple((str(k), v) for k, v in val.items())
    if isinstance(default, tuple):
        if not isinstance(val, list):
            raise InputError(f"{where} must be a list, got {val!r}")
        return tuple(val)
    from autoplace import safe
    if isinstance(default, float):        # every runtime number is a non-negative, finite quantity
        lo, hi, lo_open = _NUMBER_DOMAINS.get(f.name, (0.0, 1e15, False))
        return safe.number(val, where, lo=lo, hi=hi, lo_open=lo_open)
    if isinstance(default, int):
        if isinstance(val, bool) or not isinstance(val, int):
            raise InputError(f"{where} must be an integer, got {safe.one_line(repr(val), 60)}")
        lo, hi, _ = _NUMBER_DOMAINS.get(f.name, (0, 2**40, False))
        return safe.integer(val, where, lo=int(lo), hi=int(hi))
    if isinstance(default, str) or default is None:
        if not isinstance(val, str):
            raise InputError(f"{where} must be a string, got {val!r}")
        return val
    return val


def runtime_from_dict(raw: dict, source: str) -> RuntimeSpec:
    """A RuntimeSpec from a parsed TOML document; every key must be a field (exact keys)."""
    src = Path(source).name
    allowed = set(TOP_KEYS) | set(SECTIONS)
    unknown = sorted(set(raw) - allowed)
    if unknown:
        raise InputError(f"runtime {src}: unknown key '{unknown[0]}'; valid keys: {', '.join(sorted(allowed))}")
    top = {f.name: f for f in fields(RuntimeSpec)}
    kw: dict = {}
    for key in TOP_KEYS:
        if key in raw:
            kw[key] = _coerce(src, "", top[key], raw[key])
    for req in ("name", "family", "version"):
        if req not in kw:
            raise InputError(f"runtime {src}: missing key '{req}'")
    for sec, cls in SECTIONS.items():
        table = raw.get(sec, {})
        if not isinstance(table, dict):
            raise InputError(f"runtime {src}: [{sec}] must be a table")
        valid = {f.name: f for f in fields(cls)}
        bad = sorted(set(table) - set(valid))
        if bad:
            raise InputError(f"runtime {src}: unknown [{sec}] key '{bad[0]}'; valid: {', '.join(valid)}")
        kw[sec] = cls(**{k: _coerce(src, sec, valid[k], v) for k, v in table.items()})
    kw["source"] = str(source)
    rt = RuntimeSpec(**kw)
    from autoplace.runtimes.check import validate_runtime
    validate_runtime(rt)
    return rt


def _path(name_or_path: str) -> Path:
    p = Path(name_or_path)
    if p.suffix == ".toml" or p.exists():
        if not p.is_file():
            raise InputError(f"--runtime: file '{name_or_path}' does not exist")
        return p
    key = name_or_path.strip().lower().replace("_", "-")
    key = ALIASES.get(key, key)
    cand = RUNTIME_DIR / f"{key}.toml"
    if cand.exists():
        return cand
    raise InputError(f"--runtime: unknown runtime '{name_or_path}'; choose one of "
                     f"{', '.join(available_runtimes())} or pass a .toml path")


ALIASES = {"megatron": "megatron-core", "mcore": "megatron-core", "nemo": "megatron-core",
           "megatron-bridge": "megatron-core", "titan": "torchtitan", "torchtitan-eager": "torchtitan",
           "ds": "deepspeed", "automodel": "nemo-automodel", "fsdp": "llm-foundry", "native": "torch-native"}


def _read(path: str) -> dict:
    try:
        from autoplace.safe import read_text
        return tomllib.loads(read_text(path, "--runtime"))
    except tomllib.TOMLDecodeError as e:
        raise InputError(f"runtime {Path(path).name}: invalid TOML ({str(e).splitlines()[0]})") from None


def _extended(raw: dict, src: str) -> dict:
    """`extends = "<built-in runtime>"`: that runtime's document with this one's keys on top, table
    by table (a later release of a stack states only what changed). Only shipped runtimes can be
    extended, one level deep."""
    base = raw.pop("extends")
    names = available_runtimes()
    if not isinstance(base, str) or base not in names:
        from autoplace import safe
        raise InputError(f"runtime {src}: extends must name a built-in runtime ({', '.join(names)}), "
                         f"got {safe.one_line(repr(base), 60)}")
    braw = _read(str(RUNTIME_DIR / f"{base}.toml"))
    if "extends" in braw:
        raise InputError(f"runtime {src}: '{base}' extends another runtime; extend that one directly")
    out = {k: v for k, v in braw.items() if k not in SECTIONS}
    out.update({k: v for k, v in raw.items() if k not in SECTIONS})
    for sec in SECTIONS:
        mine = raw.get(sec, {})
        if sec in braw or sec in raw:
            out[sec] = {**braw.get(sec, {}), **mine} if isinstance(mine, dict) else mine
    return out


@lru_cache(maxsize=64)
def _load(path: str) -> RuntimeSpec:
    raw = _read(path)
    if "extends" in raw:
        raw = _extended(raw, Path(path).name)
    return runtime_from_dict(raw, path)


def load_runtime(name_or_path: str | RuntimeSpec | None = None) -> RuntimeSpec:
    """`--runtime NAME|PATH` → RuntimeSpec (a RuntimeSpec passes through; None → the default)."""
    if isinstance(name_or_path, RuntimeSpec):
        return name_or_path
    return _load(str(_path(name_or_path or DEFAULT_RUNTIME).resolve()))


def __getattr__(name: str):
    """`autoplace.runtimes.training_spec`: moved to autoplace.specs.training (a TrainingSpec holds a
    runtime, so the runtimes sit below it); the old name keeps working."""
    if name == "training_spec":
        import importlib
        return importlib.import_module("autoplace.specs.training").training_spec
    raise AttributeError(f"module 'autoplace.runtimes' has no attribute {name!r}")
