"""File and JSON helpers any layer may use: atomic writes, JSON-ready conversion, JSON reading.

The CLI imports these, never the reverse: nothing outside `autoplace/cli/` imports `autoplace.cli`.
"""

from __future__ import annotations

import json
import math
import os
import tempfile
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
