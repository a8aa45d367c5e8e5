"""Validation of emitted launcher files by the launchers' own code (optional 'launchers' extra).

Install: DS_BUILD_OPS=0 pip install deepspeed megatron-core accelerate torchtitan==0.2.2 -c constraints-ci.txt
(`pip install -e .[launchers]`). Each launcher is skipped when its package is missing. Checks:

* DeepSpeed: `DeepSpeedConfig` accepts every emitted ds_config.json at the plan's data-parallel size
  (an mpu reporting dp, as a PipelineModule's grid does) — batch identity, ZeRO and offload
  sub-configs (pydantic, extra="forbid") — and rejects it at the wrong size when pp > 1;
* megatron-core: `TransformerConfig` (+ ModelParallelConfig fields) and `DistributedDataParallelConfig`
  accept the emitted degrees and shapes; `initialize_model_parallel` builds the rank grid at the full
  world size on the fake process-group backend; the constant micro-batch calculator gives m; the
  Megatron-LM `validate_args` checks that megatron-core does not ship are mirrored from the
  Megatron-LM source (arguments.py);
* torchtitan 0.2.2: `ConfigManager` loads the TOML (and, separately, the overrides) into `JobConfig`;
  `ParallelDims` validates at the world size and builds its meshes on the fake backend; the batch and
  pipeline-split checks of train.py / pipeline_parallel.py hold; the emitted flavor module builds a
  model whose parameter count equals the ModelSpec's;
* accelerate: `load_config_from_file` reads the YAML, `ParallelismConfig` accepts the sizes (total =
  num_processes) and builds its device mesh, `FullyShardedDataParallelPlugin` accepts the fsdp_config;
* PyTorch DeviceMesh at the full world size (fake backend) for the mesh an FSDP2/TP/PP plan implies.
"""

from __future__ import annotations

import importlib
import importlib.util
import json
import shlex
import sys
import types
from contextlib import contextmanager
from dataclasses import replace
from pathlib import Path

import pytest
import yaml
from hypothesis import HealthCheck, given, settings

sys.path.insert(0, str(Path(__file__).parent))
import test_export as base  # noqa: E402
from launchers import readback as rb  # noqa: E402

from autoplace.export import accelerate, deepspeed, megatron, torchtitan  # noqa: E402
from autoplace.export.common import ExportJob, virtual_chunks  # noqa: E402
from autoplace.specs.presets import get_preset  # noqa: E402
from autoplace.specs.training import TrainingSpec  # noqa: E402

pytestmark = pytest.mark.launchers

SETTINGS = dict(max_examples=25, deadline=None,
                suppress_health_check=[HealthCheck.filter_too_much, HealthCheck.too_slow])


@contextmanager
def fake_world(world: int):
    """The default process group on the 'fake' backend: one process acts as rank 0 of `world`."""
    import torch.distributed as dist
    from torch.testing._internal.distributed.fake_pg import FakeStore
    if dist.is_initialized():
        dist.destroy_process_group()
    dist.init_process_group("fake", store=FakeStore(), rank=0, world_size=world)
    try:
        yield
    finally:
        dist.destroy_process_group()


def cases(launcher):
    """Legal plans in the launcher's domain plus the fixed examples."""
    return base.supported_cases(launcher)


# ==== DeepSpeed ==========================================================================================
class _MPU:
    def __init__(self, dp):
        self.dp = dp

    def get_data_parallel_world_size(self):
        return self.dp

    def get_data_parallel_rank(self):
        return 0


def _ds_config(cfg: dict, dp: int, monkeypatch):
    pytest.importorskip("deepspeed")
    import deepspeed.runtime.config as dsc
    monkeypatch.setattr(dsc.dist, "get_rank", lambda *a, **k: 0)
    return dsc.DeepSpeedConfig(cfg, mpu=_MPU(dp))


def _check_deepspeed(job: ExportJob, monkeypatch):
    cfg = json.loads(deepspeed.emit(job)["ds_config.json"])
    c = _ds_config(cfg, job.plan.dp, monkeypatch)
    assert c.world_size == job.plan.dp
    assert (c.train_batch_size, c.train_micro_batch_size_per_gpu, c.gradient_accumulation_steps) == \
        (job.train.global_batch, job.plan.mbs, job.micro_batches)
    assert c.zero_optimization_stage == cfg["zero_optimization"]["stage"]
    zc = c.zero_config
    if job.plan.off >= 2:
        assert zc.offload_optimizer.device == "cpu"
        assert zc.offload_optimizer.ratio == pytest.approx(job.plan.offload_fraction)
    if job.plan.off == 3:
        assert zc.offload_param.device == "cpu"
    assert zc.overlap_comm == job.plan.dp_overlap
    assert c.bfloat16_config.enabled == (job.train.precision == "bf16")
    assert c.float16_config.enabled == (job.train.precision == "fp16")
    if job.plan.pp > 1:                                  # the identity is over dp, not the world size
        with pytest.raises(AssertionError, match="batch"):
            _ds_config(cfg, job.world, monkeypatch)


def test_deepspeed_worked_examples(monkeypatch):
    for plan in ("zero=3,offload=params,recompute=full,mbs=2", "pp=2,zero=1,mbs=2",
                 "zero=3,offload=grads,phi=0.25,mbs=1,dp_bucket_mb=200", "zero=2,offload=grads,mbs=4"):
        _check_deepspeed(base.job_of(base.M13, base.T13, plan, 64), monkeypatch)


@settings(**SETTINGS)
@given(cases("deepspeed"))
def test_deepspeed_config_accepts_emitted_json(case):
    model, train, plan, W = case
    mp = pytest.MonkeyPatch()
    try:
        _check_deepspeed(ExportJob(model, base.HW, train, plan, W), mp)
    finally:
        mp.undo()


def test_deepspeed_refusal_matches_pipeline_engine_source():
    spec = importlib.util.find_spec("deepspeed")
    if spec is None:
        pytest.skip("deepspeed not installed")
    src = (Path(spec.origin).parent / "runtime" / "pipe" / "engine.py").read_text()
    assert "ZeRO-2 and ZeRO-3 are incompatible with pipeline parallelism" in src
    cfg_src = (Path(spec.origin).parent / "runtime" / "config.py").read_text()
    assert "mics_shard_size" in cfg_src and "removed" in cfg_src      # why HSDP is refused


# ==== megatron-core ======================================================================================
def megatron_core_configs(args_text: str, world: int, env: dict):
    """TransformerConfig + DistributedDataParallelConfig from the emitted flags, and the Megatron-LM
    validate_args checks that megatron-core does not ship (mirrored from megatron/training/arguments.py)."""
    import torch
    import torch.nn.functional as F
    from megatron.core.distributed import DistributedDataParallelConfig
    from megatron.core.transformer import TransformerConfig
    a = rb.parse_flags(args_text)
    i = lambda k, d=None: int(a[k]) if k in a else d  # noqa: E731
    tp, pp, cp = i("--tensor-model-parallel-size", 1), i("--pipeline-model-parallel-size", 1), \
        i("--context-parallel-size", 1)
    L = i("--num-layers")
    vpp = (L // pp) // i("--num-layers-per-virtual-pipeline-stage") \
        if "--num-layers-per-virtual-pipeline-stage" in a else None
    bf16, fp16 = "--bf16" in a, "--fp16" in a
    dtype = torch.bfloat16 if bf16 else (torch.float16 if fp16 else torch.float32)
    swiglu = "--swiglu" in a
    kw = dict(
        tensor_model_parallel_size=tp, pipeline_model_parallel_size=pp,
        virtual_pipeline_model_parallel_size=vpp if vpp and vpp > 1 else None,
        microbatch_group_size_per_vp_stage=i("--microbatch-group-size-per-virtual-pipeline-stage"),
        sequence_parallel="--sequence-parallel" in a, context_parallel_size=cp,
        expert_model_parallel_size=i("--expert-model-parallel-size", 1),
        expert_tensor_parallel_size=i("--expert-tensor-parallel-size"),
        num_moe_experts=i("--num-experts"), moe_router_topk=i("--moe-router-topk", 2),
        moe_grouped_gemm="--moe-grouped-gemm" in a,
        pipeline_dtype=dtype, params_dtype=dtype, bf16=bf16, fp16=fp16,
        num_layers=L, hidden_size=i("--hidden-size"), ffn_hidden_size=i("--ffn-hidden-size"),
        num_attention_heads=i("--num-attention-heads"),
        num_query_groups=i("--num-query-groups") if "--group-query-attention" in a else None,
        kv_channels=i("--kv-channels"),
        gated_linear_unit=swiglu, activation_func=F.silu if swiglu else F.gelu,
        add_bias_linear="--disable-bias-linear" not in a, add_qkv_bias="--add-qkv-bias" in a,
        qk_layernorm="--qk-layernorm" in a, normalization=a.get("--normalization", "LayerNorm"),
        recompute_granularity=a.get("--recompute-granularity"), recompute_method=a.get("--recompute-method"),
        recompute_num_layers=i("--recompute-num-layers"),
        recompute_modules=_words(a["--recompute-modules"]) if "--recompute-modules" in a else None,
        num_layers_in_first_pipeline_stage=i("--decoder-first-pipeline-num-layers"),
        num_layers_in_last_pipeline_stage=i("--decoder-last-pipeline-num-layers"),
        pipeline_model_parallel_layout=a.get("--pipeline-model-parallel-layout"),
        attention_dropout=float(a.get("--attention-dropout", 0.1)), hidden_dropout=float(a.get("--hidden-dropout", 0.1)),
    )
    if "--num-experts" in a:
        freq = a.get("--moe-layer-freq", "1")
        kw.update(num_moe_experts=i("--num-experts"), moe_router_topk=i("--moe-router-topk"),
                  moe_ffn_hidden_size=i("--moe-ffn-hidden-size"),
                  moe_layer_freq=json.loads(freq) if freq.startswith("[") else int(freq),
                  moe_shared_expert_intermediate_size=i("--moe-shared-expert-intermediate-size"),
                  moe_shared_expert_gate="--moe-shared-expert-gate" in a,
                  moe_token_dispatcher_type=a.get("--moe-token-dispatcher-type", "allgather"),
                  moe_flex_dispatcher_backend=a.get("--moe-flex-dispatcher-backend", "deepep"),
                  overlap_moe_expert_parallel_comm="--overlap-moe-expert-parallel-comm" in a)
    if "--cuda-graph-impl" in a:
        kw.update(cuda_graph_impl=a["--cuda-graph-impl"],
                  cuda_graph_scope=_words(a["--cuda-graph-scope"]) if "--cuda-graph-scope" in a else [])
    if "--multi-latent-attention" in a:
        from megatron.core.transformer.transformer_config import MLATransformerConfig
        kw.update(multi_latent_attention=True, q_lora_rank=i("--q-lora-rank"), kv_lora_rank=i("--kv-lora-rank"),
                  qk_head_dim=i("--qk-head-dim"), qk_pos_emb_head_dim=i("--qk-pos-emb-head-dim"),
                  v_head_dim=i("--v-head-dim"), mtp_num_layers=i("--mtp-num-layers"))
        tc = MLATransformerConfig(**kw)
    else:
        tc = TransformerConfig(**kw)
    fsdp = "--use-megatron-fsdp" in a
    ddp = DistributedDataParallelConfig(
        use_distributed_optimizer="--use-distributed-optimizer" in a,
        overlap_grad_reduce="--overlap-grad-reduce" in a, overlap_param_gather="--overlap-param-gather" in a,
        num_distributed_optimizer_instances=i("--num-distributed-optimizer-instances", 1),
        use_megatron_fsdp=fsdp, data_parallel_sharding_strategy=a.get("--data-parallel-sharding-strategy", "no_shard"),
        bucket_size=i("--ddp-bucket-size"))
    # ---- Megatron-LM arguments.py validate_args (subset the plan can trip) -------------------------
    assert world % (tp * pp * cp) == 0
    # FP8/FP4 switches: TransformerConfig checks them against Transformer Engine's version, which this
    # CPU machine lacks, so the values are checked against the fields' choices (transformer_config.py)
    if "--fp8-format" in a:
        assert a["--fp8-format"] in ("e4m3", "hybrid")
        assert a["--fp8-recipe"] in ("tensorwise", "delayed", "mxfp8", "blockwise", "custom")
    if "--fp4-format" in a:
        assert a["--fp4-format"] == "e2m1" and a["--fp4-recipe"] in ("nvfp4", "custom") and "--fp8-format" not in a
    if "--fp8-param-gather" in a or "--fp4-param-gather" in a:
        assert "--use-distributed-optimizer" in a or "--use-megatron-fsdp" in a
    assert "--fp8-dot-product-attention" not in a      # no such flag (excluded from the argument factory)
    if a.get("--cuda-graph-scope") == "full_iteration":
        assert a["--cuda-graph-impl"] == "local" and "--no-check-for-nan-in-loss-and-grad" in a
    if "--overlap-param-gather" in a:
        assert ("--use-distributed-optimizer" in a or fsdp) and "--overlap-grad-reduce" in a
    if "--tp-comm-overlap" in a:
        assert "--sequence-parallel" in a
    if fsdp:
        assert a["--ckpt-format"] == "fsdp_dtensor"
        assert env.get("CUDA_DEVICE_MAX_CONNECTIONS") != "1"
    elif tp > 1 or cp > 1:
        assert env.get("CUDA_DEVICE_MAX_CONNECTIONS") == "1"
    if "--optimizer-cpu-offload" in a:
        assert "--use-precision-aware-optimizer" in a and "--use-distributed-optimizer" in a
    if a.get("--recompute-granularity") == "selective":
        assert "--recompute-method" not in a
    if cp > 1:
        assert i("--seq-length") % (2 * cp) == 0
    assert i("--max-position-embeddings") >= i("--seq-length")
    if kw["virtual_pipeline_model_parallel_size"]:
        assert pp > 1 and (L // pp) % i("--num-layers-per-virtual-pipeline-stage") == 0
    elif kw["num_layers_in_first_pipeline_stage"] is None and not kw["pipeline_model_parallel_layout"]:
        assert L % pp == 0
    if kw.get("num_moe_experts") and kw["expert_model_parallel_size"] > 1:
        assert kw["num_moe_experts"] % kw["expert_model_parallel_size"] == 0 and not fp16
    return a, tc, ddp


def _words(v) -> list:
    return list(v) if isinstance(v, (list, tuple)) else str(v).split()


def _check_megatron(job: ExportJob):
    pytest.importorskip("megatron.core")
    from megatron.core import parallel_state as ps
    from megatron.core.num_microbatches_calculator import ConstantNumMicroBatchesCalculator
    files = megatron.emit(job)
    env = rb.read_env(files["megatron_env.sh"])
    a, tc, ddp = megatron_core_configs(files["megatron_args.txt"], job.world, env)
    plan = job.plan
    assert tc.tensor_model_parallel_size == plan.tp and tc.pipeline_model_parallel_size == plan.pp
    assert (tc.virtual_pipeline_model_parallel_size or 1) == plan.v
    if plan.v > 1:
        assert tc.microbatch_group_size_per_vp_stage == plan.G
    assert tc.expert_tensor_parallel_size == (plan.t_exp if job.model.is_moe else plan.tp)
    calc = ConstantNumMicroBatchesCalculator(job.train.global_batch, plan.mbs, plan.dp, False, 0)
    assert calc.get() == job.micro_batches
    with fake_world(job.world):
        try:
            ps.initialize_model_parallel(
                tensor_model_parallel_size=plan.tp, pipeline_model_parallel_size=plan.pp,
                virtual_pipeline_model_parallel_size=tc.virtual_pipeline_model_parallel_size,
                context_parallel_size=plan.cp, expert_model_parallel_size=tc.expert_model_parallel_size,
                expert_tensor_parallel_size=tc.expert_tensor_parallel_size,
                num_distributed_optimizer_instances=ddp.num_distributed_optimizer_instances,
                create_gloo_process_groups=False)
            assert ps.get_data_parallel_world_size() == plan.dp
            assert ps.get_tensor_model_parallel_world_size() == plan.tp
            assert ps.get_pipeline_model_parallel_world_size() == plan.pp
            assert ps.get_context_parallel_world_size() == plan.cp
            if job.model.is_moe:
                assert ps.get_expert_model_parallel_world_size() == plan.ep
                assert ps.get_expert_data_parallel_world_size() == job.world // (plan.t_exp * plan.ep * plan.pp)
        finally:
            ps.destroy_model_parallel()


@pytest.mark.parametrize("model,train,plan,world", [
    ("13b", (4096, 1024), base.EXAMPLE, 64),
    ("70b", (4096, 512), "tp=8,pp=4,vpp=5,zero=1,sp=1,recompute=block,recompute_layers=10,mbs=1,vpp_group=8", 128),
    ("llama3-8b", (8192, 256), "tp=2,zero=3,recompute=full,mbs=1,dp_replicate=4", 64),
    ("mixtral-8x7b", (4096, 256), "tp=2,ep=4,pp=4,sp=1,zero=1,offload=optimizer,phi=0.5,layer_split=6:10:9:7,mbs=1", 64),
    ("gpt-1.7b", (2048, 512), "tp=4,cp=2,zero=2,sp=1,mbs=2,dp_bucket_mb=100", 32),
    ("llama3-8b", (8192, 256), "tp=2,pp=4,vpp=2,zero=1,sp=1,mbs=1,layer_split=7:9:9:7", 32),
    ("deepseek-v3", (4096, 1024), "pp=4,ep=64,zero=1,recompute_modules=mla_up_proj,mbs=1,layer_split=15:15:16:15", 256),
])
def test_megatron_core_accepts_examples(model, train, plan, world):
    m = get_preset(model)
    _check_megatron(base.job_of(m, TrainingSpec(seq_len=train[0], global_batch=train[1]), plan, world))


def _switched(train, *sets):
    from autoplace.runtimes import load_runtime
    from autoplace.runtimes.switches import apply_settings
    return replace(train, runtime=apply_settings(load_runtime("megatron-core"), sets))


@pytest.mark.parametrize("model,train,plan,world,sets", [
    ("mixtral-8x7b", (4096, 256), "ep=8,zero=1,mbs=1,ep_overlap=1", 64,
     ("moe_dispatch=hybridep", "cuda_graphs=true")),
    ("deepseek-v3", (4096, 1024), "pp=4,vpp=2,ep=64,zero=1,ep_overlap=1,mbs=1,layer_split=15:15:16:15", 256,
     ("moe_dispatch=deepep",)),
    ("llama3-8b", (8192, 256), "tp=2,sp=1,zero=1,mbs=1", 64, ("cuda_graphs=true",)),
])
def test_megatron_core_accepts_runtime_switches(model, train, plan, world, sets):
    """What --runtime-set priced is what the flags ask for, and megatron-core's TransformerConfig
    accepts it: the flex dispatcher with its backend, EP all-to-all overlap, per-layer CUDA graphs."""
    m = get_preset(model)
    job = base.job_of(m, _switched(TrainingSpec(seq_len=train[0], global_batch=train[1]), *sets), plan, world)
    assert not megatron.LAUNCHER.refusals(job)
    _check_megatron(job)
    text = megatron.emit(job)["megatron_args.txt"]
    rt = job.train.rt
    if m.is_moe:
        if rt.kernels.moe_dispatch in ("deepep", "hybridep"):
            assert "--moe-token-dispatcher-type flex" in text
            assert f"--moe-flex-dispatcher-backend {rt.kernels.moe_dispatch}" in text
        assert "--overlap-moe-expert-parallel-comm" in text
    assert ("--cuda-graph-impl transformer_engine" in text) == rt.kernels.cuda_graphs
    assert ("--cuda-graph-scope attn moe_router moe_preprocess" in text) == (rt.kernels.cuda_graphs and m.is_moe)


@settings(**SETTINGS)
@given(base.legal_cases())
def test_megatron_core_accepts_emitted_args(case):
    model, train, plan, W = case
    job = ExportJob(model, base.HW, train, plan, W)
    if megatron.LAUNCHER.refusals(job):
        return
    _check_megatron(job)


# ==== torchtitan 0.2.2 ===================================================================================
def _torchtitan():
    """Import torchtitan 0.2.2 on a CPU machine: its MoE kernels module imports triton at import time,
    so stand in a module that raises if the (GPU-only) kernels are ever called."""
    if importlib.util.find_spec("torchtitan") is None:
        pytest.skip("torchtitan not installed")
    if importlib.util.find_spec("triton") is None and "torchtitan.models.moe.kernels" not in sys.modules:
        k = types.ModuleType("torchtitan.models.moe.kernels")

        def _gpu_only(*a, **kw):
            raise RuntimeError("triton kernels are not available on this CPU test machine")
        k.generate_permute_indices = k.fill_indices_wrapper = _gpu_only
        k.__all__ = ["generate_permute_indices", "fill_indices_wrapper"]
        sys.modules["torchtitan.models.moe.kernels"] = k
    from importlib.metadata import version

    import torchtitan
    if not version("torchtitan").startswith("0.2."):
        pytest.skip(f"torchtitan {version('torchtitan')} has no TOML job files (need 0.2.x)")
    return torchtitan


def _overrides_argv(text: str) -> list[str]:
    argv = []
    for line in text.splitlines():
        line = line.strip()
        if line and not line.startswith("#"):
            argv += shlex.split(line)
    return argv


def _check_torchtitan(job: ExportJob, tmp: Path):
    _torchtitan()
    from torch.distributed.pipelining.schedules import PipelineScheduleSingle, get_schedule_class
    from torchtitan.config import ConfigManager
    from torchtitan.distributed.parallel_dims import ParallelDims
    from torchtitan.distributed.pipeline_parallel import generate_llm_fqn_per_model_part
    files = torchtitan.emit(job)
    for name, text in files.items():
        (tmp / name).write_text(text)
    cfg = ConfigManager().parse_args(["--job.config_file", str(tmp / "torchtitan_job.toml")])
    cli = ConfigManager().parse_args(_overrides_argv(files["torchtitan_overrides.txt"]))
    for section in ("parallelism", "training", "activation_checkpoint", "model", "compile", "experimental"):
        a, b = getattr(cfg, section), getattr(cli, section)
        if section == "parallelism":
            b.module_fqns_per_model_part = a.module_fqns_per_model_part   # TOML-only key
        assert a == b, section
    if job.model.is_moe:        # the MoE model is one torchtitan registers (no placeholder spec)
        from torchtitan.protocols.train_spec import get_train_spec
        spec = get_train_spec(cfg.model.name)
        assert cfg.model.flavor in spec.model_args, (cfg.model.name, cfg.model.flavor)
    p, W = cfg.parallelism, job.world
    pd = ParallelDims(dp_shard=p.data_parallel_shard_degree, dp_replicate=p.data_parallel_replicate_degree,
                      cp=p.context_parallel_degree, tp=p.tensor_parallel_degree, pp=p.pipeline_parallel_degree,
                      ep=p.expert_parallel_degree, etp=p.expert_tensor_parallel_degree, world_size=W)
    plan = job.plan
    assert (pd.dp_replicate * pd.dp_shard, pd.tp, pd.pp, pd.cp, pd.ep) == (plan.dp, plan.tp, plan.pp, plan.cp, plan.ep)
    assert pd.fsdp_enabled == (plan.zero == 3 and (plan.dp_shard > 1 or plan.cp > 1))
    if pd.cp_enabled:
        assert cfg.training.seq_len % pd.seq_len_divisor == 0
    # train.py batch checks
    batch = pd.dp_replicate * pd.dp_shard
    tr = cfg.training
    assert tr.global_batch_size % (tr.local_batch_size * batch) == 0
    accum = tr.global_batch_size // (tr.local_batch_size * batch)
    if pd.pp_enabled:
        assert tr.local_batch_size % p.pipeline_parallel_microbatch_size == 0
        n_mb = tr.local_batch_size // p.pipeline_parallel_microbatch_size
        assert n_mb * accum == job.micro_batches
        cls = get_schedule_class(p.pipeline_parallel_schedule)
        single = issubclass(cls, PipelineScheduleSingle)
        L = job.model.layers
        if p.module_fqns_per_model_part:
            parts = p.module_fqns_per_model_part
        else:
            lps = p.pipeline_parallel_layers_per_stage
            first, last = p.pipeline_parallel_first_stage_less_layers, p.pipeline_parallel_last_stage_less_layers
            import math
            stages = math.ceil((L + first + last) / lps)
            assert stages % pd.pp == 0
            assert (stages // pd.pp == 1) if single else (stages // pd.pp >= 2)
            parts = generate_llm_fqn_per_model_part(stages, L, first, last)
        assert len(parts) == plan.pp * plan.v
        per = [sum(x.startswith("layers.") for x in part) for part in parts]
        want = virtual_chunks(plan.layer_split, plan.v) if plan.layer_split else [L // (plan.pp * plan.v)] * (plan.pp * plan.v)
        assert per == want
        if plan.v > 1:                                   # torch's Interleaved1F1B rounds
            m = n_mb
            rounds = max(1, m // pd.pp)
            assert m % rounds == 0 and m // rounds == plan.G
    else:
        assert accum == job.micro_batches
    ac = cfg.activation_checkpoint
    assert ac.mode in ("none", "full", "selective")
    if ac.mode == "selective":
        assert ac.selective_ac_option == "op" or ac.selective_ac_option.isdigit()
    with fake_world(W):
        pd.build_mesh()
        if plan.dp > 1:
            assert pd.get_mesh("batch").size() == plan.dp
        if pd.fsdp_enabled:
            assert pd.get_mesh("fsdp").size() == plan.dp_shard * plan.cp
    if "autoplace_torchtitan_flavor.py" in files:
        _check_flavor(job, tmp)


def _check_flavor(job, tmp):
    import torch
    sys.path.insert(0, str(tmp))
    try:
        sys.modules.pop(torchtitan.FLAVOR_MODULE, None)
        importlib.import_module(torchtitan.FLAVOR_MODULE)
    finally:
        sys.path.remove(str(tmp))
    from torchtitan.models.llama3 import llama3_args
    from torchtitan.models.llama3.model.model import Transformer
    args = llama3_args["autoplace"]
    with torch.device("meta"):
        model = Transformer(args)
    n = sum(p.numel() for p in model.parameters())
    assert n == job.model.total_params(), (n, job.model.total_params())


@pytest.mark.parametrize("model,train,plan,world", [
    ("llama3-70b", (8192, 256), "tp=8,pp=4,vpp=2,zero=3,reshard=0,sp=1,recompute=full,mbs=1", 128),
    ("13b", (4096, 1024), "tp=8,zero=3,sp=1,recompute=selective,mbs=1", 64),
    ("13b", (4096, 1024), "zero=3,dp_replicate=8,offload=params,recompute=block,recompute_layers=20,mbs=2", 64),
    ("llama3-8b", (8192, 128), "tp=2,cp=2,zero=3,sp=1,mbs=1,tp_overlap=1", 16),
    ("7b", (4096, 64), "zero=0,mbs=1", 8),
    ("qwen3-30b-a3b", (4096, 256), "tp=2,ep=4,etp=1,zero=3,sp=1,mbs=1,rank_order=torchtitan", 32),
    ("gpt-oss-20b", (4096, 256), "ep=8,zero=3,mbs=1,rank_order=torchtitan", 32),
    ("llama-tiny", (256, 64), "pp=2,zero=3,layer_split=1:3,mbs=1", 8),
    ("llama3-8b", (8192, 256), "tp=2,pp=4,vpp=2,zero=3,sp=1,mbs=1,layer_split=7:9:9:7", 32),
    ("llama3-8b", (8192, 256), "tp=2,pp=4,zero=3,sp=1,mbs=1,layer_split=7:9:9:7", 32),      # per-stage keys
])
def test_torchtitan_loads_examples(tmp_path, model, train, plan, world):
    from autoplace.runtimes import load_runtime
    m = get_preset(model)
    rt = load_runtime("torchtitan-compile" if "tp_overlap=1" in plan else "torchtitan")   # async TP needs compile
    _check_torchtitan(base.job_of(m, TrainingSpec(seq_len=train[0], global_batch=train[1], runtime=rt), plan, world),
                      tmp_path)


def test_torchtitan_refuses_moe_models_it_does_not_register():
    """torchtitan 0.2.2 builds MoE models only through its registered TrainSpecs (deepseek_v3, qwen3,
    llama4, gpt_oss flavors); Mixtral matches none, so the exporter refuses and the search does not
    offer it."""
    from autoplace.export.registry import get_launcher
    from autoplace.runtimes import load_runtime
    job = base.job_of(get_preset("mixtral-8x7b"), TrainingSpec(seq_len=4096, global_batch=256,
                                                               runtime=load_runtime("torchtitan")),
                      "tp=2,ep=4,etp=1,zero=3,sp=1,mbs=1,rank_order=torchtitan", 32)
    why = get_launcher("torchtitan").refusals(job)
    assert any("registered definitions" in w and "qwen3 30B-A3B" in w for w in why), why


@settings(**SETTINGS)
@given(case=cases("torchtitan"))
def test_torchtitan_accepts_emitted_toml(case, tmp_path_factory):
    model, train, plan, W = case
    _check_torchtitan(ExportJob(model, base.HW, train, plan, W), tmp_path_factory.mktemp("tt"))


# ==== accelerate ===========================================================================================
def _check_accelerate(job: ExportJob, tmp: Path):
    pytest.importorskip("accelerate")
    from accelerate.commands.config.config_args import load_config_from_file
    from accelerate.parallelism_config import ParallelismConfig
    from accelerate.utils import FullyShardedDataParallelPlugin
    files = accelerate.emit(job)
    for name in ("accelerate_config.yaml", "accelerate_config_fsdp1.yaml"):
        if name not in files:
            continue
        (tmp / name).write_text(files[name])
        cc = load_config_from_file(str(tmp / name))
        assert cc.num_processes == job.world and cc.num_machines == job.nodes
        raw = yaml.safe_load(files[name])
        if raw["distributed_type"] == "MULTI_GPU":
            assert cc.distributed_type == "MULTI_GPU"
            continue
        fc = {k.removeprefix("fsdp_"): v for k, v in cc.fsdp_config.items()}
        kw = dict(fsdp_version=fc["version"], reshard_after_forward=fc["reshard_after_forward"],
                  cpu_offload=fc["offload_params"], activation_checkpointing=fc["activation_checkpointing"],
                  auto_wrap_policy=fc["auto_wrap_policy"], state_dict_type=fc["state_dict_type"],
                  transformer_cls_names_to_wrap=fc.get("transformer_layer_cls_to_wrap"),
                  cpu_ram_efficient_loading=False)
        if fc["version"] == 1:
            kw.update(sharding_strategy=fc["sharding_strategy"], sync_module_states=False,
                      use_orig_params=fc["use_orig_params"], backward_prefetch=fc["backward_prefetch"],
                      forward_prefetch=fc["forward_prefetch"])
        plugin = FullyShardedDataParallelPlugin(**kw)
        hold = not job.plan.reshard_after_forward
        if fc["version"] == 2:
            assert plugin.reshard_after_forward is (not hold)
        else:
            # torch names the hybrid ZeRO-2 member `_HYBRID_SHARD_ZERO2`; accelerate takes the public name
            assert plugin.sharding_strategy.name.lstrip("_") == fc["sharding_strategy"]
        pc_raw = cc.parallelism_config or {}
        sizes = {k.removeprefix("parallelism_config_"): v for k, v in pc_raw.items()}
        pc = ParallelismConfig(dp_replicate_size=sizes.get("dp_replicate_size", 1),
                               dp_shard_size=sizes.get("dp_shard_size", job.world),
                               tp_size=sizes.get("tp_size", 1), cp_size=sizes.get("cp_size", 1),
                               # accelerate's default TP handler imports transformers (not in the extra)
                               tp_handler=types.SimpleNamespace() if sizes.get("tp_size", 1) > 1 else None)
        assert pc.total_size == job.world
        assert pc.data_parallel_size == job.plan.dp
        assert pc.dp_shard_enabled or pc.cp_enabled          # FSDP2 needs a dimension to shard over
        with fake_world(job.world):
            mesh = pc.build_device_mesh("cpu")
            assert mesh.size() == job.world


@pytest.mark.parametrize("plan", ["zero=3,dp_replicate=8,recompute=full,mbs=1", "zero=3,reshard=0,mbs=1",
                                  "tp=8,zero=3,mbs=1", "tp=4,cp=2,zero=3,offload=params,mbs=1", "zero=0,mbs=1"])
def test_accelerate_loads_examples(tmp_path, plan):
    t = TrainingSpec(seq_len=4096, global_batch=512)
    _check_accelerate(base.job_of(base.M13, t, plan, 64), tmp_path)


@settings(**SETTINGS)
@given(case=cases("accelerate"))
def test_accelerate_accepts_emitted_yaml(case, tmp_path_factory):
    model, train, plan, W = case
    _check_accelerate(ExportJob(model, base.HW, train, plan, W), tmp_path_factory.mktemp("acc"))


# ==== PyTorch DeviceMesh for FSDP2 / TP / PP plans ============================================================
def plan_mesh(plan):
    """(shape, names) of the torchtitan-order mesh a plan implies: pp, dp_replicate, dp_shard, cp, tp."""
    dims = [("pp", plan.pp), ("dp_replicate", plan.dp_replicate), ("dp_shard", plan.dp_shard),
            ("cp", plan.cp), ("tp", plan.tp)]
    dims = [(n, s) for n, s in dims if s > 1] or [("dp_shard", 1)]
    return tuple(s for _, s in dims), tuple(n for n, _ in dims)


def _check_mesh(job: ExportJob):
    from torch.distributed.device_mesh import init_device_mesh
    shape, names = plan_mesh(job.plan)
    with fake_world(job.world):
        mesh = init_device_mesh("cpu", shape, mesh_dim_names=names)
        assert mesh.size() == job.world
        dp_dims = tuple(n for n in ("dp_replicate", "dp_shard") if n in names)
        if dp_dims:
            assert mesh[dp_dims]._flatten("dp").size() == job.plan.dp
        shard = tuple(n for n in ("dp_shard", "cp") if n in names)
        if shard:                                        # the FSDP2 shard mesh (dp_shard × cp)
            sub = mesh[shard] if len(shard) > 1 else mesh[shard[0]]
            assert (sub._flatten("fsdp") if len(shard) > 1 else sub).size() == job.plan.dp_shard * job.plan.cp
        if "dp_replicate" in names and "dp_shard" in names:
            hsdp = mesh["dp_replicate", "dp_shard"]      # 2-D mesh: FSDP2 treats it as HSDP
            assert hsdp.ndim == 2 and hsdp.shape == (job.plan.dp_replicate, job.plan.dp_shard)
        for n, s in zip(names, shape):
            assert mesh[n].size() == s


@settings(**SETTINGS)
@given(base.legal_cases())
def test_device_mesh_at_full_world_size(case):
    pytest.importorskip("torch.distributed.device_mesh")
    model, train, plan, W = case
    _check_mesh(ExportJob(model, base.HW, train, plan, W))


def test_device_mesh_worked_example():
    _check_mesh(base.job_of(base.M13, base.T13, "tp=8,pp=2,zero=3,dp_replicate=2,sp=1,mbs=1", 64))


def test_megatron_refusals_follow_megatron_core():
    """What megatron-core 0.16.1 / Megatron-LM refuse is refused before export: EP overlap with one MTP
    layer at pp 1 and with the allgather dispatcher (TransformerConfig.__post_init__), FP8 attention
    (no CLI flag), --fp8-param-gather with optimizer CPU offload outside the delayed recipe
    (arguments.py)."""
    from autoplace.export.registry import get_launcher
    from autoplace.runtimes import load_runtime
    from autoplace.runtimes.switches import apply_settings
    L = get_launcher("megatron")
    rt = load_runtime("megatron-core")

    def why(model, plan, world, rt=rt, **tr):
        t = TrainingSpec(seq_len=4096, global_batch=tr.pop("gb", 1024), runtime=rt, **tr)
        return " ".join(L.refusals(base.job_of(get_preset(model), t, plan, world)))
    assert "MTP" in why("deepseek-v3", "ep=64,tp=1,zero=1,ep_overlap=1,mbs=1", 256)
    assert "MTP" not in why("deepseek-v3", "ep=64,pp=4,vpp=2,zero=1,ep_overlap=1,mbs=1", 1024)
    ag = apply_settings(rt, ["moe_dispatch=allgather"])
    assert "alltoall/flex" in why("qwen3-30b-a3b", "ep=8,zero=1,ep_overlap=1,mbs=1", 64, rt=ag)
    assert "alltoall/flex" not in why("qwen3-30b-a3b", "ep=8,zero=1,ep_overlap=1,mbs=1", 64)
    fa = apply_settings(rt, ["fp8_attention=true"])
    assert "no command-line flag" in why("llama3-8b", "tp=2,sp=1,zero=1,mbs=1", 64, rt=fa, precision="fp8")
    assert "delayed" in why("llama3-8b", "tp=2,sp=1,zero=1,offload=optimizer,mbs=1", 64, precision="fp8",
                            fp8_recipe="current")
    assert "delayed" not in why("llama3-8b", "tp=2,sp=1,zero=1,offload=optimizer,mbs=1", 64, precision="fp8",
                                fp8_recipe="delayed")


def test_deepspeed_2021_writes_a_nonzero_bucket():
    import json as _json

    from autoplace.runtimes import load_runtime
    job = base.job_of(get_preset("13b"), TrainingSpec(seq_len=2048, global_batch=512,
                                                      runtime=load_runtime("deepspeed-2021")), "zero=1,mbs=1", 64)
    z = _json.loads(deepspeed.emit(job)["ds_config.json"])["zero_optimization"]
    assert z["reduce_bucket_size"] == 500_000_000 and z["allgather_bucket_size"] == 500_000_000
