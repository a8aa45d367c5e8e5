"""Load an emitted torchtitan 0.3 job module with torchtitan 0.3's own ConfigManager (run in a
subprocess with PYTHONPATH = <.venv-tt03>:<export folder>); prints the parsed sections as JSON.

torchtitan 0.3 imports triton kernels at module import time (GPU only): a module that needs triton
is replaced by a stand-in that raises if called, and the import is retried. Float8 converters ask
for an SM89+ GPU when the config is built: an H100 (9, 0) is answered."""

import json
import sys
import traceback
import types


def _stub(name):
    m = types.ModuleType(name)

    def __getattr__(attr):
        if attr.startswith("__"):
            raise AttributeError(attr)
        def _gpu_only(*a, **kw):
            raise RuntimeError(f"{name}.{attr}: triton kernels are GPU-only")
        return _gpu_only
    m.__getattr__ = __getattr__
    sys.modules[name] = m


def _load(module):
    for _ in range(20):
        try:
            return __import__(module)
        except ModuleNotFoundError as e:
            if not (e.name or "").startswith("triton"):
                raise
            tb = traceback.extract_tb(e.__traceback__)
            files = [f.filename for f in tb if "/torchtitan/" in f.filename]
            name = "torchtitan/" + files[-1].split("/torchtitan/", 1)[1]
            _stub(name[:-3].replace("/", ".").removesuffix(".__init__"))
            for k in [k for k in sys.modules if k.startswith("torchtitan") and isinstance(sys.modules[k], types.ModuleType) is not False and k not in ()]:
                pass
    raise RuntimeError("could not import " + module)


_load(sys.argv[1])
from torchtitan.config import ConfigManager  # noqa: E402

# float8 converters are built when the config function runs and ask the GPU for SM89+: answered as
# the H100 the exports are written for (torchao itself is imported for real)
_f8 = sys.modules.get("torchtitan.components.quantization.float8")
if _f8 is not None and hasattr(_f8, "has_cuda_capability"):
    _f8.has_cuda_capability = lambda major, minor: (9, 0) >= (major, minor)

cfg = ConfigManager().parse_args(["--module", sys.argv[1], "--config", sys.argv[2]])
p, t = cfg.parallelism, cfg.training
print(json.dumps({
    "dp_replicate": p.data_parallel_replicate_degree, "dp_shard": p.data_parallel_shard_degree,
    "reshard": p.fsdp_reshard_after_forward, "tp": p.tensor_parallel_degree, "pp": p.pipeline_parallel_degree,
    "cp": p.context_parallel_degree, "ep": p.expert_parallel_degree, "schedule": p.pipeline_parallel_schedule,
    "layers_per_stage": p.pipeline_parallel_layers_per_stage, "microbatch": p.pipeline_parallel_microbatch_size,
    "local_batch": t.local_batch_size, "global_batch": t.global_batch_size, "seq_len": t.seq_len,
    "cpu_offload": t.enable_cpu_offload,
    "ac": type(cfg.activation_checkpoint).__qualname__ if cfg.activation_checkpoint is not None else None,
    "compile": cfg.compile.enable, "async_tp": cfg.compile.enable_async_tensor_parallel}))
