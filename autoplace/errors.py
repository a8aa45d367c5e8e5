"""Error types and the CLI exit codes (one table: `EXIT_CODES`).

| code | meaning |
|---:|---|
| 0 | ok |
| 1 | bad input (`InputError`: one line naming the field and the fix) |
| 2 | illegal plan (`IllegalPlanError`: every violated composition rule) |
| 3 | no feasible plan (`NoFeasiblePlanError`): nothing legal fits the memory limit, no legal plan at all, or `estimate` of a plan that does not fit |
| 4 | launcher refused (`LauncherRefusedError`): every requested launcher cannot express the plan |
| 64 | usage error (unknown option, missing or malformed option value: click/typer usage errors; BSD `EX_USAGE`) |
"""

EXIT_OK = 0
EXIT_INPUT = 1
EXIT_ILLEGAL = 2
EXIT_NO_FEASIBLE = 3
EXIT_REFUSED = 4
EXIT_USAGE = 64
EXIT_CODES = {EXIT_OK: "ok", EXIT_INPUT: "bad input", EXIT_ILLEGAL: "illegal plan",
              EXIT_NO_FEASIBLE: "no feasible plan", EXIT_REFUSED: "launcher refused",
              EXIT_USAGE: "usage error"}


class AutoplaceError(Exception):
    exit_code = EXIT_INPUT


class InputError(AutoplaceError):
    """Bad user input: names the field and the fix. Exit code 1."""
    exit_code = EXIT_INPUT


class IllegalPlanError(AutoplaceError):
    """A well-formed plan that violates composition rules. Exit code 2."""
    exit_code = EXIT_ILLEGAL

    def __init__(self, message: str, violations=()):
        super().__init__(message)
        self.violations = list(violations)


class NoFeasiblePlanError(AutoplaceError):
    """No legal plan fits the memory limit (or none is legal). Exit code 3."""
    exit_code = EXIT_NO_FEASIBLE


class LauncherRefusedError(AutoplaceError):
    """A legal plan that the requested launcher(s) cannot express. Exit code 4."""
    exit_code = EXIT_REFUSED

    def __init__(self, launcher: str, reasons):
        self.launcher = launcher
        self.reasons = list(reasons)
        super().__init__(f"{launcher} cannot express this plan: " + "; ".join(self.reasons))
