"""The search over a (preset × GPU count × hardware) grid ends in a plan or a one-line error, never a
traceback: shared by `tests/test_search_grid.py` (a fast deterministic subset, coarse space) and
`benchmarks/search_grid.py` (the whole grid, the default space as `autoplace search` runs it)."""

from __future__ import annotations

GPUS = (8, 64, 1024, 16384)
HARDWARE = ("h100-sxm-80gb", "b200")


def run_cell(preset: str, gpus: int, hardware: str, *, space=None, method: str = "auto", trials: int = 200,
             top_k: int = 1) -> tuple[str, float | None, str]:
    """One search as the CLI runs it (library call). Returns (outcome, best step s, message):
    outcome 'plan' or the `AutoplaceError` subclass name (a user-facing one-line refusal). Any other
    exception propagates (a crash)."""
    from autoplace.errors import AutoplaceError
    from autoplace.search.launchers import search
    from autoplace.specs.hardware import load_hardware
    from autoplace.specs.presets import get_preset
    try:
        o = search(get_preset(preset), load_hardware(hardware), gpus, space=space, method=method, trials=trials,
                   top_k=top_k, per_launcher=False)
    except AutoplaceError as e:
        return type(e).__name__, None, str(e).splitlines()[0] if str(e) else ""
    return "plan", float(o.ranked[0][1]), ""
