"""Megatron-LM's own argument parser on the emitted `megatron_args.txt`.

No PyPI package ships `megatron/training/arguments.py` (megatron-core has only `megatron.core`), so this
runs when MEGATRON_LM points to a Megatron-LM checkout and is skipped otherwise; CI checks the flags
with megatron-core's dataclasses (tests/test_export_launchers.py). Every flag must be known to
Megatron-LM's parser (ignore_unknown_args=False) and parse to the plan's values."""

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

MLM = os.environ.get("MEGATRON_LM")
pytestmark = pytest.mark.skipif(not MLM or not (Path(MLM) / "megatron" / "training" / "arguments.py").exists(),
                                reason="set MEGATRON_LM to a Megatron-LM checkout (no PyPI package has megatron.training)")
HW = load_hardware("h100-sxm-80gb")


@pytest.mark.parametrize("model,world,plan", [
    ("llama3-8b", 64, "tp=2,pp=2,zero=1,sp=1,recompute=selective,mbs=1"),
    ("llama3-70b", 128, "tp=8,pp=4,vpp=5,zero=1,sp=1,recompute=block,recompute_layers=10,mbs=1,vpp_group=8"),
    ("mixtral-8x7b", 64, "tp=2,ep=4,pp=2,sp=1,zero=1,mbs=1"),
    ("13b", 64, "tp=2,zero=3,recompute=full,mbs=1"),
])
def test_megatron_lm_parse_args_accepts_emitted_flags(tmp_path, model, world, plan):
    m = get_preset(model)
    t = TrainingSpec(seq_len=4096, global_batch=512)
    job = ExportJob(m, HW, t, parse_plan(plan).resolved(world), world)
    (tmp_path / "args.txt").write_text(megatron.emit(job)["megatron_args.txt"])
    here = Path(__file__).parent / "launchers" / "mlm_parse.py"
    env = dict(os.environ, PYTHONPATH=MLM, WORLD_SIZE=str(world), RANK="0")
    r = subprocess.run([sys.executable, str(here), str(tmp_path / "args.txt")], capture_output=True, text=True,
                       env=env, timeout=600)
    assert r.returncode == 0, r.stderr[-2000:]
    a = json.loads(r.stdout.strip().splitlines()[-1])
    p = job.plan
    assert (a["tensor_model_parallel_size"], a["pipeline_model_parallel_size"]) == (p.tp, p.pp)
    assert (a["micro_batch_size"], a["global_batch_size"], a["seq_length"]) == (p.mbs, 512, 4096)
    assert a["rotary_base"] == int(m.rope_theta) and a["swiglu"] is True
    assert a["moe_grouped_gemm"] == m.is_moe
