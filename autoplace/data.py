"""Where the shipped data folders are: `hardware_profiles/` and `search_spaces/`.

A source checkout (editable install, CI) reads them next to the package; a wheel installs them
under `<prefix>/share/autoplace/` (pyproject `[tool.setuptools.data-files]`). `AUTOPLACE_DATA`
(a folder holding both) overrides either.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

KINDS = ("hardware_profiles", "search_spaces")


def candidates(kind: str) -> list[Path]:
    """Folders searched for `kind`, in order."""
    if kind not in KINDS:
        raise ValueError(f"unknown data folder '{kind}'")
    out = []
    env = os.environ.get("AUTOPLACE_DATA")
    if env:
        out.append(Path(env) / kind)
    out.append(Path(__file__).resolve().parents[1] / kind)          # source checkout
    out.append(Path(sys.prefix) / "share" / "autoplace" / kind)      # wheel install
    return out


def data_dir(kind: str) -> Path:
    """The first existing folder of `candidates(kind)` (the source-checkout path if none exists, so
    error messages name a real expectation)."""
    c = candidates(kind)
    for p in c:
        if p.is_dir():
            return p
    return c[-2] if len(c) > 1 else c[0]
