"""The emitted ds_config.json run by DeepSpeed itself: `deepspeed.initialize` of a tiny model on CPU.

tests/test_export_launchers.py checks that `DeepSpeedConfig` parses every emitted config; here each
config of a set of plans (ZeRO 0/1/2/3, ZeRO-3 offload=params, ZeRO-2/3 offload=grads — DeepSpeed's
offload_optimizer —, a partial offload ratio, bf16 and fp32, gradient accumulation > 1, activation
checkpointing) builds a real engine and trains two optimizer steps (engine(batch) → loss →
engine.backward → engine.step), and the engine must report what the plan asked for.

How it runs (deepspeed 0.19, read from its source):

* each case is its own subprocess (DeepSpeed keeps process-global state: the comm backend, ZeRO-3
  hooks, the checkpointing module); the cases run a few at a time from one module fixture;
* ``DS_ACCELERATOR=cpu`` before ``import deepspeed`` selects accelerator/cpu_accelerator.py; one
  rank (RANK=0, WORLD_SIZE=1, LOCAL_RANK=0, MASTER_ADDR/PORT) and
  ``deepspeed.init_distributed(dist_backend="gloo")``;
* comm/torch.py TorchBackend JIT-compiles the shared-memory allreduce op (deepspeed_shm_comm, ~50 s
  on two cores) when it starts; one rank has nobody to share memory with, so the child replaces
  ``deepspeed.comm.torch.build_shm_op`` by ``lambda: None`` (what it returns where the op is
  incompatible);
* the emitted optimizer is {"type": "AdamW"}: DeepSpeed would build FusedAdam (no offload) or
  DeepSpeedCPUAdam (offload) from C++ sources. Every case but one adds ``"torch_adam": true`` to
  the optimizer params, which makes engine.get_optimizer_configuration pick torch.optim.AdamW with
  the file's lr/betas/eps/weight_decay. The partial-offload case cannot: stage3.py asserts
  "Hybrid Optimizer Only Supports DeepSpeedCPUAdam", so it runs the file's optimizer unchanged and
  needs the cpu_adam op — prebuilt (DS_BUILD_CPU_ADAM=1 at install) or in torch's JIT cache; it is
  skipped otherwise (building it takes ~100 s) unless AUTOPLACE_DS_JIT=1 allows the build;
* the plans are exported for several GPUs, but here dp = 1: train_batch_size is rewritten to
  train_micro_batch_size_per_gpu × gradient_accumulation_steps × 1 (the file's micro-batch and
  accumulation are kept), else DeepSpeed's batch identity check rejects the file at world size 1.

The fp16 case runs only where DeepSpeed's CPU accelerator reports fp16 (mkldnn fp16, e.g.
AVX512-FP16 hosts); elsewhere it is skipped, as DeepSpeed itself would refuse it ("Type fp16 is not
supported on your device"). pytest's -k still starts every case's child (one module fixture).
"""

from __future__ import annotations

import copy
import importlib.util
import json
import math
import os
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import pytest

HERE = Path(__file__).resolve()
STEPS = 2                                   # optimizer steps per case
AC_BLOCKS = 6                               # hidden blocks of the toy model
JIT_ENV = "AUTOPLACE_DS_JIT"


# ==== the child: one deepspeed.initialize and a few steps ==============================================
def _child(spec: dict) -> dict:
    os.environ["DS_ACCELERATOR"] = "cpu"
    import socket
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), RANK="0", WORLD_SIZE="1",
                      LOCAL_RANK="0", LOCAL_SIZE="1")
    try:
        import deepspeed
        import torch
        from deepspeed.accelerator import get_accelerator
        acc = get_accelerator()
        if acc.device_name() != "cpu":
            return {"skip": f"DS_ACCELERATOR=cpu gave the {acc.device_name()!r} accelerator"}
        importlib.import_module("deepspeed.comm.torch").build_shm_op = lambda: None   # see module doc
        deepspeed.init_distributed(dist_backend="gloo")
    except Exception as e:                      # noqa: BLE001  (any failure to start: skip, with why)
        return {"skip": f"DeepSpeed's CPU accelerator did not initialize: {type(e).__name__}: {e}"}

    cfg = spec["config"]
    if cfg.get("fp16", {}).get("enabled") and not acc.is_fp16_supported():
        return {"skip": "fp16 is not supported by DeepSpeed's CPU accelerator on this host"}
    if not spec["torch_adam"]:
        from deepspeed.git_version_info import installed_ops
        from torch.utils.cpp_extension import _get_build_directory
        cached = os.path.exists(os.path.join(_get_build_directory("cpu_adam", False), "cpu_adam.so"))
        if not (installed_ops.get("cpu_adam") or cached or os.environ.get(JIT_ENV) == "1"):
            return {"skip": f"needs DeepSpeedCPUAdam: the cpu_adam op is neither prebuilt nor JIT-cached "
                            f"(set {JIT_ENV}=1 to build it, ~100 s on two cores)"}

    dtype = torch.bfloat16 if cfg.get("bf16", {}).get("enabled") else \
        torch.float16 if cfg.get("fp16", {}).get("enabled") else torch.float32
    ac = cfg.get("activation_checkpointing")
    if ac is not None:
        deepspeed.checkpointing.configure(None, deepspeed_config=cfg)
    n_ckpt = min(AC_BLOCKS, ac["number_checkpoints"]) if ac else 0

    class Toy(torch.nn.Module):
        """16 → 32 → 6 × (32 → 32) → 1, MSE loss; the first n_ckpt blocks under deepspeed.checkpointing."""

        def __init__(self):
            super().__init__()
            self.inp = torch.nn.Linear(16, 32)
            self.blocks = torch.nn.ModuleList(torch.nn.Linear(32, 32) for _ in range(AC_BLOCKS))
            self.out = torch.nn.Linear(32, 1)

        def forward(self, x, y):
            h = torch.nn.functional.gelu(self.inp(x))
            for i, b in enumerate(self.blocks):
                f = lambda t, b=b: torch.nn.functional.gelu(b(t)) + t  # noqa: E731
                h = deepspeed.checkpointing.checkpoint(f, h) if i < n_ckpt else f(h)
            return torch.nn.functional.mse_loss(self.out(h).float(), y.float())

    torch.manual_seed(0)
    model = Toy()
    ref = copy.deepcopy(model)                  # fp32 probe of the trained weights
    gas, mbs = cfg["gradient_accumulation_steps"], cfg["train_micro_batch_size_per_gpu"]
    data = [(torch.randn(mbs, 16), torch.randn(mbs, 1)) for _ in range(gas)]

    engine, optimizer, _, _ = deepspeed.initialize(model=model, model_parameters=model.parameters(), config=cfg)
    params = list(model.parameters())

    def full_params():
        with deepspeed.zero.GatheredParameters(params):   # a no-op below ZeRO-3
            return [p.detach().float().clone() for p in params]

    def master():
        out = [deepspeed.utils.safe_get_full_fp32_param(p) for p in params]
        return None if any(t is None for t in out) else [t.detach().float().clone() for t in out]

    def probe(weights):
        with torch.no_grad():
            for r, w in zip(ref.parameters(), weights):
                r.copy_(w)
            return sum(ref(x, y).item() for x, y in data) / len(data)

    w0, m0 = full_params(), master()
    losses = []
    for _ in range(STEPS):
        for x, y in data:
            loss = engine(x.to(dtype), y)
            engine.backward(loss)
            engine.step()
            losses.append(loss.item())
    w1, m1 = full_params(), master()

    oo, op = engine.zero_offload_optimizer(), engine.zero_offload_param()
    basic = engine.basic_optimizer
    g = basic.param_groups[0]
    out = {
        "stage": engine.zero_optimization_stage(),
        "gas": engine.gradient_accumulation_steps(),
        "micro": engine.train_micro_batch_size_per_gpu(),
        "train_batch_size": engine.train_batch_size(),
        "world": engine.world_size,
        "offload_optimizer": None if oo is None else str(oo.device.value if hasattr(oo.device, "value") else oo.device),
        "offload_ratio": None if oo is None else oo.ratio,
        "offload_param": None if op is None else str(op.device.value if hasattr(op.device, "value") else op.device),
        "bf16": engine.bfloat16_enabled(), "fp16": engine.fp16_enabled(),
        "param_dtype": str(next(iter(model.parameters())).dtype),
        "overlap_comm": engine.zero_overlap_comm(),
        "reduce_bucket_size": engine.zero_reduce_bucket_size(),
        "allgather_bucket_size": engine.zero_allgather_bucket_size(),
        "sub_group_size": engine.zero_sub_group_size(),
        "gradient_clipping": engine.gradient_clipping(),
        "basic_optimizer": type(basic).__name__,
        "hparams": {"lr": g["lr"], "betas": list(g["betas"]), "eps": g["eps"], "weight_decay": g["weight_decay"]},
        "optimizer": type(optimizer).__name__,
        "ac_number_checkpoints": deepspeed.checkpointing.num_layers if ac else None,
        "losses": losses,
        "global_steps": engine.global_steps,
        "changed": [float((a - b).abs().max()) for a, b in zip(w0, w1)],
        "master_changed": None if m0 is None or m1 is None else [float((a - b).abs().max()) for a, b in zip(m0, m1)],
        "probe": [probe(w0), probe(w1)],
    }
    if out["stage"] == 3 and oo is not None:   # the sub-groups offload_optimizer.ratio assigns
        out["subgroup_numel"] = [int(n) for n in engine.optimizer.fp16_partitioned_groups_flat_numel]
        out["partial_offload"] = engine.optimizer.partial_offload
    return out


# ==== the cases ========================================================================================
@dataclass(frozen=True)
class Case:
    id: str
    plan: str
    precision: str = "bf16"
    world: int = 4
    global_batch: int = 16
    torch_adam: bool = True
    model: str = "llama-tiny"                   # preset, or "toy" for a parameter count = the toy model's


TOY_PARAMS = 16 * 32 + 32 + AC_BLOCKS * (32 * 32 + 32) + 32 + 1
CASES = [
    Case("zero0-bf16", "zero=0,mbs=2"),                                                # m = 16/(2·4) = 2
    Case("zero1-bf16-accum4", "zero=1,mbs=1,dp_bucket_mb=1"),                          # m = 4
    Case("zero2-fp32-no-overlap", "zero=2,mbs=2,dp_overlap=0,dp_bucket_mb=1", precision="fp32"),
    Case("zero3-bf16-default-buckets", "zero=3,mbs=2"),                                # 5e8-element buckets
    Case("zero3-offload-params-recompute", "zero=3,offload=params,recompute=full,mbs=2,dp_bucket_mb=1"),
    Case("zero2-offload-grads", "zero=2,offload=grads,mbs=1,dp_bucket_mb=1", world=8),
    Case("zero3-offload-grads", "zero=3,offload=grads,mbs=2,dp_bucket_mb=1"),
    Case("zero3-partial-offload", "zero=3,offload=grads,phi=0.5,mbs=2,dp_bucket_mb=1", torch_adam=False,
         model="toy"),
    Case("zero1-fp16-offload", "zero=1,offload=grads,mbs=2", precision="fp16"),
]


def _job(case: Case):
    if str(HERE.parent) not in sys.path:
        sys.path.insert(0, str(HERE.parent))
    import test_export as base

    from autoplace.specs.model import params_only
    from autoplace.specs.presets import get_preset
    from autoplace.specs.training import TrainingSpec
    # the partial-offload case: the plan's per-rank ZeRO-3 partition Ψ/dp is the toy model's size,
    # so the emitted sub_group_size cuts the toy's optimizer state as it would the real model's
    model = params_only(TOY_PARAMS * case.world) if case.model == "toy" else get_preset(case.model)
    return base.job_of(model, TrainingSpec(seq_len=256, global_batch=case.global_batch, precision=case.precision),
                       case.plan, case.world)


def _emitted(job) -> dict:
    from autoplace.export.common import as_job
    from autoplace.export.registry import LAUNCHERS
    return json.loads(LAUNCHERS["deepspeed"].emit(as_job(job))["ds_config.json"])


def _prepare(case: Case) -> tuple:
    """(job, the emitted ds_config, the config the child runs)."""
    job = _job(case)
    file_cfg = _emitted(job)
    cfg = copy.deepcopy(file_cfg)
    # one rank here: keep the file's micro-batch and accumulation, dp = 1 in the batch identity
    cfg["train_batch_size"] = cfg["train_micro_batch_size_per_gpu"] * cfg["gradient_accumulation_steps"] * 1
    if case.torch_adam:                       # torch.optim.AdamW instead of a JIT-built C++ Adam
        cfg["optimizer"]["params"]["torch_adam"] = True
    return job, file_cfg, cfg


def _run_child(cfg: dict, torch_adam: bool) -> dict:
    env = dict(os.environ, DS_ACCELERATOR="cpu", OMP_NUM_THREADS="1", PYTHONWARNINGS="ignore")
    timeout = 900 if os.environ.get(JIT_ENV) == "1" else 240
    p = subprocess.run([sys.executable, str(HERE)], input=json.dumps({"config": cfg, "torch_adam": torch_adam}),
                       capture_output=True, text=True, env=env, timeout=timeout)
    lines = [ln for ln in p.stdout.splitlines() if ln.startswith("RESULT ")]
    if p.returncode != 0 or not lines:
        return {"error": f"rc={p.returncode}\n{p.stdout[-3000:]}\n{p.stderr[-6000:]}"}
    return json.loads(lines[-1][len("RESULT "):])


@pytest.fixture(scope="module")
def runs():
    """All cases at once, a few children at a time; each test waits for its own."""
    if importlib.util.find_spec("deepspeed") is None:
        pytest.skip("deepspeed is not installed (the 'launchers' extra)")
    prepared = {c.id: _prepare(c) for c in CASES}
    pool = ThreadPoolExecutor(max_workers=max(2, min(4, os.cpu_count() or 1)))
    futures = {c.id: pool.submit(_run_child, prepared[c.id][2], c.torch_adam) for c in CASES}
    yield {k: (prepared[k][0], prepared[k][1], fut) for k, fut in futures.items()}
    pool.shutdown(wait=True)


@pytest.mark.launchers
@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_deepspeed_initialize_trains_emitted_config(case, runs):
    from autoplace.export.common import zero_level
    job, f, fut = runs[case.id]
    r = fut.result()
    assert "error" not in r, r.get("error")
    if "skip" in r:
        pytest.skip(r["skip"])
    plan, z = job.plan, f["zero_optimization"]

    # the engine runs what the file says, and the file says what the plan says
    assert r["stage"] == z["stage"] == zero_level(plan)[0]
    assert r["world"] == 1
    assert (r["micro"], r["gas"]) == (f["train_micro_batch_size_per_gpu"], f["gradient_accumulation_steps"]) \
        == (plan.mbs, job.micro_batches)
    assert r["gas"] > 1
    assert r["train_batch_size"] == r["micro"] * r["gas"]
    assert r["offload_optimizer"] == ("cpu" if plan.off >= 2 else None)
    assert r["offload_param"] == ("cpu" if plan.off == 3 else None)
    if plan.off >= 2:
        assert r["offload_ratio"] == pytest.approx(plan.offload_fraction)
    assert r["bf16"] == (case.precision == "bf16") and r["fp16"] == (case.precision == "fp16")
    assert r["param_dtype"] == {"bf16": "torch.bfloat16", "fp16": "torch.float16", "fp32": "torch.float32"}[
        case.precision]
    assert r["overlap_comm"] == plan.dp_overlap
    assert (r["reduce_bucket_size"], r["allgather_bucket_size"]) == (z["reduce_bucket_size"], z["allgather_bucket_size"])
    if r["stage"] == 3:
        assert r["sub_group_size"] == z["sub_group_size"]
    assert r["gradient_clipping"] == f["gradient_clipping"]
    assert r["basic_optimizer"] == ("AdamW" if case.torch_adam else "DeepSpeedCPUAdam")
    hp = f["optimizer"]["params"]
    assert r["hparams"] == {"lr": hp["lr"], "betas": hp["betas"], "eps": hp["eps"], "weight_decay": hp["weight_decay"]}
    if r["stage"] in (1, 2):
        assert r["optimizer"] == "DeepSpeedZeroOptimizer"
    elif r["stage"] == 3:
        assert r["optimizer"] == "DeepSpeedZeroOptimizer_Stage3"
    if "activation_checkpointing" in f:
        assert r["ac_number_checkpoints"] == f["activation_checkpointing"]["number_checkpoints"]

    # and it trains: STEPS optimizer steps of gas micro-batches, finite losses, every tensor moved,
    # the fp32 probe loss on the training batches went down
    assert r["global_steps"] == STEPS and len(r["losses"]) == STEPS * r["gas"]
    assert all(math.isfinite(x) for x in r["losses"])
    assert all(d > 0 for d in r["changed"]), r["changed"]
    if r["master_changed"] is not None:
        assert all(d > 0 for d in r["master_changed"]), r["master_changed"]
    assert r["probe"][1] < r["probe"][0], r["probe"]

    if "subgroup_numel" in r and plan.offload_fraction < 1:
        # stage3.py: sub-group i of n is offloaded when i ≥ int((1 − ratio)·n); with the 1e9 default
        # sub_group_size the toy's partition is one sub-group, offloaded whole whatever the ratio
        n, numel = len(r["subgroup_numel"]), r["subgroup_numel"]
        host = sum(numel[i] for i in range(n) if i >= int((1 - r["partial_offload"]) * n)) / sum(numel)
        assert n > 1 and host == pytest.approx(plan.offload_fraction, abs=0.1), (n, numel, host)


if __name__ == "__main__":                     # the child process of one case
    res = _child(json.loads(sys.stdin.read()))
    sys.stdout.flush()
    print("RESULT " + json.dumps(res), flush=True)
