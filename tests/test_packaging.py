"""What a user installs: the wheel's package list and data, the extras (planning never imports torch,
optuna or matplotlib; a missing extra is one line naming the pip install), `--version`, `list`, and
the docs site building with warnings as errors."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

import autoplace
from autoplace.cli import app

PKG = Path(autoplace.__file__).resolve().parent
ROOT = PKG.parent


def _pyproject() -> dict:
    try:
        import tomllib
    except ImportError:  # Python 3.10
        import tomli as tomllib
    return tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))


def test_every_subpackage_and_data_folder_is_in_the_wheel_list():
    st = _pyproject()["tool"]["setuptools"]
    found = {".".join(p.parent.relative_to(ROOT).parts) for p in PKG.rglob("__init__.py")}
    listed = set(st["packages"])
    assert found - listed == set()                       # a new sub-package must be listed
    assert st["package-dir"] == {"autoplace.hardware_profiles": "hardware_profiles",
                                 "autoplace.search_spaces": "search_spaces"}
    for name in ("hardware_profiles", "search_spaces"):
        assert f"autoplace.{name}" in listed and any((ROOT / name).glob("*.toml"))
    assert (PKG / "py.typed").exists() and (ROOT / "LICENSE").read_text().lstrip().startswith("Apache License")


def test_base_dependencies_hold_no_heavy_extra():
    proj = _pyproject()["project"]
    base = " ".join(proj["dependencies"])
    for heavy in ("torch", "optuna", "matplotlib", "mkdocs"):
        assert heavy not in base
    extras = proj["optional-dependencies"]
    assert extras["profile"][0].startswith("torch") and extras["bayes"][0].startswith("optuna")
    assert extras["plot"][0].startswith("matplotlib")
    assert "autoplace[profile,bayes,plot,docs]" in extras["test"]


_NO_HEAVY = r"""
import sys
from typer.testing import CliRunner
from autoplace.cli import app
r = CliRunner()
for args in (["search", "--model", "7b", "--gpus", "8", "--json"],
             ["estimate", "--model", "7b", "--gpus", "8", "--plan", "tp=2,zero=1", "--json"],
             ["compare", "--model", "7b", "--gpus", "8", "--plan", "tp=2", "--plan", "zero=3", "--json"],
             ["list", "hardware", "--json"]):
    res = r.invoke(app, args)
    assert res.exit_code == 0, (args, res.output[-400:])
heavy = sorted(m for m in ("torch", "optuna", "matplotlib", "pandas") if m in sys.modules)
print(",".join(heavy))
"""


def test_planning_never_imports_torch_optuna_or_matplotlib():
    out = subprocess.run([sys.executable, "-c", _NO_HEAVY], capture_output=True, text=True, timeout=120,
                         env={**os.environ, "PYTHONPATH": str(ROOT)}, cwd=ROOT)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.strip() == ""


def test_a_missing_extra_is_one_line_naming_the_install():
    from autoplace._imports import MissingExtraError, require
    from autoplace.errors import InputError
    with pytest.raises(MissingExtraError) as e:
        require("matplotlib_not_installed_here", "--plot")
    assert str(e.value) == "--plot needs matplotlib_not_installed_here: pip install matplotlib_not_installed_here"
    assert isinstance(e.value, InputError) and isinstance(e.value, ImportError)
    # the extras map: blocking the import shows the extra's name
    code = ("import sys; sys.modules['matplotlib'] = None\n"
            "from autoplace.plots.common import pyplot\n"
            "try:\n    pyplot()\nexcept Exception as e:\n    print(type(e).__name__, e)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60,
                         env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert out.stdout.strip() == "MissingExtraError --plot / --report needs matplotlib: pip install 'autoplace[plot]'"


def test_version_and_list():
    r = CliRunner().invoke(app, ["--version"])
    assert r.exit_code == 0 and r.output.strip() == f"autoplace {autoplace.__version__}"
    r = CliRunner().invoke(app, ["list", "runtimes", "--json"])
    doc = json.loads(r.output)
    names = [i["name"] for i in doc["items"]]
    assert "megatron-core" in names and "torchtitan" in names and doc["schema_version"] == autoplace.SCHEMA_VERSION
    r = CliRunner().invoke(app, ["list", "launchers", "--json"])
    assert [i["name"] for i in json.loads(r.output)["items"]] == ["megatron", "deepspeed", "torchtitan",
                                                                   "accelerate", "torchrun", "slurm"]
    r = CliRunner().invoke(app, ["list", "gpus"])
    assert r.exit_code == 1 and "choose one of hardware, models, runtimes, spaces, launchers" in r.output


@pytest.mark.skipif(shutil.which("mkdocs") is None and not (Path(sys.executable).parent / "mkdocs").exists(),
                    reason="mkdocs not installed (the 'docs' extra)")
def test_docs_site_builds_strict(tmp_path):
    exe = Path(sys.executable).parent / "mkdocs"
    cmd = [str(exe) if exe.exists() else "mkdocs", "build", "--strict", "-q", "-d", str(tmp_path / "site")]
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=300, cwd=ROOT,
                         env={**os.environ, "PYTHONPATH": str(ROOT), "NO_MKDOCS_2_WARNING": "1"})
    assert out.returncode == 0, out.stderr[-3000:]
    cli = (tmp_path / "site" / "cli" / "index.html").read_text(encoding="utf-8")
    assert "autoplace search" in cli and "--plan-file" in cli          # generated from the typer app
    api = (tmp_path / "site" / "api_reference" / "index.html").read_text(encoding="utf-8")
    import autoplace.api
    for name in autoplace.api.__all__:                                    # generated from the docstrings
        assert f'id="autoplace.api.{name}"' in api, name
    assert "World size." in api and "What <code>autoplace search</code> takes" in api
    assert (ROOT / "README.md").stat().st_size <= 20_000
