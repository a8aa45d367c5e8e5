"""Megatron-LM's own argument parser (`parse_args` + `validate_args`) on the emitted launch folder.

No PyPI package ships `megatron/training/arguments.py` (megatron-core has only `megatron.core`), so this
runs on the Megatron-LM checkouts `.ci/run` makes (`.venv-mlm/<tag>` for each of
launchers.MEGATRON_LM_TAGS: the pinned megatron-core's release and the current one) or on MEGATRON_LM,
and skips a checkout that is absent; CI also checks the flags with megatron-core's dataclasses
(tests/test_export_launchers.py). Every flag must be known to Megatron-LM's parser
(ignore_unknown_args=False), pass its validation and parse to the plan's values."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from autoplace.export import megatron
from autoplace.export.common import ExportJob
from autoplace.plan import parse_plan
from autoplace.specs.hardware import load_hardware
from autoplace.specs.presets import get_preset
from autoplace.specs.training import TrainingSpec

sys.path.insert(0, str(Path(__file__).parent))
from launchers import MEGATRON_LM_TAGS  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
CHECKOUTS = {t: ROOT / ".venv-mlm" / t for t in MEGATRON_LM_TAGS}
if os.environ.get("MEGATRON_LM"):
    CHECKOUTS["MEGATRON_LM"] = Path(os.environ["MEGATRON_LM"])
HW = load_hardware("h100-sxm-80gb")


def _checkout(tag) -> Path:
    d = CHECKOUTS[tag]
    if not (d / "megatron" / "training" / "arguments.py").exists():
        pytest.skip(f"no Megatron-LM {tag} checkout in {d} (.ci/run makes it; no PyPI package has megatron.training)")
    return d


CASES = [
    ("llama3-8b", 64, "tp=2,pp=2,zero=1,sp=1,recompute=selective,mbs=1"),
    ("llama3-70b", 128, "tp=8,pp=4,vpp=5,zero=1,sp=1,recompute=block,recompute_layers=10,mbs=1,vpp_group=8"),
    ("mixtral-8x7b", 64, "tp=2,ep=4,pp=2,sp=1,zero=1,mbs=1"),
    ("13b", 64, "tp=2,zero=3,recompute=full,mbs=1"),
]


@pytest.mark.parametrize("tag", list(CHECKOUTS))
def test_megatron_lm_parse_args_accepts_emitted_flags(tmp_path, tag):
    """One parser process per release over every case's export folder (the import is the cost)."""
    mlm = _checkout(tag)
    jobs = []
    for n, (model, world, plan) in enumerate(CASES):
        m = get_preset(model)
        t = TrainingSpec(seq_len=4096, global_batch=512)
        job = ExportJob(m, HW, t, parse_plan(plan).resolved(world), world)
        d = tmp_path / f"case{n}"
        d.mkdir()
        for name, text in megatron.emit(job).items():
            (d / name).write_text(text)
        jobs.append((d, job))
    here = Path(__file__).parent / "launchers" / "mlm_parse.py"
    r = subprocess.run([sys.executable, str(here), *[f"{d}@{job.world}" for d, job in jobs]], capture_output=True,
                       text=True, env=dict(os.environ, PYTHONPATH=str(mlm)), timeout=600)
    assert r.returncode == 0, r.stderr[-2000:]
    got = {o["file"]: o for o in map(json.loads, [x for x in r.stdout.splitlines() if x.startswith("{")])}
    for d, job in jobs:
        out = got[str(d)]
        assert out["ok"], (job.describe(), out["error"])
        a, p, m = out["args"], job.plan, job.model
        assert (a["tensor_model_parallel_size"], a["pipeline_model_parallel_size"]) == (p.tp, p.pp)
        assert (a["micro_batch_size"], a["global_batch_size"], a["seq_length"]) == (p.mbs, 512, 4096)
        assert a["data_parallel_size"] == p.dp
        assert a["rotary_base"] == int(m.rope_theta) and a["swiglu"] is True
        assert a["moe_grouped_gemm"] == m.is_moe
