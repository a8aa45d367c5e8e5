"""Error types and the command line's exit codes.

| code | meaning                                                                  | raised as                         |
|-----:|--------------------------------------------------------------------------|-----------------------------------|
|    0 | success                                                                  | —                                 |
|    1 | bad input: one line naming the field (or file and key) and the fix      | `InputError` (and OS file errors) |
|    2 | a well-formed plan that violates composition rules (every rule listed)   | `IllegalPlanError`                |
|    3 | a search in which no legal plan fits (the closest plan and its overrun)  | `NoFeasiblePlanError`             |
|    4 | a legal plan that was not carried out: a launcher cannot express it      | `export.common.LauncherRefusedError` |
|      | (`export`, `search --emit`), or a profiled run did not end ok (`profile`) | `EXIT_NOT_CARRIED_OUT`            |

Every `AutoplaceError` carries its `exit_code`; `autoplace.cli.common.cli_errors` prints the message
as one line and exits with it, never with a traceback. Code 1 is bad input throughout, including an
unknown key in an input file (search spaces, hardware profiles); 2 is reserved for illegal plans.

Not user errors (they never reach the CLI): `profile.capabilities.Unsupported` (a plan the runner
skips, recorded as such), `search.ilp.StageModelError` (a plan outside the ILP's linear model), and
`validate.mapping.Skip` (a record the validator cannot map). `LauncherRefusedError` is defined with
the exporters (`autoplace/export/common.py`) for now; it belongs here once the launcher interface
settles.
"""

EXIT_OK = 0
EXIT_INPUT = 1
EXIT_ILLEGAL_PLAN = 2
EXIT_NO_FEASIBLE_PLAN = 3
EXIT_NOT_CARRIED_OUT = 4
"""A legal plan that a launcher refused or a profiled run that did not end ok."""


class AutoplaceError(Exception):
    """Base of the errors the CLI reports as one line; `exit_code` is the process exit status."""
    exit_code = EXIT_INPUT


class InputError(AutoplaceError):
    """Bad user input: names the field and the fix. Exit code 1."""
    exit_code = EXIT_INPUT


class IllegalPlanError(AutoplaceError):
    """A well-formed plan that violates composition rules. Exit code 2."""
    exit_code = EXIT_ILLEGAL_PLAN

    def __init__(self, message: str, violations=()):
        super().__init__(message)
        self.violations = list(violations)
        """The `rules.Violation`s, every violated rule with its reason."""


class NoFeasiblePlanError(AutoplaceError):
    """A search in which no legal plan fits the memory limit. Exit code 3."""
    exit_code = EXIT_NO_FEASIBLE_PLAN
