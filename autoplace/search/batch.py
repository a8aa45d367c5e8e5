"""`PlanBatch`: many uniform plans as numpy columns, read by the same cost functions as a `Plan`.

Every per-plan knob is a 1-D array with the attribute name the cost model reads on a `Plan` (the
integer codes `rc`, `sched`, `off`, `order`, `p_mode`, `g_mode`, `o_mode`, ... and the degrees);
the fields a search never varies are scalars with the `Plan` defaults (`layer_split=()`,
`stage_recompute=()`, `omit=()`, `zero_axes="dp,cp"`, `zero_over_cp=True`). `plan(i)` rebuilds the
scalar dataclass, so a row round-trips exactly.

Plan fields without a dedicated column here (numeric or boolean flags added to `Plan` later, e.g.
`tp_async`, `dp_bucket_mb`) are carried generically: as a column when the search varies them (a
space may list any such field as a knob), else as the `Plan` default scalar.
"""

from __future__ import annotations

from dataclasses import MISSING, fields

import numpy as np

from autoplace.plan import OFFLOAD, RANK_ORDERS, RECOMPUTE, SCHEDULES, Plan, modules_of

# stored columns (everything else is derived from them)
INT_COLS = ("tp", "pp", "vpp", "cp", "ep", "t_exp", "dp", "dp_replicate", "zero", "rc",
            "recompute_layers", "rc_mods", "off", "mbs", "sched", "G", "order")
BOOL_COLS = ("sp", "tp_overlap", "dp_overlap", "reshard_after_forward")
FLOAT_COLS = ("offload_fraction",)
COLUMNS = INT_COLS + BOOL_COLS + FLOAT_COLS

# Plan fields covered by the columns above (possibly under another name / as a code)
_COVERED = {"tp", "pp", "vpp", "cp", "ep", "etp", "dp", "dp_replicate", "zero", "reshard_after_forward",
            "sp", "recompute", "recompute_layers", "recompute_modules", "offload", "offload_fraction", "mbs", "schedule",
            "vpp_group", "rank_order", "tp_overlap", "dp_overlap"}
_SCALAR_ONLY = {"layer_split", "stage_recompute", "dp_modes", "zero_axes", "omit"}


def _extra_fields() -> dict:
    """Plan fields (bool/int/float) without a dedicated column: name → (dtype, default)."""
    out = {}
    for f in fields(Plan):
        if f.name in _COVERED or f.name in _SCALAR_ONLY:
            continue
        d = f.default if f.default is not MISSING else None
        typ = str(f.type)
        dtype = bool if typ == "bool" else (np.int64 if typ == "int" else (np.float64 if typ == "float" else None))
        if dtype is None:
            continue
        out[f.name] = (dtype, d)
    return out


EXTRA = _extra_fields()


def _dtype(c):
    if c in INT_COLS:
        return np.int64
    if c in BOOL_COLS:
        return bool
    if c in FLOAT_COLS:
        return np.float64
    return EXTRA[c][0]


def extra_columns(obj) -> list[str]:
    """Extra Plan fields stored as arrays (varied) on a batch."""
    return [c for c in EXTRA if isinstance(obj.__dict__.get(c), np.ndarray)]


class _Base:
    # scalars shared by every row (uniform plans)
    layer_split: tuple = ()
    stage_recompute: tuple = ()
    omit: tuple = ()
    zero_axes: str = "dp,cp"
    zero_over_cp: bool = True
    zero_over_model_axis: bool = False
    dp_modes: str = ""

    def _set_extras(self, cols: dict, check) -> None:
        for c, (dtype, default) in EXTRA.items():
            if c in cols:
                setattr(self, c, check(c, np.asarray(cols[c], dtype=dtype)))
            else:
                setattr(self, c, default)

    def _derive(self) -> None:
        self._memo = {}             # per-batch values the cost functions ask for repeatedly (cost.memory.memo)
        z = self.zero
        self.hold = (z == 3) & ~self.reshard_after_forward
        self.p_mode = np.where(z < 3, 0, np.where(self.reshard_after_forward, 1, 2)).astype(np.int64)
        self.g_mode = (z >= 2).astype(np.int64)
        self.o_mode = (z >= 1).astype(np.int64)
        self.etp = self.t_exp
        self.dp_shard = self.dp // np.maximum(self.dp_replicate, 1)
        self.v = np.where(self.sched == 1, self.vpp, 1)
        self.vpp_group = self.G

    def __getstate__(self):
        return {k: v for k, v in self.__dict__.items() if k != "_memo"}

    def __setstate__(self, state):
        self.__dict__.update(state)
        self._memo = {}

    def columns(self) -> dict:
        out = {c: getattr(self, c) for c in COLUMNS}
        for c in extra_columns(self):
            out[c] = getattr(self, c)
        return out


class PlanBatch(_Base):
    """Columns of equal length; derived codes are computed once at construction."""

    def __init__(self, **cols):
        missing = [c for c in COLUMNS if c not in cols]
        if missing:
            raise ValueError(f"PlanBatch: missing column(s) {', '.join(missing)}")
        unknown = [c for c in cols if c not in COLUMNS and c not in EXTRA]
        if unknown:
            raise ValueError(f"PlanBatch: unknown column(s) {', '.join(unknown)}")
        n = None

        def check(c, a):
            nonlocal n
            a = np.ascontiguousarray(a).reshape(-1)
            if n is None:
                n = a.shape[0]
            elif a.shape[0] != n:
                raise ValueError(f"PlanBatch: column {c} has {a.shape[0]} rows, expected {n}")
            return a

        for c in COLUMNS:
            setattr(self, c, check(c, np.asarray(cols[c], dtype=_dtype(c))))
        self._set_extras(cols, check)
        self._n = int(n or 0)
        self._derive()

    def __len__(self) -> int:
        return self._n

    def take(self, idx) -> "PlanBatch":
        idx = np.asarray(idx)
        return PlanBatch(**{c: a[idx] for c, a in self.columns().items()})

    @classmethod
    def concat(cls, batches) -> "PlanBatch":
        batches = [b for b in batches if len(b)]
        if not batches:
            return cls.empty()
        names = set()
        for b in batches:
            names.update(b.columns())
        out = {}
        for c in names:
            parts = []
            for b in batches:
                v = getattr(b, c)
                parts.append(v if isinstance(v, np.ndarray) else np.full(len(b), v, dtype=_dtype(c)))
            out[c] = np.concatenate(parts)
        return cls(**out)

    @classmethod
    def empty(cls) -> "PlanBatch":
        return cls(**{c: np.zeros(0) for c in COLUMNS})

    @classmethod
    def from_plans(cls, plans, world: int | None = None) -> "PlanBatch":
        """Uniform scalar plans → batch (layer_split / stage_recompute must be empty)."""
        plans = [p.resolved(world) if world is not None else p for p in plans]
        rows = {c: [] for c in COLUMNS}
        varied = [c for c in EXTRA if len({getattr(p, c) for p in plans}) > 1
                  or any(getattr(p, c) != EXTRA[c][1] for p in plans)]
        for c in varied:
            rows[c] = []
        for p in plans:
            if p.layer_split or p.stage_recompute or p.omit or p.dp_modes or p.zero_axes != "dp,cp":
                raise ValueError("PlanBatch holds uniform plans only (no layer_split, stage_recompute, "
                                 "omit, dp_modes or non-default zero_axes)")
            for c in rows:
                rows[c].append(getattr(p, c))
        return cls(**rows)

    def plan(self, i: int) -> Plan:
        """Row i as the scalar dataclass (round trip: PlanBatch.from_plans([b.plan(i)]) == b.take([i]))."""
        g = lambda c: getattr(self, c)[i].item()  # noqa: E731
        tp, t_exp, pp, sched = g("tp"), g("t_exp"), g("pp"), g("sched")
        G = g("G")
        extra = {}
        for c in EXTRA:
            v = getattr(self, c)
            extra[c] = v[i].item() if isinstance(v, np.ndarray) else v
            if EXTRA[c][0] is bool:
                extra[c] = bool(extra[c])
        return Plan(
            tp=tp, pp=pp, vpp=g("vpp"), cp=g("cp"), ep=g("ep"), etp=0 if t_exp == tp else t_exp,
            dp=g("dp"), dp_replicate=g("dp_replicate"), zero=g("zero"),
            reshard_after_forward=bool(g("reshard_after_forward")), sp=bool(g("sp")),
            recompute=RECOMPUTE[g("rc")], recompute_layers=g("recompute_layers"),
            recompute_modules=modules_of(g("rc_mods")),
            offload=OFFLOAD[g("off")], offload_fraction=float(g("offload_fraction")), mbs=g("mbs"),
            schedule=SCHEDULES[sched], vpp_group=0 if G == pp else G, rank_order=RANK_ORDERS[g("order")],
            tp_overlap=bool(g("tp_overlap")), dp_overlap=bool(g("dp_overlap")), **extra)

    def plans(self):
        return [self.plan(i) for i in range(len(self))]

    def __repr__(self) -> str:
        return f"PlanBatch({self._n} plans)"


class GridBatch(_Base):
    """A Cartesian block of plans: each column broadcastable to `shape` (one axis per option group).

    The cost functions evaluate it by numpy broadcasting, so a term that depends on few knobs is
    computed once per distinct value of those knobs, not once per plan; only the final sums are
    full-size. `flat()` materializes it as a 1-D `PlanBatch` (C order), `take_flat(idx)` picks rows.
    """

    def __init__(self, shape: tuple, **cols):
        self.shape = tuple(int(s) for s in shape)
        self.size = int(np.prod(self.shape)) if self.shape else 1

        def check(c, a):
            np.broadcast_shapes(a.shape, self.shape)     # raises if not broadcastable
            return a

        for c in COLUMNS:
            setattr(self, c, check(c, np.asarray(cols[c], dtype=_dtype(c))))
        self._set_extras(cols, check)
        self._derive()

    def __len__(self) -> int:
        return self.size

    def sub(self, axis: int, idx) -> "GridBatch":
        """The block restricted to positions `idx` (a slice) along one axis."""
        shape = list(self.shape)
        n_new = len(range(*idx.indices(shape[axis])))
        cols = {}
        for c, a in self.columns().items():
            if a.ndim == len(self.shape) and a.shape[axis] > 1:
                sl = [slice(None)] * a.ndim
                sl[axis] = idx
                a = a[tuple(sl)]
            cols[c] = a
        shape[axis] = n_new
        return GridBatch(tuple(shape), **cols)

    def with_col(self, **kw) -> "GridBatch":
        cols = self.columns()
        cols.update(kw)
        return GridBatch(self.shape, **cols)

    def full(self, x) -> np.ndarray:
        """A broadcastable result as a flat array in this block's C order."""
        return np.broadcast_to(np.asarray(x), self.shape).reshape(-1)

    def flat(self) -> PlanBatch:
        return PlanBatch(**{c: _flatten(a, self.shape) for c, a in self.columns().items()})

    def take_flat(self, idx) -> PlanBatch:
        ix = np.unravel_index(np.asarray(idx, dtype=np.int64), self.shape)
        return PlanBatch(**{c: np.broadcast_to(a, self.shape)[ix] for c, a in self.columns().items()})


def _flatten(a: np.ndarray, shape: tuple) -> np.ndarray:
    """broadcast_to(a, shape).ravel(), via repeat/tile when `a` varies along one axis only (fast)."""
    a = np.asarray(a)
    n = int(np.prod(shape))
    if a.ndim == 0:
        return np.full(n, a)
    if a.ndim != len(shape):
        return np.broadcast_to(a, shape).reshape(-1)
    var = [i for i, s in enumerate(a.shape) if s > 1]
    if len(var) == 0:
        return np.full(n, a.reshape(-1)[0])
    if len(var) == 1:
        ax = var[0]
        inner = int(np.prod(shape[ax + 1:]))
        outer = int(np.prod(shape[:ax]))
        return np.tile(np.repeat(a.reshape(-1), inner), outer)
    return np.broadcast_to(a, shape).reshape(-1)
