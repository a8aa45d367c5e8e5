"""`estimate --from FILE`: the launcher configs a user already has, read through the same readers as the
export round trip (autoplace.export.readback). Our own exports read back to the plan that wrote them
(same step time and memory); the launchers' own example configs (tests/data/launcher_examples, each
citing its repository and commit) give the numbers of the equivalent `--plan`; bad inputs are one line."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from typer.testing import CliRunner

from autoplace.analysis.common import build_training, training_from_config
from autoplace.cli import app
from autoplace.errors import InputError
from autoplace.estimate import estimate
from autoplace.export import from_config
from autoplace.export.common import ExportJob
from autoplace.export.registry import LAUNCHERS
from autoplace.plan import Plan, parse_plan
from autoplace.specs.hardware import load_hardware
from autoplace.specs.presets import get_preset

EX = Path(__file__).parent / "data" / "launcher_examples"
HW = load_hardware("h100-sxm-80gb")
FILE = {"megatron": "megatron_args.txt", "deepspeed": "ds_config.json", "torchtitan": "torchtitan_job.toml",
        "accelerate": "accelerate_config.yaml"}


def _numbers(doc: dict) -> tuple:
    return (doc["time"]["step_s"], doc["memory"]["peak_bytes"], *(s["total"] for s in doc["memory"]["per_stage"]))


@pytest.mark.parametrize("launcher,model,world,plan", [
    ("megatron", "13b", 64, "tp=4,pp=2,zero=1,sp=1,recompute=selective,mbs=1"),
    ("megatron", "llama3-8b", 32, "tp=2,pp=4,vpp=2,zero=1,sp=1,recompute=full,mbs=1"),
    ("deepspeed", "7b", 16, "zero=3,recompute=full,mbs=2"),
    ("deepspeed", "7b", 16, "zero=2,offload=grads,mbs=1"),
    ("torchtitan", "llama3-8b", 16, "dp_replicate=2,zero=3,recompute=selective,mbs=1"),
    ("torchtitan", "llama3-8b", 16, "tp=2,sp=1,pp=2,zero=3,recompute=full,mbs=1"),
    ("accelerate", "7b", 16, "zero=3,recompute=full,mbs=2"),
])
def test_our_exports_read_back_to_the_same_estimate(tmp_path, launcher, model, world, plan):
    m = get_preset(model)
    train, _ = build_training(m, 4096, 256, None, "bf16", None, world, runtime=from_config.RUNTIME[launcher])
    p = parse_plan(plan).resolved(world)
    job = ExportJob(m, HW, train, p, world, None)
    files = LAUNCHERS[launcher].emit(job)
    for name, text in files.items():
        (tmp_path / name).write_text(text)
    m2, fc, _ = from_config.resolve(tmp_path / FILE[launcher], model=model, gpus=world)
    assert fc.launcher == launcher and fc.world == world
    train2 = training_from_config(fc, m2, seq_len=4096 if fc.seq_len is None else None)
    want = estimate(m, HW, train, p, world)
    got = estimate(m2, HW, train2, fc.plan(), world)
    assert got["legal"] and _numbers(got) == pytest.approx(_numbers(want), rel=1e-12)


def _json(args):
    r = CliRunner().invoke(app, args)
    assert r.exit_code == 0, r.output[-600:]
    return json.loads(r.stdout)


def test_megatron_example_script_equals_its_plan():
    # examples/gpt3/train_gpt3_175b_distributed.sh: an 8-layer GPT, tp 2, pp 2 on 8 GPUs, fp16
    got = _json(["estimate", "--from", str(EX / "megatron_train_gpt3_175b_distributed.sh"), "--json"])
    assert got["plan"]["tp"] == 2 and got["plan"]["pp"] == 2 and got["plan"]["dp"] == 2
    assert got["training"]["precision"] == "fp16" and got["training"]["seq_len"] == 512
    flags = from_config.read(EX / "megatron_train_gpt3_175b_distributed.sh").flags
    m = from_config.megatron_model(flags, "x")
    assert (m.layers, m.hidden, m.heads, m.ffn_hidden, m.vocab) == (8, 256, 8, 1024, 50257)
    train, _ = build_training(m, 512, 64, None, "fp16", None, 8, runtime="megatron-core")
    want = estimate(m, HW, train, Plan(tp=2, pp=2, dp=2, mbs=1), 8)
    assert _numbers(got) == pytest.approx(_numbers(want), rel=1e-12)


def test_torchtitan_example_config_equals_its_plan():
    # torchtitan llama3_8b.toml ("a preset for 64 A100 GPUs"): FSDP over every GPU, op-level SAC
    args = ["--hardware", "a100-80gb", "--json"]
    got = _json(["estimate", "--from", str(EX / "torchtitan_llama3_8b.toml"), "--gpus", "64", *args])
    want = _json(["estimate", "--model", "llama3-8b", "--gpus", "64", "--plan", "zero=3,recompute=selective,mbs=1",
                  "--runtime", "torchtitan", "--seq-len", "8192", "--global-batch", "64", *args])
    assert got["plan"] == want["plan"] and _numbers(got) == pytest.approx(_numbers(want), rel=1e-12)


@pytest.mark.parametrize("make,args,match", [
    (lambda d: (d / "x.json").write_text("{not json"), [], "cannot read it as a DeepSpeed config"),
    (lambda d: (d / "x.json").write_text(json.dumps({"train_batch_size": "auto", "train_micro_batch_size_per_gpu": 1,
                                                     "gradient_accumulation_steps": 1})), ["--model", "7b"],
     "must all be integers"),
    (lambda d: (d / "x.json").write_text(json.dumps({"train_batch_size": 8, "train_micro_batch_size_per_gpu": 1,
                                                     "gradient_accumulation_steps": 1})), [],
     "does not name a model autoplace knows; add --model"),
    (lambda d: (d / "x.txt").write_text("--num-layers 32\n--tensor-model-parallel-size 2\n"), [],
     "does not state the GPU count; add --gpus"),
    (lambda d: (d / "x.txt").write_text("hello\n"), [], "not a launcher config autoplace reads"),
    (lambda d: shutil.copy(EX / "megatron_train_gpt3_175b_distributed.sh", d / "x.sh"), ["--model", "7b"],
     "contradicts --model 7b: layers 8 (file) vs 32"),
    (lambda d: shutil.copy(EX / "megatron_train_gpt3_175b_distributed.sh", d / "x.sh"), ["--gpus", "16"],
     "the file runs 8 GPUs (GPUs per node × nodes), --gpus says 16"),
    (lambda d: shutil.copy(EX / "torchtitan_llama3_8b.toml", d / "x.toml"), [], "add --gpus"),
])
def test_bad_inputs_are_one_line(tmp_path, make, args, match):
    make(tmp_path)
    path = next(tmp_path.iterdir())
    r = CliRunner().invoke(app, ["estimate", "--from", str(path), *args])
    assert r.exit_code == 1, r.output
    lines = r.output.strip().splitlines()
    assert len(lines) == 1 and match in lines[0] and lines[0].startswith(f"error: --from {path}")


def test_from_excludes_plan():
    with pytest.raises(InputError):
        from_config.read(EX / "nope.toml")
    r = CliRunner().invoke(app, ["estimate", "--from", str(EX / "torchtitan_llama3_8b.toml"), "--plan", "tp=2"])
    assert r.exit_code == 1 and "give one of --from, --plan, --plan-file" in r.output


def test_search_from_keeps_the_files_model_and_batch():
    doc = _json(["search", "--from", str(EX / "megatron_train_gpt3_175b_distributed.sh"), "--gpus", "8",
                 "--top-k", "1", "--json"])
    best = doc["plans"][0]
    assert best["model"]["name"] == "Megatron-LM flags (8 layers, hidden 256)"
    assert best["training"]["seq_len"] == 512 and best["training"]["global_batch"] == 64


def test_accelerate_example_config_equals_its_plan():
    # accelerate examples/config_yaml_templates/fsdp.yaml: FSDP1 FULL_SHARD on 2 processes, bf16; no
    # launch script beside it, so micro-batch 1 without accumulation (said on stderr)
    args = ["--model", "7b", "--hardware", "b200", "--json"]
    r = CliRunner().invoke(app, ["estimate", "--from", str(EX / "accelerate_fsdp.yaml"), *args])
    assert r.exit_code == 0, r.output[-600:]
    assert "micro-batch 1, gradient accumulation 1" in r.stderr
    got = json.loads(r.stdout)
    want = _json(["estimate", "--gpus", "2", "--plan", "zero=3,reshard_after_forward=1,mbs=1", "--runtime",
                  "accelerate", "--global-batch", "2", *args])
    assert got["plan"] == want["plan"] and _numbers(got) == pytest.approx(_numbers(want), rel=1e-12)


def test_deepspeed_example_config_equals_its_plan():
    # Megatron-DeepSpeed examples_deepspeed/rebase/ds_config_gbs256_mbs8_log1_zero1.json: ZeRO-1, fp16,
    # global batch 256, micro-batch 8, accumulation left to DeepSpeed (256 / (8 × 8 GPUs) = 4); the model
    # (GPT-3 Small 125M) and seq 2048 from the launch script beside it (see data/launcher_examples/SOURCES.md)
    ds = str(EX / "megatron_deepspeed_ds_config_gbs256_mbs8_log1_zero1.json")
    args = ["--model", str(EX / "gpt3_small_125m_config.json"), "--gpus", "8", "--seq-len", "2048", "--json"]
    r = CliRunner().invoke(app, ["estimate", "--from", ds, *args])
    assert r.exit_code == 0, r.output[-600:]
    assert "micro-batch 8, gradient accumulation 4, global batch 256" in r.stderr
    got = json.loads(r.stdout)
    want = _json(["estimate", "--plan", "zero=1,mbs=8", "--runtime", "deepspeed", "--precision", "fp16",
                  "--global-batch", "256", *args])
    assert got["plan"] == want["plan"] and got["plan"]["dp"] == 8 and got["plan"]["zero"] == 1
    assert got["training"]["precision"] == "fp16" and got["training"]["global_batch"] == 256
    assert _numbers(got) == pytest.approx(_numbers(want), rel=1e-12)
    r = CliRunner().invoke(app, ["estimate", "--from", ds, *args[:2]])
    assert r.exit_code == 1 and "leaves gradient_accumulation_steps to DeepSpeed" in r.output
    assert "add --gpus" in r.output and len(r.output.strip().splitlines()) == 1


def test_api_from_file_is_the_cli_estimate():
    import autoplace
    ds = str(EX / "megatron_deepspeed_ds_config_gbs256_mbs8_log1_zero1.json")
    cfg = str(EX / "gpt3_small_125m_config.json")
    res = autoplace.estimate(autoplace.EstimateRequest(from_file=ds, model=cfg, gpus=8, seq_len=2048))
    got = _json(["estimate", "--from", ds, "--model", cfg, "--gpus", "8", "--seq-len", "2048", "--json"])
    assert res.document["plan"] == got["plan"] and _numbers(res.document) == pytest.approx(_numbers(got), rel=1e-12)
    with pytest.raises(InputError, match="give one of --from, --plan, --plan-file"):
        autoplace.estimate(autoplace.EstimateRequest(from_file=ds, plan="zero=1", gpus=8))


def test_torchtitan_01_keys_and_its_pipeline_default_of_one_micro_batch_per_stage(tmp_path):
    """torchtitan 0.1 (2024): degrees under [training], pipelining under [experimental], and with no
    `pipeline_parallel_microbatches` as many micro-batches as stages: local batch 8 over pp 4 → 4
    micro-batches of 2 (0.2 would run 8 of 1). Stated: the same plan as the 0.2 keys with mbs 2."""
    old = ('[model]\nname = "llama3"\nflavor = "8B"\n[training]\nbatch_size = 8\nseq_len = 8192\n'
           'data_parallel_shard_degree = -1\ntensor_parallel_degree = 2\n'
           '[experimental]\npipeline_parallel_degree = 4\npipeline_parallel_schedule = "1F1B"\n')
    (tmp_path / "old.toml").write_text(old)
    fc = from_config.read(tmp_path / "old.toml", gpus=64)
    got = fc.plan().resolved(64)
    assert (got.tp, got.pp, got.dp, got.zero, got.mbs, got.sp) == (2, 4, 8, 3, 2, True)
    assert fc.quantities["dp"] == 8 and any("as many micro-batches as pipeline stages" in n for n in fc.notes)
    (tmp_path / "n.toml").write_text(old + "pipeline_parallel_microbatches = 8\n")
    assert from_config.read(tmp_path / "n.toml", gpus=64).plan().mbs == 1
    (tmp_path / "bad.toml").write_text(old.replace("batch_size = 8", "batch_size = 6"))
    with pytest.raises(InputError, match="not divisible into 4 pipeline micro-batches"):
        from_config.read(tmp_path / "bad.toml", gpus=64)
