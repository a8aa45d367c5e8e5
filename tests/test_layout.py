"""The package's shape: layering (nothing below the CLI imports it), the registered commands, the
specification the docstrings cite, and run outputs kept out of the tree."""

from __future__ import annotations

import ast
from pathlib import Path

import autoplace

PKG = Path(autoplace.__file__).resolve().parent
ROOT = PKG.parent


def _imports(path: Path) -> set[str]:
    out = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            out.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            out.add(node.module)
            out.update(f"{node.module}.{a.name}" for a in node.names)
    return out


def _pyproject() -> dict:
    try:
        import tomllib
    except ImportError:  # Python 3.10
        import tomli as tomllib
    return tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))


def test_nothing_outside_the_cli_imports_the_cli():
    # lazy imports inside functions count too (ast.walk sees every import statement)
    offenders = sorted(str(p.relative_to(PKG)) for p in PKG.rglob("*.py")
                       if "cli" not in p.relative_to(PKG).parts[:1] and p.name != "__main__.py"
                       and any(m == "autoplace.cli" or m.startswith("autoplace.cli.") for m in _imports(p)))
    assert offenders == []


def test_every_command_module_is_registered():
    from typer.main import get_command

    from autoplace.cli import app
    modules = sorted(p.stem for p in (PKG / "cli").glob("*.py")
                     if "def register(" in p.read_text(encoding="utf-8"))
    assert modules == ["calibrate", "compare", "estimate", "export", "listing", "profile", "search", "sweep",
                       "tune", "validate"]
    assert sorted(get_command(app).commands) == sorted({"listing": "list"}.get(m, m) for m in modules)


def test_the_cited_specification_ships_with_the_package():
    spec = PKG / "docs" / "placement_semantics.md"
    text = spec.read_text(encoding="utf-8")
    assert text.startswith("# Placement semantics")
    cited = [p for p in PKG.rglob("*.py") if "placement_semantics.md" in p.read_text(encoding="utf-8")]
    assert len(cited) >= 5                         # the docstrings that cite it
    from autoplace.data import package_dir
    assert package_dir("docs") / "placement_semantics.md" == spec
    pyproject = _pyproject()
    data = pyproject["tool"]["setuptools"]["package-data"]
    assert "*.md" in data["autoplace.docs"] and "*.toml" in data["autoplace.runtimes"]


def test_run_outputs_are_ignored_not_tracked():
    assert "/runs/" in (ROOT / ".gitignore").read_text(encoding="utf-8").split()
    assert not (ROOT / "profile_results.jsonl").exists() and not (ROOT / "profile_candidates.jsonl").exists()


def test_no_import_circles():
    # every import statement counts, lazy ones inside functions too: modules form a DAG
    mods = {}
    for p in PKG.rglob("*.py"):
        parts = list(p.relative_to(ROOT).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        mods[".".join(parts)] = p
    graph = {}
    for name, p in mods.items():
        deps = set()
        for node in ast.walk(ast.parse(p.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                # `from pkg import sub` depends on the sub-module; `from mod import name` on the module
                deps |= {f"{node.module}.{a.name}" if f"{node.module}.{a.name}" in mods else node.module
                         for a in node.names}
            elif isinstance(node, ast.Import):
                deps |= {a.name for a in node.names}
        graph[name] = {m for m in deps if m in mods and m != name}
    state, cycle = {}, []

    def visit(v, path):
        state[v] = 1
        for w in sorted(graph[v]):
            if state.get(w) == 1:
                cycle.append(path[path.index(w):] + [w] if w in path else [v, w])
            elif w not in state:
                visit(w, path + [w])
        state[v] = 2

    for v in sorted(graph):
        if v not in state:
            visit(v, [v])
    assert cycle == []
