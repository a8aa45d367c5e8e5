"""Plan families for `search --diverse`: the best plan of each distinct strategy, not five variants
of the winner.

Every plan belongs to exactly one family, the first that matches in this order:

  offload   any CPU offload (optimizer, gradients or parameters)
  EP        expert parallelism (ep > 1)
  CP        context parallelism (cp > 1)
  PP        pipeline parallelism (pp > 1), with or without TP
  TP        tensor parallelism (tp > 1), no PP/CP/EP
  DP-only   data parallelism alone (DDP, ZeRO-1/2/3, FSDP, HSDP)

so "PP" is the best pipelined plan (whatever its tp), "TP" the best plan that splits layers but
does not pipeline them. `family_codes` reads the same columns on a `Plan`, a `PlanBatch` or a
broadcast `GridBatch` (numpy), so the exhaustive search keeps a per-family best as it goes.
"""

from __future__ import annotations

import numpy as np

FAMILIES = ("DP-only", "TP", "PP", "CP", "EP", "offload")     # code = index


def family_codes(p) -> np.ndarray:
    """Family code(s) of a plan or a batch of plans (broadcast shape of its degree/offload columns)."""
    tp, pp, cp, ep, off = (np.asarray(getattr(p, c)) for c in ("tp", "pp", "cp", "ep", "off"))
    return np.where(off > 0, 5, np.where(ep > 1, 4, np.where(cp > 1, 3, np.where(pp > 1, 2,
                    np.where(tp > 1, 1, 0))))).astype(np.int64)


def family_of(plan) -> str:
    return FAMILIES[int(family_codes(plan))]
