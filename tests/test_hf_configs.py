"""The 20 real Hugging Face configs of tests/data/hf_configs (sources: SOURCES.md there): each
attention model's parameter count within its stated tolerance of the published figure
(published.json, cited), Llama 4 Scout and Maverick within 1 % (their published totals include the
vision encoder, counted here from `vision_config`), and each hybrid state-space / linear-attention
model refused in one line with the reason and the bad-input exit code, never priced as attention."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from test_hf_architectures import _vision_params
from typer.testing import CliRunner

from autoplace.cli import app
from autoplace.errors import EXIT_INPUT, InputError
from autoplace.specs.hf_config import load_hf_config

DATA = Path(__file__).parent / "data" / "hf_configs"
PUBLISHED = {k: v for k, v in json.loads((DATA / "published.json").read_text()).items() if not k.startswith("_")}
HYBRIDS = sorted(k for k, v in PUBLISHED.items() if v.get("refused"))
COUNTED = sorted(k for k, v in PUBLISHED.items() if not v.get("refused"))
runner = CliRunner()


def test_twenty_configs_each_with_a_published_count():
    dirs = sorted(p.name for p in DATA.iterdir() if (p / "config.json").is_file())
    assert len(dirs) == 20 and dirs == sorted(PUBLISHED)
    assert len(HYBRIDS) == 6 and all("source" in v for v in PUBLISHED.values())


@pytest.mark.parametrize("name", COUNTED)
def test_parameter_count_within_the_stated_tolerance_of_published(name):
    pub = PUBLISHED[name]
    cfg = json.loads((DATA / name / "config.json").read_text())
    m = load_hf_config(DATA / name)
    assert not m.analogy, m.analogy                 # every family here is read by its own rules
    total = m.total_params()
    if "vision_config" in cfg and cfg["model_type"] == "llama4":
        total += _vision_params(cfg["vision_config"])
    want = pub.get("text_total", pub["total"])
    assert abs(total - want) / want <= pub["tolerance"], (total, want)
    if "active_tolerance" in pub:
        assert abs(m.active_params() - pub["active"]) / pub["active"] <= pub["active_tolerance"]


@pytest.mark.parametrize("name,total", [("meta-llama__Llama-4-Scout-17B-16E", 109e9),
                                        ("meta-llama__Llama-4-Maverick-17B-128E", 400e9)])
def test_llama4_within_one_percent(name, total):
    """The cards' 109B / 400B (17B active): the text decoder autoplace trains plus the vision encoder."""
    cfg = json.loads((DATA / name / "config.json").read_text())
    m = load_hf_config(DATA / name)
    assert abs(m.total_params() + _vision_params(cfg["vision_config"]) - total) / total < 0.01
    assert abs(m.active_params() - 17e9) / 17e9 < 0.02


@pytest.mark.parametrize("name", HYBRIDS)
def test_hybrid_refused_with_the_reason(name):
    with pytest.raises(InputError) as e:
        load_hf_config(DATA / name)
    msg = str(e.value)
    assert "\n" not in msg and e.value.exit_code == EXIT_INPUT
    assert any(w in msg for w in PUBLISHED[name]["reason"]), msg
    r = runner.invoke(app, ["search", "-m", str(DATA / name / "config.json"), "-n", "8"])
    assert r.exit_code == EXIT_INPUT and "Traceback" not in r.output
    assert any(w in " ".join(r.output.split()) for w in PUBLISHED[name]["reason"]), r.output
