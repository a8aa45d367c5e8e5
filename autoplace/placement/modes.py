"""States, modes and mesh axes (placement_semantics.md §1.1–1.3)."""

from __future__ import annotations

from enum import Enum


class State(str, Enum):
    P = "parameters"
    G = "gradients"
    O = "optimizer"
    A = "activations"


class Mode(str, Enum):
    R = "R"              # replicated: full copy on every device of the axis group
    S = "S"              # sharded: disjoint 1/n slice, never materialized in full
    SG = "SG"            # sharded-with-gather: 1/n at rest, gathered per use, freed after
    SG_HOLD = "SG-hold"  # gathered once, held forward→backward (SHARD_GRAD_OP)
    M = "M"              # materialized on demand (recomputed)
    OFF = "OFF"          # offloaded to host (optionally a fraction φ)

    def resident_fraction(self, n: int, phi: float = 1.0) -> float:
        """§2.1: f(R)=1, f(S)=f(SG)=f(SG-hold at rest)=1/n, f(OFF(φ))=1−φ."""
        if self is Mode.R:
            return 1.0
        if self in (Mode.S, Mode.SG, Mode.SG_HOLD):
            return 1.0 / n
        if self is Mode.OFF:
            return 1.0 - phi
        raise ValueError("M has a checkpoint fraction, not a residency fraction")


STATES = tuple(State)
MODES = tuple(Mode)
# Mesh axes and their roles (§1.2).
AXES = {
    "dp_replicate": "data-splitting",
    "dp_shard": "data-splitting",
    "cp": "data-splitting (gradients) / sequence-splitting (activations)",
    "tp": "model-splitting",
    "pp": "model-splitting (layers)",
    "ep": "model-splitting (experts) / data-splitting (dense weights)",
}
# Integer codes used by the cost model on the data-parallel shard axis.
P_CODES = (Mode.R, Mode.SG, Mode.SG_HOLD)   # p_mode 0, 1, 2
G_CODES = (Mode.R, Mode.S, Mode.SG)         # g_mode 0, 1, (2 = ill-formed, rule C5)
O_CODES = (Mode.R, Mode.S)                  # o_mode 0, 1
