"""Hostile-input safety in one place: text that goes into generated files or onto the terminal, names a
launcher needs, numbers read from files and options, and the bounds on how much work an input may ask for.

Every exporter routes the values it writes through the quoting functions here (one per file language:
shell comment / word, SBATCH header, Python string and docstring, TOML, YAML, JSON); every reader checks
its numbers with `number` / `integer` once, where it reads them. Violations are one-line `InputError`s
naming the field and the fix (exit code 1).
"""

from __future__ import annotations

import json
import math
import numbers
import os
import re
import shlex
import stat
from pathlib import Path

from autoplace.errors import AutoplaceError, InputError

# ---- bounds (stated once; the docs page quotes them) -----------------------------------------------
MAX_GPUS = 1 << 20
"""Largest GPU count any command plans for (1,048,576)."""
MAX_BATCH = 1 << 30
"""Largest global batch (samples) and micro-batch size."""
MAX_SEQ_LEN = 1 << 24
"""Largest sequence length (16,777,216 tokens)."""
MAX_LAYERS = 100_000
"""Largest transformer layer count."""
MAX_WIDTH = 1 << 24
"""Largest hidden / FFN / head count / head dim / vocabulary (16,777,216)."""
MAX_VOCAB = 1 << 27
"""Largest vocabulary (134,217,728)."""
MAX_TOP_K = 1_000
"""Most plans a search lists (--top-k)."""
MAX_TRIALS = 1_000_000
"""Most trials a sampled search runs (--trials)."""
MAX_NAME = 200
"""Longest model / hardware name (characters)."""
MAX_INPUT_BYTES = 16 << 20
"""Largest input file read (config.json, plan.json, TOML): 16 MiB."""
MAX_PATH = 4096
"""Longest path accepted on the command line."""
MAX_JSON_DEPTH = 64
"""Deepest nesting of an input JSON document."""
MAX_PROFILE_TIMEOUT_S = 7 * 24 * 3600.0
"""Longest `profile --timeout` (a week)."""

# ---- text -------------------------------------------------------------------------------------------
# C0/C1 controls, DEL, the Unicode line/paragraph separators and bidi overrides: anything that can end a
# line in some file language or move/recolour the terminal.
_CONTROL = re.compile("[\x00-\x1f\x7f-\x9f\u2028\u2029\u200e\u200f\u202a-\u202e\u2066-\u2069\ufeff]")
_ANSI = re.compile(r"\x1b(?:\[[0-?]*[ -/]*[@-~]|\][^\x07\x1b]*(?:\x07|\x1b\\)?|[@-Z\\-_])")


def has_control(s: str) -> bool:
    """True if `s` holds a control character, line separator or terminal escape."""
    return bool(_CONTROL.search(s))


def one_line(s: object, limit: int = MAX_NAME) -> str:
    """`s` as one printable line: terminal escapes removed, other control characters (newline, CR, tab,
    U+2028, bidi overrides) each replaced by a space, cut to `limit` characters with '…'. For
    terminal output and as the base of every file-language quoting below."""
    t = _ANSI.sub("", str(s))
    t = _CONTROL.sub(" ", t)
    if len(t) > limit:
        t = t[: max(0, limit - 1)] + "…"
    return t


def comment(s: object, limit: int = 400) -> str:
    """Text for a `#` comment line in shell, TOML, YAML, Python or an SBATCH script: one line, so it
    can never end the comment."""
    return one_line(s, limit)


def shell_word(s: object) -> str:
    """One shell word (single-quoted where needed) whose value is `one_line(s)`."""
    return shlex.quote(one_line(s, MAX_PATH))


def py_str(s: object) -> str:
    """A Python string literal of `one_line(s)` (repr: quotes and backslashes escaped)."""
    return repr(one_line(s, MAX_PATH))


def docstring_text(s: object, limit: int = 400) -> str:
    """Text for inside a triple-quoted Python docstring: one line, backslashes and double quotes
    escaped so no `\"\"\"` can end the docstring."""
    return one_line(s, limit).replace("\\", "\\\\").replace('"', '\\"')


def json_str(s: object) -> str:
    """A JSON (and YAML flow) string literal; every control character escaped."""
    return json.dumps(str(s), ensure_ascii=True)


def toml_str(s: object) -> str:
    """A TOML basic string literal (JSON's escapes are TOML's, with \\uXXXX)."""
    return json_str(s)


yaml_str = json_str
"""YAML accepts a JSON string literal as a double-quoted scalar."""

_LAUNCHER_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._+-]{0,127}$")


def launcher_name(s: object, field: str) -> str:
    """`s` unchanged if it is a safe launcher name (letters, digits, . _ + -, ≤ 128, no leading
    punctuation), else a one-line InputError naming `field`."""
    t = str(s)
    if not _LAUNCHER_NAME.match(t):
        raise InputError(f"{field}: {one_line(t, 60)!r} is not a launcher-safe name; use letters, digits "
                         "and . _ + - (at most 128 characters)")
    return t


def slug(s: object, default: str = "job") -> str:
    """A launcher-safe name made from `s` (other characters become '-'), e.g. for `#SBATCH --job-name`."""
    t = re.sub(r"[^A-Za-z0-9_.+-]+", "-", str(s)).strip("-._+").lower()[:100]
    return t or default


def check_name(s: object, field: str, fix: str = "rename it") -> str:
    """A model or hardware name as read: a string of at most MAX_NAME characters with no control
    characters or terminal escapes; otherwise a one-line InputError."""
    if not isinstance(s, str):
        raise InputError(f"{field} must be a string, got {type(s).__name__}")
    if len(s) > MAX_NAME:
        raise InputError(f"{field} is {len(s):,} characters long (at most {MAX_NAME}); {fix}")
    if has_control(s):
        raise InputError(f"{field} {one_line(s, 60)!r} contains control characters (newline, tab, escape); {fix}")
    return s


def portable_path(p: object) -> str:
    """A path fit for an emitted file: relative paths unchanged, an absolute path as its file name only
    (the planning machine's folders never end up in what is shared)."""
    s = str(p)
    return Path(s).name if os.path.isabs(s) else s


# ---- numbers ----------------------------------------------------------------------------------------
def number(v: object, field: str, *, lo: float | None = None, hi: float | None = None,
           lo_open: bool = False, fix: str = "") -> float:
    """`v` as a finite float in [lo, hi] (lo exclusive with lo_open); a one-line InputError naming `field`
    otherwise. Strings, booleans, NaN, ±inf and integers beyond float range are refused."""
    if isinstance(v, numbers.Real) and not isinstance(v, (bool, int, float)):
        v = float(v)                      # numpy scalars
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        raise InputError(f"{field} must be a number, got {one_line(repr(v), 60)}" + (f"; {fix}" if fix else ""))
    try:
        x = float(v)
    except OverflowError:
        x = math.inf
    if not math.isfinite(x):
        raise InputError(f"{field} must be a finite number, got {short_number(v)}" + (f"; {fix}" if fix else ""))
    _range(x, v, field, lo, hi, lo_open, fix)
    return x


def integer(v: object, field: str, *, lo: int | None = None, hi: int | None = None, fix: str = "") -> int:
    """`v` as an int in [lo, hi] (a float with an integral value is accepted); a one-line InputError
    naming `field` otherwise."""
    if isinstance(v, numbers.Integral) and not isinstance(v, bool):
        v = int(v)
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        raise InputError(f"{field} must be an integer, got {one_line(repr(v), 60)}" + (f"; {fix}" if fix else ""))
    if isinstance(v, float):
        if not math.isfinite(v) or v != int(v):
            raise InputError(f"{field} must be an integer, got {v!r}" + (f"; {fix}" if fix else ""))
        v = int(v)
    _range(v, v, field, lo, hi, False, fix)
    return v


def fmt(x: float) -> str:
    """1048576 → '1,048,576'; 0.95 → '0.95'."""
    if isinstance(x, int) and not isinstance(x, bool):
        return f"{x:,}"
    return f"{int(x):,}" if float(x).is_integer() and abs(x) < 1e18 else f"{x:g}"


def short_number(v) -> str:
    """An offending value for an error line: an int exactly (1,000,001), a long one by its digit count."""
    s = f"{v:,}" if isinstance(v, int) and not isinstance(v, bool) else repr(v)
    return s if len(s) <= 24 else f"a {len(s)}-digit number"


def _range(x, v, field, lo, hi, lo_open, fix):
    tail = f"; {fix}" if fix else ""
    if lo is not None and (x <= lo if lo_open else x < lo):
        raise InputError(f"{field} must be {'>' if lo_open else '≥'} {fmt(lo)}, got {short_number(v)}{tail}")
    if hi is not None and x > hi:
        raise InputError(f"{field} must be ≤ {fmt(hi)}, got {short_number(v)}{tail}")


ROUNDING = 1e-9
"""Negative values down to −ROUNDING are rounding (a difference of equal sums) and count as 0."""


def check_finite_costs(values: dict, what: str = "estimate") -> None:
    """Internal check before anything is printed or ranked: every number is finite and ≥ 0 (down to
    −ROUNDING). A violation is a bug (or an input no check caught), reported as one line, never
    printed as a result."""
    for k, v in values.items():
        if isinstance(v, bool) or not isinstance(v, (int, float)):
            try:
                v = float(v)
            except (TypeError, ValueError):
                continue
        if not math.isfinite(v) or v < -ROUNDING:
            raise InternalError(f"internal error: {what} {k} = {v!r} is not a finite non-negative number; "
                                "please report this input")


class InternalError(AutoplaceError):
    """A cost came out non-finite or negative: never printed as a result. Exit code 1."""


MAX_LOCAL_RANKS = 256
"""Most ranks `profile` / `calibrate` start on this machine (--gpus, --nproc)."""

CLI_NUMBERS: dict[str, tuple[str, float, float, bool, bool]] = {
    # parameter → (option, low, high, integer, low exclusive)
    "gpus": ("--gpus", 1, MAX_GPUS, True, False),
    "gpus_per_node": ("--gpus-per-node", 1, 4096, True, False),
    "seq_len": ("--seq-len", 1, MAX_SEQ_LEN, True, False),
    "global_batch": ("--global-batch", 1, MAX_BATCH, True, False),
    "global_batch_tokens": ("--global-batch-tokens", 1, MAX_BATCH * 4096, True, False),
    "top_k": ("--top-k", 1, MAX_TOP_K, True, False),
    "headroom": ("--memory-headroom", 0.0, 0.95, False, False),
    "trials": ("--trials", 1, MAX_TRIALS, True, False),
    "workers": ("--workers", 1, 1024, True, False),
    "profile_top": ("--profile-top", 1, 100, True, False),
    "largest_layer": ("--largest-layer", 0.0, 1e16, False, True),
    "steps": ("--steps", 1, 1_000_000, True, False),
    "warmup": ("--warmup", 0, 1_000_000, True, False),
    "seed": ("--seed", 0, 2**63 - 1, True, False),
    "lr": ("--lr", 0.0, 1e3, False, True),
    "timeout": ("--timeout", 0.0, MAX_PROFILE_TIMEOUT_S, False, True),
    "nproc": ("--nproc", 1, MAX_LOCAL_RANKS, True, False),
    "nnodes": ("--nnodes", 1, 65536, True, False),
}
"""The domain of every numeric command-line option, checked before a command runs
(`autoplace.cli.common.cli_errors`). Per command: `profile --gpus` ≤ MAX_LOCAL_RANKS."""
CLI_OVERRIDES = {("profile", "gpus"): ("--gpus", 1, MAX_LOCAL_RANKS, True, False)}


def check_cli_numbers(command: str, values: dict) -> None:
    """Check every numeric option of `command` (its keyword arguments) against `CLI_NUMBERS`; the first
    out of its domain is a one-line InputError naming the option and the allowed range."""
    for k, v in values.items():
        for s in (v if isinstance(v, (list, tuple)) else [v]):
            if isinstance(s, str) and len(s) > MAX_PATH:
                raise InputError(f"--{k.replace('_', '-')} is {len(s):,} characters long (at most {MAX_PATH:,}); "
                                 "give a name or a path")
        dom = CLI_OVERRIDES.get((command, k)) or CLI_NUMBERS.get(k)
        if dom is None or v is None or isinstance(v, (str, list, tuple, bool)):
            continue
        opt, lo, hi, is_int, lo_open = dom
        fix = f"give a value in {fmt(lo)}..{fmt(hi)}" + (" (above the low end)" if lo_open else "")
        if is_int:
            integer(v, opt, lo=int(lo), hi=int(hi), fix=fix)
        else:
            number(v, opt, lo=lo, hi=hi, lo_open=lo_open, fix=fix)


# ---- files --------------------------------------------------------------------------------------------
def read_text(path: str | Path, field: str, limit: int = MAX_INPUT_BYTES) -> str:
    """The UTF-8 text of a regular file of at most `limit` bytes; a FIFO, device, folder or oversized
    file is refused at once with a one-line InputError naming `field`."""
    p = Path(path)
    if len(str(p)) > MAX_PATH:
        raise InputError(f"{field}: path is {len(str(p)):,} characters long (at most {MAX_PATH})")
    try:
        st = os.stat(p)
    except OSError as e:
        raise InputError(f"{field}: cannot read {one_line(str(p), 120)!r} ({e.strerror or e}); "
                         "check the path and permissions") from None
    if not stat.S_ISREG(st.st_mode):
        raise InputError(f"{field}: {one_line(str(p), 120)!r} is not a regular file (a folder, FIFO or "
                         "device); pass a file")
    if st.st_size > limit:
        raise InputError(f"{field}: {one_line(str(p), 120)!r} is {st.st_size:,} bytes (at most {limit:,}); "
                         "pass the real file")
    try:
        with open(p, "rb") as f:
            data = f.read(limit + 1)
    except OSError as e:
        raise InputError(f"{field}: cannot read {one_line(str(p), 120)!r} ({e.strerror or e})") from None
    if len(data) > limit:
        raise InputError(f"{field}: {one_line(str(p), 120)!r} is larger than {limit:,} bytes; pass the real file")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as e:
        raise InputError(f"{field}: {one_line(str(p), 120)!r} is not UTF-8 text ({e.reason} at byte "
                         f"{e.start})") from None


_JSON_STRING = re.compile(r'"(?:[^"\\]|\\.)*"')
_BRACKET = re.compile(r"[\[\]{}]")


def json_depth_ok(text: str, limit: int = MAX_JSON_DEPTH) -> bool:
    """True if the brackets of a JSON text (outside strings) nest at most `limit` deep."""
    depth = 0
    for m in _BRACKET.finditer(_JSON_STRING.sub("", text)):
        depth += 1 if m.group() in "[{" else -1
        if depth > limit:
            return False
    return True


# ---- signals and child processes ----------------------------------------------------------------
_STOP_SIGNALS = ("SIGTERM", "SIGHUP")


def _raise_terminated(signum, frame):
    from autoplace.errors import Terminated
    raise Terminated(signum)


class signals_as_exceptions:
    """While active (main thread only): SIGTERM and SIGHUP raise `errors.Terminated`, so a `timeout`
    wrapper, a closed terminal or a cancelled batch job unwinds the command like Ctrl-C does —
    `finally` blocks end worker pools and remove temp files (`io.atomic_write`). Restores the old
    handlers on exit."""

    def __enter__(self):
        import signal
        import threading
        self._old = {}
        if threading.current_thread() is threading.main_thread():
            for name in _STOP_SIGNALS:
                sig = getattr(signal, name, None)
                if sig is not None:
                    self._old[sig] = signal.signal(sig, _raise_terminated)
        return self

    def __exit__(self, *exc):
        import signal
        for sig, h in self._old.items():
            signal.signal(sig, h)
        return False


def die_with_parent() -> None:
    """In a child process: SIGTERM when the parent dies, even by SIGKILL (Linux PR_SET_PDEATHSIG);
    a no-op elsewhere."""
    import signal
    try:
        import ctypes
        ctypes.CDLL(None).prctl(1, signal.SIGTERM)     # PR_SET_PDEATHSIG = 1
    except (OSError, AttributeError):                   # pragma: no cover - not Linux
        pass


def quiet_worker() -> None:
    """Initializer of a forked worker pool: SIGTERM / SIGHUP back to their default (die quietly — the
    parent ends the pool with SIGTERM), Ctrl-C ignored (the parent handles it for the group), and the
    worker dies with its parent. No worker prints a traceback when a command is interrupted."""
    import signal
    for name in _STOP_SIGNALS:
        sig = getattr(signal, name, None)
        if sig is not None:
            signal.signal(sig, signal.SIG_DFL)
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    die_with_parent()


def descendants(pid: int) -> set[int]:
    """Every live descendant of `pid`, read from Linux /proc (empty elsewhere). torchrun starts each
    worker in a session of its own, so its process group does not hold them."""
    out, todo = set(), [pid]
    while todo:
        p = todo.pop()
        try:
            tasks = os.listdir(f"/proc/{p}/task")
        except OSError:
            continue
        for t in tasks:
            try:
                with open(f"/proc/{p}/task/{t}/children") as f:
                    new = {int(x) for x in f.read().split()} - out
            except (OSError, ValueError):
                continue
            out |= new
            todo += new
    return out


def alive(pid: int) -> bool:
    """The process runs (a zombie awaiting its reaper counts as ended)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except (OSError, IndexError):
        try:
            os.kill(pid, 0)
            return True
        except OSError:
            return False
