"""torchtitan 0.3 (Python job configs, PR #2386) validates the emitted `autoplace_torchtitan_job.py`:
its own ConfigManager loads `--module autoplace_torchtitan_job --config autoplace_job` (tyro parse and
`_validate_config`) in a subprocess, because 0.3 cannot share the venv with 0.2.2. The 0.3 package
lives in `.venv-tt03` (`.ci/run`: pip install --no-deps --target .venv-tt03 torchtitan==0.3.0 spmd_types==0.2.3 torch_checkpointing==0.1.1); the
test skips when it is absent. The parsed sections must equal the plan."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from autoplace.export import torchtitan
from autoplace.export.common import ExportJob
from autoplace.plan import parse_plan
from autoplace.runtimes import load_runtime
from autoplace.specs.hardware import load_hardware
from autoplace.specs.presets import get_preset
from autoplace.specs.training import TrainingSpec

sys.path.insert(0, str(Path(__file__).parent))
from launchers import tt03_pythonpath  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
TT03 = Path(os.environ.get("AUTOPLACE_TT03", ROOT / ".venv-tt03"))
HW = load_hardware("h100-sxm-80gb")
pytestmark = pytest.mark.skipif(not (TT03 / "torchtitan" / "config" / "manager.py").exists(),
                                reason=f"torchtitan 0.3 not installed in {TT03} (see .ci/run)")


@pytest.mark.parametrize("model,world,train,plan", [
    ("llama3-70b", 128, (8192, 256), "tp=8,pp=4,vpp=2,zero=3,sp=1,recompute=full,mbs=1"),
    ("llama3-8b", 64, (8192, 512), "zero=3,dp_replicate=8,recompute=selective,mbs=1"),
    ("llama3-8b", 16, (8192, 128), "tp=2,cp=2,zero=3,sp=1,mbs=1,offload=params"),
    ("llama3-405b", 512, (8192, 512), "tp=8,pp=8,zero=3,sp=1,recompute=full,mbs=1,layer_split=15:16:16:16:16:16:16:15"),
    ("llama3-8b", 8, (4096, 64), "zero=0,mbs=1"),
    ("13b", 64, (4096, 256), "zero=3,recompute=block,recompute_layers=5,mbs=1"),       # Llama-2 shape, every 8th block
    ("qwen3-30b-a3b", 64, (4096, 256), "zero=3,ep=8,mbs=1"),                          # registered MoE model
    ("70b:fp8", 64, (4096, 256), "tp=8,pp=2,zero=3,sp=1,recompute=selective,mbs=1"),  # float8 converters, custom shape
])
def test_torchtitan_03_config_manager_accepts_job_module(tmp_path, model, world, train, plan):
    model, _, prec = model.partition(":")
    t = TrainingSpec(seq_len=train[0], global_batch=train[1], precision=prec or "bf16", runtime=load_runtime("torchtitan"))
    p = parse_plan(plan + ",rank_order=torchtitan").resolved(world)
    job = ExportJob(get_preset(model), HW, t, p, world)
    files = torchtitan.emit(job)
    assert f"{torchtitan.JOB_MODULE}.py" in files
    (tmp_path / f"{torchtitan.JOB_MODULE}.py").write_text(files[f"{torchtitan.JOB_MODULE}.py"])
    env = dict(os.environ, PYTHONPATH=tt03_pythonpath(TT03, tmp_path))
    r = subprocess.run([sys.executable, str(ROOT / "tests" / "launchers" / "tt03_check.py"), torchtitan.JOB_MODULE,
                        "autoplace_job"], capture_output=True, text=True, cwd=tmp_path, env=env, timeout=600)
    assert r.returncode == 0, r.stderr[-3000:]
    got = json.loads(r.stdout.strip().splitlines()[-1])
    zero3 = p.zero == 3
    assert (got["dp_replicate"], got["dp_shard"]) == ((p.dp_replicate, p.dp_shard) if zero3 else (p.dp, 1))
    assert (got["tp"], got["pp"], got["cp"], got["ep"]) == (p.tp, p.pp, p.cp, p.ep)
    assert got["seq_len"] == t.seq_len and got["global_batch"] == t.global_batch
    m = t.global_batch // (p.mbs * p.dp)
    if p.pp > 1:
        assert got["local_batch"] == t.global_batch // p.dp and got["microbatch"] == p.mbs
        assert got["schedule"] == {"1f1b": "1F1B", "interleaved": "Interleaved1F1B", "gpipe": "GPipe"}[p.schedule]
        assert got["local_batch"] // got["microbatch"] == m
    else:
        assert got["local_batch"] == p.mbs and t.global_batch // (got["local_batch"] * p.dp) == m
    assert got["cpu_offload"] == (p.offload == "params")
    assert got["ac"] == {"none": None, "selective": "SelectiveAC.Config", "full": "FullAC.Config",
                         "block": "_EveryNthConfig"}[p.recompute]


def test_torchtitan_03_module_is_refused_in_one_line_where_0_3_cannot_say_the_plan():
    hw = HW
    tensorwise = TrainingSpec(seq_len=4096, global_batch=1024, precision="fp8", fp8_recipe="tensorwise",
                              runtime=load_runtime("torchtitan"))
    job = ExportJob(get_preset("llama3-8b"), hw, tensorwise, parse_plan("zero=3,mbs=1,rank_order=torchtitan").resolved(64), 64)
    assert f"{torchtitan.JOB_MODULE}.py" not in torchtitan.emit(job)
    assert torchtitan.v03_refusal(job) == ("fp8 recipe tensorwise: torchtitan 0.3.0's Float8LinearConverter has "
                                           "rowwise only (--fp8-recipe rowwise)")
    assert any("not written: fp8 recipe tensorwise" in n for n in torchtitan.notes(job))
    t = TrainingSpec(seq_len=4096, global_batch=1024, runtime=load_runtime("torchtitan"))
    etp = ExportJob(get_preset("qwen3-30b-a3b"), hw, t, parse_plan("tp=2,ep=4,etp=2,zero=3,sp=1,mbs=1,rank_order=torchtitan").resolved(64), 64)
    assert torchtitan.v03_refusal(etp) == ("torchtitan 0.3.0 has no expert tensor parallelism (EP borrows the TP "
                                           "ranks): etp=2; use etp=1")
    assert f"{torchtitan.JOB_MODULE}.py" not in torchtitan.emit(etp)
