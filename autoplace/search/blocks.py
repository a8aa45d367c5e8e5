"""Blocks: Cartesian pieces of the enumeration that the cost model evaluates by broadcasting.

Degree rows with the same option counts per group are stacked into a `GridBatch` of shape
(rows, count_1, …, count_G) whose columns vary along one axis each. A block holds at most
`max_size` plans: a row larger than that is split along its largest axis. `BlockSpec` is the
cheap description (what the exhaustive search hands to its worker processes); `make_block`
materializes it.

Keys: plan j of the enumeration (canonical order: degree rows in order, then the groups in C
order, the last group varying fastest) has the key j. A block's plan at (r, k_1 … k_G) has the key
`keys0[r] + ravel(k + lo, sig)`; ties in step time are broken by it, so results do not depend on
chunking or on the number of workers.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple

import numpy as np

from autoplace.search.batch import GridBatch, PlanBatch


@dataclass
class Block:
    """One Cartesian block: degree rows with equal option counts stacked on axis 0, one axis per group."""
    grid: GridBatch
    rows: np.ndarray
    sig: tuple
    """Full option counts per group axis."""
    lo: tuple
    """First option index of each group axis in this block."""
    keys0: np.ndarray
    """Key of the first plan of each stacked row."""
    n_rl: int = 0
    """Plans the block-recompute slot stands for (collapse mode)."""
    block_slot: int = -1
    """Index of that slot on the rc axis (−1: none in this block)."""
    rc_axis: int = 1

    @property
    def size(self) -> int:
        return self.grid.size

    def keys(self) -> np.ndarray:
        """Canonical key of every plan of the block (flat, C order)."""
        shape = self.grid.shape
        local = np.zeros(shape[1:], dtype=np.int64)
        stride = 1
        for ax in range(len(self.sig) - 1, -1, -1):
            sh = [1] * len(self.sig)
            sh[ax] = -1
            local = local + ((np.arange(shape[ax + 1]) + self.lo[ax]) * stride).reshape(sh)
            stride *= self.sig[ax]
        return (self.keys0.reshape((-1,) + (1,) * len(self.sig)) + local[None]).reshape(-1)

    def on_rc(self, sl) -> tuple:
        """Index selecting `sl` on the rc axis (everything on the others)."""
        ix = [slice(None)] * len(self.grid.shape)
        ix[self.rc_axis] = sl
        return tuple(ix)

    def rc_slot_mask(self) -> np.ndarray:
        """Broadcastable mask of the block-recompute slot on the rc axis."""
        sh = [1] * len(self.grid.shape)
        sh[self.rc_axis] = -1
        return (np.arange(self.grid.shape[self.rc_axis]) == self.block_slot).reshape(sh)


class BlockSpec(NamedTuple):
    """What `make_block` needs to build a block."""
    key: tuple
    """Option counts per group, then (n_rl, block slot index) of the rows."""
    rows: tuple
    """Degree rows stacked on axis 0."""
    cut: tuple | None
    """(axis, start, stop) when one row is split along a group axis, else None."""
    keys0: tuple
    """Key of the first plan of each row."""


def row_block_info(en, d) -> tuple[int, int]:
    """(n_rl, block slot index) of degree row d (collapse mode), else (0, −1)."""
    if not en.collapse_block:
        return 0, -1
    g = en.groups[en.rc_axis - 1]
    a, c = g.offsets[d], g.counts[d]
    rcs = g.cols["rc"][a:a + c]
    j = np.nonzero(rcs == 3)[0]
    if j.size == 0:
        return 0, -1
    return int(g.w[a + j[0]]), int(j[0])


def block_specs(en, max_size: int) -> list[BlockSpec]:
    """Cheap descriptions of the blocks of `en`: degree rows with equal option counts stacked; a row
    larger than max_size split along its largest axis."""
    tot_all = en.totals_eval
    rows = np.nonzero(tot_all > 0)[0]
    if rows.size == 0:
        return []
    ends = np.cumsum(tot_all[rows])
    start = dict(zip(rows.tolist(), (ends - tot_all[rows]).tolist()))
    sigs: dict = {}
    for d in rows.tolist():
        sigs.setdefault(en.counts_eval(d) + row_block_info(en, d), []).append(d)
    specs = []
    ng = len(en.groups)
    for key, members in sigs.items():
        sig = key[:ng]
        total = int(np.prod(sig))
        if total <= max_size:
            per = max(1, max_size // total)
            for i in range(0, len(members), per):
                mr = members[i:i + per]
                specs.append(BlockSpec(key, tuple(mr), None, tuple(start[d] for d in mr)))
        else:
            ax = int(np.argmax(sig))
            step = max(1, max_size // (total // sig[ax]))
            for d in members:
                for a in range(0, sig[ax], step):
                    specs.append(BlockSpec(key, (d,), (ax, a, min(sig[ax], a + step)), (start[d],)))
    return specs


def make_block(en, spec: BlockSpec) -> Block:
    """The block a spec describes: each group's columns laid along its own axis."""
    key, mrows, cut, keys0 = spec
    ng = len(en.groups)
    sig = key[:ng]
    n_rl, bslot = key[ng], key[ng + 1]
    mrows = np.asarray(mrows, dtype=np.int64)
    shape = [mrows.size] + list(sig)
    lo = [0] * ng
    cols = {c: arr[mrows].reshape((-1,) + (1,) * ng) for c, arr in en.deg.items()}
    for ax, g in enumerate(en.groups):
        a, b = (cut[1], cut[2]) if (cut is not None and cut[0] == ax) else (0, sig[ax])
        lo[ax] = a
        shape[ax + 1] = b - a
        idx = g.offsets[mrows][:, None] + np.arange(a, b)[None, :]
        sh = [mrows.size] + [1] * ng
        sh[ax + 1] = b - a
        for name, arr in g.cols.items():
            cols[name] = arr[idx].reshape(sh)
    ra = en.rc_axis
    if bslot >= 0:
        if lo[ra - 1] <= bslot < lo[ra - 1] + shape[ra]:
            bslot -= lo[ra - 1]
        else:
            bslot = -1
    return Block(GridBatch(tuple(shape), **cols), mrows, tuple(sig), tuple(lo),
                 np.asarray(keys0, dtype=np.int64), n_rl if bslot >= 0 else 0, bslot, ra)


def decode_flat(en, rows: np.ndarray, ends: np.ndarray, j: np.ndarray) -> PlanBatch:
    """Plans with keys `j` (mixed-radix decoding; `rows` the degree rows with plans, `ends` their
    cumulative plan counts)."""
    tot = np.diff(np.concatenate([[0], ends]))
    starts = ends - tot
    di = np.searchsorted(ends, j, side="right")
    k = j - starts[di]
    d = rows[di]
    cols = {c: en.deg[c][d] for c in en.deg}
    for g in reversed(en.groups):           # C order: the last group varies fastest
        c = g.counts[d]
        pos = g.offsets[d] + k % c
        k = k // c
        for name, arr in g.cols.items():
            cols[name] = arr[pos]
    return PlanBatch(**cols)
