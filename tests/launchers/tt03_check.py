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


def _summary(cfg) -> dict:
    p, t = cfg.parallelism, cfg.training
    return {
        "dp_replicate": p.data_parallel_replicate_degree, "dp_shard": p.data_parallel_shard_degree,
        "reshard": p.fsdp_reshard_after_forward, "tp": p.tensor_parallel_degree, "pp": p.pipeline_parallel_degree,
        "cp": p.context_parallel_degree, "ep": p.expert_parallel_degree, "schedule": p.pipeline_parallel_schedule,
        "layers_per_stage": p.pipeline_parallel_layers_per_stage, "microbatch": p.pipeline_parallel_microbatch_size,
        "local_batch": t.local_batch_size, "global_batch": t.global_batch_size, "seq_len": t.seq_len,
        "cpu_offload": t.enable_cpu_offload,
        "ac": type(cfg.activation_checkpoint).__qualname__ if cfg.activation_checkpoint is not None else None,
        "compile": cfg.compile.enable, "async_tp": cfg.compile.enable_async_tensor_parallel}


def _stand_in_gpu():
    # float8 converters are built when the config function runs and ask the GPU for SM89+: answered
    # as the H100 the exports are written for (torchao itself is imported for real)
    f8 = sys.modules.get("torchtitan.components.quantization.float8")
    if f8 is not None and hasattr(f8, "has_cuda_capability"):
        f8.has_cuda_capability = lambda major, minor: (9, 0) >= (major, minor)


def main(argv):
    """`tt03_check.py MODULE CONFIG`: one module on PYTHONPATH, its parsed sections as JSON;
    `tt03_check.py --dirs MODULE D1 D2 …`: MODULE.py of each folder, one JSON line each
    ({"dir", "ok", "error", "parsed"})."""
    import contextlib
    import io
    if argv[0] != "--dirs":
        _load(argv[0])
        _stand_in_gpu()
        from torchtitan.config import ConfigManager
        print(json.dumps(_summary(ConfigManager().parse_args(["--module", argv[0], "--config", argv[1]]))))
        return
    module, dirs = argv[1], argv[2:]
    _load("torchtitan.config")
    _load("torchtitan.models.llama3.config_registry")
    _load("torchtitan.components.quantization")
    _stand_in_gpu()
    from torchtitan.config import ConfigManager
    for d in dirs:
        sys.path.insert(0, d)
        sys.modules.pop(module, None)
        out = io.StringIO()
        try:
            with contextlib.redirect_stdout(out), contextlib.redirect_stderr(out):
                _load(module)
                _stand_in_gpu()
                cfg = ConfigManager().parse_args(["--module", module, "--config", "autoplace_job"])
            print(json.dumps({"dir": d, "ok": True, "error": None, "parsed": _summary(cfg)}), flush=True)
        except BaseException as e:  # noqa: BLE001 — tyro exits; any error is the verdict
            msg = f"{type(e).__name__}: {str(e).strip()[:300]}" if not isinstance(e, SystemExit) else out.getvalue()[-300:]
            print(json.dumps({"dir": d, "ok": False, "error": msg}), flush=True)
        finally:
            sys.path.remove(d)


if __name__ == "__main__":
    main(sys.argv[1:])
