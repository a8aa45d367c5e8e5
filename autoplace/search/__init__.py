"""Search over parallelization plans (placement_semantics.md §4.7).

- `space`      reads `search_spaces/*.toml`: the allowed values or ranges of every knob.
- `batch`      `PlanBatch`: a plan per row, numpy arrays with the attribute names of `Plan`.
- `enumerate`  the Cartesian product of a space restricted to divisor degrees, pruned by the
               composition rules of `autoplace.placement.rules` (no second copy), in chunks:
  - `options`  the option groups (each knob's values per degree row, as flat columns);
  - `pruning`  rules applied early and per block, charged per rule; the `extra_rules` hook;
  - `blocks`   Cartesian blocks for broadcast evaluation, and their canonical keys.
- `exhaustive` evaluates every legal plan with the vectorized step-time model: exact optimum + top-k.
- `ilp`        CP-SAT (or scipy milp) for non-uniform layer splits and per-stage recompute.
- `bayes`      Optuna TPE over the same space, memory as a constraint.
- `driver`     `run_search`: the one entry point the CLI and the benchmarks use.

Nothing here imports optuna or ortools at module import time.
"""


from autoplace._callable import make_callable  # noqa: E402

make_callable(__name__)   # `autoplace.search(request)` calls autoplace.api.search
