"""Error types and the command line's exit codes (one table: `EXIT_CODES`).

| code | meaning                                                                   | raised as              |
|-----:|---------------------------------------------------------------------------|------------------------|
|    0 | success                                                                   | —                      |
|    1 | bad input: one line naming the field (or file and key) and the fix       | `InputError` (and OS file errors) |
|    2 | a well-formed plan that violates composition rules (every rule listed)    | `IllegalPlanError`     |
|    3 | no feasible plan: no legal plan fits (the closest plan and its overrun),  | `NoFeasiblePlanError`  |
|      | no legal plan at all, or `estimate` of a plan that does not fit           |                        |
|    4 | a legal plan that was not carried out: every requested launcher cannot    | `LauncherRefusedError` |
|      | express it (`export`, `search --emit`), or a profiled run did not end ok  | `EXIT_REFUSED`         |
|   64 | usage error: unknown option, missing or malformed option value (click/    | typer's usage errors   |
|      | typer; BSD `EX_USAGE`)                                                    |                        |
|  130 | interrupted: Ctrl-C / SIGINT (128 + signal number, the shell convention)  | `KeyboardInterrupt`    |
|  143 | terminated: SIGTERM (129: SIGHUP); outputs are whole or untouched         | `Terminated`           |

Every `AutoplaceError` carries its `exit_code`; `autoplace.cli.common.cli_errors` prints the message
as one line and exits with it, never with a traceback. Code 1 is bad input throughout, including an
unknown key in an input file (search spaces, hardware profiles, runtimes); 2 is reserved for
illegal plans.

Not user errors (they never reach the CLI): `profile.capabilities.Unsupported` (a plan the runner
skips, recorded as such), `search.ilp.StageModelError` (a plan outside the ILP's linear model), and
`validate.mapping.Skip` (a record the validator cannot map).
"""

EXIT_OK = 0
EXIT_INPUT = 1
EXIT_ILLEGAL = 2
EXIT_NO_FEASIBLE = 3
EXIT_REFUSED = 4
"""A legal plan that a launcher refused, or a profiled run that did not end ok."""
EXIT_USAGE = 64
EXIT_INTERRUPTED = 130
"""Ctrl-C (SIGINT): 128 + 2; SIGTERM gives 143 and SIGHUP 129 (128 + the signal number)."""
EXIT_CODES = {EXIT_OK: "ok", EXIT_INPUT: "bad input", EXIT_ILLEGAL: "illegal plan",
              EXIT_NO_FEASIBLE: "no feasible plan", EXIT_REFUSED: "not carried out (launcher refused)",
              EXIT_USAGE: "usage error",
              EXIT_INTERRUPTED: "interrupted (Ctrl-C)", 143: "terminated (SIGTERM)", 129: "hung up (SIGHUP)"}


class AutoplaceError(Exception):
    """Base of the errors the CLI reports as one line; `exit_code` is the process exit status."""
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
        """The `rules.Violation`s, every violated rule with its reason."""


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


class Terminated(BaseException):
    """SIGTERM or SIGHUP to the command (`autoplace.safe.signals_as_exceptions`): unwinds like Ctrl-C, so
    worker pools are ended and temp files removed; the CLI exits with 128 + `signum`. A BaseException,
    like KeyboardInterrupt, so no `except Exception` swallows it."""

    def __init__(self, signum: int):
        super().__init__(signum)
        self.signum = int(signum)
