"""Where the shipped data is: `hardware_profiles/`, `search_spaces/`, the runtimes, the spec and the
JSON schemas, read with `importlib.resources`.

An installed wheel carries the top-level `hardware_profiles/` and `search_spaces/` folders of the
checkout as the package data of `autoplace.hardware_profiles` / `autoplace.search_spaces`
(pyproject `[tool.setuptools.package-dir]`), so `pip install --target` and `--prefix` find them; a
source checkout (PYTHONPATH, editable install) reads them next to the package. `AUTOPLACE_DATA` (a
folder holding both) overrides either.
"""

from __future__ import annotations

import os
from importlib.resources import files
from pathlib import Path

KINDS = ("hardware_profiles", "search_spaces")
PACKAGE_DIRS = ("runtimes", "docs", "schemas")


def _in_package(kind: str) -> Path:
    # autoplace is installed as a plain directory (never zipped: it holds data read by path)
    return Path(str(files("autoplace") / kind))


def candidates(kind: str) -> list[Path]:
    """Folders searched for `kind`, in order."""
    if kind not in KINDS:
        raise ValueError(f"unknown data folder '{kind}'")
    out = []
    env = os.environ.get("AUTOPLACE_DATA")
    if env:
        out.append(Path(env) / kind)
    out.append(_in_package(kind))                                    # installed wheel
    out.append(Path(__file__).resolve().parents[1] / kind)          # source checkout
    return out


def data_dir(kind: str) -> Path:
    """The first existing folder of `candidates(kind)` (the source-checkout path if none exists, so
    error messages name a real expectation)."""
    c = candidates(kind)
    for p in c:
        if p.is_dir():
            return p
    return c[-1]


def package_dir(name: str) -> Path:
    """A data folder inside the package: `runtimes`, `docs` (the specification) or `schemas`."""
    if name not in PACKAGE_DIRS:
        raise ValueError(f"unknown package data folder '{name}'")
    return _in_package(name)
