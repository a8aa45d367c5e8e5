"""Error types with their CLI exit codes (1 bad input, 2 illegal plan, 3 nothing fits)."""


class AutoplaceError(Exception):
    exit_code = 1


class InputError(AutoplaceError):
    """Bad user input: names the field and the fix. Exit code 1."""
    exit_code = 1


class IllegalPlanError(AutoplaceError):
    """A well-formed plan that violates composition rules. Exit code 2."""
    exit_code = 2

    def __init__(self, message: str, violations=()):
        super().__init__(message)
        self.violations = list(violations)


class NoFeasiblePlanError(AutoplaceError):
    """A search in which no legal plan fits the memory limit. Exit code 3."""
    exit_code = 3
