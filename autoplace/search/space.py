"""Search spaces: which values each plan knob may take (`search_spaces/*.toml`).

A space file is a TOML document::

    name = "megatron"
    description = "..."
    extends = "default"          # optional: start from another space, then override knobs
    [knobs]
    tp = "divisors"              # every divisor of the GPU count (rule D1 prunes by heads)
    pp = { min = 1, max = 64 }   # divisors of the GPU count in a range
    cp = [1, 2, 4]               # an explicit list
    mbs = { min = 1, max = 16, pow2 = true }
    recompute_layers = "all"     # block recompute: 1 .. L/pp − 1 layers per stage
    ...

Knobs not named take a single neutral value (tp = pp = cp = ep = 1, zero 0, no SP, no recompute,
no offload, mbs 1, 1F1B, Megatron rank order), or the values of the space named by `extends`.
Degrees are further restricted to divisors of the GPU count by the enumerator; the composition
rules then prune what is illegal (and count it).

Keys are exact, at every level (the top level, [knobs], range tables): a misspelt key is an
`InputError` (exit code 1, bad input) that names it and lists the valid keys, never a silent default.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass, fields, replace
from pathlib import Path

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

from autoplace.data import data_dir
from autoplace.errors import InputError
from autoplace.plan import (
    MAX_DEGREE,
    OFFLOAD,
    RANK_ORDERS,
    RECOMPUTE,
    RECOMPUTE_MODULES,
    SCHEDULES,
    modules_code,
    modules_of,
)

SPACE_DIR = data_dir("search_spaces")
DEFAULT_SPACE = "default"

_RC_ALIASES = {"off": "none", "no": "none", "sel": "selective", "uniform": "full"}
_OFF_ALIASES = {"opt": "optimizer", "optim": "optimizer", "param": "params", "cpu": "optimizer"}
_SCHED_ALIASES = {"interleaved-1f1b": "interleaved", "interleaved1f1b": "interleaved"}
_ORDER_ALIASES = {"megatron": "tp-cp-ep-dp-pp", "torchtitan": "pp-dp-cp-tp"}


@dataclass(frozen=True)
class Choice:
    """Integer values of a knob: an explicit list, or a range filtered to divisors of a bound.

    `values`: explicit integers (strings such as "tp" allowed where noted). Otherwise every divisor
    of the bound N that lies in [lo, hi] (and is a power of two if `pow2`).
    """
    values: tuple = ()
    lo: int = 1
    hi: int | None = None
    pow2: bool = False
    step: int = 1
    divisors: bool = True      # range form: keep only divisors of the bound

    @property
    def explicit(self) -> bool:
        return bool(self.values)

    def resolve(self, bound: int | None = None) -> list:
        """Concrete values; range forms need `bound` (divisors of it, or 1..bound)."""
        if self.values:
            return list(self.values)
        hi = self.hi if self.hi is not None else (bound if bound is not None else self.lo)
        if bound is not None:
            hi = min(hi, bound)
        out = []
        for v in range(max(self.lo, 1), hi + 1, self.step if not self.divisors else 1):
            if self.pow2 and v & (v - 1):
                continue
            if self.divisors and bound is not None and bound % v:
                continue
            if not self.divisors and (v - self.lo) % self.step:
                continue
            out.append(v)
        return out

    def describe(self) -> str:
        if self.values:
            return "[" + ", ".join(str(v) for v in self.values) + "]"
        s = f"{'divisors' if self.divisors else 'values'} in {self.lo}..{self.hi if self.hi is not None else 'N'}"
        return s + (" (powers of 2)" if self.pow2 else "") + (f" step {self.step}" if self.step > 1 else "")


@dataclass(frozen=True)
class Space:
    name: str = "neutral"
    description: str = ""
    source: str = "builtin"
    # degrees (resolved against the GPU count by the enumerator)
    tp: Choice = Choice((1,))
    pp: Choice = Choice((1,))
    cp: Choice = Choice((1,))
    ep: Choice = Choice((1,))                 # ignored (1) for dense models
    etp: tuple = ("tp",)                      # expert TP: "tp" (= tp) or integers
    dp_replicate: Choice = Choice((1,))       # HSDP replicate degree (zero ≥ 1 only; divisors of dp)
    # placement / memory knobs
    zero: tuple = (0,)
    reshard_after_forward: tuple = (True,)    # zero 3: True FULL_SHARD (SG), False SHARD_GRAD_OP (hold)
    sp: tuple = (False,)                      # only for tp > 1
    tp_overlap: tuple = (False,)              # only with sp
    recompute: tuple = (0,)                   # rc codes
    recompute_layers: Choice = Choice((), lo=1, hi=None, divisors=False)   # "all": 1 .. L/pp − 1
    recompute_modules: tuple = (0,)           # rc_mods codes (modules_code) tried with selective recompute
    offload: tuple = (0,)
    offload_fraction: tuple = (1.0,)
    # batch / schedule
    mbs: Choice = Choice((1,))                # filtered to divisors of B / dp
    schedule: tuple = (0,)                    # sched codes; pp = 1 always uses 1F1B
    vpp: Choice = Choice((2,))                # interleaved only
    vpp_group: tuple = ("pp",)                # "pp" (Megatron default), "m" (always legal), integers
    rank_order: tuple = (0,)
    dp_overlap: tuple = (True,)
    # other numeric/boolean Plan fields (e.g. tp_async, dp_bucket_mb): ((name, (values…)), …);
    # fields not listed keep the Plan default
    extras: tuple = ()
    runtime: str = ""
    """A runtime this space was cut to (space_for_runtime): the search also applies its capability
    rules, so every plan of the space is one the runtime can express."""

    def knobs(self) -> dict:
        return {f.name: getattr(self, f.name) for f in fields(self)
                if f.name not in ("name", "description", "source", "extras", "runtime")}

    def to_dict(self) -> dict:
        out = {"name": self.name, "description": self.description, "source": self.source}
        if self.runtime:
            out["runtime"] = self.runtime
        for k, v in self.knobs().items():
            if isinstance(v, Choice):
                out[k] = list(v.values) if v.values else v.describe()
            elif k == "recompute":
                out[k] = [RECOMPUTE[c] for c in v]
            elif k == "recompute_modules":
                out[k] = [list(modules_of(c)) for c in v]
            elif k == "offload":
                out[k] = [OFFLOAD[c] for c in v]
            elif k == "schedule":
                out[k] = [SCHEDULES[c] for c in v]
            elif k == "rank_order":
                out[k] = [RANK_ORDERS[c] for c in v]
            else:
                out[k] = list(v)
        for k, v in self.extras:
            out[k] = list(v)
        return out

    def with_(self, **kw) -> "Space":
        return replace(self, **kw)


CORE_KNOBS = tuple(f.name for f in fields(Space) if f.name not in ("name", "description", "source", "extras", "runtime"))


def _extra_knobs() -> dict:
    from autoplace.search.batch import EXTRA
    return EXTRA


KNOB_NAMES = CORE_KNOBS + tuple(k for k in _extra_knobs() if k not in CORE_KNOBS)


def _parse_extra(src, key, raw) -> tuple:
    dtype, _ = _extra_knobs()[key]
    out = []
    for v in _as_list(src, key, raw):
        if dtype is bool:
            out.extend(_bools(src, key, v))
        elif isinstance(v, bool) or not isinstance(v, (int, float)) or (dtype is not float and not isinstance(v, int)):
            raise _err(src, f"knob '{key}': values must be {'integers' if dtype is not float else 'numbers'}, got {v!r}")
        else:
            out.append(v)
    return tuple(dict.fromkeys(out))


# ---- parsing ----------------------------------------------------------------------------------
def _err(src: str, msg: str) -> InputError:
    return InputError(f"search space {src}: {msg}")


def _check_keys(src: str, table: dict, valid, what: str, where: str = "") -> None:
    """Exact keys: an InputError naming every unknown key of `table` and listing the valid ones."""
    unknown = [k for k in table if k not in valid]
    if unknown:
        names = ", ".join(f"'{k}'" for k in unknown)
        raise _err(src, f"{where}unknown {what}{'s' if len(unknown) > 1 else ''} {names}; "
                        f"valid: {', '.join(valid)}")


_MAX_VALUES = 10_000
"""Most values one knob lists (bounded work)."""


def _as_list(src, key, raw):
    if isinstance(raw, list):
        if not raw:
            raise _err(src, f"knob '{key}' has an empty list")
        if len(raw) > _MAX_VALUES:
            raise _err(src, f"knob '{key}' lists {len(raw):,} values (at most {_MAX_VALUES:,})")
        return raw
    return [raw]


def _choice(src: str, key: str, raw, allow=()) -> Choice:
    if isinstance(raw, str):
        r = raw.strip().lower()
        if r in ("divisors", "all"):
            return Choice((), lo=1, hi=None, divisors=(key != "recompute_layers"))
        if r in ("pow2", "powers-of-2", "powers_of_2"):
            return Choice((), lo=1, hi=None, pow2=True)
        if r in allow:
            return Choice((r,))
        raise _err(src, f"knob '{key}' = '{raw}': write a list of integers, \"divisors\", "
                        f"or a range {{ min = 1, max = 8, pow2 = true }}")
    if isinstance(raw, dict):
        # `step` thins a plain range; degree, mbs and vpp ranges are divisors, where a step means nothing
        valid = ("min", "max", "pow2", "step") if key == "recompute_layers" else ("min", "max", "pow2")
        _check_keys(src, raw, valid, "range key", where=f"knob '{key}': ")
        if not isinstance(raw.get("pow2", False), bool):
            raise _err(src, f"knob '{key}': range pow2 must be true or false, got {raw['pow2']!r}")
        lo, hi = raw.get("min", 1), raw.get("max")
        step = raw.get("step", 1)
        for name, v in (("min", lo), ("max", hi), ("step", step)):
            if v is not None and (not isinstance(v, int) or isinstance(v, bool) or not 1 <= v <= MAX_DEGREE):
                raise _err(src, f"knob '{key}': range {name} must be an integer in 1..{MAX_DEGREE:,}, got {v!r}")
        if hi is not None and hi < lo:
            raise _err(src, f"knob '{key}': range max {hi} < min {lo}")
        return Choice((), lo=lo, hi=hi, pow2=bool(raw.get("pow2", False)), step=step,
                      divisors=(key != "recompute_layers"))
    vals = []
    for v in _as_list(src, key, raw):
        if isinstance(v, str) and v.strip().lower() in allow:
            vals.append(v.strip().lower())
        elif isinstance(v, bool) or not isinstance(v, int) or not 1 <= v <= MAX_DEGREE:
            raise _err(src, f"knob '{key}': values must be integers in 1..{MAX_DEGREE:,}"
                            + (f" or {', '.join(repr(a) for a in allow)}" if allow else "") + f", got {v!r}")
        else:
            vals.append(v)
    return Choice(tuple(dict.fromkeys(vals)))


def _bools(src, key, raw) -> tuple:
    out = []
    for v in _as_list(src, key, raw):
        if isinstance(v, bool):
            out.append(v)
        elif isinstance(v, int) and v in (0, 1):
            out.append(bool(v))
        elif isinstance(v, str) and v.lower() in ("true", "false", "on", "off", "yes", "no"):
            out.append(v.lower() in ("true", "on", "yes"))
        else:
            raise _err(src, f"knob '{key}': values must be true/false, got {v!r}")
    return tuple(dict.fromkeys(out))


def _names(src, key, raw, table, aliases) -> tuple:
    out = []
    for v in _as_list(src, key, raw):
        s = str(v).strip().lower()
        s = aliases.get(s, s)
        if s not in table:
            raise _err(src, f"knob '{key}': '{v}' is not one of {', '.join(table)}")
        out.append(table.index(s))
    return tuple(dict.fromkeys(out))


def _module_sets(src, key, raw) -> tuple:
    """[[], ["mla_up_proj"], "core_attn+mla_up_proj", …] → rc_mods codes ([] = the runtime's selective)."""
    out = []
    for v in _as_list(src, key, raw):
        names = v if isinstance(v, list) else [x for x in str(v).replace(":", "+").split("+") if x.strip()]
        for x in names:
            if str(x).strip().lower() not in RECOMPUTE_MODULES:
                raise _err(src, f"knob '{key}': '{x}' is not one of {', '.join(RECOMPUTE_MODULES)} "
                                "(each value is a list of module names, [] for the runtime's selective)")
        out.append(modules_code(str(x).strip().lower() for x in names))
    return tuple(dict.fromkeys(out))


def _parse_knob(src: str, key: str, raw):
    if key in ("tp", "pp", "cp", "ep", "dp_replicate", "mbs", "vpp"):
        c = _choice(src, key, raw)
        if key == "vpp" and c.values and min(c.values) < 2:
            raise _err(src, "knob 'vpp': virtual stages per rank must be ≥ 2 (interleaved schedule)")
        return c
    if key == "recompute_layers":
        return _choice(src, key, raw)
    if key == "etp":
        c = _choice(src, key, raw, allow=("tp",))
        if not c.values:
            raise _err(src, "knob 'etp' takes a list of integers or \"tp\"")
        return c.values
    if key == "zero":
        vals = _as_list(src, key, raw)
        for v in vals:
            if isinstance(v, bool) or v not in (0, 1, 2, 3):
                raise _err(src, f"knob 'zero': values must be 0, 1, 2 or 3, got {v!r}")
        return tuple(dict.fromkeys(vals))
    if key in ("reshard_after_forward", "sp", "tp_overlap", "dp_overlap"):
        return _bools(src, key, raw)
    if key == "recompute":
        return _names(src, key, raw, RECOMPUTE, _RC_ALIASES)
    if key == "recompute_modules":
        return _module_sets(src, key, raw)
    if key == "offload":
        return _names(src, key, raw, OFFLOAD, _OFF_ALIASES)
    if key == "schedule":
        return _names(src, key, raw, SCHEDULES, _SCHED_ALIASES)
    if key == "rank_order":
        return _names(src, key, raw, RANK_ORDERS, _ORDER_ALIASES)
    if key == "offload_fraction":
        out = []
        for v in _as_list(src, key, raw):
            if isinstance(v, bool) or not isinstance(v, (int, float)) or not 0 < v <= 1:
                raise _err(src, f"knob 'offload_fraction': values must be in (0, 1], got {v!r}")
            out.append(float(v))
        return tuple(dict.fromkeys(out))
    if key == "vpp_group":
        out = []
        for v in _as_list(src, key, raw):
            if isinstance(v, str) and v.strip().lower() in ("pp", "m", "rounds"):
                out.append(v.strip().lower())
            elif isinstance(v, int) and not isinstance(v, bool) and 1 <= v <= MAX_DEGREE:
                out.append(v)
            else:
                raise _err(src, f"knob 'vpp_group': values must be \"pp\", \"m\", \"rounds\" or positive integers, "
                                f"got {v!r}")
        return tuple(dict.fromkeys(out))
    raise _err(src, f"unknown knob '{key}'; valid knobs: {', '.join(KNOB_NAMES)}")  # pragma: no cover


def space_from_dict(raw: dict, source: str, _seen: tuple = ()) -> Space:
    """A Space from a parsed space file. Keys are exact: an unknown key at the top level, in
    [knobs] or in a range table is an InputError (exit 1) that names it and lists the valid keys."""
    src = source
    top_allowed = ("name", "description", "extends", "knobs", "launchers", "notes")
    _check_keys(src, raw, top_allowed + KNOB_NAMES, "key")
    for k in ("name", "description", "extends"):
        if k in raw and not isinstance(raw[k], str):
            raise _err(src, f"'{k}' must be a string, got {raw[k]!r}")
    base = Space()
    if raw.get("extends"):
        ext = str(raw["extends"])
        if ext in _seen:
            raise _err(src, f"'extends = \"{ext}\"' is circular")
        base = load_space(ext, _seen=_seen + (ext,))
    knobs = raw.get("knobs", {})
    if not isinstance(knobs, dict):
        raise _err(src, f"[knobs] must be a table, got {knobs!r}")
    _check_keys(src, knobs, KNOB_NAMES, "knob")
    knobs = dict(knobs)
    for k in KNOB_NAMES:          # knobs may also be written at top level
        if k in raw:
            if k in knobs:
                raise _err(src, f"knob '{k}' is set both at the top level and in [knobs]; keep one")
            knobs[k] = raw[k]
    kw = {}
    extras = dict(base.extras)
    for key, val in knobs.items():
        if key in CORE_KNOBS:
            kw[key] = _parse_knob(src, key, val)
        else:
            extras[key] = _parse_extra(src, key, val)
    kw["extras"] = tuple(extras.items())
    name = str(raw.get("name") or Path(source).stem)
    return replace(base, name=name, description=str(raw.get("description", base.description if raw.get("extends") else "")),
                   source=source, **kw)


def available_spaces() -> list[str]:
    return sorted({p.stem for p in SPACE_DIR.glob("*.toml")} | set(SPACE_ALIASES))


# `--space megatron|fsdp`: the default space cut to a runtime (the old search_spaces/megatron.toml and
# fsdp.toml contradicted the exporters; the runtime files are now the one source)
SPACE_ALIASES = {"megatron": "megatron-core", "fsdp": "llm-foundry"}


def space_for_runtime(rt, base: Space | None = None) -> Space:
    """The default space (or `base`) cut to what runtime `rt` can express (`rt.supports`), with the
    plan switches the runtime fixes (`rt.plan_defaults()`: tp_async, dp_overlap, bwd_prefetch,
    fetch_sync, rank order, DP bucket) as single values. The cut only narrows knob lists; the exact
    legality is the runtime's capability rules (`autoplace.runtimes.check.capability_rules`), which
    the search applies as well — so a value this cut keeps that a rule refuses is still pruned."""
    from autoplace.runtimes import load_runtime
    rt = load_runtime(rt)
    sp = base or load_space(DEFAULT_SPACE)
    s, d = rt.supports, rt.defaults
    one = Choice((1,))
    kw: dict = {}
    kw["zero"] = tuple(z for z in sp.zero if z in s.zero) or (s.zero[0],)
    if not s.zero_hold:
        kw["reshard_after_forward"] = (True,)
    if not s.hsdp:
        kw["dp_replicate"] = one
    for knob, ok in (("pp", s.pp), ("tp", s.tp), ("cp", s.cp), ("ep", s.ep)):
        if not ok:
            kw[knob] = one
    kw["sp"] = {"never": (False,), "always": (True,)}.get(s.sp, sp.sp)
    if not s.tp_overlap or s.sp == "never":
        kw["tp_overlap"] = (False,)
    kw["etp"] = {"1": (1,), "tp-or-1": tuple(e for e in sp.etp if e in ("tp", 1)) or ("tp",)}.get(s.etp, sp.etp)
    kw["schedule"] = tuple(c for c in sp.schedule if SCHEDULES[c] in s.schedules) or (0,)
    kw["vpp_group"] = {"pp": ("pp",), "rounds": ("rounds",)}.get(s.vpp_group, sp.vpp_group)
    kw["offload"] = tuple(c for c in sp.offload if OFFLOAD[c] in s.offload) or (0,)
    if not s.offload_partial:
        kw["offload_fraction"] = (1.0,)
    kw["recompute"] = tuple(c for c in sp.recompute if RECOMPUTE[c] in s.recompute) or (0,)
    allowed = modules_code(s.recompute_modules)
    kw["recompute_modules"] = tuple(c for c in sp.recompute_modules if c & ~allowed == 0) or (0,)
    orders = [RANK_ORDERS.index(d.rank_order)] if d.rank_order in s.rank_orders else []
    orders += [RANK_ORDERS.index(o) for o in s.rank_orders if RANK_ORDERS.index(o) not in orders]
    kw["rank_order"] = tuple(orders)
    pdf = rt.plan_defaults()
    kw["dp_overlap"] = (bool(pdf["dp_overlap"]),)
    extras = dict(sp.extras)
    if not s.ep_overlap and "ep_overlap" in extras:
        extras["ep_overlap"] = (False,)
    for k in ("tp_async", "bwd_prefetch", "fetch_sync", "dp_bucket_mb"):
        if k in pdf and k in KNOB_NAMES:
            extras[k] = (pdf[k],)
    kw["extras"] = tuple(extras.items())
    return sp.with_(name=f"runtime:{rt.name}", description=f"the default space cut to {rt.describe()}",
                    source=f"space_for_runtime({rt.name})", runtime=_runtime_ref(rt), **kw)


def _runtime_ref(rt) -> str:
    """A shipped runtime by name, a user's TOML by path."""
    from autoplace.runtimes import RUNTIME_DIR
    return rt.name if rt.source == "builtin" or Path(rt.source).parent == RUNTIME_DIR else rt.source


def resolve_space_path(name_or_path: str) -> Path:
    p = Path(name_or_path)
    if p.suffix == ".toml" or p.exists() or "/" in name_or_path:
        if not p.exists():
            raise InputError(f"--space: file '{name_or_path}' does not exist")
        if p.is_dir():
            raise InputError(f"--space: '{name_or_path}' is a directory, not a .toml file")
        return p
    cand = SPACE_DIR / f"{name_or_path.strip().lower()}.toml"
    if cand.exists():
        return cand
    raise InputError(f"--space: unknown search space '{name_or_path}'; choose one of "
                     f"{', '.join(available_spaces()) or '(none found in ' + str(SPACE_DIR) + ')'} or pass a .toml path")


def load_space(name_or_path: str | None = None, _seen: tuple = ()) -> Space:
    """`--space NAME|PATH` → Space. One-line InputError for a missing file, bad TOML or a bad knob.
    `megatron` and `fsdp` are the default space cut to a runtime (`SPACE_ALIASES`, space_for_runtime);
    `runtime:NAME` cuts it to any runtime."""
    key = (name_or_path or "").strip().lower()
    if key in SPACE_ALIASES or key.startswith("runtime:"):
        sp = space_for_runtime(SPACE_ALIASES.get(key) or key.split(":", 1)[1])
        return sp.with_(name=key) if key in SPACE_ALIASES else sp
    path = resolve_space_path(name_or_path or DEFAULT_SPACE)
    try:
        from autoplace.safe import read_text
        raw = tomllib.loads(read_text(path, "--space"))
    except tomllib.TOMLDecodeError as e:
        raise InputError(f"search space {path}: invalid TOML ({str(e).splitlines()[0]})") from None
    except UnicodeDecodeError:
        raise InputError(f"search space {path}: not a UTF-8 text file") from None
    return space_from_dict(raw, str(path), _seen=_seen or ((path.stem,)))
