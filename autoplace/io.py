"""File and JSON helpers any layer may use: atomic writes, JSON-ready conversion, JSON reading.

The CLI imports these, never the reverse: nothing outside `autoplace/cli/` imports `autoplace.cli`.
"""

from __future__ import annotations

import json
import math
import os
import re
import tempfile
import time
from pathlib import Path

from autoplace.errors import InputError


def atomic_write(path: str | Path, text: str) -> Path:
    """Write via a temp file in the same folder + os.replace, so readers never see half a file."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w") as f:
            f.write(text)
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise
    return path


def atomic_write_bytes(path: str | Path, data: bytes) -> Path:
    """`atomic_write` for binary content (PNG, HTML as bytes): temp file in the same folder + os.replace."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.chmod(tmp, 0o644)
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise
    return path


def to_jsonable(obj: object, *, toml: bool = False) -> object:
    """Plain Python containers and scalars from numpy arrays/scalars, tuples and nested dicts.

    `toml=True` prepares a document for TOML, which has no null, NaN or infinity: None entries are
    dropped and NaN/inf are written as strings."""
    import numpy as np
    if isinstance(obj, dict):
        return {str(k) if toml else k: to_jsonable(v, toml=toml) for k, v in obj.items()
                if not (toml and v is None)}
    if isinstance(obj, (list, tuple)):
        return [to_jsonable(v, toml=toml) for v in obj if not (toml and v is None)]
    if isinstance(obj, np.ndarray):
        return to_jsonable(obj.tolist(), toml=toml)
    if isinstance(obj, np.generic):
        obj = obj.item()
    if toml and isinstance(obj, float) and (math.isnan(obj) or math.isinf(obj)):
        return str(obj)
    return obj


def read_json(path: str | Path, field: str, fix: str = "fix the file") -> object:
    """The parsed JSON of `path`; an InputError naming `field` (e.g. '--records') and the fix when the
    file cannot be read or is not JSON. The one place every JSON input file is read."""
    from autoplace.safe import MAX_JSON_DEPTH, json_depth_ok, one_line, read_text
    p = Path(path)
    text = read_text(p, field)
    if not json_depth_ok(text):
        raise InputError(f"{field}: '{one_line(p, 120)}' nests deeper than {MAX_JSON_DEPTH} levels; {fix}")
    try:
        return json.loads(text, parse_constant=_no_constant)
    except json.JSONDecodeError as e:
        raise InputError(f"{field}: '{one_line(p, 120)}' is not valid JSON ({e.msg} at line {e.lineno}, "
                         f"column {e.colno}); {fix}") from None
    except (ValueError, RecursionError) as e:   # NaN/Infinity, integers beyond the digit limit
        raise InputError(f"{field}: '{one_line(p, 120)}': {one_line(e, 120)}; {fix}") from None


def _no_constant(name: str):
    raise ValueError(f"{name} is not a JSON number")


# ---- run outputs --------------------------------------------------------------------------------
RUNS_DIR = "runs"
"""Where measured runs go by default, under the current directory (git-ignored: `/runs/`)."""


def default_run_dir(command: str, model: str, world: int, root: str | Path = RUNS_DIR) -> Path:
    """`runs/<command>-<model>-<world>g-<UTC stamp>/` (not created; a suffix -2, -3, … when a run of
    the same second exists). `model` is slugged: "Llama-2-13B" → "llama-2-13b"."""
    slug = re.sub(r"[^a-z0-9.]+", "-", str(model).lower()).strip("-.") or "model"
    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
    base = Path(root) / f"{command}-{slug}-{int(world)}g-{stamp}"
    path, n = base, 1
    while path.exists():
        n += 1
        path = base.with_name(f"{base.name}-{n}")
    return path


# ---- JSON Lines (profile records, progress events) ----------------------------------------------
def _json_default(o):
    """json.dumps fallback for records written by workers: numpy values, sets, anything else as str."""
    import numpy as np
    if isinstance(o, np.generic):
        return o.item()
    if isinstance(o, np.ndarray):
        return o.tolist()
    if isinstance(o, (set, frozenset, tuple)):
        return list(o)
    return str(o)


def append_jsonl(path: str | Path, obj: object) -> None:
    """Append one JSON object as a line and fsync it: a reader (or a crash) never sees half a record
    except possibly the last line."""
    line = json.dumps(obj, default=_json_default) + "\n"
    with open(path, "a") as f:
        f.write(line)
        f.flush()
        os.fsync(f.fileno())


def read_jsonl(path: str | Path) -> list[dict]:
    """Every JSON object of a JSON Lines file ([] if it does not exist); a line cut short by a crash
    (not valid JSON) is skipped."""
    p = Path(path)
    if not p.exists():
        return []
    out = []
    for line in p.read_text().splitlines():
        line = line.strip()
        if line:
            try:
                out.append(json.loads(line))
            except json.JSONDecodeError:
                continue
    return out


# ---- whole-folder replacement (export, search --emit) -----------------------------------------
def _rename_exchange(a: Path, b: Path) -> bool:
    """Swap two paths atomically (Linux renameat2 RENAME_EXCHANGE); False where unsupported."""
    import ctypes
    import sys
    if not sys.platform.startswith("linux"):
        return False
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        fn = libc.renameat2
    except (OSError, AttributeError):
        return False
    fn.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_int, ctypes.c_char_p, ctypes.c_uint]
    at_fdcwd, rename_exchange = -100, 2
    return fn(at_fdcwd, os.fsencode(str(a)), at_fdcwd, os.fsencode(str(b)), rename_exchange) == 0


def replace_folder(out: str | Path, files: dict[str, tuple[str, int]], managed: set[str]) -> list[str]:
    """Make `out` hold exactly `files` (name → (text, mode)) plus whatever it held that autoplace does
    not manage (names not in `managed`): everything is written into a staging folder beside `out`,
    then swapped in with one atomic rename, so a reader (or a kill at any moment) sees the old folder
    or the new one, never a mix of two plans. Returns the managed names of the old folder that are
    gone. A folder that holds the current directory is updated file by file instead."""
    import shutil
    out = Path(out)
    if out.is_symlink():                       # replace the folder the link points to, keep the link
        out = Path(os.path.realpath(out))
    parent = out.parent if str(out.parent) else Path(".")
    parent.mkdir(parents=True, exist_ok=True)
    old = sorted(p.name for p in out.iterdir()) if out.is_dir() else []
    removed = [n for n in old if n in managed and n not in files]
    for stale in parent.glob(f".{out.name}.staging-*"):     # left by a killed run
        shutil.rmtree(stale, ignore_errors=True)
    cwd = Path.cwd().resolve()
    if out.exists() and (out.resolve() == cwd or out.resolve() in cwd.parents):
        for name, (text, mode) in files.items():
            atomic_write(out / name, text).chmod(mode)
        for n in removed:
            (out / n).unlink(missing_ok=True)
        return removed
    stage = Path(tempfile.mkdtemp(dir=parent, prefix=f".{out.name}.staging-"))
    try:
        for n in old:                                          # the user's own files stay
            if n in managed or n.startswith(f".{out.name}."):
                continue
            src, dst = out / n, stage / n
            if src.is_dir() and not src.is_symlink():
                shutil.copytree(src, dst, symlinks=True, copy_function=_link_or_copy)
            else:
                _link_or_copy(src, dst)
        for name, (text, mode) in files.items():
            with open(stage / name, "w") as f:
                f.write(text)
            os.chmod(stage / name, mode)
        os.chmod(stage, 0o755)
        if out.is_dir() and _rename_exchange(stage, out):
            shutil.rmtree(stage, ignore_errors=True)           # now the old folder
        else:
            if out.is_dir():
                gone = Path(tempfile.mkdtemp(dir=parent, prefix=f".{out.name}.staging-"))
                os.replace(out, gone / "old")
                os.replace(stage, out)
                shutil.rmtree(gone, ignore_errors=True)
            else:
                os.replace(stage, out)
    except BaseException:
        shutil.rmtree(stage, ignore_errors=True)
        raise
    return removed


def _link_or_copy(src, dst):
    import shutil
    try:
        os.link(src, dst, follow_symlinks=False)
    except OSError:
        shutil.copy2(src, dst, follow_symlinks=False)
    return dst
