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


def read_json(path, field: str, fix: str = "fix the file"):
    """The parsed JSON of `path`; an InputError naming `field` (e.g. '--records') and the fix when the
    file cannot be read or is not JSON. The one place every JSON input file is read."""
    import json
    from pathlib import Path

    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as e:
        raise InputError(f"{field}: cannot read '{p}' ({getattr(e, 'strerror', None) or e}); "
                         "check the path and permissions") from None
    try:
        return json.loads(text)
    except json.JSONDecodeError as e:
        raise InputError(f"{field}: '{p}' is not valid JSON ({e.msg} at line {e.lineno}, column {e.colno}); "
                         f"{fix}") from None
