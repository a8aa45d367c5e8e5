"""Launcher export: the plan file, every emitter, refusals, export_all and the `export` CLI.

Round trip: each emitted artifact is parsed back with a parser of our own (argparse-style flag
list, json, tomllib, yaml.safe_load — tests/launchers/readback.py) and must give the plan's degrees,
batch sizes (micro, global, m = B/(mbs·dp)) and memory knobs (ZeRO stage, hold, offload, recompute,
sp). A hypothesis property test does this for random legal plans over several presets and GPU
counts. Validation by the launchers' own code lives in tests/test_export_launchers.py.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from dataclasses import asdict
from pathlib import Path

import pytest
import yaml
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from autoplace.contract import SCHEMA_VERSION

sys.path.insert(0, str(Path(__file__).parent))
from launchers import readback as rb  # noqa: E402

from autoplace.errors import IllegalPlanError, InputError  # noqa: E402
from autoplace.export import (  # noqa: E402  # noqa: E402
    LAUNCHERS,
    LauncherRefusedError,
    accelerate,
    deepspeed,
    emit_for_search,
    export_all,
    megatron,
    plan_document,
    read_plan_file,
    slurm,
    torchrun,
    torchtitan,
    write_plan_file,
)
from autoplace.export.common import ExportJob  # noqa: E402
from autoplace.placement.rules import Ctx, check  # noqa: E402
from autoplace.plan import Plan, parse_plan  # noqa: E402
from autoplace.runtimes import load_runtime  # noqa: E402
from autoplace.specs.hardware import load_hardware  # noqa: E402
from autoplace.specs.model import params_only  # noqa: E402
from autoplace.specs.presets import get_preset  # noqa: E402
from autoplace.specs.training import TrainingSpec  # noqa: E402

MODS = {"megatron": megatron, "deepspeed": deepspeed, "torchtitan": torchtitan, "accelerate": accelerate,
        "torchrun": torchrun, "slurm": slurm}
HW = load_hardware("h100-sxm-80gb")
M13 = get_preset("13b")
T13 = TrainingSpec(seq_len=4096, global_batch=1024)
EXAMPLE = "tp=8,pp=2,zero=1,sp=1,recompute=selective,mbs=1"


def job_of(model, train, plan_text_or_plan, world, hw=HW, predicted=None) -> ExportJob:
    p = parse_plan(plan_text_or_plan) if isinstance(plan_text_or_plan, str) else plan_text_or_plan
    return ExportJob(model, hw, train, p.resolved(world), world, predicted)


def doc_of(model, train, plan_text, world, hw=HW, predicted=None) -> dict:
    return plan_document(model, hw, train, parse_plan(plan_text), world, predicted)


def readback(name: str, files: dict, job: ExportJob) -> dict:
    W, L = job.world, (None if job.model.states_only else job.model.layers)
    if name == "megatron":
        return rb.read_megatron(files["megatron_args.txt"], W)
    if name == "deepspeed":
        return rb.read_deepspeed(files["ds_config.json"], W, L)
    if name == "torchtitan":
        return rb.read_torchtitan(files["torchtitan_job.toml"], L)
    if name == "accelerate":
        out = rb.read_accelerate(files["accelerate_config.yaml"], files["accelerate_launch.sh"], job.gpus_per_node)
        if "accelerate_config_fsdp1.yaml" in files:
            v1 = rb.read_accelerate(files["accelerate_config_fsdp1.yaml"], files["accelerate_launch.sh"],
                                    job.gpus_per_node)
            assert v1 == out, (v1, out)
        return out
    if name == "torchrun":
        return {"world": rb.read_torchrun(files["torchrun.sh"])["world"]}
    return {"world": rb.read_slurm(files["slurm.sbatch"])["world"]}


def assert_round_trip(name: str, job: ExportJob) -> dict:
    files = MODS[name].emit(job)
    got = readback(name, files, job)
    want = rb.expected(job.model, job.train, job.plan, job.world)
    diff = rb.compare(got, want)
    assert not diff, f"{name}: {diff} for {job.describe()}"
    return files


# ==== plan file ====================================================================================
@pytest.mark.parametrize("model,plan,world", [
    ("13b", EXAMPLE, 64),
    ("70b", "tp=8,pp=4,vpp=2,zero=1,sp=1,recompute=block,recompute_layers=3,mbs=1,schedule=interleaved", 128),
    ("mixtral-8x7b", "tp=2,ep=4,etp=1,pp=2,zero=1,sp=1,recompute=full,mbs=1", 64),
    ("llama-tiny", "zero=3,reshard=0,offload=params,mbs=2,dp_replicate=2", 8),
])
def test_plan_file_round_trip_exact(tmp_path, model, plan, world):
    m = get_preset(model)
    if m.is_moe:
        m = m.with_(dense_layer_ids=(0, 1))          # a tuple-typed field survives JSON
    t = TrainingSpec(seq_len=2048, global_batch=512, precision="bf16", regime="megatron-bf16")
    p = parse_plan(plan)
    pred = {"step_time_s": 1.25, "mfu": 0.41, "peak_memory_bytes": 7.5e10, "per_stage": [1.0, 2.0]}
    path = write_plan_file(tmp_path / "plan.json", plan_document(m, HW, t, p, world, pred))
    m2, hw2, t2, p2, w2, pred2 = read_plan_file(path)
    assert (m2, hw2, t2, w2, pred2) == (m, HW, t, world, pred)
    assert p2 == p.resolved(world)
    assert p2.to_dict() == p.resolved(world).to_dict()
    doc = json.loads(path.read_text())
    assert doc["schema_version"] == SCHEMA_VERSION and doc["cluster"]["gpus"] == world
    assert doc["cluster"]["hardware"]["name"] == HW.name and doc["cluster"]["hardware"]["source"] == Path(HW.source).name   # no absolute path
    assert doc["cluster"]["gpus_per_node"] == HW.gpus_per_node
    assert doc["cluster"]["scaleup_domain"] == HW.scaleup_domain
    # a second write of what was read is byte-identical
    path2 = write_plan_file(tmp_path / "again.json", plan_document(m2, hw2, t2, p2, w2, pred2))
    assert path2.read_text() == path.read_text()


def test_plan_file_params_only_and_hand_written_hardware(tmp_path):
    m = params_only(7.5e9)
    t = TrainingSpec(seq_len=2048, global_batch=64, states_only=True)
    doc = plan_document(m, HW, t, parse_plan("zero=3"), 64, None)
    doc["cluster"]["hardware"] = {"name": "a100-80gb"}          # by name only: loaded from the profile
    path = write_plan_file(tmp_path / "p.json", doc)
    m2, hw2, t2, p2, w2, pred = read_plan_file(path)
    assert m2 == m and t2 == t and pred is None and w2 == 64
    assert hw2.name == load_hardware("a100-80gb").name
    assert hw2.gpus_per_node == HW.gpus_per_node


def _corrupt(tmp_path, mutate) -> Path:
    doc = doc_of(M13, T13, EXAMPLE, 64)
    mutate(doc)
    p = tmp_path / "bad.json"
    p.write_text(json.dumps(doc))
    return p


@pytest.mark.parametrize("mutate,match", [
    (lambda d: d.pop("schema_version"), "schema_version"),
    (lambda d: d.update(schema_version=99), "newer"),
    (lambda d: d.pop("plan"), "missing field 'plan'"),
    (lambda d: d["model"].pop("layers"), "model is missing field"),
    (lambda d: d["model"].update(colour="red"), "model.colour is not a known field"),
    (lambda d: d["plan"].update(recompute="sometimes"), "plan.recompute must be one of"),
    (lambda d: d["plan"].update(tp="8"), "plan.tp must be an int"),
    (lambda d: d["plan"].update(zero=5), "plan.zero must be 0, 1, 2 or 3"),
    (lambda d: d["plan"].update(warp=9), "plan.warp is not a known plan field"),
    (lambda d: d["cluster"].update(gpus=0), "cluster.gpus must be ≥ 1, got 0"),
    (lambda d: d["cluster"].update(hardware={"name": "tpu-v9"}), "unknown GPU profile"),
    (lambda d: d["training"].update(precision="int3"), "precision"),
    (lambda d: d.update(predicted=[1, 2]), "'predicted' must be an object"),
])
def test_plan_file_broken_fields_are_one_line_input_errors(tmp_path, mutate, match):
    with pytest.raises(InputError, match=match) as e:
        read_plan_file(_corrupt(tmp_path, mutate))
    assert "\n" not in str(e.value)


def test_plan_file_missing_and_not_json(tmp_path):
    with pytest.raises(InputError, match="does not exist"):
        read_plan_file(tmp_path / "nope.json")
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    with pytest.raises(InputError, match=r"not valid JSON \(.* line 1"):
        read_plan_file(bad)
    (tmp_path / "d").mkdir()
    with pytest.raises(InputError, match="directory without a plan.json"):
        read_plan_file(tmp_path / "d")
    write_plan_file(tmp_path / "d" / "plan.json", doc_of(M13, T13, EXAMPLE, 64))
    assert read_plan_file(tmp_path / "d")[4] == 64            # a folder holding plan.json is accepted


def test_write_plan_file_is_atomic_and_leaves_no_temp_files(tmp_path):
    doc = doc_of(M13, T13, EXAMPLE, 64)
    write_plan_file(tmp_path / "plan.json", doc)
    write_plan_file(tmp_path / "plan.json", doc)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["plan.json"]
    assert (tmp_path / "plan.json").stat().st_mode & 0o777 == 0o644


# ==== the worked example (13b on 64 H100s) ===========================================================
def test_megatron_worked_example():
    job = job_of(M13, T13, EXAMPLE, 64)
    files = assert_round_trip("megatron", job)
    a = rb.parse_flags(files["megatron_args.txt"])
    assert a["--tensor-model-parallel-size"] == "8" and a["--pipeline-model-parallel-size"] == "2"
    assert "--data-parallel-size" not in a                       # derived by Megatron
    assert a["--sequence-parallel"] is True and a["--use-distributed-optimizer"] is True
    assert a["--recompute-granularity"] == "selective" and "--recompute-method" not in a
    assert (a["--micro-batch-size"], a["--global-batch-size"], a["--seq-length"]) == ("1", "1024", "4096")
    assert (a["--num-layers"], a["--hidden-size"], a["--ffn-hidden-size"], a["--num-attention-heads"]) == \
        ("40", "5120", "13824", "40")
    assert a["--overlap-grad-reduce"] is True and a["--overlap-param-gather"] is True
    assert a["--bf16"] is True and a["--swiglu"] is True and a["--normalization"] == "RMSNorm"
    assert a["--untie-embeddings-and-output-weights"] is True and a["--disable-bias-linear"] is True
    assert "--group-query-attention" not in a                    # Llama-2-13B is MHA
    assert rb.read_env(files["megatron_env.sh"]) == {"CUDA_DEVICE_MAX_CONNECTIONS": "1"}
    assert "--num-layers-per-virtual-pipeline-stage" not in a


def test_worked_example_refusals_name_the_reason():
    job = job_of(M13, T13, EXAMPLE, 64)
    ds = deepspeed.LAUNCHER.refusals(job)
    assert any("tp=8" in r for r in ds) and any("selective" in r for r in ds)
    assert any("zero=1" in r and "no ZeRO-1/2" in r for r in torchtitan.LAUNCHER.refusals(job))
    acc = accelerate.LAUNCHER.refusals(job)
    assert any("pp=2" in r for r in acc) and any("zero=1" in r for r in acc)
    for mod in (deepspeed, torchtitan, accelerate):
        with pytest.raises(LauncherRefusedError) as e:
            mod.emit(job)
        assert e.value.exit_code == 4 and e.value.reasons


# ==== per-launcher cases ===============================================================================
def test_megatron_interleaved_gqa_and_group_size():
    m = get_preset("70b")
    t = TrainingSpec(seq_len=4096, global_batch=512)
    job = job_of(m, t, "tp=8,pp=4,vpp=5,zero=1,sp=1,recompute=block,recompute_layers=10,mbs=1,vpp_group=8", 128)
    assert not check(Ctx(m, t, 128), job.plan)
    files = assert_round_trip("megatron", job)
    a = rb.parse_flags(files["megatron_args.txt"])
    assert a["--num-layers-per-virtual-pipeline-stage"] == "4"      # 80/4 = 20 per stage, 5 chunks
    assert a["--microbatch-group-size-per-virtual-pipeline-stage"] == "8"
    assert "--virtual-pipeline-model-parallel-size" not in a
    assert (a["--recompute-method"], a["--recompute-num-layers"]) == ("block", "2")   # 10 per stage / 5 chunks
    assert a["--group-query-attention"] is True and a["--num-query-groups"] == "8"


def test_megatron_fsdp_path_unsets_cuda_device_max_connections():
    job = job_of(get_preset("llama3-8b"), TrainingSpec(seq_len=8192, global_batch=256),
                 "tp=2,zero=3,recompute=full,mbs=1", 64)
    files = assert_round_trip("megatron", job)
    a = rb.parse_flags(files["megatron_args.txt"])
    assert a["--use-megatron-fsdp"] is True and a["--data-parallel-sharding-strategy"] == "optim_grads_params"
    assert a["--ckpt-format"] == "fsdp_dtensor" and a["--no-gradient-accumulation-fusion"] is True
    assert rb.read_env(files["megatron_env.sh"]) == {"CUDA_DEVICE_MAX_CONNECTIONS": None}


def test_megatron_moe_uneven_split_and_offload():
    m = get_preset("mixtral-8x7b").with_(dense_layer_ids=(0,))
    t = TrainingSpec(seq_len=4096, global_batch=256)
    job = job_of(m, t, "tp=2,ep=4,pp=4,sp=1,zero=1,offload=optimizer,phi=0.5,layer_split=7:9:9:7,mbs=1", 64)
    assert not check(Ctx(m, t, 64), job.plan)
    files = assert_round_trip("megatron", job)
    a = rb.parse_flags(files["megatron_args.txt"])
    assert a["--num-experts"] == "8" and a["--moe-router-topk"] == "2" and a["--expert-model-parallel-size"] == "4"
    assert a["--moe-layer-freq"] == "[0" + ",1" * 31 + "]"
    assert (a["--decoder-first-pipeline-num-layers"], a["--decoder-last-pipeline-num-layers"]) == ("7", "7")
    assert a["--optimizer-cpu-offload"] is True and a["--use-precision-aware-optimizer"] is True
    job2 = job_of(m, t, "tp=2,ep=4,pp=4,sp=1,zero=1,layer_split=6:10:9:7,mbs=1", 64)
    a2 = rb.parse_flags(megatron.emit(job2)["megatron_args.txt"])
    assert a2["--pipeline-model-parallel-layout"] == "Et*6|t*10|t*9|t*7L"


def test_megatron_interleaved_uneven_split_is_a_layout_over_virtual_stages():
    m, t = get_preset("llama3-8b"), TrainingSpec(seq_len=8192, global_batch=256)
    job = job_of(m, t, "tp=2,pp=4,vpp=2,zero=1,sp=1,mbs=1,layer_split=7:9:9:7", 32)
    a = rb.parse_flags(megatron.emit(job)["megatron_args.txt"])
    # stage r's layers cut into 2 chunks (larger first); chunk c of rank r is virtual stage c·4 + r
    assert a["--pipeline-model-parallel-layout"] == "Et*4|t*5|t*5|t*4|t*3|t*4|t*4|t*3L"
    assert "--num-layers-per-virtual-pipeline-stage" not in a
    assert "--decoder-first-pipeline-num-layers" not in a


@pytest.mark.parametrize("launcher,plan,needle", [
    ("megatron", "tp=8,pp=2,zero=3,mbs=1", "zero=3 with pp=2"),
    ("megatron", "tp=8,pp=2,zero=2,mbs=1", "zero=2 with pp=2"),
    ("megatron", "tp=8,pp=2,zero=1,schedule=gpipe,mbs=1", "gpipe"),
    ("megatron", "tp=8,zero=3,reshard=0,mbs=1", "reshard_after_forward=False"),
    ("megatron", "tp=8,zero=3,offload=params,mbs=1", "offloads only optimizer state"),
    ("megatron", "tp=8,zero=1,tp_overlap=1,mbs=1", "--tp-comm-overlap"),
    ("deepspeed", "pp=2,zero=2,mbs=1", "PipelineEngine rejects ZeRO stage ≥ 2"),
    ("deepspeed", "pp=2,zero=3,mbs=1", "incompatible with pipeline parallelism"),
    ("deepspeed", "cp=2,zero=1,mbs=1", "Ulysses"),
    ("deepspeed", "zero=1,offload=optimizer,mbs=1", "offload=grads"),
    ("deepspeed", "zero=2,offload=grads,phi=0.5,mbs=1", "ZeRO-3 only"),
    ("deepspeed", "zero=3,dp_replicate=8,mbs=1", "MiCS"),
    ("deepspeed", "zero=3,reshard=0,mbs=1", "releases parameters"),
    ("deepspeed", "pp=4,vpp=2,zero=1,mbs=1", "interleaved"),
])
def test_launcher_refusals(launcher, plan, needle):
    reasons = MODS[launcher].supports(parse_plan(plan), M13, T13, 64, HW)
    assert any(needle in r for r in reasons), reasons


def test_megatron_refuses_params_only_model():
    m = params_only(7e9)
    assert any("parameter-count-only" in r for r in megatron.supports(parse_plan("zero=1"), m))


def test_deepspeed_pure_zero3_with_offload():
    t = TrainingSpec(seq_len=4096, global_batch=1024)
    job = job_of(M13, t, "zero=3,offload=params,recompute=full,mbs=2", 64)
    files = assert_round_trip("deepspeed", job)
    c = json.loads(files["ds_config.json"])
    assert (c["train_batch_size"], c["train_micro_batch_size_per_gpu"], c["gradient_accumulation_steps"]) == \
        (1024, 2, 8)                                            # 1024 = 2 × 8 × 64
    z = c["zero_optimization"]
    assert z["stage"] == 3 and z["offload_param"]["device"] == "cpu" and z["offload_optimizer"]["device"] == "cpu"
    # the runtime's bucket (runtimes/deepspeed.toml dp_bucket_elements = 5e8: DeepSpeed's
    # reduce_bucket_size default), not the HF integration's h² "auto" value
    assert z["reduce_bucket_size"] == 500_000_000 and z["allgather_bucket_size"] == 500_000_000
    assert z["stage3_param_persistence_threshold"] == 100_000
    assert c["activation_checkpointing"]["number_checkpoints"] == 40
    assert "auto" not in files["ds_config.json"]
    assert c["bf16"] == {"enabled": True}


def test_deepspeed_pipeline_batch_identity_uses_dp_not_world():
    job = job_of(M13, T13, "pp=2,zero=1,mbs=2", 64)
    c = json.loads(assert_round_trip("deepspeed", job)["ds_config.json"])
    assert c["train_batch_size"] == c["train_micro_batch_size_per_gpu"] * c["gradient_accumulation_steps"] * 32
    assert "PipelineModule(layers=..., num_stages=2" in deepspeed.emit(job)["deepspeed_launch.sh"]


def test_deepspeed_partial_offload_and_buckets():
    job = job_of(M13, TrainingSpec(seq_len=4096, global_batch=1024),
                 "zero=3,offload=grads,phi=0.25,mbs=1,dp_bucket_mb=200", 64)
    c = json.loads(assert_round_trip("deepspeed", job)["ds_config.json"])
    z = c["zero_optimization"]
    assert z["offload_optimizer"]["ratio"] == 0.25 and "offload_param" not in z
    assert z["reduce_bucket_size"] == 100_000_000                 # 200 MB of 2-byte gradients
    # DeepSpeed moves whole sub-groups to the host (zero/stage3.py: i ≥ int((1 − ratio)·n)); with the
    # 1e9 default the rank's 13e9/64 partition would be one sub-group, offloaded whatever the ratio
    per_rank = M13.total_params() / 64
    assert z["sub_group_size"] == -(-per_rank // deepspeed.PARTIAL_OFFLOAD_SUBGROUPS)
    assert per_rank / z["sub_group_size"] > 19
    full = json.loads(deepspeed.emit(job_of(M13, T13, "zero=3,offload=grads,mbs=1", 64))["ds_config.json"])
    assert full["zero_optimization"]["sub_group_size"] == 1_000_000_000   # DeepSpeed's default


def test_torchtitan_fsdp_tp_pp_interleaved():
    m = get_preset("llama3-70b")
    t = TrainingSpec(seq_len=8192, global_batch=256)
    job = job_of(m, t, "tp=8,pp=4,vpp=2,zero=3,reshard=0,sp=1,recompute=full,mbs=1", 128)
    assert not check(Ctx(m, t, 128), job.plan)
    files = assert_round_trip("torchtitan", job)
    c = rb.tomllib.loads(files["torchtitan_job.toml"])
    par = c["parallelism"]
    assert (par["data_parallel_replicate_degree"], par["data_parallel_shard_degree"]) == (1, 4)
    assert par["pipeline_parallel_schedule"] == "Interleaved1F1B"
    assert par["pipeline_parallel_layers_per_stage"] == 10                 # 80 / (4 · 2)
    assert par["fsdp_reshard_after_forward"] == "never"
    assert c["training"]["local_batch_size"] == 64 and c["training"]["global_batch_size"] == 256
    assert c["model"] == {"name": "llama3", "flavor": "70B", "hf_assets_path": "./assets/hf/tokenizer"}
    assert "torchtitan >= 0.3 has no" in files["torchtitan_job.toml"]          # version note
    assert "autoplace_torchtitan_flavor.py" not in files                      # built-in flavor


def test_torchtitan_overrides_equal_the_toml():
    compiled = T13.with_(runtime=load_runtime("torchtitan-compile"))     # async TP (tp_overlap) needs compile
    for plan, t in (("tp=8,zero=3,sp=1,recompute=selective,mbs=1", T13),
                    ("zero=3,dp_replicate=8,offload=params,mbs=2", T13),
                    ("tp=4,pp=2,zero=3,sp=1,recompute=block,recompute_layers=10,mbs=1,tp_overlap=1", compiled)):
        job = job_of(M13, t, plan, 64)
        files = torchtitan.emit(job)
        toml_flat = rb.flatten(rb.tomllib.loads(files["torchtitan_job.toml"]))
        assert rb.overrides_dict(files["torchtitan_overrides.txt"]) == rb.as_cli_strings(toml_flat)


def test_torchtitan_custom_flavor_module_reproduces_ffn_width():
    job = job_of(M13, T13, "tp=8,zero=3,sp=1,mbs=1", 64)
    files = torchtitan.emit(job)
    c = rb.tomllib.loads(files["torchtitan_job.toml"])
    assert c["model"]["flavor"] == "autoplace" and c["experimental"]["custom_import"] == torchtitan.FLAVOR_MODULE
    args = torchtitan.flavor_args(M13)
    assert torchtitan.ffn_hidden(args["dim"], args["multiple_of"], args["ffn_dim_multiplier"]) == 13824
    assert "TransformerModelArgs(dim=5120, n_layers=40" in files["autoplace_torchtitan_flavor.py"]
    for name in ("7b", "70b", "llama3-8b", "llama3-405b"):
        a = torchtitan.flavor_args(get_preset(name))
        assert a and torchtitan.ffn_hidden(a["dim"], a["multiple_of"], a["ffn_dim_multiplier"]) == \
            get_preset(name).ffn_hidden


@pytest.mark.parametrize("plan,needle", [
    ("tp=8,zero=3,mbs=1", "always applies sequence parallelism"),
    ("tp=8,zero=2,sp=1,mbs=1", "no ZeRO-1/2"),
    ("tp=8,zero=0,sp=1,mbs=1", "DDP only to pure data parallelism"),
    ("tp=8,zero=3,sp=1,offload=grads,mbs=1", "enable_cpu_offload"),
    ("tp=4,pp=2,vpp=2,zero=3,sp=1,mbs=1,vpp_group=4", "Interleaved1F1B runs rounds"),
])
def test_torchtitan_refusals(plan, needle):
    t = TrainingSpec(seq_len=4096, global_batch=48)
    reasons = torchtitan.supports(parse_plan(plan), M13, t, 64, HW)
    assert any(needle in r for r in reasons), reasons


def test_accelerate_fsdp1_and_fsdp2_hsdp():
    job = job_of(M13, T13, "zero=3,dp_replicate=8,recompute=full,mbs=1", 64)
    files = assert_round_trip("accelerate", job)
    v2 = yaml.safe_load(files["accelerate_config.yaml"])
    assert v2["fsdp_config"]["fsdp_version"] == 2 and v2["fsdp_config"]["fsdp_reshard_after_forward"] is True
    assert v2["parallelism_config"]["parallelism_config_dp_replicate_size"] == 8
    assert v2["parallelism_config"]["parallelism_config_dp_shard_size"] == 8
    assert v2["num_processes"] == 64 and v2["num_machines"] == 8 and v2["mixed_precision"] == "bf16"
    v1 = yaml.safe_load(files["accelerate_config_fsdp1.yaml"])
    assert v1["fsdp_config"]["fsdp_sharding_strategy"] == "HYBRID_SHARD"
    hold = job_of(M13, T13, "zero=3,reshard=0,mbs=1", 64)
    f2 = assert_round_trip("accelerate", hold)
    assert yaml.safe_load(f2["accelerate_config_fsdp1.yaml"])["fsdp_config"]["fsdp_sharding_strategy"] == "SHARD_GRAD_OP"
    assert yaml.safe_load(f2["accelerate_config.yaml"])["fsdp_config"]["fsdp_reshard_after_forward"] is False
    tp = job_of(M13, T13, "tp=8,zero=3,mbs=1", 64)
    f3 = assert_round_trip("accelerate", tp)
    assert "accelerate_config_fsdp1.yaml" not in f3                      # FSDP1 has no TP
    ddp = job_of(M13, TrainingSpec(seq_len=4096, global_batch=64), "zero=0,mbs=1,recompute=full", 64)
    f4 = assert_round_trip("accelerate", ddp)
    assert yaml.safe_load(f4["accelerate_config.yaml"])["distributed_type"] == "MULTI_GPU"


@pytest.mark.parametrize("plan,needle", [
    ("tp=8,zero=3,sp=1,mbs=1", "sequence-parallel"),
    ("tp=8,dp=8,zero=3,dp_replicate=8,mbs=1", "no dimension to shard over"),
    ("zero=2,mbs=1", "ZeRO-3) or nothing"),
    ("zero=3,recompute=selective,mbs=1", "fsdp_activation_checkpointing"),
    ("zero=3,offload=grads,mbs=1", "offload=params"),
])
def test_accelerate_refusals(plan, needle):
    reasons = accelerate.supports(parse_plan(plan), M13, T13, 64, HW)
    assert any(needle in r for r in reasons), reasons


def test_torchrun_single_and_multi_node_and_slurm():
    one = job_of(get_preset("llama-tiny"), TrainingSpec(seq_len=256, global_batch=16), "zero=3,mbs=1", 4)
    r1 = rb.read_torchrun(torchrun.emit(one)["torchrun.sh"])
    assert r1 == {"world": 4, "nodes": 1, "standalone": True, "c10d": False}
    many = job_of(M13, T13, EXAMPLE, 64)
    r2 = rb.read_torchrun(torchrun.emit(many)["torchrun.sh"])
    assert r2 == {"world": 64, "nodes": 8, "standalone": False, "c10d": True}
    s = slurm.emit(many)["slurm.sbatch"]
    assert rb.read_slurm(s) == {"world": 64, "nodes": 8, "tasks_per_node": 1}
    assert "--rdzv-backend c10d" in s and "scontrol show hostnames" in s and '--rdzv-id "$SLURM_JOB_ID"' in s
    assert 'PAYLOAD="${PAYLOAD:-megatron}"' in s
    odd = job_of(get_preset("llama-tiny"), TrainingSpec(seq_len=256, global_batch=12), "zero=3,mbs=1", 12)
    assert any("whole number" in r for r in torchrun.LAUNCHER.refusals(odd))
    assert any("whole number" in r for r in slurm.LAUNCHER.refusals(odd))


@pytest.mark.skipif(shutil.which("bash") is None, reason="bash not installed")
def test_emitted_scripts_are_valid_bash(tmp_path):
    cases = [(M13, T13, EXAMPLE, 64), (M13, T13, "zero=3,dp_replicate=8,recompute=full,mbs=1", 64),
             (get_preset("llama-tiny"), TrainingSpec(seq_len=256, global_batch=16), "zero=3,mbs=1", 4)]
    n = 0
    for m, t, p, w in cases:
        res = export_all(doc_of(m, t, p, w), "all", tmp_path / str(n))
        for paths in res.written.values():
            for f in paths:
                if f.endswith((".sh", ".sbatch")):
                    subprocess.run(["bash", "-n", f], check=True)
                    n += 1
    assert n >= 8


def test_notes_are_reported():
    job = job_of(M13, T13, "tp=8,zero=3,sp=1,recompute=selective,mbs=1", 64)
    assert any("per-op SAC" in n for n in torchtitan.notes(job))
    assert any("not a built-in llama3 flavor" in n for n in torchtitan.notes(job))


# ==== property test over random legal plans ===========================================================
PRESETS = ("13b", "7b", "70b", "llama3-8b", "mixtral-8x7b", "llama-tiny", "gpt-1.7b")
WORLDS = (8, 16, 32, 64, 128)


def _divisors(n, cap=None):
    return [d for d in range(1, n + 1) if n % d == 0 and (cap is None or d <= cap)]


@st.composite
def legal_cases(draw):
    name = draw(st.sampled_from(PRESETS))
    model = get_preset(name)
    W = draw(st.sampled_from(WORLDS))
    tp = draw(st.sampled_from(_divisors(W, 8)))
    pp = draw(st.sampled_from(_divisors(W // tp, 8)))
    cp = draw(st.sampled_from(_divisors(W // (tp * pp), 4)))
    dp = W // (tp * pp * cp)
    ep, etp = 1, 0
    if model.is_moe:
        ep = draw(st.sampled_from([e for e in _divisors(model.num_experts) if (dp * cp * tp) % e == 0]))
        etp = draw(st.sampled_from([0, 1]))
    zero = draw(st.integers(0, 3))
    reshard = draw(st.booleans())
    r = draw(st.sampled_from(_divisors(dp)))
    off_max = {0: 0, 1: 1, 2: 2, 3: 3}[zero] if (zero < 3 or reshard) else 2
    off = draw(st.integers(0, off_max))
    phi = draw(st.sampled_from([1.0, 1.0, 0.5]))
    sp = tp > 1 and draw(st.booleans())
    lps = model.layers // pp if model.layers % pp == 0 else 1
    recompute = draw(st.sampled_from(["none", "selective", "full", "block"]))
    rl = draw(st.integers(0, lps)) if recompute == "block" else 0
    schedule, vpp = "1f1b", 1
    if pp > 1:
        schedule = draw(st.sampled_from(["1f1b", "gpipe", "interleaved"]))
        if schedule == "interleaved":
            opts = [v for v in (2, 4, 5) if lps % v == 0]
            assume(opts)
            vpp = draw(st.sampled_from(opts))
    mbs = draw(st.sampled_from([1, 2]))
    m = draw(st.sampled_from([1, 2, 4, 8, 16]))
    seq = draw(st.sampled_from([2048, 4096]))
    prec = draw(st.sampled_from(["bf16", "bf16", "fp16", "fp8", "fp32"]))
    train = TrainingSpec(seq_len=seq, global_batch=mbs * dp * m, precision=prec)
    plan = Plan(tp=tp, pp=pp, vpp=vpp, cp=cp, ep=ep, etp=etp, dp=dp, dp_replicate=r, zero=zero,
                reshard_after_forward=reshard, sp=sp, recompute=recompute, recompute_layers=rl,
                offload=("none", "optimizer", "grads", "params")[off], offload_fraction=phi if off else 1.0,
                mbs=mbs, schedule=schedule, tp_overlap=sp and draw(st.booleans()),
                dp_overlap=draw(st.booleans()))
    assume(not check(Ctx(model, train, W), plan))
    return model, train, plan, W


@settings(max_examples=120, deadline=None,
          suppress_health_check=[HealthCheck.filter_too_much, HealthCheck.too_slow])
@given(legal_cases())
def test_property_every_launcher_round_trips_or_refuses(case):
    model, train, plan, W = case
    job = ExportJob(model, HW, train, plan, W)
    for name, mod in MODS.items():
        reasons = mod.supports(plan, model, train, W, HW)
        assert reasons == mod.LAUNCHER.refusals(job)
        if reasons:
            assert all(isinstance(r, str) and r.strip() and "\n" not in r for r in reasons)
            with pytest.raises(LauncherRefusedError):
                mod.emit(job)
            continue
        files = assert_round_trip(name, job)
        if name == "megatron":
            env = rb.read_env(files["megatron_env.sh"])
            z = rb.expected(model, train, plan, W)["zero"]
            if z >= 2:
                assert env == {"CUDA_DEVICE_MAX_CONNECTIONS": None}
            elif plan.tp > 1 or plan.cp > 1:
                assert env == {"CUDA_DEVICE_MAX_CONNECTIONS": "1"}
        if name == "torchtitan":
            flat = rb.flatten(rb.tomllib.loads(files["torchtitan_job.toml"]))
            flat.pop("parallelism.module_fqns_per_model_part", None)
            assert rb.overrides_dict(files["torchtitan_overrides.txt"]) == rb.as_cli_strings(flat)
        if name == "deepspeed":
            assert '"auto"' not in files["ds_config.json"]


@st.composite
def supported_cases(draw, launcher):
    """Legal plans inside one launcher's documented domain (so the property test sees many emits)."""
    # torchtitan builds MoE models only through its registered TrainSpecs (runtimes/torchtitan.toml
    # supports.moe_specs): Qwen3-30B-A3B is one, Mixtral is not
    names = PRESETS if launcher != "torchtitan" else tuple(
        p for p in PRESETS if not get_preset(p).is_moe) + ("qwen3-30b-a3b",)
    name = draw(st.sampled_from(names))
    model = get_preset(name)
    W = draw(st.sampled_from(WORLDS))
    tp = 1 if launcher == "deepspeed" else draw(st.sampled_from(_divisors(W, 8)))
    pp = 1 if launcher == "accelerate" else draw(st.sampled_from(_divisors(W // tp, 4)))
    cp = 1 if launcher == "deepspeed" else draw(st.sampled_from(_divisors(W // (tp * pp), 2)))
    dp = W // (tp * pp * cp)
    ep, etp = 1, 0
    if launcher == "deepspeed":
        zero = draw(st.sampled_from([0, 1] if pp > 1 else [0, 1, 2, 3]))
    elif tp * pp * cp == 1:
        zero = draw(st.sampled_from([0, 3]))
    else:
        zero = 3
    reshard = True if launcher == "deepspeed" else draw(st.booleans())
    r = 1
    if launcher != "deepspeed" and zero == 3:
        r = draw(st.sampled_from([d for d in _divisors(dp) if dp // d > 1 or cp > 1] or [1]))
    if model.is_moe and launcher == "torchtitan":     # EP is carved out of dp_shard·cp·tp
        etp = draw(st.sampled_from([0, 1])) if tp > 1 else 0
        shard = dp // r if zero == 3 else 1           # below ZeRO-3 torchtitan runs DDP: dp_shard = 1
        ep = draw(st.sampled_from([e for e in _divisors(model.num_experts)
                                   if (shard * cp * tp) % (e * (etp or tp)) == 0]))
    if launcher == "deepspeed":
        off = draw(st.sampled_from({0: ["none"], 1: ["none"], 2: ["none", "grads"],
                                    3: ["none", "grads", "params"]}[zero]))
        phi = draw(st.sampled_from([1.0, 0.5])) if zero == 3 and off != "none" else 1.0
    else:
        off = draw(st.sampled_from(["none", "params"])) if zero == 3 and reshard and (dp // r > 1 or cp > 1) \
            else "none"
        phi = 1.0
    sp = tp > 1 and launcher != "accelerate"
    lps = model.layers // pp if model.layers % pp == 0 else 1
    rc_opts = {"deepspeed": ["none", "full", "block"] if pp == 1 else ["none", "full"],
               "accelerate": ["none", "full"], "torchtitan": ["none", "selective", "full", "block"]}[launcher]
    recompute = draw(st.sampled_from(rc_opts))
    rl = 0
    if recompute == "block":
        ks = [k for k in range(1, lps + 1) if launcher != "torchtitan" or lps % k == 0]
        rl = draw(st.sampled_from(ks))
    schedule, vpp, G = "1f1b", 1, 0
    mbs = draw(st.sampled_from([1, 2]))
    m = draw(st.sampled_from([1, 2, 4, 8, 12, 16]))
    if pp > 1 and launcher == "torchtitan":
        schedule = draw(st.sampled_from(["1f1b", "gpipe", "interleaved"]))
        if schedule == "interleaved":
            opts = [v for v in (2, 4) if lps % v == 0]
            assume(opts and m >= pp)
            vpp = draw(st.sampled_from(opts))
            G = torchtitan.interleaved_group(m, pp)[0]
            assume(m % max(1, m // pp) == 0)
    seq = draw(st.sampled_from([2048, 4096]))
    precs = {"deepspeed": ["bf16", "fp16", "fp32"], "torchtitan": ["bf16", "fp32", "fp8"],
             "accelerate": ["bf16", "fp16", "fp32"]}[launcher]   # runtimes/accelerate.toml: no FP8 recipe
    train = TrainingSpec(seq_len=seq, global_batch=mbs * dp * m, precision=draw(st.sampled_from(precs)))
    plan = Plan(tp=tp, pp=pp, vpp=vpp, cp=cp, ep=ep, etp=etp, dp=dp, dp_replicate=r, zero=zero,
                reshard_after_forward=reshard, sp=sp, recompute=recompute, recompute_layers=rl, offload=off,
                offload_fraction=phi, mbs=mbs, schedule=schedule, vpp_group=G,
                dp_overlap=draw(st.booleans()),
                rank_order="pp-dp-cp-tp" if launcher in ("torchtitan", "accelerate") else "tp-cp-ep-dp-pp")
    assume(not check(Ctx(model, train, W), plan))
    assume(not (launcher == "torchtitan" and cp > 1 and seq % (tp * 2 * cp)))
    assume(not (launcher == "accelerate" and zero == 3 and dp // r == 1 and (cp == 1 or r > 1)))  # needs a shard dim
    return model, train, plan, W


@pytest.mark.parametrize("launcher", ["deepspeed", "torchtitan", "accelerate"])
def test_property_launcher_domain_is_emitted_and_round_trips(launcher):
    @settings(max_examples=60, deadline=None,
              suppress_health_check=[HealthCheck.filter_too_much, HealthCheck.too_slow])
    @given(supported_cases(launcher))
    def run(case):
        model, train, plan, W = case
        job = ExportJob(model, HW, train, plan, W)
        assert MODS[launcher].LAUNCHER.refusals(job) == [], plan.short()
        assert_round_trip(launcher, job)
    run()


def test_megatron_always_accepts_the_common_recipe():
    """Dense TP+PP+ZeRO-1 plans (the tested Megatron recipe) are never refused."""
    for name, W, plan in [("13b", 64, EXAMPLE), ("70b", 128, "tp=8,pp=4,zero=1,sp=1,mbs=1"),
                          ("llama3-8b", 16, "tp=2,pp=2,zero=1,sp=1,recompute=full,mbs=2")]:
        m = get_preset(name)
        t = TrainingSpec(seq_len=4096, global_batch=256)
        assert megatron.supports(parse_plan(plan), m, t, W, HW) == []


# ==== export_all / emit_for_search ======================================================================
def test_export_all_writes_refuses_and_cleans_stale_files(tmp_path):
    out = tmp_path / "out"
    res = export_all(doc_of(M13, T13, "zero=3,recompute=full,mbs=2", 64), "all", out)
    assert set(res.written) == set(LAUNCHERS) and not res.refused   # pure ZeRO-3: every launcher can
    for paths in res.written.values():
        for p in map(Path, paths):
            assert p.exists()
            assert p.stat().st_mode & 0o777 == (0o755 if p.suffix in (".sh", ".sbatch") else 0o644)
    manifest = json.loads((out / "export_manifest.json").read_text())
    assert manifest["refused"] == res.refused
    # re-export a plan DeepSpeed refuses: its old files disappear
    res2 = export_all(doc_of(M13, T13, EXAMPLE, 64), "all", out)
    assert "deepspeed" in res2.refused and not (out / "ds_config.json").exists()
    assert str(out / "ds_config.json") in res2.removed
    assert not list(out.glob(".*.tmp"))


def test_fetch_sync_plans_are_refused_except_under_deepspeed_2021(tmp_path):
    """fetch_sync (synchronous ZeRO-3 fetches) is what DeepSpeed 2021 ran: every current stack refuses
    it (rule RT-fetch-sync); under the deepspeed-2021 runtime the DeepSpeed JSON is written, with a note."""
    res = export_all(doc_of(M13, T13, "zero=3,recompute=full,mbs=2,fetch_sync=1", 64), "all", tmp_path)
    assert set(res.written) == {"torchrun", "slurm"}                 # process launchers start any stack
    assert all(any("fetch_sync=1 is DeepSpeed ZeRO-3 as released in 2021" in r for r in res.refused[k])
               for k in ("megatron", "deepspeed", "torchtitan", "accelerate"))
    t21 = TrainingSpec(seq_len=4096, global_batch=1024, precision="fp16", runtime=load_runtime("deepspeed-2021"))
    old = export_all(doc_of(M13, t21, "zero=3,recompute=full,mbs=2,fetch_sync=1", 64), "deepspeed", tmp_path / "o")
    assert list(old.written) == ["deepspeed"]
    assert any("fetch_sync=True models DeepSpeed ZeRO-3 as released in 2021" in n for n in old.notes["deepspeed"])
    plain = export_all(doc_of(M13, T13, "zero=3,recompute=full,mbs=2", 64), "all", tmp_path / "p")
    assert not any("fetch_sync" in n for ns in plain.notes.values() for n in ns)


def test_export_all_illegal_plan_and_unknown_launcher(tmp_path):
    doc = doc_of(M13, T13, EXAMPLE, 64)
    doc["plan"]["tp"] = 3                                  # heads 40 % 3, and 3·2·4 ≠ 64
    with pytest.raises(IllegalPlanError) as e:
        export_all(doc, "all", tmp_path / "x")
    assert e.value.exit_code == 2 and not (tmp_path / "x").exists()
    with pytest.raises(InputError, match="unknown launcher 'mpirun'"):
        export_all(doc_of(M13, T13, EXAMPLE, 64), ["megatron,mpirun"], tmp_path / "y")


def test_emit_for_search_writes_plan_file_and_launchers(tmp_path):
    doc = doc_of(M13, T13, EXAMPLE, 64, predicted={"step_time_s": 10.5})
    res = emit_for_search(doc, tmp_path / "emit", ["megatron", "deepspeed"])
    assert Path(res.plan_file).name == "plan.json"
    assert read_plan_file(res.plan_file)[5] == {"step_time_s": 10.5}
    assert list(res.written) == ["megatron"] and "deepspeed" in res.refused
    assert "predicted: step_time_s=10.5" in (tmp_path / "emit" / "megatron_env.sh").read_text()


# ==== CLI ================================================================================================
@pytest.fixture()
def runner():
    from typer.testing import CliRunner
    return CliRunner()


def _app():
    from autoplace.cli import app
    return app


def test_cli_export_writes_files_and_table(tmp_path, runner):
    pf = write_plan_file(tmp_path / "plan.json", doc_of(M13, T13, EXAMPLE, 64))
    r = runner.invoke(_app(), ["export", "--plan-file", str(pf), "--launcher", "all", "--out", str(tmp_path / "o")])
    assert r.exit_code == 0, r.output
    assert "megatron_args.txt" in r.output and "refused" in r.output and "tp=8" in r.output
    assert (tmp_path / "o" / "megatron_args.txt").exists()


def test_cli_export_json(tmp_path, runner):
    pf = write_plan_file(tmp_path / "plan.json", doc_of(M13, T13, EXAMPLE, 64))
    r = runner.invoke(_app(), ["export", "--plan-file", str(pf), "-l", "megatron,torchtitan", "--out",
                               str(tmp_path / "o"), "--json"])
    assert r.exit_code == 0
    d = json.loads(r.stdout)
    assert list(d["written"]) == ["megatron"] and list(d["refused"]) == ["torchtitan"]


def test_cli_export_missing_plan_file_is_one_line_exit_1(tmp_path, runner):
    r = runner.invoke(_app(), ["export", "--plan-file", str(tmp_path / "nope.json"), "--out", str(tmp_path / "o")])
    assert r.exit_code == 1
    assert "Traceback" not in r.output
    assert r.exception is None or isinstance(r.exception, SystemExit)
    assert r.stderr.strip().count("\n") == 0 and "does not exist" in r.stderr


def test_cli_export_all_refused_exit_4_and_illegal_exit_2(tmp_path, runner):
    pf = write_plan_file(tmp_path / "plan.json", doc_of(M13, T13, EXAMPLE, 64))
    r = runner.invoke(_app(), ["export", "--plan-file", str(pf), "-l", "deepspeed", "--out", str(tmp_path / "o")])
    assert r.exit_code == 4 and "deepspeed cannot express this plan" in r.stderr
    r = runner.invoke(_app(), ["export", "--plan-file", str(pf), "-l", "deepspeed", "--out", str(tmp_path / "o"),
                               "--json"])
    assert r.exit_code == 4 and "deepspeed" in json.loads(r.stdout)["refused"]
    doc = json.loads(pf.read_text())
    doc["plan"]["pp"] = 3
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps(doc))
    r = runner.invoke(_app(), ["export", "--plan-file", str(bad), "--out", str(tmp_path / "o2")])
    assert r.exit_code == 2 and "illegal" in r.stderr and "Traceback" not in r.output
    r = runner.invoke(_app(), ["export", "--plan-file", str(pf), "-l", "horovod", "--out", str(tmp_path / "o3")])
    assert r.exit_code == 1 and "unknown launcher" in r.stderr


def test_launchers_constant_matches_modules():
    assert set(LAUNCHERS) == set(MODS)
    for name, mod in MODS.items():
        assert mod.NAME == name and mod.FILES


def test_job_spec_dataclass_fields_round_trip_through_document():
    doc = doc_of(M13, T13, EXAMPLE, 64)
    assert doc["model"] == asdict(M13) and doc["training"] == asdict(T13)
