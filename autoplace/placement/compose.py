"""Compose a Plan into a Placement: for every state and mesh axis, one mode (§1.4 composition).

Residency fractions multiply across axes; a collective along one axis acts on the tensor as already
split by the others (§1.4, last paragraph). The cost model reads the same codes (`dp_modes`), so the
table shown to a user and the numbers it gets can never disagree.
"""

from __future__ import annotations

from dataclasses import dataclass

from autoplace.placement.modes import G_CODES, O_CODES, P_CODES, Mode, State


def dp_modes(plan) -> tuple[Mode, Mode, Mode]:
    """(P, G, O) modes on the data-parallel shard axis, from the plan's codes."""
    g = G_CODES[plan.g_mode] if plan.g_mode < len(G_CODES) else Mode.SG
    return P_CODES[plan.p_mode], g, O_CODES[plan.o_mode]


@dataclass(frozen=True)
class Placement:
    """modes[state][axis] → Mode (with OFF as a flag on top of the resident mode)."""
    modes: dict
    offloaded: dict          # state → fraction φ living on the host
    notes: tuple

    def table(self) -> list[dict]:
        rows = []
        for st in State:
            row = {"state": st.value}
            for ax, m in self.modes[st].items():
                row[ax] = m.value + (f"+OFF({self.offloaded[st]:g})" if self.offloaded.get(st) and ax == "dp_shard" else "")
            rows.append(row)
        return rows


def compose(plan, defer_grad_sync: bool = True) -> Placement:
    """The plan's placement; `defer_grad_sync` False: the runtime's pipeline syncs every micro-batch
    (RuntimeSpec comm.pp_defer_grad_sync), so K1's in-step placement does not apply."""
    p_m, g_m, o_m = dp_modes(plan)
    notes = []
    k1 = plan.pp > 1 and plan.zero >= 2 and defer_grad_sync
    if k1:
        notes.append("K1: pipeline micro-batching keeps P and G unsharded within the step "
                     "(torch pipelining + FSDP2); one AG(P) + one RS(G) per step")
    a_tp = Mode.S if plan.sp else Mode.R   # SP shards LN/dropout regions on the sequence dim
    act_mode = {"none": Mode.R, "selective": Mode.M, "full": Mode.M, "block": Mode.M}[plan.recompute]
    cp_dense = Mode.S if (plan.zero >= 1 and plan.zero_over_cp and plan.cp > 1) else Mode.R
    modes = {
        State.P: {"dp_replicate": Mode.R, "dp_shard": p_m, "cp": Mode.R if p_m is Mode.R else cp_dense,
                  "tp": Mode.S, "pp": Mode.S, "ep": Mode.S if plan.ep > 1 else Mode.R},
        State.G: {"dp_replicate": Mode.R, "dp_shard": g_m, "cp": Mode.R if g_m is Mode.R else cp_dense,
                  "tp": Mode.S, "pp": Mode.S, "ep": Mode.S if plan.ep > 1 else Mode.R},
        State.O: {"dp_replicate": Mode.R, "dp_shard": o_m, "cp": cp_dense,
                  "tp": Mode.S, "pp": Mode.S, "ep": Mode.S if plan.ep > 1 else Mode.R},
        # activations: each replica holds its own samples; the sequence is split by cp
        State.A: {"dp_replicate": Mode.S, "dp_shard": Mode.S, "cp": Mode.S, "tp": a_tp, "pp": Mode.S,
                  "ep": Mode.S, "recompute": act_mode},
    }
    off = {}
    if plan.off >= 1:
        off[State.O] = plan.offload_fraction
    if plan.off >= 2:
        off[State.G] = 1.0
    if plan.off >= 3:
        off[State.P] = 1.0
    return Placement(modes=modes, offloaded=off, notes=tuple(notes))
