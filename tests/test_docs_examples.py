"""The docs' Python API page runs: its code blocks, top to bottom, in one namespace."""

from __future__ import annotations

import re
from pathlib import Path

import autoplace

DOCS = Path(autoplace.__file__).resolve().parent / "docs"


def _blocks(page: str) -> list[str]:
    return re.findall(r"^```python\n(.*?)^```", (DOCS / page).read_text(encoding="utf-8"), flags=re.S | re.M)


def test_api_page_runs(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    blocks = _blocks("api.md")
    assert len(blocks) >= 5
    ns: dict = {}
    for i, code in enumerate(blocks):
        exec(compile(code, f"api.md block {i + 1}", "exec"), ns)
    out = capsys.readouterr().out
    assert "is" in ns["cmp"].sentence and ns["files"].written["torchrun"]
    assert ns["best"].plan in out and isinstance(ns["res"], autoplace.SearchResult)
    # the plan string round-trips through --plan
    from autoplace.plan import parse_plan
    assert parse_plan(ns["best"].plan).resolved(8).to_dict() == ns["best"].document["plan"]


def test_api_names():
    import importlib
    for name in autoplace.__all__:
        assert getattr(autoplace, name) is not None
    assert importlib.import_module("autoplace.search.driver").METHODS   # the sub-package is still a module …
    assert callable(autoplace.search) and callable(autoplace.estimate) and callable(autoplace.export)
    from autoplace import search  # … and the call
    assert search is autoplace.search
