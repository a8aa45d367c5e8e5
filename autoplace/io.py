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
