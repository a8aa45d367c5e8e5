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


def headline_check(model, gpus: int, hardware: str = "h100-sxm-80gb", top_k: int = 1) -> dict:
    """The default search's #1 plan for (model, gpus) against `search --launcher L` for the stack L
    that priced it. Returns {"outcome", "launcher", "plan", "step_s", "peak_gib", "runs_on", "problems", "message"}:
    outcome "ok" (a training stack priced it, its own model says it fits, and the step time and peak
    memory equal `search --launcher L`'s for the same plan), "no plan" (a one-line refusal: no stack
    runs a plan that fits — the output says so, no problem) or "problem" (`problems` says what)."""
    from autoplace.errors import AutoplaceError
    from autoplace.estimate import estimate
    from autoplace.export.registry import STACKS
    from autoplace.search.launchers import price_on_stacks, search
    from autoplace.specs.hardware import load_hardware
    from autoplace.specs.presets import get_preset
    m = get_preset(model) if isinstance(model, str) else model
    hw = load_hardware(hardware)
    res = {"outcome": "ok", "launcher": None, "plan": None, "step_s": None, "peak_gib": None, "runs_on": [],
           "problems": [], "message": ""}
    try:
        o = search(m, hw, gpus, top_k=top_k, per_launcher=False)
    except AutoplaceError as e:
        return dict(res, outcome="no plan", message=str(e).splitlines()[0] if str(e) else type(e).__name__)
    p, step, t = o.ranked[0]
    out = res["problems"]
    res.update(launcher=t.launcher, plan=p.short(), step_s=float(step))
    if t.launcher not in STACKS:
        out.append(f"#1 priced by {t.launcher!r}, not a training stack")
        return dict(res, outcome="problem")
    rows = {r["launcher"]: r for r in price_on_stacks(m, hw, gpus, p, o.stack_trains)}
    res["runs_on"] = [n for n, r in rows.items() if r["runs"]]
    if not rows[t.launcher]["runs"]:
        out.append(f"#1 does not run on its own stack {t.launcher}: {rows[t.launcher]['why']}")
    d = estimate(m, hw, t.train, p, gpus)
    res["peak_gib"] = d["memory"]["peak_bytes"] / 2**30
    own = search(m, hw, gpus, launchers=[t.launcher], top_k=1, per_launcher=False)
    q, s2, t2 = own.ranked[0]
    d2 = estimate(m, hw, t2.train, q, gpus)
    if q != p:
        out.append(f"search -l {t.launcher} picks {q.short()}, the default #1 is {p.short()}")
    if s2 != step or d2["time"]["step_s"] != d["time"]["step_s"]:
        out.append(f"step {step} (default #1) vs {s2} (search -l {t.launcher})")
    if d2["memory"]["peak_bytes"] != d["memory"]["peak_bytes"]:
        out.append(f"peak {d['memory']['peak_bytes']} vs {d2['memory']['peak_bytes']} (search -l {t.launcher})")
    if rows[t.launcher]["step_s"] != d["time"]["step_s"]:
        out.append(f"'runs on' prices {t.launcher} at {rows[t.launcher]['step_s']} s, the row at {d['time']['step_s']} s")
    return dict(res, outcome="problem" if out else "ok")


def headline_problems(model, gpus: int, hardware: str = "h100-sxm-80gb", top_k: int = 1) -> list[str]:
    """What is wrong with the default search's #1 plan for (model, gpus) (`headline_check`): [] when
    it is priced by a training stack that runs it, with `search --launcher L`'s numbers, or when no
    stack runs a plan that fits (a one-line refusal says so)."""
    return headline_check(model, gpus, hardware, top_k)["problems"]
