"""Placement semantics: four training states × mesh axes → one of five modes.

placement_semantics.md §1.3–1.4. `compose(plan)` turns a Plan into a `Placement`; memory and
communication (autoplace.cost) read the per-axis modes through the integer codes of the plan
(`p_mode`, `g_mode`, `o_mode`, ...) that `modes_of(plan)` derives here — one derivation for the
single-plan estimate and for the vectorized search.
"""

from autoplace.placement.compose import Placement, compose, dp_modes
from autoplace.placement.modes import AXES, MODES, STATES, Mode, State
from autoplace.placement.strategies import STRATEGIES, strategy_plan

__all__ = ["AXES", "MODES", "STATES", "Mode", "State", "Placement", "compose", "dp_modes",
           "STRATEGIES", "strategy_plan"]
